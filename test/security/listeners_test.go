// Package security tests gpuscaler the way an attacker on the same network
// and a careless operator would meet it: the real binary, its default
// listeners, and what it refuses to start with.
package security

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// bin is the gpuscaler binary, found or built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	if addr := os.Getenv(floodAddrEnv); addr != "" {
		// This process is one of BenchmarkIdleConnectionFlood's clients.
		os.Exit(holdFlood(addr))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gpuscaler-security-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bin, err = testenv.GPUScaler(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// syncBuffer is a buffer a process writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// simOnly is a config with no provider or metrics section: every default.
const simOnly = `
clusterName: sec
clouds:
  sim: {}
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 3}
`

func writeConfig(t testing.TB, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// With no listener settings, the gRPC port (8086) and the metrics port
// (9090) answer on 127.0.0.1 only: from another address of this machine
// (127.0.0.2, as a peer on the network would come) nothing is listening.
func TestDefaultListenersAreLoopbackOnly(t *testing.T) {
	startProvider(t, writeConfig(t, simOnly), "127.0.0.1:9090")
	for _, port := range []string{"8086", "9090"} {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), time.Second); err != nil {
			t.Errorf("port %s not served on loopback: %v", port, err)
		} else {
			c.Close()
		}
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", port), time.Second); err == nil {
			c.Close()
			t.Errorf("port %s answers on 127.0.0.2: it listens beyond loopback", port)
		}
	}
}

// A plaintext gRPC listener off loopback is refused at start, naming the
// field and the two ways out; with insecure set it starts, warning loudly.
func TestPlaintextOffLoopbackNeedsConsent(t *testing.T) {
	cfg := writeConfig(t, simOnly+"provider: {listenAddress: \"0.0.0.0:0\"}\nmetrics: {address: \"127.0.0.1:0\"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "provider", "--config", cfg).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("started with a plaintext listener on every interface (err %v):\n%s", err, out)
	}
	for _, want := range []string{"provider.listenAddress", "provider.tls", "provider.insecure"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not mention %s:\n%s", want, out)
		}
	}
	if out, err := exec.CommandContext(ctx, bin, "validate", "--config", cfg).CombinedOutput(); err == nil {
		t.Fatalf("validate accepted what start-up refuses:\n%s", out)
	}

	cmd := exec.Command(bin, "provider", "--config", cfg, "--insecure")
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), "INSECURE") {
		if time.Now().After(deadline) {
			t.Fatalf("no loud warning with --insecure:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
