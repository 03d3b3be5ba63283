package serve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

func start(t *testing.T, srv *http.Server, lis net.Listener) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, srv, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// bogus opens a connection, sends one request a server refuses and reads
// its answer, leaving the connection kept alive and idle.
func bogus(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /nothing-here HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

// closedByServer reports whether the server has closed c.
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// A flood of idle connections, each after one refused request, holds at
// most MaxConns of them open, the oldest closed first, and a real request
// is still answered at once.
func TestIdleFloodKeepsTheCapAndServes(t *testing.T) {
	const max = 8
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	addr := start(t, HTTP(mux, Limits{MaxConns: max, MaxConnsPerSource: max}), listen(t))

	var flood []net.Conn
	for range 50 {
		flood = append(flood, bogus(t, addr))
	}
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a real request behind the flood: %v", err)
	}
	resp.Body.Close()
	open := 0
	for i, c := range flood {
		if !closedByServer(c) {
			open++
			if i < len(flood)-max {
				t.Errorf("connection %d of %d is still open; the oldest go first", i, len(flood))
			}
		}
	}
	if open > max-1 {
		t.Errorf("%d flood connections open, want at most %d (the real request took a place)", open, max-1)
	}
}

// A connection that sends nothing is closed after ReadHeaderTimeout, and
// one that sends half a header too: neither holds a place for long.
func TestSilentConnectionsTimeOut(t *testing.T) {
	addr := start(t, HTTP(http.NotFoundHandler(), Limits{ReadHeaderTimeout: 300 * time.Millisecond}), listen(t))
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	half, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	if _, err := io.WriteString(half, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]net.Conn{"silent": silent, "half a header": half} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: still open after 5s", name)
		}
	}
}

// trickle opens a connection that sends a whole header announcing a
// body of 200,000 bytes, then one byte of it, as the probe's flood did.
func trickle(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\nx"); err != nil {
		t.Fatal(err)
	}
	return c
}

// healthz asks for /healthz on a new connection and returns how long the
// answer took.
func healthz(t *testing.T, addr string) time.Duration {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	begin := time.Now()
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz behind the flood: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz behind the flood: %s", resp.Status)
	}
	return time.Since(begin)
}

func okMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	return mux
}

// 140 connections that announce a large body and trickle it hold no
// place: each is answered 413 and closed without its body being read,
// and /healthz answers within 100 ms throughout.
func TestTricklingFloodHoldsNoPlace(t *testing.T) {
	var evicted atomic.Int64
	addr := start(t, HTTP(okMux(), Limits{Evicted: func(string) { evicted.Add(1) }}), listen(t))
	var flood []net.Conn
	for range 140 {
		flood = append(flood, trickle(t, addr))
	}
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	// Each is answered 413, or closed first to make room for a later one
	// of the same source.
	for i, c := range flood {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("trickling connection %d: %s, want 413", i, resp.Status)
			}
		} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("trickling connection %d: neither answered nor closed in 2s", i)
		}
		if !closedByServer(c) {
			t.Fatalf("trickling connection %d is still open after its 413", i)
		}
	}
	if took := healthz(t, addr); took > 100*time.Millisecond {
		t.Errorf("/healthz took %v behind the trickling flood, want within 100ms", took)
	}
}

