package serve

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// evictionLogEvery is how often one listener logs one reason of eviction.
const evictionLogEvery = time.Minute

// Evictions counts the connections listeners close to make room, in
// gpuscaler_connections_evicted_total{listener, reason}, and logs them at
// most once a minute per listener and reason (a flood must not flood the
// log too).
type Evictions struct {
	counter *prometheus.CounterVec
	log     *slog.Logger
	quiet   *QuietLog
}

// QuietLog lets one log line a key through per period and counts the
// rest: for what a flood repeats. Safe for concurrent use.
type QuietLog struct {
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	last  map[string]time.Time
	quiet map[string]int
}

// NewQuietLog lets a key's line through once per every.
func NewQuietLog(every time.Duration) *QuietLog {
	return &QuietLog{every: every, now: time.Now, last: map[string]time.Time{}, quiet: map[string]int{}}
}

// Allow reports whether key's line may be logged now, and how many of its
// lines were held back since the last one.
func (q *QuietLog) Allow(key string) (ok bool, heldBack int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	if now.Sub(q.last[key]) < q.every {
		q.quiet[key]++
		return false, 0
	}
	heldBack = q.quiet[key]
	q.last[key], q.quiet[key] = now, 0
	return true, heldBack
}

// NewEvictions registers the counter with reg (nil: nowhere); a process
// whose listeners each call it shares one counter.
func NewEvictions(reg prometheus.Registerer, log *slog.Logger) (*Evictions, error) {
	if log == nil {
		log = slog.Default()
	}
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuscaler_connections_evicted_total",
		Help: "Connections a listener closed to make room, by listener and reason " +
			"(waiting, slow, source, full, unauthenticated, authenticated-full).",
	}, []string{"listener", "reason"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			c = existing
		}
	}
	return &Evictions{counter: c, log: log, quiet: NewQuietLog(evictionLogEvery)}, nil
}

// For returns the Evicted hook of one listener.
func (e *Evictions) For(listener string) func(reason string) {
	if e == nil {
		return func(string) {}
	}
	return func(reason string) {
		e.counter.WithLabelValues(listener, reason).Inc()
		ok, quiet := e.quiet.Allow(listener + "/" + reason)
		if !ok {
			return
		}
		e.log.Warn("closed a connection to make room; a flood or a slow client holds the listener",
			"listener", listener, "reason", reason, "alsoSinceLastLog", quiet)
	}
}
