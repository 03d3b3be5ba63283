// Package serve runs gpuscaler's listeners within bounds that a peer
// without credentials cannot stretch: deadlines on reading a request's
// header and body, on writing the answer and on idling between requests,
// and caps on the connections each listener holds open, in all and per
// source address.
//
// The HTTP servers (metrics, health, the script server) answer anyone who
// reaches them, so a full server makes room rather than refuse: it closes
// the oldest connection that waits for a request (idle or still silent),
// else the one whose request has run longest past SlowRequest. A source
// past its own share closes its own oldest connection. A request with a
// body is answered 413 and its connection closed without reading the
// body: none of these servers takes one, and a body trickled a byte at a
// time would otherwise hold a busy connection until ReadTimeout. So a
// flood costs at most the cap, and a real request still gets in.
//
// The gRPC listener (Handshakes) holds connections that have not finished
// their handshake apart from those that have: a flood of silent peers
// evicts its own oldest members, never an authenticated client's place.
package serve

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound one HTTP server. A zero field takes its default.
type Limits struct {
	// MaxConns is how many connections the server holds open; default 128.
	MaxConns int
	// MaxConnsPerSource is how many of them one source address holds;
	// default a quarter of MaxConns.
	MaxConnsPerSource int
	// SlowRequest is how long a request may run before its connection may
	// be closed to make room for a new one; default 2s. Health checks,
	// scrapes and script fetches take milliseconds.
	SlowRequest time.Duration
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
	// Evicted, when set, is told of every connection closed to make room,
	// with the reason (an Evict* constant). It must not block.
	Evicted func(reason string)
}

// Defaults of Limits.
const (
	DefaultMaxConns          = 128
	DefaultSlowRequest       = 2 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	maxHeaderBytes           = 64 << 10
)

// Why a connection was closed to make room.
const (
	// EvictWaiting: the server was full; the oldest connection waiting for
	// a request went.
	EvictWaiting = "waiting"
	// EvictSlow: the server was full of requests; the one running longest
	// past SlowRequest went.
	EvictSlow = "slow"
	// EvictSource: one source held its share; its own oldest went.
	EvictSource = "source"
	// EvictFull: the server was full of fresh requests; the new one went.
	EvictFull = "full"
	// EvictUnauthenticated: too many connections had not finished their
	// handshake; the oldest of them went (Handshakes).
	EvictUnauthenticated = "unauthenticated"
	// EvictAuthenticatedFull: a connection finished its handshake while
	// the authenticated ones were at their cap; it went (Handshakes).
	EvictAuthenticatedFull = "authenticated-full"
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
	if l.MaxConnsPerSource <= 0 {
		l.MaxConnsPerSource = max(1, l.MaxConns/4)
	}
	if l.Evicted == nil {
		l.Evicted = func(string) {}
	}
	def(&l.SlowRequest, DefaultSlowRequest)
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	return l
}

// HTTP returns a server of h within l. h is served only requests without
// a body.
func HTTP(h http.Handler, l Limits) *http.Server {
	l = l.withDefaults()
	c := &conns{limits: l, open: map[net.Conn]*conn{}, perSource: map[string]int{}, now: time.Now}
	return &http.Server{
		Handler:           noBody(h),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         c.track,
	}
}

// noBody answers a request that carries a body (or may: chunked) 413 and
// closes its connection, so the body is never read: net/http would read up
// to 256 KiB of an unread body after the answer, for as long as the peer
// trickles it, unless the read deadline has passed.
func noBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			w.Header().Set("Connection", "close")
			http.Error(w, "request bodies are not accepted", http.StatusRequestEntityTooLarge)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// conns tracks a server's open connections through its ConnState hook.
type conns struct {
	limits    Limits
	now       func() time.Time
	mu        sync.Mutex
	seq       uint64
	open      map[net.Conn]*conn
	perSource map[string]int // live connections by source address
	live      int            // open less those closed here and not yet reported closed
}

type conn struct {
	seq     uint64
	source  string
	state   http.ConnState
	since   time.Time // when the state last changed
	closing bool
}

// track records a connection's state; a new connection makes room for
// itself when its source or the server is full (see the package doc).
func (c *conns) track(nc net.Conn, st http.ConnState) {
	var (
		victim net.Conn
		reason string
	)
	c.mu.Lock()
	now := c.now()
	switch st {
	case http.StateNew:
		c.seq++
		src := sourceOf(nc)
		c.open[nc] = &conn{seq: c.seq, source: src, state: st, since: now}
		c.live++
		c.perSource[src]++
		switch {
		case c.perSource[src] > c.limits.MaxConnsPerSource:
			victim, reason = c.oldest(nc, func(e *conn) bool { return e.source == src }), EvictSource
		case c.live > c.limits.MaxConns:
			victim, reason = c.oldest(nc, func(e *conn) bool { return e.state != http.StateActive }), EvictWaiting
			if victim == nil {
				victim, reason = c.slowest(nc, now), EvictSlow
			}
		}
		if reason != "" && victim == nil {
			victim, reason = nc, EvictFull
		}
		if victim != nil {
			e := c.open[victim]
			e.closing = true
			c.live--
			c.perSource[e.source]--
		}
	case http.StateActive, http.StateIdle:
		if e, ok := c.open[nc]; ok {
			e.state, e.since = st, now
		}
	case http.StateHijacked, http.StateClosed:
		if e, ok := c.open[nc]; ok {
			if !e.closing {
				c.live--
				c.perSource[e.source]--
			}
			if c.perSource[e.source] <= 0 {
				delete(c.perSource, e.source)
			}
			delete(c.open, nc)
		}
	}
	c.mu.Unlock()
	if victim != nil {
		c.limits.Evicted(reason)
		// This runs in the server's accept loop: a TLS connection's Close
		// writes a close-notify a full peer can hold for seconds, so its
		// socket is closed under it instead.
		if tc, ok := victim.(*tls.Conn); ok {
			_ = tc.NetConn().Close()
		} else {
			_ = victim.Close()
		}
	}
}