// slow sends a whole request whose handler does not answer until release
// is closed: a request the server is busy with.
func slow(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// A server full of requests that run past SlowRequest closes the
// longest-running of them for a new connection; while they are fresh, the
// new connection is the one closed.
func TestFullOfSlowRequestsMakesRoom(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	reasons := make(chan string, 64)
	const max = 4
	addr := start(t, HTTP(mux, Limits{MaxConns: max, MaxConnsPerSource: 2 * max, SlowRequest: 300 * time.Millisecond,
		Evicted: func(r string) { reasons <- r }}), listen(t))
	defer close(release)
	var busy []net.Conn
	defer func() {
		for _, c := range busy {
			c.Close()
		}
	}()
	// One at a time, each running before the next is sent: busy[0] is
	// the longest-running request, whatever the scheduler does with the
	// others' handshakes.
	for i := range max {
		busy = append(busy, slow(t, addr))
		for started.Load() < int64(i+1) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
	}
	fresh, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if !closedByServer(fresh) {
		t.Error("a new connection got a place while every request was fresh")
	}
	if r := <-reasons; r != EvictFull {
		t.Errorf("eviction reason %q, want %q", r, EvictFull)
	}
	time.Sleep(400 * time.Millisecond)
	if took := healthz(t, addr); took > 100*time.Millisecond {
		t.Errorf("/healthz took %v behind slow requests, want within 100ms", took)
	}
	if r := <-reasons; r != EvictSlow {
		t.Errorf("eviction reason %q, want %q", r, EvictSlow)
	}
	if !closedByServer(busy[0]) {
		t.Error("the longest-running request kept its place")
	}
	for _, c := range busy[1:] {
		if closedByServer(c) {
			t.Error("a request other than the longest-running lost its place")
		}
	}
}

// One source past its share closes its own oldest connection, not
// another source's.
func TestOneSourceTakesItsShareOnly(t *testing.T) {
	reasons := make(chan string, 64)
	addr := start(t, HTTP(okMux(), Limits{MaxConns: 16, MaxConnsPerSource: 2, Evicted: func(r string) { reasons <- r }}), listen(t))
	// Another source: 127.0.0.2 is loopback too.
	other, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from 127.0.0.2, a second loopback address: %v", err)
	}
	defer other.Close()
	var mine []net.Conn
	for range 5 {
		mine = append(mine, bogus(t, addr))
	}
	defer func() {
		for _, c := range mine {
			c.Close()
		}
	}()
	for i, c := range mine {
		if closed := closedByServer(c); closed != (i < 3) {
			t.Errorf("connection %d of one source: closed %v, want %v", i, closed, i < 3)
		}
	}
	if closedByServer(other) {
		t.Error("another source's connection was closed")
	}
	for range 3 {
		if r := <-reasons; r != EvictSource {
			t.Errorf("eviction reason %q, want %q", r, EvictSource)
		}
	}
}

// accept hands out what lis accepts on a channel.
func accept(lis net.Listener) <-chan net.Conn {
	accepted := make(chan net.Conn, 256)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	return accepted
}

// Silent connections that never finish a handshake push out only each
// other: an authenticated connection keeps its place, and a new one still
// gets in and can authenticate.
func TestHandshakeTiers(t *testing.T) {
	reasons := make(chan string, 256)
	lis := Handshakes(listen(t), Tiers{Unauthenticated: 4, Authenticated: 2, Evicted: func(r string) { reasons <- r }})
	defer lis.Close()
	accepted := accept(lis)
	dial := func() (client, server net.Conn) {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, <-accepted
	}
	authClient, authServer := dial()
	if !Authenticated(authServer) {
		t.Fatal("the first connection could not authenticate")
	}
	var silent []net.Conn
	for range 64 {
		c, _ := dial()
		silent = append(silent, c)
	}
	for i, c := range silent {
		if closed := closedByServer(c); closed != (i < 60) {
			t.Errorf("silent connection %d: closed %v, want %v", i, closed, i < 60)
		}
	}
	if closedByServer(authClient) {
		t.Error("the authenticated connection lost its place to silent ones")
	}
	_, late := dial()
	if !Authenticated(late) {
		t.Error("a connection after the flood could not authenticate")
	}
	_, third := dial()
	if Authenticated(third) {
		t.Error("a third connection authenticated past a cap of 2")
	}
	counts := map[string]int{}
	for len(reasons) > 0 {
		counts[<-reasons]++
	}
	// 60 silent ones for each other, one for the late connection.
	if counts[EvictUnauthenticated] != 61 || counts[EvictAuthenticatedFull] != 1 {
		t.Errorf("evictions %v, want 61 unauthenticated and 1 authenticated-full", counts)
	}
	// A closed authenticated connection gives its place back.
	late.Close()
	_, fourth := dial()
	if !Authenticated(fourth) {
		t.Error("a freed authenticated place was not taken")
	}
}
