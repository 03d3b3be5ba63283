package security

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// floodConns is how many idle connections the probe opened.
const floodConns = 20000

// BenchmarkIdleConnectionFlood opens 20,000 connections to the provider's
// metrics port, each with one request no credential could make better (a
// 404), and keeps them open, as the probe did; then a real request asks
// for /healthz. It reports the provider's resident memory before and
// during the flood (target: within 10 %), how many connections the
// provider still holds (its cap), and how long the real request took.
func BenchmarkIdleConnectionFlood(b *testing.B) {
	addr := testenv.LoopbackAddress(b)
	cfg := writeConfig(b, simOnly+fmt.Sprintf("metrics: {address: %q}\nprovider: {listenAddress: %q}\n", addr, testenv.LoopbackAddress(b)))
	cmd, _ := startProvider(b, cfg, addr)
	client := &http.Client{Timeout: 5 * time.Second}
	get := func() (time.Duration, error) {
		start := time.Now()
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("/healthz: %s", resp.Status)
		}
		return time.Since(start), nil
	}
	for range 200 { // warm: what normal scrapes allocate is in the baseline
		if _, err := get(); err != nil {
			b.Fatal(err)
		}
	}
	client.CloseIdleConnections()
	time.Sleep(time.Second)
	idle := rss(b, cmd.Process.Pid)
	var fetch time.Duration
	var peak int64
	var held int
	for b.Loop() {
		stop := flood(b, addr, floodConns)
		time.Sleep(2 * time.Second)
		peak = max(peak, rss(b, cmd.Process.Pid))
		held = heldConnections(b, cmd.Process.Pid)
		var err error
		if fetch, err = get(); err != nil {
			b.Fatalf("a real request during the flood: %v", err)
		}
		stop()
	}
	b.ReportMetric(float64(idle)/1e6, "idle-rss-MB")
	b.ReportMetric(float64(peak)/1e6, "flood-rss-MB")
	b.ReportMetric(100*float64(peak-idle)/float64(idle), "rss-growth-%")
	b.ReportMetric(float64(fetch.Microseconds())/1e3, "fetch-ms")
	b.ReportMetric(float64(held), "fds-held")
	if growth := float64(peak-idle) / float64(idle); growth > 0.10 {
		b.Errorf("resident memory grew %.1f %% under %d idle connections (%d -> %d bytes); the target is 10 %%", 100*growth, floodConns, idle, peak)
	}
}

// rss is a process's resident memory in bytes.
func rss(b *testing.B, pid int) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// heldConnections counts a process's open file descriptors.
func heldConnections(b *testing.B, pid int) int {
	b.Helper()
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		b.Fatal(err)
	}
	return len(fds)
}

// floodAddrEnv makes the test binary a flood client of that address
// (TestMain): it opens floodPerProcess connections, sends one bogus
// request on each, says "ready", and holds them until its input closes.
// A process may hold fewer descriptors than the flood needs, so the
// benchmark spreads it over several.
const (
	floodAddrEnv    = "GPUSCALER_FLOOD_ADDR"
	floodPerProcess = 5000
)

func holdFlood(addr string) int {
	conns := make([]net.Conn, 0, floodPerProcess)
	for range floodPerProcess {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "connection %d: %v\n", len(conns), err)
			return 1
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, "GET /admin HTTP/1.1\r\nHost: gpuscaler\r\n\r\n")
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// flood starts the flood's client processes and returns once every one
// holds its connections; stop closes them.
func flood(b *testing.B, addr string, n int) (stop func()) {
	b.Helper()
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for range (n + floodPerProcess - 1) / floodPerProcess {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), floodAddrEnv+"="+addr)
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		outPipe, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		var errs syncBuffer
		cmd.Stderr = &errs
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		stops = append(stops, func() { in.Close(); _ = cmd.Wait() })
		line, err := bufio.NewReader(outPipe).ReadString('\n')
		if err != nil || line != "ready\n" {
			stop()
			b.Fatalf("flood client: %q %v: %s", line, err, errs.String())
		}
	}
	return stop
}
