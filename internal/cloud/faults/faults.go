// Package faults injects failures into the clouds' fake APIs: the next
// request with a method and path fails with an answer in the fake's own
// error shape, or is carried out and its answer lost (the connection
// dropped before a byte of it), as a timeout after the request left would.
// A Set can also fail a share of all requests at random, for chaos
// campaigns.
package faults

import (
	"bytes"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Set holds the pending faults of one fake; the zero value is ready.
type Set struct {
	mu    sync.Mutex
	rules []rule
	// random fails a share of the requests no rule matches; nil for none.
	random *random
}

// random is a Set's random failures.
type random struct {
	rate    float64
	seed    uint64
	answers []func(http.ResponseWriter)
	// counts are the faults injected, by Kind.
	counts map[Kind]int
	// seen counts the requests drawn for, by key (see draw).
	seen map[uint64]int
}

// Kind is a kind of injected fault.
type Kind string

// The kinds of random faults.
const (
	// Answered: the request is refused with one of the fake's error
	// answers (a 429 or a 5xx) and not carried out.
	Answered Kind = "answered"
	// Lost: the request is carried out and its connection dropped before
	// the answer, as a timeout after the cloud accepted it.
	Lost Kind = "lost"
	// Dropped: the connection is dropped before the request is carried
	// out.
	Dropped Kind = "dropped"
)

// Random makes rate (0..1) of the requests that no rule matches fail, each
// in one of the three Kinds with equal odds, drawn from seed; answers are
// the fake's own error answers for Answered. A rate of 0 stops it.
func (s *Set) Random(rate float64, seed uint64, answers ...func(http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := map[Kind]int{}
	if s.random != nil {
		counts = s.random.counts
	}
	s.random = &random{rate: rate, seed: seed, answers: answers, counts: counts, seen: map[uint64]int{}}
}

// Injected returns how many random faults of each Kind were injected.
func (s *Set) Injected() map[Kind]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[Kind]int{}
	if s.random != nil {
		for k, n := range s.random.counts {
			out[k] = n
		}
	}
	return out
}

// draw picks the random fault for the n-th request with key (see
// requestKey): "" for none, and the answer to give for Answered. The draw
// is a function of the seed, the key and n, so concurrent requests meet
// the same faults in whatever order they arrive, and a campaign replayed
// from its seed fails the same requests (a shared stream would hand each
// request the draw of whichever came first).
func (r *random) draw(key uint64) (Kind, func(http.ResponseWriter)) {
	if r == nil || r.rate <= 0 {
		return "", nil
	}
	n := r.seen[key]
	r.seen[key] = n + 1
	rng := rand.New(rand.NewPCG(r.seed, key+uint64(n)))
	if rng.Float64() >= r.rate {
		return "", nil
	}
	kinds := []Kind{Answered, Lost, Dropped}
	k := kinds[rng.IntN(len(kinds))]
	if k == Answered && len(r.answers) == 0 {
		k = Dropped
	}
	r.counts[k]++
	if k == Answered {
		return k, r.answers[rng.IntN(len(r.answers))]
	}
	return k, nil
}

// maxKeyedBody is how much of a request's body its key covers.
const maxKeyedBody = 64 << 10

// requestKey hashes what a request asks: its method, path, query and
// body (which it puts back for the fake to read). A GCP requestId, a
// fresh UUID per mutation, is left out: a replay sends other ones.
func requestKey(r *http.Request) uint64 {
	h := fnv.New64a()
	q := r.URL.Query()
	q.Del("requestId")
	_, _ = io.WriteString(h, r.Method+" "+r.URL.Path+"?"+q.Encode()+"\n")
	if r.Body != nil && r.Body != http.NoBody {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxKeyedBody))
		_, _ = h.Write(body)
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	}
	return h.Sum64()
}

// readCloser reads a request body's replayed start and rest, and closes
// the original.
type readCloser struct {
	io.Reader
	io.Closer
}

type rule struct {
	method, path string
	// answer writes the failure; nil loses the answer instead.
	answer func(http.ResponseWriter)
	// after: the request is carried out before answer is written.
	after bool
}

// Fail makes the next request with method whose path ends with path be
// answered by answer instead of the fake.
func (s *Set) Fail(method, path string, answer func(http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, rule{method: method, path: path, answer: answer})
}

// Answer is an answer of status and body as they are (JSON, by its
// Content-Type), for Fail: what a changed API or a broken proxy might say.
func Answer(status int, body []byte) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// FailAfter makes the fake carry out the next request with method whose
// path ends with path, then answer it with answer: a 5xx from a proxy or
// a timed-out front end after the cloud acted.
func (s *Set) FailAfter(method, path string, answer func(http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, rule{method: method, path: path, answer: answer, after: true})
}

// Lose makes the fake carry out the next request with method whose path
// ends with path, then drop the connection unanswered.
func (s *Set) Lose(method, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, rule{method: method, path: path})
}

// Serve answers r by the first pending fault it matches (which is then
// spent), else by next.
func (s *Set) Serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key := requestKey(r) // before the lock: reading a body waits on the client
	s.mu.Lock()
	var hit *rule
	for i, f := range s.rules {
		if f.method == r.Method && strings.HasSuffix(r.URL.Path, f.path) {
			hit = &f
			s.rules = append(s.rules[:i], s.rules[i+1:]...)
			break
		}
	}
	if hit == nil {
		switch kind, answer := s.random.draw(key); kind {
		case Answered:
			hit = &rule{answer: answer}
		case Lost:
			hit = &rule{}
		case Dropped:
			s.mu.Unlock()
			hangUp(w)
			return
		}
	}
	s.mu.Unlock()
	switch {
	case hit == nil:
		next.ServeHTTP(w, r)
	case hit.answer != nil:
		if hit.after {
			next.ServeHTTP(httptest.NewRecorder(), r)
		}
		hit.answer(w)
	default:
		next.ServeHTTP(httptest.NewRecorder(), r)
		hangUp(w)
	}
}

// hangUp closes the request's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}
