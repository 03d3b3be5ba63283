package nodegroup

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// harness runs a Manager against the simulated cloud on a fake clock that
// warps forward whenever something waits on it, so minutes of cloud time
// pass in milliseconds while every goroutine still sees a consistent clock.
type harness struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	cfg    *config.Config
	engine *sim.Engine
	acct   *sim.Cloud
	mgr    *Manager
	cancel context.CancelFunc
	opts   Options
}

const baseConfig = `
clusterName: test
sync: {period: 30s, requestsPerSecond: 10000, maxConcurrentCreates: 8}
clouds:
  sim: {bootDelay: 60s, deleteDelay: 10s}
`

func newHarness(t *testing.T, doc string, simOpts sim.Options, opts Options) *harness {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	simOpts.Clock = clk
	engine, err := sim.NewEngine(*cfg.Clouds.Sim, simOpts)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, clk: clk, cfg: cfg, engine: engine, acct: engine.Account(cfg.ClusterName), opts: opts}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			if clk.HasWaiters() {
				clk.Step(250 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() {
		h.stop()
		close(stop)
		<-done
	})
	h.start()
	return h
}

func (h *harness) start() {
	h.t.Helper()
	opts := h.opts
	opts.Clock = h.clk
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	opts.Registerer = prometheus.NewRegistry()
	mgr, err := New(h.cfg, map[string]cloud.Provider{"sim": h.acct}, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Start(ctx); err != nil {
		cancel()
		h.t.Fatalf("start: %v", err)
	}
	h.mgr, h.cancel = mgr, cancel
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		h.mgr.Wait()
		h.cancel = nil
	}
}

// restart stops the Manager and starts a new one on the same cloud, as a
// provider process restart would.
func (h *harness) restart() {
	h.stop()
	h.start()
}

func testLogger() *slog.Logger {
	if os.Getenv("GPUSCALER_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// eventually polls cond for up to 20 s of real time.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// states counts a group's members by state, with failed ones apart.
func (h *harness) states(group string) (running, creating, deleting, failed int) {
	h.t.Helper()
	insts, err := h.mgr.Instances(group)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, in := range insts {
		switch {
		case in.ErrorCode != "":
			failed++
		case in.State == StateRunning:
			running++
		case in.State == StateCreating:
			creating++
		case in.State == StateDeleting:
			deleting++
		}
	}
	return
}

// cloudInstances returns the live (not deleting) instances at the cloud by group.
func (h *harness) cloudInstances() map[string][]cloud.Instance {
	out := map[string][]cloud.Instance{}
	for _, in := range h.engine.Instances(h.cfg.ClusterName) {
		if in.State != cloud.StateDeleting {
			out[in.Group] = append(out[in.Group], in)
		}
	}
	return out
}
