// Package serve runs gpuscaler's listeners within bounds that a peer
// without credentials cannot stretch: deadlines on reading a request's
// header and body, on writing the answer and on idling between requests,
// and a cap on the connections each listener holds open.
//
// The HTTP servers (metrics and health, the script server) answer anyone
// who reaches them, so a full server closes its oldest connection that is
// not in the middle of a request to make room: a flood of idle connections
// costs the process at most MaxConns of them, and a real request still
// gets in. The gRPC listener is behind mTLS; beyond its cap a new
// connection is closed at once.
package serve

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound one HTTP server. A zero field takes its default.
type Limits struct {
	// MaxConns is how many connections the server holds open; default 128.
	MaxConns int
	// ReadHeaderTimeout bounds reading a request's header (a new
	// connection must send one within it); default 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request; default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing an answer; default 60s.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection waits for its next
	// request; default 30s.
	IdleTimeout time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxConns          = 128
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	maxHeaderBytes           = 64 << 10
)

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	return l
}

// HTTP returns a server of h within l.
func HTTP(h http.Handler, l Limits) *http.Server {
	l = l.withDefaults()
	c := &conns{max: l.MaxConns, open: map[net.Conn]*conn{}}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         c.track,
	}
}

// conns tracks a server's open connections through its ConnState hook.
type conns struct {
	max  int
	mu   sync.Mutex
	seq  uint64
	open map[net.Conn]*conn
	live int // open less those closed here and not yet reported closed
}

type conn struct {
	seq     uint64
	state   http.ConnState
	closing bool
}

// track records a connection's state; a new connection over the cap
// closes the oldest one that is not reading or answering a request
// (StateNew or StateIdle), or itself when every other one is.
func (c *conns) track(nc net.Conn, st http.ConnState) {
	var victim net.Conn
	c.mu.Lock()
	switch st {
	case http.StateNew:
		c.seq++
		c.open[nc] = &conn{seq: c.seq, state: st}
		c.live++
		if c.live > c.max {
			victim = c.oldestWaiting(nc)
			if victim == nil {
				victim = nc
			}
			c.open[victim].closing = true
			c.live--
		}
	case http.StateActive, http.StateIdle:
		if e, ok := c.open[nc]; ok {
			e.state = st
		}
	case http.StateHijacked, http.StateClosed:
		if e, ok := c.open[nc]; ok {
			if !e.closing {
				c.live--
			}
			delete(c.open, nc)
		}
	}
	c.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
}

// oldestWaiting is the oldest connection, other than except, that waits
// for a request; nil when there is none. Called with mu held.
func (c *conns) oldestWaiting(except net.Conn) net.Conn {
	var (
		best    net.Conn
		bestSeq uint64
	)
	for nc, e := range c.open {
		if nc == except || e.closing || e.state == http.StateActive {
			continue
		}
		if best == nil || e.seq < bestSeq {
			best, bestSeq = nc, e.seq
		}
	}
	return best
}

// Run serves srv on lis until ctx is done, then shuts it down gracefully
// (requests in flight get 5 seconds). It returns the server's error, or
// nil once ctx is done.
func Run(ctx context.Context, srv *http.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return nil
	}
}

// Listener caps the connections lis hands out at max: beyond it a new
// connection is closed as soon as it is accepted. For the gRPC provider,
// whose peers authenticate in the handshake.
func Listener(lis net.Listener, max int) net.Listener {
	if max <= 0 {
		max = DefaultMaxConns
	}
	return &capped{Listener: lis, slots: make(chan struct{}, max)}
}

type capped struct {
	net.Listener
	slots chan struct{}
}

func (l *capped) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slot{Conn: c, free: func() { <-l.slots }}, nil
		default:
			_ = c.Close()
		}
	}
}

// slot is a connection that gives its place back once, when closed.
type slot struct {
	net.Conn
	once sync.Once
	free func()
}

func (s *slot) Close() error {
	err := s.Conn.Close()
	s.once.Do(s.free)
	return err
}
