// Package coretest holds what the cloud backends' tests of the node-group
// core share: a log sink that several goroutines write, waits on the core,
// and the scale-cycle exercise every backend's write paths must come out
// of with nothing left behind.
package coretest

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// LogBuffer is a log sink safe for concurrent writers.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Wait polls cond until it holds, failing the test after 20 s with the
// logs.
func Wait(t testing.TB, what string, logs *LogBuffer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Running returns a group's running instances.
func Running(t testing.TB, m *nodegroup.Manager, group string) []nodegroup.Instance {
	t.Helper()
	insts, err := m.Instances(group)
	if err != nil {
		t.Fatal(err)
	}
	var out []nodegroup.Instance
	for _, in := range insts {
		if in.State == nodegroup.StateRunning {
			out = append(out, in)
		}
	}
	return out
}

// ScaleCycles makes 100 random scale-ups and scale-downs of a group (at
// most maxSize instances), calling fault after each to inject the cloud's
// failures, then scales the group to zero and waits (a minute at most)
// until left, which describes what the cloud still holds, says nothing
// ("") and the group has no member.
func ScaleCycles(t *testing.T, m *nodegroup.Manager, group string, maxSize int, fault func(*rand.Rand), left func() string) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	ctx := context.Background()
	for i := range 100 {
		insts, err := m.Instances(group)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if room := maxSize - len(insts); room > 0 {
				_ = m.IncreaseSize(ctx, group, 1+rng.IntN(min(room, 3)))
			}
		} else {
			var ids []string
			for _, in := range insts {
				if in.State == nodegroup.StateRunning && rng.IntN(2) == 0 {
					ids = append(ids, in.ProviderID)
				}
			}
			if len(ids) > 0 {
				_ = m.DeleteNodes(ctx, group, ids) // may be refused while the group changes
			}
		}
		fault(rng)
		time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		insts, _ := m.Instances(group)
		var ids []string
		for _, in := range insts {
			ids = append(ids, in.ProviderID)
		}
		if len(ids) > 0 {
			_ = m.DeleteNodes(ctx, group, ids)
		}
		what := left()
		if what == "" && len(insts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %s; %d members %+v (seed %d)", what, len(insts), insts, seed)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n, _ := m.TargetSize(group); n != 0 {
		t.Fatalf("target %d after scaling to zero", n)
	}
}

// Logger is a debug-level text logger into logs.
func Logger(logs *LogBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Start runs the core of cfg over one cloud, with a fresh metrics
// registry, until the returned stop is called.
func Start(t testing.TB, cfg *config.Config, name string, p cloud.Provider, opts nodegroup.Options) (*nodegroup.Manager, func()) {
	t.Helper()
	opts.Registerer = prometheus.NewRegistry()
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{name: p}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	return mgr, func() { cancel(); mgr.Wait() }
}

// Pending reports whether any group has a member that does not run yet.
func Pending(m *nodegroup.Manager) bool {
	for _, g := range m.Groups() {
		insts, _ := m.Instances(g.Name)
		for _, in := range insts {
			if in.State != nodegroup.StateRunning {
				return true
			}
		}
	}
	return false
}

// MeasureCallsPerMinute runs cluster-autoscaler's loop (Refresh, then
// every group's target and instances and every instance's group) six
// times 100 ms apart per benchmark iteration: one minute at a 100x time
// scale (a 300 ms sync period stands for 30 s). It reports the cloud
// calls the iterations cost, per "METHOD path" and in total, as calls/min.
func MeasureCallsPerMinute(b *testing.B, m *nodegroup.Manager, calls func() map[string]int) {
	ctx := context.Background()
	before := calls()
	b.ResetTimer()
	for range b.N {
		for range 6 {
			_ = m.Refresh(ctx)
			for _, g := range m.Groups() {
				_, _ = m.TargetSize(g.Name)
				insts, _ := m.Instances(g.Name)
				for _, in := range insts {
					_, _ = m.GroupForProviderID(in.ProviderID)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	b.StopTimer()
	total := 0
	for k, v := range calls() {
		if d := v - before[k]; d > 0 {
			total += d
			b.ReportMetric(float64(d)/float64(b.N), strings.NewReplacer(" ", "_", "/", "", "{", "", "}", "").Replace(k)+"/min")
		}
	}
	b.ReportMetric(float64(total)/float64(b.N), "calls/min")
}
