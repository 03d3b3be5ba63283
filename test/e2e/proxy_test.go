package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// serviceProxy runs an HTTP CONNECT proxy on loopback that tunnels each
// host:port of routes to its loopback address, and returns the proxy's
// URL. A process outside the cluster given it as HTTPS_PROXY reaches a
// Service by the DNS name a chart wrote (and verifies its certificate for
// that name), as a pod would through the cluster's DNS.
func serviceProxy(t *testing.T, routes map[string]string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go tunnel(conn, routes)
		}
	}()
	return "http://" + lis.Addr().String()
}

// tunnel serves one CONNECT request on conn.
func tunnel(conn net.Conn, routes map[string]string) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	target, ok := routes[req.Host]
	if req.Method != http.MethodConnect || !ok {
		_, _ = io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		_, _ = io.WriteString(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
	<-done
}
