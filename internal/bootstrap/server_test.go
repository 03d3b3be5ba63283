package bootstrap

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"
)

const script = "#!/bin/bash\nJOIN_TOKEN=very-secret-join-token\n"

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestScriptServer(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var logs bytes.Buffer
	var ipMu sync.Mutex
	ips := map[string]string{"node-a": "127.0.0.1", "node-b": "10.9.9.9"}
	srv := newServer(t, ServerOptions{Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil)), InstanceIP: func(n string) (string, bool) {
		ipMu.Lock()
		defer ipMu.Unlock()
		ip, ok := ips[n]
		return ip, ok
	}})
	hs := httptest.NewServer(srv)
	defer hs.Close()

	tokA := srv.Register("node-a", script, time.Hour)
	if code, body := fetch(t, hs.URL+ScriptPath+tokA); code != 200 || body != script {
		t.Fatalf("first fetch: %d %q", code, body)
	}
	if code, body := fetch(t, hs.URL+ScriptPath+tokA); code != 404 || strings.Contains(body, "JOIN") {
		t.Fatalf("second fetch: %d %q", code, body)
	}
	// Guessed token.
	if code, body := fetch(t, hs.URL+ScriptPath+"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"); code != 404 || strings.Contains(body, "JOIN") {
		t.Fatalf("guessed token: %d %q", code, body)
	}
	// Wrong IP: node-b's instance is at 10.9.9.9, the request comes from loopback.
	tokB := srv.Register("node-b", script, time.Hour)
	if code, body := fetch(t, hs.URL+ScriptPath+tokB); code != 404 || strings.Contains(body, "JOIN") {
		t.Fatalf("wrong IP: %d %q", code, body)
	}
	// Expired.
	tokC := srv.Register("node-c", script, time.Minute)
	clk.Step(2 * time.Minute)
	if code, body := fetch(t, hs.URL+ScriptPath+tokC); code != 404 || strings.Contains(body, "JOIN") {
		t.Fatalf("expired: %d %q", code, body)
	}
	for _, tok := range []string{tokA, tokB, tokC} {
		if strings.Contains(logs.String(), tok) {
			t.Fatal("a token reached the logs")
		}
	}
	if strings.Contains(logs.String(), "very-secret") {
		t.Fatal("script content reached the logs")
	}
	if !strings.Contains(logs.String(), "startup script handed out") || !strings.Contains(logs.String(), "request not from the instance's address") {
		t.Fatalf("hand-outs and refusals are not logged:\n%s", logs.String())
	}
}