// oldest is the oldest connection, other than except and those closing,
// that ok accepts; nil when there is none. Called with mu held.
func (c *conns) oldest(except net.Conn, ok func(*conn) bool) net.Conn {
	var (
		best    net.Conn
		bestSeq uint64
	)
	for nc, e := range c.open {
		if nc == except || e.closing || !ok(e) {
			continue
		}
		if best == nil || e.seq < bestSeq {
			best, bestSeq = nc, e.seq
		}
	}
	return best
}

// slowest is the connection whose request has run longest, if longer
// than SlowRequest; nil when there is none. Called with mu held.
func (c *conns) slowest(except net.Conn, now time.Time) net.Conn {
	var (
		best  net.Conn
		since time.Time
	)
	for nc, e := range c.open {
		if nc == except || e.closing || e.state != http.StateActive || now.Sub(e.since) < c.limits.SlowRequest {
			continue
		}
		if best == nil || e.since.Before(since) {
			best, since = nc, e.since
		}
	}
	return best
}

// sourceOf is the host of a connection's remote address.
func sourceOf(nc net.Conn) string {
	addr := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
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

// Tiers bound a listener whose peers authenticate in a handshake.
type Tiers struct {
	// Unauthenticated is how many connections may wait for their
	// handshake to finish; past it the oldest of them is closed.
	Unauthenticated int
	// Authenticated is how many may hold a place after it; past it a
	// connection that finishes its handshake is closed.
	Authenticated int
	// Evicted, when set, is told of every connection closed to make room
	// (EvictUnauthenticated, EvictAuthenticatedFull). It must not block.
	Evicted func(reason string)
}

// Handshakes caps the connections lis hands out in two tiers: until the
// server calls Authenticated on a connection, it counts against
// t.Unauthenticated, and a new connection past that cap closes the
// oldest unauthenticated one, so silent peers can only push out each
// other; then it counts against t.Authenticated. For the gRPC provider,
// whose peers authenticate with mTLS.
func Handshakes(lis net.Listener, t Tiers) net.Listener {
	if t.Unauthenticated <= 0 {
		t.Unauthenticated = DefaultMaxConns
	}
	if t.Authenticated <= 0 {
		t.Authenticated = DefaultMaxConns
	}
	if t.Evicted == nil {
		t.Evicted = func(string) {}
	}
	return &tiered{Listener: lis, tiers: t}
}

type tiered struct {
	net.Listener
	tiers Tiers

	mu       sync.Mutex
	pending  []*tieredConn // oldest first
	admitted int
}

// Accept hands out the next connection, closing the oldest one still in
// its handshake when the unauthenticated tier is full.
func (l *tiered) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &tieredConn{Conn: nc, l: l}
	var victim *tieredConn
	l.mu.Lock()
	l.pending = append(l.pending, c)
	if len(l.pending) > l.tiers.Unauthenticated {
		victim, l.pending = l.pending[0], l.pending[1:]
		victim.tier = tierGone
	}
	l.mu.Unlock()
	if victim != nil {
		l.tiers.Evicted(EvictUnauthenticated)
		_ = victim.Conn.Close()
	}
	return c, nil
}

// Authenticated moves c, a connection this listener handed out, to the
// authenticated tier. It reports false, and closes c, when that tier is
// full or c was already closed to make room.
func Authenticated(c net.Conn) bool {
	tc, ok := c.(*tieredConn)
	if !ok {
		return true
	}
	l := tc.l
	l.mu.Lock()
	admitted, full := false, false
	if tc.tier == tierPending {
		l.dropPending(tc)
		if l.admitted < l.tiers.Authenticated {
			tc.tier, admitted = tierAdmitted, true
			l.admitted++
		} else {
			tc.tier, full = tierGone, true
		}
	}
	l.mu.Unlock()
	if full {
		l.tiers.Evicted(EvictAuthenticatedFull)
	}
	if !admitted {
		_ = tc.Conn.Close()
	}
	return admitted
}

// dropPending removes c from the pending tier. Called with mu held.
func (l *tiered) dropPending(c *tieredConn) {
	for i, p := range l.pending {
		if p == c {
			l.pending = append(l.pending[:i], l.pending[i+1:]...)
			return
		}
	}
}

const (
	tierPending = iota
	tierAdmitted
	tierGone
)

// tieredConn is a connection that gives its place back once, when closed.
type tieredConn struct {
	net.Conn
	l    *tiered
	tier int // guarded by l.mu
}

func (c *tieredConn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	switch c.tier {
	case tierPending:
		c.l.dropPending(c)
	case tierAdmitted:
		c.l.admitted--
	}
	c.tier = tierGone
	c.l.mu.Unlock()
	return err
}
