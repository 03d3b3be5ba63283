// Package faults injects failures into the clouds' fake APIs: the next
// request with a method and path fails with an answer in the fake's own
// error shape, or is carried out and its answer lost (the connection
// dropped before a byte of it), as a timeout after the request left would.
package faults

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Set holds the pending faults of one fake; the zero value is ready.
type Set struct {
	mu    sync.Mutex
	rules []rule
}

type rule struct {
	method, path string
	// answer writes the failure; nil loses the answer instead.
	answer func(http.ResponseWriter)
}

// Fail makes the next request with method whose path ends with path be
// answered by answer instead of the fake.
func (s *Set) Fail(method, path string, answer func(http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append(s.rules, rule{method, path, answer})
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
	s.mu.Lock()
	var hit *rule
	for i, f := range s.rules {
		if f.method == r.Method && strings.HasSuffix(r.URL.Path, f.path) {
			hit = &f
			s.rules = append(s.rules[:i], s.rules[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	switch {
	case hit == nil:
		next.ServeHTTP(w, r)
	case hit.answer != nil:
		hit.answer(w)
	default:
		next.ServeHTTP(httptest.NewRecorder(), r)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}
}
