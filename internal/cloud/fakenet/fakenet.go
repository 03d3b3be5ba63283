// Package fakenet serves the clouds' fake APIs on a loopback port, or on
// in-memory connections for tests that run on a virtual clock
// (testing/synctest): a goroutine blocked on a socket is not "durably
// blocked", so a bubble's clock would never move while a client waits on
// a real connection, and an idle keep-alive connection would hold it
// still for good.
package fakenet

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"google.golang.org/grpc/test/bufconn"
)

// bufferSize is each in-memory connection's buffer in each direction.
const bufferSize = 1 << 20

// Serve starts a test server for h. On a loopback port, as
// httptest.NewServer does; when inMemory, on in-memory connections that
// only the server's own Client can dial: its URL names a loopback address
// (the clients accept plain http only for loopback) that nothing listens
// on. Close the server to end its connections and goroutines.
func Serve(h http.Handler, inMemory bool) *httptest.Server {
	if !inMemory {
		return httptest.NewServer(h)
	}
	l := listener{bufconn.Listen(bufferSize)}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	srv.Client().Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := l.DialContext(ctx)
		if err != nil {
			return nil, err
		}
		return conn{c}, nil
	}
	return srv
}

// listener is an in-memory listener that names a loopback address.
type listener struct{ *bufconn.Listener }

// Accept waits for the next in-memory connection.
func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return conn{c}, nil
}

// Addr is 127.0.0.1:1, where nothing listens: a client that does not dial
// through the server's Client fails at once rather than reach another
// server.
func (listener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// conn is an in-memory connection whose deadlines in the past are now.
// net/http ends a pending read with a deadline of 1970 (aLongTimeAgo);
// bufconn arms a timer for the time until it, which on a bubble's clock
// (2000) is some -30 years, and the runtime was seen to crash on such a
// timer inside a bubble. A deadline that has passed acts the same
// whenever it passed.
type conn struct{ net.Conn }

// SetDeadline sets both deadlines.
func (c conn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(notBefore(t)) }

// SetReadDeadline sets the read deadline.
func (c conn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(notBefore(t)) }

// SetWriteDeadline sets the write deadline.
func (c conn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(notBefore(t)) }

// notBefore is t, or now for a t that has passed (zero stays zero: no
// deadline).
func notBefore(t time.Time) time.Time {
	if now := time.Now(); !t.IsZero() && t.Before(now) {
		return now
	}
	return t
}