func TestScriptServerOneWinnerUnderConcurrency(t *testing.T) {
	srv := newServer(t, ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	tok := srv.Register("node", script, time.Hour)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(hs.URL + ScriptPath + tok)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == 200 && string(b) == script {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d fetches got the script, want exactly 1", wins.Load())
	}
	if srv.Pending() != 0 {
		t.Fatal("the fetched script is still held")
	}
}

func TestServerDeliveryRendersStub(t *testing.T) {
	cfg := testConfig(t)
	cfg.NodeGroups[0].Bootstrap.Delivery = "server"
	srv := newServer(t, ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	r, err := New(cfg, Options{Kube: secrets(), Server: srv, ServerURL: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	stub := render(t, r, "k3s-plain")
	if strings.Contains(stub, k3sToken) || !strings.Contains(stub, hs.URL+ScriptPath) {
		t.Fatalf("stub:\n%s", stub)
	}
	url := stub[strings.Index(stub, hs.URL):]
	url = strings.TrimRight(url[:strings.IndexAny(url, "'\n")], "'")
	if code, body := fetch(t, url); code != 200 || !strings.Contains(body, k3sToken) {
		t.Fatalf("the stub's link gave %d %q", code, body)
	}
	r.Release(t.Context(), "k3s-plain-0123456789")
}

// A flood of bogus tokens costs a counter, not a log line each.
func TestRefusalsAreCountedNotFlooded(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	srv := newServer(t, ServerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for i := range 2000 {
		resp, err := http.Get(ts.URL + ScriptPath + fmt.Sprintf("bogus-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := strings.Count(logs.String(), "startup script refused"); n > 1 {
		t.Fatalf("%d log lines for 2,000 refused requests", n)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 2000 {
		t.Fatalf("refusal counter: %v %v", mfs, err)
	}
}

// Expired scripts are dropped even when nobody asks for them.
func TestExpiredScriptsAreSwept(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := newServer(t, ServerOptions{Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	for i := range 10 {
		srv.Register(fmt.Sprintf("n%d", i), "#!/bin/sh\n", time.Minute)
	}
	clk.Step(2 * time.Minute)
	srv.Register("late", "#!/bin/sh\n", time.Hour)
	srv.mu.Lock()
	n := len(srv.entries)
	srv.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d scripts held after the others expired, want 1", n)
	}
}

func newServer(t *testing.T, opts ServerOptions) *Server {
	t.Helper()
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestReissueAfterRestart: a second server with the same key puts a
// script back under the token the first one gave, until the first
// deadline, and only once; a server with another key cannot.
func TestReissueAfterRestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	key := bytes.Repeat([]byte{7}, MinKeyLength)
	first := newServer(t, ServerOptions{Clock: clk, Key: key, Logger: slog.New(slog.DiscardHandler)})
	token := first.Register("node-a", script, time.Hour)
	ordered := clk.Now()

	clk.Step(10 * time.Minute) // the process restarts while node-a boots
	// bindToInstanceIP off: a reissued script still goes to its instance's
	// address alone (the token may have been used before the restart).
	instanceIP := "127.0.0.1"
	second := newServer(t, ServerOptions{Clock: clk, Key: key, Logger: slog.New(slog.DiscardHandler),
		ReissueIP: func(string) (string, bool) { return instanceIP, true }})
	hs := httptest.NewServer(second)
	defer hs.Close()
	if code, _ := fetch(t, hs.URL+ScriptPath+token); code != 404 {
		t.Fatalf("before the reissue: %d", code)
	}
	if !second.Reissue("node-a", script, ordered.Add(time.Hour)) {
		t.Fatal("reissue within the deadline refused")
	}
	instanceIP = "192.0.2.10" // another machine than the test's
	if code, _ := fetch(t, hs.URL+ScriptPath+token); code != 404 {
		t.Fatalf("a reissued script handed to an address other than its instance's: %d", code)
	}
	instanceIP = "127.0.0.1"
	if code, body := fetch(t, hs.URL+ScriptPath+token); code != 200 || body != script {
		t.Fatalf("after the reissue: %d %q", code, body)
	}
	if code, _ := fetch(t, hs.URL+ScriptPath+token); code != 404 {
		t.Fatalf("a reissued token served twice: %d", code)
	}

	other := newServer(t, ServerOptions{Clock: clk, Key: bytes.Repeat([]byte{8}, MinKeyLength), Logger: slog.New(slog.DiscardHandler),
		ReissueIP: func(string) (string, bool) { return "127.0.0.1", true }})
	other.Reissue("node-a", script, ordered.Add(time.Hour))
	ho := httptest.NewServer(other)
	defer ho.Close()
	if code, _ := fetch(t, ho.URL+ScriptPath+token); code != 404 {
		t.Fatalf("a server with another key honoured the token: %d", code)
	}
	unbound := newServer(t, ServerOptions{Clock: clk, Key: key, Logger: slog.New(slog.DiscardHandler)})
	if unbound.Reissue("node-b", script, ordered.Add(time.Hour)) {
		t.Fatal("reissued with no instance address to bind the script to")
	}
	clk.Step(time.Hour)
	if second.Reissue("node-a", script, ordered.Add(time.Hour)) {
		t.Fatal("reissued after the deadline")
	}
	if _, err := NewServer(ServerOptions{Key: []byte("short")}); err == nil {
		t.Fatal("a 5-byte key accepted")
	}
}

// With scriptServer.tls.caCertFile, the stub trusts that CA alone: it
// fetches and runs its script from a server whose certificate no public
// CA signed, and the same stub without the pin is refused.
func TestStubPinsTheServersCA(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: apt-get install curl")
	}
	srv := newServer(t, ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewTLSServer(srv)
	defer hs.Close()
	cfg := testConfig(t)
	cfg.NodeGroups[0].Bootstrap.Delivery = "server"
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	pinned, err := New(cfg, Options{Kube: secrets(), Server: srv, ServerURL: hs.URL, ServerCA: caPEM})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(cfg, Options{Kube: secrets(), Server: srv, ServerURL: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		r    *Renderer
		runs bool
	}{{"pinned", pinned, true}, {"not pinned", plain, false}} {
		marker := filepath.Join(dir, tc.name)
		token := srv.Register("node-a", "#!/bin/bash\ntouch '"+marker+"'\n", time.Minute)
		stub, err := execute(tc.r.tpl.stub, stubVars{NodeName: "node-a", URL: hs.URL + ScriptPath + token, CA: tc.r.serverCA})
		if err != nil {
			t.Fatal(err)
		}
		stub = strings.Replace(stub, "--retry 30", "--retry 0", 1) // a refusal fails at once
		out, err := exec.Command("bash", "-c", stub).CombinedOutput()
		_, statErr := os.Stat(marker)
		if ran := err == nil && statErr == nil; ran != tc.runs {
			t.Errorf("%s: the script ran %v, want %v (%v)\n%s", tc.name, ran, tc.runs, err, out)
		}
	}
	if _, err := New(cfg, Options{Kube: secrets(), Server: srv, ServerURL: hs.URL, ServerCA: []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")}); err == nil ||
		!strings.Contains(err.Error(), "scriptServer.tls.caCertFile") {
		t.Errorf("a key as the CA: %v, want an error naming scriptServer.tls.caCertFile", err)
	}
}
