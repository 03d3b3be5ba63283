package security

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// startProvider runs the provider on a config and waits until addr
// answers /readyz with 200 (the core runs); it stops at the end of the
// test.
func startProvider(t testing.TB, cfg, addr string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, "provider", "--config", cfg)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, &out
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider did not become ready on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// timedGet asks for a path on a new connection; it returns how long the
// answer took, and an error for no answer. Any status is an answer.
func timedGet(addr, path string) (time.Duration, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return time.Since(start), nil
}

// trickleFlood opens n connections to addr that each send a whole header
// announcing a 200,000-byte body, then trickle it a byte every 100 ms
// until the test ends or the server closes them.
func trickleFlood(t *testing.T, addr string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "POST /healthz HTTP/1.1\r\nHost: gpuscaler\r\nContent-Length: 200000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		go func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
	}
}

// The probe's trickling flood, 140 connections each on the metrics port
// and the script server, leaves /healthz answering within 100 ms on both
// the metrics port and the health port, and the script server answering.
func TestTricklingFloodLocksNothingOut(t *testing.T) {
	metrics, health, scripts := testenv.LoopbackAddress(t), testenv.LoopbackAddress(t), testenv.LoopbackAddress(t)
	cfg := writeConfig(t, simOnly+fmt.Sprintf("metrics: {address: %q, healthAddress: %q}\nprovider: {listenAddress: %q}\n"+
		"scriptServer: {listenAddress: %q, url: \"http://%s\"}\n", metrics, health, testenv.LoopbackAddress(t), scripts, scripts))
	_, out := startProvider(t, cfg, metrics)
	trickleFlood(t, metrics, 140)
	trickleFlood(t, scripts, 140)
	time.Sleep(time.Second)
	for _, probe := range []struct{ what, addr, path string }{
		{"/healthz on the metrics port", metrics, "/healthz"},
		{"/readyz on the metrics port", metrics, "/readyz"},
		{"/healthz on the health port", health, "/healthz"},
		{"a script fetch", scripts, "/v1/scripts/0123456789abcdef"},
	} {
		took, err := timedGet(probe.addr, probe.path)
		if err != nil {
			t.Errorf("%s behind the trickling flood: %v\n%s", probe.what, err, out.String())
			continue
		}
		if took > 100*time.Millisecond {
			t.Errorf("%s took %v behind the trickling flood, want within 100ms", probe.what, took)
		}
	}
}

// 200 connections that never start a TLS handshake do not lock
// cluster-autoscaler out of the gRPC port: its call, with its client
// certificate, is served, and the evictions are counted.
func TestSilentFloodBeforeTheHandshakeLocksNothingOut(t *testing.T) {
	dir := t.TempDir()
	files, err := testenv.IssueMTLS(dir, "cluster-autoscaler")
	if err != nil {
		t.Fatal(err)
	}
	metrics, grpcAddr := testenv.LoopbackAddress(t), testenv.LoopbackAddress(t)
	cfg := writeConfig(t, simOnly+fmt.Sprintf("metrics: {address: %q}\nprovider: {listenAddress: %q, tls: {certFile: %q, keyFile: %q, caCertFile: %q, clientNames: [cluster-autoscaler]}}\n",
		metrics, grpcAddr, files.ServerCert, files.ServerKey, files.CA))
	_, out := startProvider(t, cfg, metrics)
	for range 200 {
		c, err := net.Dial("tcp", grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	time.Sleep(500 * time.Millisecond)
	pair, err := tls.LoadX509KeyPair(files.ClientCert, files.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pb.NewCloudProviderClient(conn).NodeGroups(ctx, &pb.NodeGroupsRequest{}); err != nil {
		t.Fatalf("cluster-autoscaler behind 200 silent connections: %v\n%s", err, out.String())
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, `gpuscaler_connections_evicted_total{listener="grpc",reason="unauthenticated"}`) {
			found = true
		}
	}
	if !found {
		t.Error("the evicted silent connections are not counted in gpuscaler_connections_evicted_total")
	}
	if !strings.Contains(out.String(), "closed a connection to make room") {
		t.Errorf("the evictions are not logged:\n%s", out.String())
	}
}
