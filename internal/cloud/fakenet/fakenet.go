// Package fakenet serves the clouds' fake APIs on a loopback port, or on
// in-memory connections for tests that run on a virtual clock
// (testing/synctest): a goroutine blocked on a socket is not "durably
// blocked", so a bubble's clock would never move while a client waits on
// a real connection, and an idle keep-alive connection would hold it
// still for good.
//
// The in-memory connections are the standard library's net.Pipe, whose
// waits are on channels made in the bubble. grpc's bufconn, tried first,
// arms a timer of zero (or, for net/http's deadline of 1970, some -30
// years) on every pipe it makes, and the Go runtime (1.26, under -race)
// crashed in timer.modify running such a timer at once inside a bubble.
package fakenet

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Serve starts a test server for h. On a loopback port, as
// httptest.NewServer does; when inMemory, on in-memory connections that
// only the server's own Client can dial: its URL names a loopback address
// (the clients accept plain http only for loopback) that nothing listens
// on. Close the server to end its connections and goroutines.
func Serve(h http.Handler, inMemory bool) *httptest.Server {
	if !inMemory {
		return httptest.NewServer(h)
	}
	l := &listener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	srv.Client().Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return l.dial(ctx)
	}
	return srv
}

// listener hands the server one end of each pipe a client dials.
type listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// Accept waits for the next dial.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and every dial still waiting.
func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is 127.0.0.1:1, where nothing listens: a client that does not dial
// through the server's Client fails at once rather than reach another
// server.
func (*listener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// dial makes a pipe and hands its other end to Accept.
func (l *listener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		err := &net.OpError{Op: "dial", Net: "pipe", Err: net.ErrClosed}
		client.Close()
		server.Close()
		return nil, err
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}
