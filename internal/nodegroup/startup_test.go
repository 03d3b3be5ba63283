package nodegroup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// Each start-up step of an instance's Node is observed once, from the
// order's time; the GPU gap from Ready; each stage on its own; nothing
// reached before the core started (a restart) is observed again.
func TestNodeStartupMetrics(t *testing.T) {
	nodes := newFakeNodes()
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{Nodes: nodes})
	if err := h.mgr.IncreaseSize(context.Background(), "g", 2); err != nil {
		t.Fatal(err)
	}
	h.eventually("2 running", func() bool { r, _, _, _ := h.states("g"); return r == 2 })
	insts, _ := h.mgr.Instances("g")
	a, b := insts[0], insts[1]
	at := func(in Instance, d time.Duration) time.Time { return in.CreatedAt.Add(d) }
	nodes.setStartup(a.ProviderID, Startup{Registered: at(a, 40*time.Second), Ready: at(a, 70*time.Second), GPUs: at(a, 130*time.Second), GPUsSeen: true, GPUsNow: true})
	nodes.setStartup(b.ProviderID, Startup{Registered: at(b, 50*time.Second), Ready: at(b, 80*time.Second)})
	h.settle(time.Minute)

	step := func(s string) map[string]string { return map[string]string{"group": "g", "step": s} }
	want := func(what string, labels map[string]string, count uint64, sum float64) {
		t.Helper()
		h.eventually(what, func() bool { c, s := h.histogram(what, labels); return c == count && s == sum }, func() string {
			c, s := h.histogram(what, labels)
			return fmt.Sprintf("count %d, sum %v", c, s)
		})
	}
	want("gpuscaler_node_startup_duration_seconds", step("registered"), 2, 90)
	want("gpuscaler_node_startup_duration_seconds", step("ready"), 2, 150)
	want("gpuscaler_node_startup_duration_seconds", step("gpus"), 1, 130)
	want("gpuscaler_gpu_startup_gap_seconds", map[string]string{"group": "g"}, 1, 60)
	// The same as stages, each on its own: boot 40 s and 50 s, Ready 30 s
	// after each registration, GPUs 60 s after a's Ready.
	stage := func(s string) map[string]string { return map[string]string{"group": "g", "stage": s} }
	want("gpuscaler_node_startup_stage_seconds", stage("boot"), 2, 90)
	want("gpuscaler_node_startup_stage_seconds", stage("ready"), 2, 60)
	want("gpuscaler_node_startup_stage_seconds", stage("gpus"), 1, 60)

	// b's GPUs come later; a's steps are not counted again.
	nodes.setStartup(b.ProviderID, Startup{Registered: at(b, 50*time.Second), Ready: at(b, 80*time.Second), GPUs: at(b, 200*time.Second), GPUsSeen: true, GPUsNow: true})
	h.settle(2 * time.Minute)
	want("gpuscaler_node_startup_duration_seconds", step("registered"), 2, 90)
	want("gpuscaler_node_startup_duration_seconds", step("gpus"), 2, 330)
	want("gpuscaler_gpu_startup_gap_seconds", map[string]string{"group": "g"}, 2, 60+120)
	want("gpuscaler_node_startup_stage_seconds", stage("gpus"), 2, 60+120)

	// After a restart the steps reached before it are not observed again.
	h.restart()
	h.settle(2 * time.Minute)
	want("gpuscaler_node_startup_duration_seconds", step("registered"), 0, 0)
	want("gpuscaler_node_startup_duration_seconds", step("gpus"), 0, 0)
}

// A GPU node that registers but shows no GPUs within gpuStartupTimeout is
// reported and its instance deleted, leaving the target (the front end
// orders its replacement); one whose GPUs came is left alone.
func TestGPUStartupTimeout(t *testing.T) {
	nodes := newFakeNodes()
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{Nodes: nodes})
	if err := h.mgr.IncreaseSize(context.Background(), "g", 2); err != nil {
		t.Fatal(err)
	}
	h.eventually("2 running", func() bool { r, _, _, _ := h.states("g"); return r == 2 })
	insts, _ := h.mgr.Instances("g")
	broken, fine := insts[0], insts[1]
	now := h.clk.Now()
	nodes.setStartup(broken.ProviderID, Startup{Registered: now, Ready: now})
	nodes.setStartup(fine.ProviderID, Startup{Registered: now, Ready: now, GPUs: now.Add(time.Minute), GPUsSeen: true, GPUsNow: true})
	h.settle(14 * time.Minute)
	if n := len(h.cloudInstances()["g"]); n != 2 {
		t.Fatalf("%d instances before gpuStartupTimeout (15m), want 2", n)
	}
	h.settle(2 * time.Minute)
	h.eventually("the GPU-less node's instance deleted", func() bool {
		live := h.cloudInstances()["g"]
		return len(live) == 1 && live[0].Name == fine.Name
	})
	if v := h.metric("gpuscaler_gpu_startup_timeouts_total", map[string]string{"group": "g"}); v != 1 {
		t.Errorf("gpuscaler_gpu_startup_timeouts_total = %v, want 1", v)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Errorf("target %d after the deletion, want 1 (the front end orders the replacement)", n)
	}
}

// Three nodes in a row whose GPUs never appear back the group off, though
// an older node of the group is healthy all along (a healthy node must not
// restart the streak on every sync).
func TestGPUStartupTimeoutsBackOff(t *testing.T) {
	nodes := newFakeNodes()
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{Nodes: nodes})
	ctx := context.Background()
	known := map[string]bool{}
	order := func(s func(now time.Time) Startup) string {
		t.Helper()
		if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
			t.Fatal(err)
		}
		var fresh string
		h.eventually("a new instance running", func() bool {
			insts, _ := h.mgr.Instances("g")
			for _, in := range insts {
				if !known[in.ProviderID] && in.State == StateRunning {
					fresh = in.ProviderID
					return true
				}
			}
			return false
		})
		known[fresh] = true
		nodes.setStartup(fresh, s(h.clk.Now()))
		return fresh
	}
	order(func(now time.Time) Startup {
		return Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true}
	})
	for i := range 3 {
		if b, ok := h.mgr.Backoff("g"); ok {
			t.Fatalf("backed off after %d GPU-less nodes: %+v", i, b)
		}
		broken := order(func(now time.Time) Startup { return Startup{Registered: now, Ready: now} })
		h.settle(16 * time.Minute)
		h.eventually("the GPU-less node deleted", func() bool {
			for _, in := range h.cloudInstances()["g"] {
				if in.ProviderID == broken {
					return false
				}
			}
			return true
		})
	}
	b, ok := h.mgr.Backoff("g")
	if !ok || b.Reason != CodeGPUsNeverAppeared {
		t.Fatalf("after three GPU-less nodes in a row: backoff %+v, %v; want %s", b, ok, CodeGPUsNeverAppeared)
	}
}
