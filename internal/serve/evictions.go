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

	mu      sync.Mutex
	last    map[[2]string]time.Time
	quiet   map[[2]string]int
	nowFunc func() time.Time
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
	return &Evictions{counter: c, log: log, last: map[[2]string]time.Time{}, quiet: map[[2]string]int{}, nowFunc: time.Now}, nil
}

// For returns the Evicted hook of one listener.
func (e *Evictions) For(listener string) func(reason string) {
	if e == nil {
		return func(string) {}
	}
	return func(reason string) {
		e.counter.WithLabelValues(listener, reason).Inc()
		key := [2]string{listener, reason}
		e.mu.Lock()
		now := e.nowFunc()
		if now.Sub(e.last[key]) < evictionLogEvery {
			e.quiet[key]++
			e.mu.Unlock()
			return
		}
		quiet := e.quiet[key]
		e.last[key], e.quiet[key] = now, 0
		e.mu.Unlock()
		e.log.Warn("closed a connection to make room; a flood or a slow client holds the listener",
			"listener", listener, "reason", reason, "alsoSinceLastLog", quiet)
	}
}
