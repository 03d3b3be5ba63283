package serve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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
	addr := start(t, HTTP(mux, Limits{MaxConns: max}), listen(t))

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

// Every connection past the listener's cap is closed on accept; a place
// given back takes a new one.
func TestListenerCap(t *testing.T) {
	lis := Listener(listen(t), 2)
	defer lis.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	first, second := <-accepted, <-accepted
	for _, c := range clients[2:] {
		if !closedByServer(c) {
			t.Error("a connection past the cap is open")
		}
	}
	first.Close()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case got := <-accepted:
		got.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("a freed place was not taken")
	}
	second.Close()
}
