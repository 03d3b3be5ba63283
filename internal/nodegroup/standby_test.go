package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

const standbyGroup = `
clusterName: test
sync: {period: 30s, requestsPerSecond: 10000, maxConcurrentCreates: 8}
clouds:
  sim: {bootDelay: 60s, deleteDelay: 10s, startDelay: 15s, stoppedPrice: 0.05}
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5, standby: {size: 1, warmFor: 60s}}
`

// poolReady waits until g's pool holds one stopped instance.
func poolReady(h *harness) cloud.Instance {
	h.t.Helper()
	var stopped cloud.Instance
	h.eventually("a stopped standby instance", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateStopped && in.Standby {
				stopped = in
				return h.metric("gpuscaler_nodegroup_instances", map[string]string{"group": "g", "state": "standby"}) == 1
			}
		}
		return false
	})
	return stopped
}

// A group with a standby pool orders an instance for it, lets it warm,
// and stops it: no capacity (target 0, listed to no front end), billed at
// the stopped price. Scaling up starts it instead of ordering (running
// after the cloud's start delay, not a boot), and the pool refills.
func TestStandbyPoolWarmsStopsAndStartsOnDemand(t *testing.T) {
	w := &wrapped{}
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	stopped := poolReady(h)
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("target %d with only a standby instance, want 0", n)
	}
	if v := h.metric("gpuscaler_instances_created_total", map[string]string{"group": "g", "reason": ReasonStandby}); v != 1 {
		t.Fatalf("gpuscaler_instances_created_total{reason=standby} %v with the pool's instance made, want 1", v)
	}
	if insts, _ := h.mgr.Instances("g"); len(insts) != 0 {
		t.Fatalf("front ends see %d instances, want none: a standby instance is no capacity", len(insts))
	}
	if _, ok := h.mgr.GroupForProviderID(stopped.ProviderID); ok {
		t.Fatal("a standby instance's provider ID maps to the group")
	}
	if at := h.metric("gpuscaler_standby_oldest_created_timestamp_seconds", map[string]string{"group": "g"}); at <= 0 || at > float64(h.clk.Now().Unix()) {
		t.Errorf("the oldest standby instance ordered at %v, want a time before now", at)
	}
	if got := h.mgr.GroupSpend("g"); got != 0.05 {
		t.Fatalf("spend %.3f/h with one stopped instance, want the stopped price 0.05", got)
	}
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("the standby instance taken", func() bool {
		insts, _ := h.mgr.Instances("g")
		return len(insts) == 1 && insts[0].Name == stopped.Name && !insts[0].StartedAt.IsZero()
	})
	h.clk.Step(15 * time.Second)
	h.mgr.syncer.kick("sim")
	h.eventually("it runs one start delay later", func() bool { r, _, _, _ := h.states("g"); return r == 1 })
	if creates, _ := w.counts(); creates != 2 { // the first standby order, and the pool's refill
		t.Errorf("%d creates, want 2: the scale-up took the standby instance, the pool refilled", creates)
	}
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "ok"}); v != 1 {
		t.Errorf("standby starts %v, want 1", v)
	}
	refill := poolReady(h)
	if refill.Name == stopped.Name {
		t.Fatal("the pool's instance is the one started")
	}
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Errorf("target %d, want 1", n)
	}
}

// IncreaseSizeFresh orders anew and leaves the pool's stopped instance
// stopped, for demand nearer than a boot: a forecast orders a boot ahead
// without spending the pool on it. StandbyReady counts what the pool
// could start, before and after the start that takes it.
func TestIncreaseSizeFreshLeavesThePool(t *testing.T) {
	w := &wrapped{}
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	stopped := poolReady(h)
	if n := h.mgr.StandbyReady("g"); n != 1 {
		t.Fatalf("StandbyReady %d with one stopped instance, want 1", n)
	}
	ctx := context.Background()
	if err := h.mgr.IncreaseSizeFresh(ctx, "g", 2); err != nil {
		t.Fatal(err)
	}
	h.eventually("two fresh orders", func() bool { creates, _ := w.counts(); return creates == 3 })
	if n, _ := h.mgr.TargetSize("g"); n != 2 {
		t.Fatalf("target %d, want 2", n)
	}
	for _, in := range h.engine.Instances("test") {
		if in.Name == stopped.Name && in.State != cloud.StateStopped {
			t.Fatalf("the pool's instance is %s after fresh orders, want it stopped", in.State)
		}
	}
	if n := h.mgr.StandbyReady("g"); n != 1 {
		t.Fatalf("StandbyReady %d after fresh orders, want the pool's 1", n)
	}
	// The plain increase after them takes the pool first.
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("the standby instance taken", func() bool {
		insts, _ := h.mgr.Instances("g")
		for _, in := range insts {
			if in.Name == stopped.Name {
				return true
			}
		}
		return false
	})
	// What the pool could start now is its refill, ordered at once
	// (refillAfter 0), not the instance taken.
	h.eventually("the pool refills", func() bool { creates, _ := w.counts(); return creates == 4 })
	if n := h.mgr.StandbyReady("g"); n != 1 {
		t.Errorf("StandbyReady %d with the taken instance serving and the refill booting, want 1", n)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 3 {
		t.Errorf("target %d, want 3", n)
	}
	if err := h.mgr.IncreaseSizeFresh(ctx, "nope", 1); !errors.Is(err, ErrGroupNotFound) {
		t.Errorf("IncreaseSizeFresh of an unknown group: %v, want ErrGroupNotFound", err)
	}
}

// A start the cloud refuses falls back to a fresh order at once, and is
// counted; the refused instance is deleted.
func TestStandbyStartFailureOrdersFresh(t *testing.T) {
	w := &wrapped{}
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	stopped := poolReady(h)
	h.engine.FailNext("start")
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("a fresh order", func() bool { creates, _ := w.counts(); return creates >= 2 })
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "failed"}); v != 1 {
		t.Errorf("failed standby starts %v, want 1", v)
	}
	h.settle(2 * time.Minute)
	h.eventually("one running", func() bool { r, _, _, _ := h.states("g"); return r == 1 })
	for _, in := range h.engine.Instances("test") {
		if in.Name == stopped.Name {
			t.Fatalf("the instance whose start failed is still there: %+v", in)
		}
	}
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Errorf("target %d, want 1", n)
	}
}

// standbyPoolOf3 is standbyGroup with a pool of three, and an offering
// backoff (which a refused instance sits out) longer than the tests'
// waits.
const standbyPoolOf3 = `
clusterName: test
sync: {period: 30s, requestsPerSecond: 10000, maxConcurrentCreates: 8, offeringBackoff: 1h}
clouds:
  sim: {bootDelay: 60s, deleteDelay: 10s, startDelay: 15s, stoppedPrice: 0.05}
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5, standby: {size: 3, warmFor: 60s}}
`

// poolOf waits until g's pool holds n stopped instances, and returns
// their names.
func poolOf(h *harness, n int) map[string]bool {
	h.t.Helper()
	names := map[string]bool{}
	h.eventually(fmt.Sprintf("%d stopped standby instances", n), func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		clear(names)
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateStopped && in.Standby {
				names[in.Name] = true
			}
		}
		return len(names) == n && h.metric("gpuscaler_nodegroup_instances", map[string]string{"group": "g", "state": "standby"}) == float64(n)
	})
	return names
}

// refusedScaleUp makes a harness of doc over w, waits for its pool of
// three, has the cloud refuse the next refusals starts, asks for one node
// and waits until one runs, the clock stepping by step. It returns the
// harness and the pool's instances.
func refusedScaleUp(t *testing.T, doc string, w *wrapped, refusals int, step time.Duration) (*harness, map[string]bool) {
	t.Helper()
	h := newWrappedHarness(t, doc, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	pool := poolOf(h, 3)
	h.engine.RefuseStarts(refusals)
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("one node running", func() bool {
		h.clk.Step(step)
		r, _, _, _ := h.states("g")
		return r == 1
	})
	return h, pool
}

// A start the cloud refuses for capacity leaves the instance stopped in
// the pool (its disk and images kept), and another stopped instance
// starts at once for the node asked for: no fresh order, no delete. The
// refused one is not offered again (StandbyReady) until
// sync.offeringBackoff has passed.
func TestStandbyStartRefusedForCapacityTakesAnother(t *testing.T) {
	w := &wrapped{}
	h, pool := refusedScaleUp(t, standbyPoolOf3, w, 1, 5*time.Second)
	creates, deletes := len(pool), 0 // the pool's orders
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "failed"}); v != 1 {
		t.Errorf("failed standby starts %v, want 1", v)
	}
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "ok"}); v != 1 {
		t.Errorf("standby starts %v, want 1", v)
	}
	// The refill of the one taken is the only order.
	h.eventually("the refill ordered", func() bool { c, _ := w.counts(); return c == creates+1 })
	if n := h.mgr.StandbyReady("g"); n != 2 {
		t.Errorf("StandbyReady %d after a refused start, want 2: the pool's last stopped one and the refill, not the refused one", n)
	}
	stopped := 0
	for _, in := range h.engine.Instances("test") {
		if pool[in.Name] && in.State == cloud.StateStopped {
			stopped++
		}
	}
	if stopped != 2 {
		t.Errorf("%d of the pool's instances stopped, want 2: the refused one and the one left", stopped)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Errorf("target %d, want 1", n)
	}
	// After sync.offeringBackoff the refused one is offered again.
	h.settle(61 * time.Minute)
	h.eventually("the refused one offered again", func() bool { return h.mgr.StandbyReady("g") == 3 })
	if c, d := w.counts(); c != creates+1 || d != deletes {
		t.Errorf("%d creates and %d deletes, want %d (the refill) and %d: a refused start buys nothing", c, d, creates+1, deletes)
	}
}

// On a cloud that goes on trying a refused start (a GCE MIG), the refused
// instance is deleted rather than kept, and its refusal is its location's:
// the pool's other instances there are left stopped, and a fresh order
// goes to the group's other location.
func TestStandbyStartRefusedWhereTheCloudRetriesIsDeleted(t *testing.T) {
	w := &wrapped{refusalRetried: true}
	doc := strings.Replace(standbyPoolOf3, "locations: [FIN-01]", "locations: [FIN-01, FIN-02]", 1)
	h, pool := refusedScaleUp(t, doc, w, 1, 30*time.Second)
	for _, in := range h.engine.Instances("test") {
		if pool[in.Name] && in.Location != "FIN-01" {
			t.Fatalf("the pool's %s is in %s: the test wants all three in FIN-01", in.Name, in.Location)
		}
	}
	// What serves is a create: a fresh order, which FIN-01's stock-out
	// sends to FIN-02, or the pool's refill, ordered when the refused one
	// was taken and booting already.
	insts, _ := h.mgr.Instances("g")
	if len(insts) != 1 || pool[insts[0].Name] {
		t.Fatalf("serving %+v, want a create: the pool's others are in the location that refused", insts)
	}
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "failed"}); v != 1 {
		t.Errorf("failed standby starts %v, want 1", v)
	}
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "ok"}); v != 0 {
		t.Errorf("standby starts %v, want none in the location that refused", v)
	}
	h.eventually("the refused instance deleted", func() bool { return w.deletedInstances() == 1 })
	stopped := 0
	for _, in := range h.engine.Instances("test") {
		if pool[in.Name] && in.State == cloud.StateStopped {
			stopped++
		}
	}
	if stopped != 2 {
		t.Errorf("%d of the pool's instances stopped, want the 2 not refused", stopped)
	}
}

// A launch (Karpenter's, through the launch API) passes over a stopped
// instance whose start the cloud just refused, for one it may start.
func TestLaunchPassesOverARefusedInstance(t *testing.T) {
	var started []cloud.Instance // the first is the one refused
	w := &wrapped{}
	w.onStart = func(_ context.Context, inst cloud.Instance) (error, bool) {
		started = append(started, inst)
		return nil, false
	}
	h, pool := refusedScaleUp(t, standbyPoolOf3, w, 1, 5*time.Second)
	w.mu.Lock()
	refused := started[0]
	w.mu.Unlock()
	if !pool[refused.Name] {
		t.Fatalf("the first start was of %s, not a pool instance", refused.Name)
	}
	if _, err := h.mgr.Launch(context.Background(), fromPool("nc-1", refused)); err != nil {
		t.Fatalf("a launch with a stopped instance left: %v", err)
	}
	if in, ok := atCloud(h, "nc-1"); !ok || in.ID == refused.ID {
		t.Errorf("the launch is %+v, want the pool's other stopped instance, not the refused %s", in, refused.ID)
	}
}

// Three starts refused in a row for one node make a fresh order; the
// refused instances stay stopped in the pool, which then holds no more
// than its size (a refill ordered while the first was taken is trimmed).
func TestStandbyStartsRefusedThriceOrderFresh(t *testing.T) {
	w := &wrapped{}
	h, pool := refusedScaleUp(t, standbyPoolOf3, w, 3, 30*time.Second)
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "failed"}); v != 3 {
		t.Errorf("failed standby starts %v, want 3", v)
	}
	h.settle(3 * time.Minute)
	var fresh []string
	for _, in := range h.engine.Instances("test") {
		switch {
		case pool[in.Name] && in.State != cloud.StateStopped:
			t.Errorf("the pool's %s is %s, want stopped", in.Name, in.State)
		case !pool[in.Name]:
			fresh = append(fresh, in.Name+" "+string(in.State))
		}
	}
	if len(fresh) != 1 {
		t.Errorf("instances beside the pool's: %v, want the one fresh order", fresh)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Errorf("target %d, want 1", n)
	}
}

// A restart finds the stopped instance again and keeps it in the pool:
// not adopted as capacity (the target stays 0), not deleted as stopped
// for good, and not ordered again.
func TestStandbyPoolSurvivesARestart(t *testing.T) {
	w := &wrapped{}
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	stopped := poolReady(h)
	h.restart()
	h.settle(3 * time.Minute)
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("target %d after a restart, want 0", n)
	}
	if creates, _ := w.counts(); creates != 1 {
		t.Errorf("%d creates after a restart, want 1: the pool was ordered again", creates)
	}
	ins := h.engine.Instances("test")
	if len(ins) != 1 || ins[0].Name != stopped.Name || ins[0].State != cloud.StateStopped {
		t.Fatalf("the cloud holds %+v, want the one stopped instance", ins)
	}
	if got := h.mgr.GroupSpend("g"); got != 0.05 {
		t.Errorf("spend %.3f/h after the restart, want 0.05", got)
	}
}

// A reload while a standby instance's start is in flight: the old core's
// start ends with its context, unsent; the new core, which took the member
// over as one that serves, finds it still stopped and starts it again,
// so the scale-up is neither lost nor ordered twice.
func TestReloadDuringAStandbyStartStartsItAgain(t *testing.T) {
	w := &wrapped{}
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	stopped := poolReady(h)
	cut := make(chan struct{})
	w.mu.Lock()
	w.onStart = func(ctx context.Context, _ cloud.Instance) (error, bool) {
		w.mu.Lock()
		first := cut != nil
		c := cut
		cut = nil
		w.mu.Unlock()
		if !first {
			return nil, false
		}
		close(c)
		<-ctx.Done() // the reload stops the core mid-start
		return ctx.Err(), true
	}
	w.mu.Unlock()
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("the first start in flight", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return cut == nil })
	h.reload(standbyGroup)
	h.eventually("the standby instance running for the scale-up", func() bool {
		h.clk.Step(15 * time.Second)
		h.mgr.syncer.kick("sim")
		insts, _ := h.mgr.Instances("g")
		return len(insts) == 1 && insts[0].Name == stopped.Name && insts[0].State == StateRunning
	})
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Errorf("target %d after the reload, want 1", n)
	}
	if creates, _ := w.counts(); creates > 2 { // the pool's first order and its refill
		t.Errorf("%d creates, want at most 2: the scale-up was ordered fresh", creates)
	}
}

// Where the core sees Nodes, a standby instance is stopped only once its
// Node has shown its GPUs, and one started for demand is timed from its
// start in gpuscaler_standby_start_duration_seconds, apart from the cold
// start-ups of gpuscaler_node_startup_duration_seconds.
func TestStandbyStartIsTimedApart(t *testing.T) {
	nodes := newFakeNodes()
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes})
	register := func(name string, gpusAfter time.Duration) {
		pid := cloud.ProviderID("sim", name)
		now := h.clk.Now()
		nodes.register(pid)
		nodes.mu.Lock()
		nodes.startup[pid] = Startup{Registered: now, Ready: now, GPUs: now.Add(gpusAfter), GPUsSeen: true, GPUsNow: true}
		nodes.mu.Unlock()
	}
	warming := warmingUp(h)
	h.clk.Step(2 * time.Minute)
	h.mgr.syncer.kick("sim")
	time.Sleep(20 * time.Millisecond)
	if in := h.engine.Instances("test"); len(in) != 1 || in[0].State != cloud.StateRunning {
		t.Fatalf("stopped before its Node showed GPUs: %+v", in)
	}
	register(warming, 20*time.Second)
	stopped := poolReady(h)
	if stopped.Name != warming {
		t.Fatalf("stopped %s, want %s", stopped.Name, warming)
	}
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("started", func() bool { insts, _ := h.mgr.Instances("g"); return len(insts) == 1 && !insts[0].StartedAt.IsZero() })
	h.clk.Step(15 * time.Second)
	register(warming, 10*time.Second)
	h.eventually("the standby start-up timed", func() bool {
		h.mgr.syncer.kick("sim")
		n, _ := h.histogram("gpuscaler_standby_start_duration_seconds", map[string]string{"group": "g", "step": "gpus"})
		return n == 1
	})
	if n, _ := h.histogram("gpuscaler_node_startup_duration_seconds", map[string]string{"group": "g", "step": "gpus"}); n != 1 {
		t.Errorf("%d cold start-ups timed, want the warm-up's 1", n)
	}
}

// A stopped instance older than the pool's maxAge is deleted and another
// warmed in its place; a reload that makes the pool smaller deletes the
// instances past its size.
func TestStandbyPoolAgesAndShrinks(t *testing.T) {
	w := &wrapped{}
	doc := strings.Replace(standbyGroup, "standby: {size: 1, warmFor: 60s}", "standby: {size: 1, warmFor: 60s, maxAge: 1h}", 1)
	h := newWrappedHarness(t, doc, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	first := poolReady(h)
	h.settle(70 * time.Minute)
	second := poolReady(h)
	if second.Name == first.Name {
		t.Fatalf("the pool still holds %s past its maxAge", first.Name)
	}
	for _, in := range h.engine.Instances("test") {
		if in.Name == first.Name {
			t.Fatalf("the aged instance is still at the cloud: %+v", in)
		}
	}
	h.reload(strings.Replace(doc, "size: 1,", "size: 0,", 1))
	h.settle(2 * time.Minute)
	if n := h.engine.Count("test"); n != 0 {
		t.Fatalf("%d instances after the pool went to size 0", n)
	}
}

// A warmed standby instance whose Node runs work (a pod that tolerates
// every taint) is not stopped, which would kill the pod: it stays running
// until the pod is gone, then stops.
func TestStandbyInstanceRunningAPodIsNotStopped(t *testing.T) {
	nodes, events := newFakeNodes(), &eventLog{}
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes, Events: events})
	pid := warmingWithNode(t, h, nodes)
	warming := strings.TrimPrefix(pid, "sim://")
	nodes.bind(pid, "ml/tolerates-everything")
	for range 6 {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		time.Sleep(20 * time.Millisecond)
	}
	if in := h.engine.Instances("test"); len(in) != 1 || in[0].State != cloud.StateRunning {
		t.Fatalf("a standby instance running a pod was stopped: %+v", in)
	}
	if busy := events.count("StandbyBusy"); busy != 1 {
		t.Errorf("%d StandbyBusy events, want 1 (once, not per sync)", busy)
	}
	nodes.bind(pid)
	if stopped := poolReady(h); stopped.Name != warming {
		t.Fatalf("stopped %s, want %s once its pod left", stopped.Name, warming)
	}
}

// A pool with prePullImages has each warming instance's Node pull them
// and is stopped only once they are there; the pull's pod is ended before
// the stop. A pull that fails is reported once and the instance stopped
// without it, not kept running at full price.
func TestStandbyWaitsForItsImages(t *testing.T) {
	doc := strings.Replace(standbyGroup, "standby: {size: 1, warmFor: 60s}", "standby: {size: 2, warmFor: 60s, prePullImages: [vllm/vllm-openai:v0.6.3]}", 1)
	nodes, events := newFakeNodes(), &eventLog{}
	h := newHarness(t, doc, sim.Options{}, Options{Nodes: nodes, Events: events})
	var warming []string
	h.eventually("the pool's instances running", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		warming = warming[:0]
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateRunning {
				warming = append(warming, in.Name)
			}
		}
		return len(warming) == 2
	})
	now := h.clk.Now()
	pids := []string{cloud.ProviderID("sim", warming[0]), cloud.ProviderID("sim", warming[1])}
	for _, pid := range pids {
		nodes.setStartup(pid, Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true, Standby: true})
	}
	for range 6 {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		time.Sleep(20 * time.Millisecond)
	}
	for _, in := range h.engine.Instances("test") {
		if in.State != cloud.StateRunning {
			t.Fatalf("%s is %s before its images were pulled", in.Name, in.State)
		}
	}
	nodes.mu.Lock()
	asks := nodes.pullAsks
	nodes.mu.Unlock()
	if asks < 2 {
		t.Fatalf("%d pulls asked for, want one for each of the 2 warming instances", asks)
	}
	nodes.setPull(pids[0], Pull{Started: true, Done: true})
	nodes.setPull(pids[1], Pull{Started: true, Failed: "vllm/vllm-openai:v0.6.3: ImagePullBackOff: unauthorized"})
	h.eventually("both stopped", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		stopped := 0
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateStopped {
				stopped++
			}
		}
		return stopped == 2
	})
	nodes.mu.Lock()
	ends := nodes.pullEnds
	nodes.mu.Unlock()
	if ends != 2 {
		t.Errorf("%d pre-pull pods ended, want 2 (one before each stop)", ends)
	}
	if failed := events.count("PrePullFailed"); failed != 1 {
		t.Errorf("%d PrePullFailed events, want 1", failed)
	}
}

// A group pushed over its cost cap by instances it did not order (found
// at the cloud and adopted) gives up its standby pool first: the pool
// serves nothing yet, the adopted instance may.
func TestStandbyPoolGivesWayToACostCap(t *testing.T) {
	// 1V100.6V is 0.1381/h on demand: room for two.
	doc := strings.Replace(standbyGroup, "maxSize: 5, standby:", "maxSize: 5, maxHourlyCost: 0.28, standby:", 1)
	w := &wrapped{}
	h := newWrappedHarness(t, doc, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	var pooled string
	h.eventually("one serving, one warming for the pool", func() bool {
		h.clk.Step(10 * time.Second)
		h.mgr.syncer.kick("sim")
		r, _, _, _ := h.states("g")
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateRunning && !strings.HasPrefix(in.Name, "found") {
				if insts, _ := h.mgr.Instances("g"); len(insts) == 1 && insts[0].Name != in.Name {
					pooled = in.Name
				}
			}
		}
		return r == 1 && pooled != ""
	})
	h.behindTheBack("found-1")
	h.eventually("the pool's instance deleted for the adopted one", func() bool {
		h.clk.Step(10 * time.Second)
		h.mgr.syncer.kick("sim")
		for _, in := range h.engine.Instances("test") {
			if in.Name == pooled {
				return false
			}
		}
		return h.mgr.GroupSpend("g") <= 0.28 // the delete counted until a list shows it done
	})
	h.settle(time.Minute)
	if got := h.mgr.GroupSpend("g"); got > 0.28+1e-9 {
		insts, _ := h.mgr.Instances("g")
		t.Fatalf("spend %.4f/h, over the cap 0.28; core %+v; cloud %+v", got, insts, h.engine.Instances("test"))
	}
	if n, _ := h.mgr.TargetSize("g"); n != 2 {
		t.Fatalf("target %d, want 2: the serving member and the adopted one", n)
	}
}

// warmingUp runs a group with a standby pool until its warming instance
// runs, and returns the instance's name.
func warmingUp(h *harness) string {
	h.t.Helper()
	var warming string
	h.eventually("the pool's instance running", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateRunning {
				warming = in.Name
				return true
			}
		}
		return false
	})
	return warming
}

// warmingWithNode runs a group with a standby pool until its warming
// instance runs with a Node that showed its GPUs, and returns the
// instance's provider ID.
func warmingWithNode(t *testing.T, h *harness, nodes *fakeNodes) string {
	t.Helper()
	pid := cloud.ProviderID("sim", warmingUp(h))
	now := h.clk.Now()
	nodes.setStartup(pid, Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true, Standby: true})
	return pid
}

// A warmed instance whose pods stay past busyTimeout is not kept warming
// at full price for ever: it serves the group, whose target rises by one,
// and the pool orders another.
func TestStandbyInstanceBusyTooLongServes(t *testing.T) {
	nodes, events := newFakeNodes(), &eventLog{}
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes, Events: events})
	pid := warmingWithNode(t, h, nodes)
	nodes.bind(pid, "ml/tolerates-everything")
	h.eventually("the busy instance taken into the group", func() bool {
		h.clk.Step(time.Minute)
		h.mgr.syncer.kick("sim")
		n, _ := h.mgr.TargetSize("g")
		return n == 1
	})
	if !events.has("StandbyServes", strings.TrimPrefix(pid, "sim://")) {
		t.Errorf("no StandbyServes Event: %+v", events.events)
	}
	if _, ok := h.mgr.GroupForProviderID(pid); !ok {
		t.Error("the instance that serves maps to no group")
	}
	h.eventually("the pool refilled", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		return h.engine.Count("test") == 2
	})
}

// A pull of the pool's images that never ends is given up past warmFor
// and prePullTimeout: the instance is stopped without them, and a
// PrePullFailed Event says so.
func TestStandbyPullThatNeverEndsIsGivenUp(t *testing.T) {
	doc := strings.Replace(standbyGroup, "standby: {size: 1, warmFor: 60s}", "standby: {size: 1, warmFor: 60s, prePullImages: [vllm/vllm-openai:v0.6.3]}", 1)
	nodes, events := newFakeNodes(), &eventLog{}
	h := newHarness(t, doc, sim.Options{}, Options{Nodes: nodes, Events: events})
	pid := warmingWithNode(t, h, nodes)
	for range 4 {
		h.clk.Step(time.Minute)
		h.mgr.syncer.kick("sim")
		time.Sleep(20 * time.Millisecond)
	}
	if in := h.engine.Instances("test"); len(in) != 1 || in[0].State != cloud.StateRunning {
		t.Fatalf("stopped while its pull was under way: %+v", in)
	}
	h.eventually("stopped once the pull is given up", func() bool {
		h.clk.Step(time.Minute)
		h.mgr.syncer.kick("sim")
		in := h.engine.Instances("test")
		return len(in) == 1 && in[0].State == cloud.StateStopped
	})
	if !events.has("PrePullFailed", strings.TrimPrefix(pid, "sim://")) {
		t.Errorf("no PrePullFailed Event: %+v", events.events)
	}
}

const forecastGroup = `
clusterName: test
sync: {period: 30s, requestsPerSecond: 10000, maxConcurrentCreates: 8}
clouds:
  sim: {bootDelay: 60s, deleteDelay: 10s, startDelay: 15s, stoppedPrice: 0.05}
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5, standby: {size: 1, warmFor: 60s, forecast: {maxSize: 3}}}
  - {name: plain, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 2, standby: {size: 1, warmFor: 60s}}
`

// stoppedIn counts the stopped standby instances of a group at the cloud.
func stoppedIn(h *harness, group string) int {
	n := 0
	for _, in := range h.engine.Instances("test") {
		if in.State == cloud.StateStopped && in.Standby && in.Group == group {
			n++
		}
	}
	return n
}

// A forecast grows a standby pool up to its forecast.maxSize and lets it
// shrink back to its size, never past either; the size it asked for holds
// across a reload; a group without standby.forecast refuses it.
func TestStandbyPoolFollowsItsForecast(t *testing.T) {
	h := newHarness(t, forecastGroup, sim.Options{}, Options{})
	ctx := context.Background()
	if size, err := h.mgr.SetStandbySize(ctx, "g", 7); err != nil || size != 3 {
		t.Fatalf("asked for 7 within a maxSize of 3: size %d, %v", size, err)
	}
	h.eventually("three stopped standby instances", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		return stoppedIn(h, "g") == 3
	})
	h.reload(forecastGroup)
	h.settle(5 * time.Minute)
	if n := stoppedIn(h, "g"); n != 3 {
		t.Fatalf("%d stopped standby instances after a reload, want the 3 the forecast asked for", n)
	}
	if size, err := h.mgr.SetStandbySize(ctx, "g", 0); err != nil || size != 1 {
		t.Fatalf("asked for 0 above a size of 1: size %d, %v", size, err)
	}
	h.eventually("the pool back at its size", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		return stoppedIn(h, "g") == 1 && len(h.engine.Instances("test")) == 2
	})
	if _, err := h.mgr.SetStandbySize(ctx, "plain", 2); !errors.Is(err, ErrNoStandbyForecast) {
		t.Fatalf("a group without standby.forecast: %v", err)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Errorf("target %d: a standby pool is no capacity", n)
	}
}

// A pool whose every offering is stocked out waits for one to come back
// instead of ordering again at every sync, each order failing at once
// (seen in a chaos campaign: a refill every 100 ms, every one reported).
func TestStandbyPoolWaitsOutAStockOut(t *testing.T) {
	doc := strings.Replace(standbyGroup, "stoppedPrice: 0.05}", "stoppedPrice: 0.05, defaultCapacity: 0}", 1)
	h := newHarness(t, doc, sim.Options{}, Options{})
	for range 20 {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		time.Sleep(5 * time.Millisecond)
	}
	if n := h.metric("gpuscaler_scale_up_failures_total", map[string]string{"group": "g", "reason": "OutOfResources"}); n > 1 {
		t.Fatalf("%v failed pool orders over 20 syncs with no capacity, want at most the one that finds it out", n)
	}
	if n := len(h.engine.Instances("test")); n != 0 {
		t.Fatalf("%d instances with no capacity", n)
	}
}

// A reload that changes how the group's instances are made (here their
// image) replaces the standby pool: the stopped instance, booted with the
// former image, is taken by nobody and deleted, and the pool refills with
// an instance of the new image. A reload that only resizes the group
// keeps the pool as it is.
func TestStandbyPoolReplacedWhenItsMachineChanges(t *testing.T) {
	w := &wrapped{}
	images := map[string]string{}
	w.onCreate = func(_ context.Context, spec cloud.CreateSpec) (cloud.Instance, error, bool) {
		w.mu.Lock()
		images[spec.Name] = spec.Image
		w.mu.Unlock()
		return cloud.Instance{}, nil, false
	}
	image := func(img string) string {
		return strings.Replace(standbyGroup, "locations: [FIN-01],", "locations: [FIN-01], image: "+img+",", 1)
	}
	h := newWrappedHarness(t, image("ubuntu-22.04-cuda-12"), sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	old := poolStopped(h)

	h.reload(strings.Replace(image("ubuntu-22.04-cuda-12"), "maxSize: 5", "maxSize: 6", 1))
	h.settle(2 * time.Minute)
	if in, ok := atCloud(h, old.Name); !ok || in.State != cloud.StateStopped {
		t.Fatalf("after a reload that only resized the group, the pool's instance is %+v, want it kept stopped", in)
	}
	if creates, _ := w.counts(); creates != 1 {
		t.Fatalf("%d creates after a reload that only resized the group, want 1", creates)
	}

	h.reload(image("ubuntu-24.04-cuda-13"))
	if _, err := h.mgr.Launch(context.Background(), fromPool("nc-1", old)); !errors.Is(err, ErrNoStandby) {
		t.Fatalf("a launch took the instance of the former image: %v, want ErrNoStandby", err)
	}
	var fresh cloud.Instance
	h.eventually("the pool replaced by an instance of the new image", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		_, stays := atCloud(h, old.Name)
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateStopped && in.Standby && in.Name != old.Name {
				fresh = in
			}
		}
		return !stays && fresh.Name != ""
	})
	w.mu.Lock()
	got := images[fresh.Name]
	w.mu.Unlock()
	if got != "ubuntu-24.04-cuda-13" {
		t.Errorf("the pool's new instance was ordered with image %q, want the new one", got)
	}
	if creates, _ := w.counts(); creates != 2 {
		t.Errorf("%d creates, want 2: the pool's first instance and its replacement", creates)
	}
}

// A standby instance marked outdated (a reload changed its group's
// machine) is taken by nobody in the moment before the pool deletes it: a
// launch finds none to take, a scale-up orders fresh instead of starting
// it, and the pool deletes it.
func TestOutdatedStandbyInstanceIsNeverTaken(t *testing.T) {
	h, w, stopped := standbyOn(t)
	h.mgr.store.mu.Lock()
	for _, mem := range h.mgr.store.groups["g"].members {
		mem.extras().outdated = true
	}
	h.mgr.store.mu.Unlock()
	if _, err := h.mgr.Launch(context.Background(), fromPool("nc-1", stopped)); !errors.Is(err, ErrNoStandby) {
		t.Fatalf("a launch took an outdated standby instance: %v, want ErrNoStandby", err)
	}
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("a fresh order for the scale-up, and the outdated instance deleted", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		creates, _ := w.counts()
		_, stays := atCloud(h, stopped.Name)
		return creates >= 2 && !stays
	})
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "ok"}); v != 0 {
		t.Errorf("%v standby starts, want none: the outdated instance was started", v)
	}
}

// A core restarted while its predecessor's last orders are not listed yet
// starts no standby instance under a cost cap: the cap cannot count those
// orders, and a start spends at once. The scale-up's fresh order waits
// for the list, as orders do (TestRestartedCoreCountsOrdersALaggingListHides),
// and the cap then refuses it. Found by a chaos campaign on the virtual
// clock (sim, seed 1795844464365243468): the cloud went over the cluster's
// cap.
func TestRestartedCoreStartsNoStandbyPastACap(t *testing.T) {
	doc := `
clusterName: test
sync: {period: 30s, requestsPerSecond: 10000, maxConcurrentCreates: 8}
maxHourlyCost: 0.35
clouds:
  sim: {bootDelay: 60s, deleteDelay: 10s, startDelay: 15s, stoppedPrice: 0.05, defaultCapacity: 100}
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5, standby: {size: 1, warmFor: 60s}}
  - {name: o, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5}
`
	h := newHarness(t, doc, sim.Options{ListLag: 40 * time.Second}, Options{ResolveAfter: time.Minute})
	poolReady(h)
	// 1V100.6V costs 0.1381/h: the stopped instance and two running fit
	// under 0.35, three running do not.
	if err := h.mgr.IncreaseSize(context.Background(), "o", 2); err != nil {
		t.Fatal(err)
	}
	h.eventually("two orders at the cloud", func() bool { return h.engine.Count("test") == 3 })
	h.restart() // its first list leaves the two out
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	spend := func() float64 {
		total := 0.0
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateStopped && in.Standby || h.engine.Parked(in.Name) {
				total += 0.05 // stopped, or deleted while stopped: its disk
			} else {
				total += 0.1381 // booting and being deleted are billed too
			}
		}
		return total
	}
	for range 12 {
		if got := spend(); got > 0.35+1e-9 {
			t.Fatalf("the cloud's instances cost %.4f/h, over the cap of 0.35: %+v", got, h.engine.Instances("test"))
		}
		h.clk.Step(10 * time.Second)
		h.mgr.syncer.kick("sim")
		time.Sleep(10 * time.Millisecond)
	}
}

// A stopped standby instance found running (a start sent by a process
// that crashed took effect after this one listed the instance stopped, or
// someone started it by hand) is stopped again: the core had counted its
// disk while it billed in full, and nobody took it. Found by a chaos
// campaign on the virtual clock (gcp, seed 1795848243470471563).
func TestStandbyInstanceStartedBehindThePoolIsStoppedAgain(t *testing.T) {
	h := newHarness(t, standbyGroup, sim.Options{}, Options{})
	stopped := poolReady(h)
	if err := h.acct.Start(context.Background(), stopped); err != nil {
		t.Fatal(err)
	}
	state := func() cloud.InstanceState {
		for _, in := range h.engine.Instances("test") {
			if in.Name == stopped.Name {
				return in.State
			}
		}
		return ""
	}
	h.eventually("it runs", func() bool { h.clk.Step(5 * time.Second); return state() == cloud.StateRunning })
	h.eventually("it is stopped again", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		return state() == cloud.StateStopped
	})
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Errorf("target %d, want 0: the instance is the pool's, not capacity", n)
	}
	if n := h.engine.Count("test"); n != 1 {
		t.Errorf("%d instances at the cloud, want the one", n)
	}
}

// A node a front end scales down goes back to a short standby pool,
// stopped rather than deleted, and the pool orders nothing fresh while
// refillAfter lasts: the instance ran, joined and warmed already, and a
// fresh one's warm-up bills in full. Nobody takes it back before it has
// stopped (its Node still carries the front end's deletion taint); then
// it starts for demand as any pool member does.
func TestScaledDownNodeGoesBackToAShortPool(t *testing.T) {
	doc := strings.Replace(standbyGroup, "warmFor: 60s}", "warmFor: 60s, refillAfter: 1h}", 1)
	w := &wrapped{}
	h := newWrappedHarness(t, doc, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	first := poolReady(h)
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, "g", 2); err != nil { // the pool's instance, and a fresh order
		t.Fatal(err)
	}
	h.eventually("2 running", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		r, _, _, _ := h.states("g")
		return r == 2
	})
	if creates, _ := w.counts(); creates != 2 {
		t.Fatalf("%d creates, want 2: the pool's first instance and one fresh order; the pool waits out refillAfter", creates)
	}
	insts, _ := h.mgr.Instances("g")
	var back Instance
	for _, in := range insts {
		if in.Name != first.Name {
			back = in
		}
	}
	// The returned node's stop is held until the checks below are done:
	// a sync may stop it at once, and a stopped one is the pool's to give.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the harness stops, on a failure below
	w.mu.Lock()
	w.onStop = func(inst cloud.Instance) {
		if inst.Name == back.Name {
			<-release
		}
	}
	w.mu.Unlock()
	if err := h.mgr.DeleteNodes(ctx, "g", []string{back.ProviderID}); err != nil {
		t.Fatal(err)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Fatalf("target %d after deleting 1 of 2, want 1", n)
	}
	if _, ok := h.mgr.GroupForProviderID(back.ProviderID); ok {
		t.Fatal("the node returned to the pool still maps to the group: cluster-autoscaler would count it")
	}
	// Taken again at once: not the returned node, which has not stopped.
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	insts, _ = h.mgr.Instances("g")
	for _, in := range insts {
		if in.Name == back.Name {
			t.Fatal("the node just deleted was taken for demand before it stopped")
		}
	}
	if err := h.mgr.DecreaseTargetSize(ctx, "g", -1); err != nil {
		// The order was made already: its node is deleted instead, as
		// cluster-autoscaler does when it may not lower the target.
		var fresh []string
		insts, _ = h.mgr.Instances("g")
		for _, in := range insts {
			if in.Name != first.Name && in.Name != back.Name {
				fresh = append(fresh, in.ProviderID)
			}
		}
		if len(fresh) != 1 {
			t.Fatalf("decrease refused (%v), and %d fresh orders", err, len(fresh))
		}
		if err := h.mgr.DeleteNodes(ctx, "g", fresh); err != nil {
			t.Fatal(err)
		}
	}
	free()
	stoppedForThePool(h, back.Name, "the returned node stopped for the pool")
	// The increase may have placed its order before the decrease took it
	// back (orders go out from the sync): that order, and only that one,
	// is then deleted. The returned node is never deleted or replaced.
	h.eventually("only an order taken back deleted", func() bool {
		creates, _ := w.counts()
		return creates <= 3 && w.deletedInstances() == creates-2
	})
	w.mu.Lock()
	backDeleted := w.deleted[back.Name]
	w.mu.Unlock()
	if backDeleted != 0 {
		t.Fatal("the scaled-down node was deleted, not stopped for the pool")
	}
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("the returned node serves again", func() bool {
		insts, _ := h.mgr.Instances("g")
		for _, in := range insts {
			if in.Name == back.Name && !in.StartedAt.IsZero() {
				return true
			}
		}
		return false
	})
}

// Without room in its pool, a scaled-down node is deleted as ever.
func TestScaledDownNodeIsDeletedWhenThePoolIsFull(t *testing.T) {
	w := &wrapped{}
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	poolReady(h)
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	poolReady(h) // refilled at once: no refillAfter
	insts, _ := h.mgr.Instances("g")
	if len(insts) != 1 {
		t.Fatalf("%d members, want the 1 taken from the pool", len(insts))
	}
	if err := h.mgr.DeleteNodes(ctx, "g", []string{insts[0].ProviderID}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the node deleted at the cloud", func() bool { return w.deletedInstances() == 1 })
}

// Only a healthy node goes back to a short pool, and not one a front end
// replaces: a node not Ready (cluster-autoscaler removes unready ones), a
// node whose GPUs are gone though they were seen once (a failed driver or
// device plugin, which a start would bring back with it) and a node
// deleted ForReplacement (rotation, defragmentation) are deleted.
// A returned node whose Node the front end deleted with it (as the
// NodeProvisioner does) still stops for the pool: the reaper does not
// take it for one that never registered.
func TestOnlyHealthyNodesGoBackToThePool(t *testing.T) {
	h, nodes, w, insts := servingFromAShortPool(t, 4) // the pool's, and three fresh orders
	ctx, now := context.Background(), h.clk.Now()
	sick, replaced, gpuless, healthy := insts[0], insts[1], insts[2], insts[3]
	nodes.setStartup(sick.ProviderID, Startup{Registered: now, GPUsSeen: true, GPUsNow: true}) // NotReady
	nodes.setStartup(gpuless.ProviderID, Startup{Registered: now, Ready: now, GPUsSeen: true})
	if err := h.mgr.DeleteNodes(ctx, "g", []string{sick.ProviderID}); err != nil {
		t.Fatal(err)
	}
	if err := h.mgr.DeleteNodes(ForReplacement(ctx), "g", []string{replaced.ProviderID}); err != nil {
		t.Fatal(err)
	}
	if err := h.mgr.DeleteNodes(ctx, "g", []string{gpuless.ProviderID}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the unready, the replaced and the GPU-less node deleted at the cloud", func() bool { return w.deletedInstances() == 3 })
	if err := h.mgr.DeleteNodes(ctx, "g", []string{healthy.ProviderID}); err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx, healthy.ProviderID); err != nil { // the front end deletes the Node too
		t.Fatal(err)
	}
	stoppedForThePool(h, healthy.Name, "the healthy node stopped for the pool")
	creates, _ := w.counts()
	if deleted := w.deletedInstances(); creates != 4 || deleted != 3 {
		t.Fatalf("%d creates, %d instances deleted; want 4 (the pool's first, three for demand) and 3 (the unready, the replaced and the GPU-less node)", creates, deleted)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("target %d with every node scaled down, want 0", n)
	}
}

// A returned node that still runs pods (ones that tolerate the front
// end's deletion taint) is deleted, as the front end asked, not kept at
// full price in a pool slot until they leave.
func TestReturnedNodeStillRunningPodsIsDeleted(t *testing.T) {
	h, nodes, w, insts := servingFromAShortPool(t, 2)
	ctx := context.Background()
	nodes.bind(insts[0].ProviderID, "ml/tolerates-everything")
	if err := h.mgr.DeleteNodes(ctx, "g", []string{insts[0].ProviderID}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the busy returned node deleted", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		return w.deletedInstances() == 1
	})
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Fatalf("target %d, want the 1 left", n)
	}
}

// stoppedForThePool waits, syncing as time passes, until the instance
// named name is stopped in its group's standby pool.
func stoppedForThePool(h *harness, name, what string) {
	h.t.Helper()
	h.eventually(what, func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		for _, in := range h.engine.Instances("test") {
			if in.Name == name {
				return in.State == cloud.StateStopped && in.Standby
			}
		}
		return false
	})
}

// servingFromAShortPool scales a group with a standby pool of one, which
// refills only after an hour, to n running members (the pool's instance
// and n-1 fresh orders), each with a healthy Node: Ready, GPUs seen.
func servingFromAShortPool(t *testing.T, n int) (*harness, *fakeNodes, *wrapped, []Instance) {
	t.Helper()
	nodes := newFakeNodes()
	doc := strings.Replace(standbyGroup, "warmFor: 60s}", "warmFor: 60s, refillAfter: 1h}", 1)
	w := &wrapped{}
	h := newWrappedHarness(t, doc, sim.Options{}, Options{Nodes: nodes}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	warmingWithNode(t, h, nodes)
	poolReady(h)
	if err := h.mgr.IncreaseSize(context.Background(), "g", n); err != nil {
		t.Fatal(err)
	}
	h.eventually(fmt.Sprint(n, " running"), func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		r, _, _, _ := h.states("g")
		return r == n
	})
	insts, _ := h.mgr.Instances("g")
	now := h.clk.Now()
	for _, in := range insts {
		nodes.setStartup(in.ProviderID, Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true})
	}
	return h, nodes, w, insts
}

// A restart while the pool's order warms up (its Node not registered yet)
// finds it the pool's again (its name says it was ordered for the pool):
// no capacity, the target stays 0, and the pool orders nothing more.
// Before, the restarted core took it for capacity, raised the target to 1
// and ordered a second instance.
func TestRestartWhileThePoolWarmsUp(t *testing.T) {
	w := &wrapped{}
	nodes := newFakeNodes()
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	name := warmingUp(h)
	if !orderedForPool(name) {
		t.Fatalf("the pool's order is named %s, with no pool mark", name)
	}
	h.restart()
	h.settle(30 * time.Second)
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("target %d after the restart, want 0: the warming instance is the pool's", n)
	}
	now := h.clk.Now() // it joins, with the pool's taint, and warms up
	nodes.setStartup(cloud.ProviderID("sim", name), Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true, Standby: true})
	if stopped := poolReady(h); stopped.Name != name {
		t.Fatalf("the pool holds %s, want %s", stopped.Name, name)
	}
	if creates, deletes := w.counts(); creates != 1 || deletes != 0 {
		t.Fatalf("%d creates, %d deletes: the restart made the pool order again", creates, deletes)
	}
}

// A pool's order taken for demand (its Node's TaintStandby lifted) is
// capacity after a restart, though its name says it was ordered for the
// pool.
func TestRestartKeepsAPoolOrderTakenForDemand(t *testing.T) {
	nodes := newFakeNodes()
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes})
	name := warmingUp(h)
	now := h.clk.Now()
	nodes.setStartup(cloud.ProviderID("sim", name), Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true})
	h.restart()
	h.settle(30 * time.Second)
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Fatalf("target %d after the restart, want 1: the instance serves", n)
	}
}

func TestOrderedForPool(t *testing.T) {
	for name, want := range map[string]bool{
		"g-p0123456789":        true,
		"gpu-h100-pabcdef0123": true,
		"g-0123456789":         false,
		"g-p012345678":         false,
		"g-pxyz3456789":        false,
		"p0123456789":          false,
		"g-p0123456789-x":      false,
	} {
		if got := orderedForPool(name); got != want {
			t.Errorf("orderedForPool(%q) = %v, want %v", name, got, want)
		}
	}
}

// flakyNodes fails the first n Node deletes, as an API server that drops
// a connection or a conflict would.
type flakyNodes struct {
	*fakeNodes
	fail int
}

func (f *flakyNodes) Delete(ctx context.Context, ids ...string) error {
	f.mu.Lock()
	if f.fail > 0 {
		f.fail--
		f.mu.Unlock()
		return errors.New("etcdserver: request timed out")
	}
	f.mu.Unlock()
	return f.fakeNodes.Delete(ctx, ids...)
}

// The Node of a stopped standby instance is deleted until it is gone: a
// delete that failed right after the stop is tried again by the syncs.
// Before, it was tried once, and the NotReady Node stayed for good
// (cluster-autoscaler counts it against the cluster's health).
func TestStoppedStandbyNodeDeletedUntilGone(t *testing.T) {
	nodes := &flakyNodes{fakeNodes: newFakeNodes()}
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes})
	pid := warmingWithNode(t, h, nodes.fakeNodes)
	nodes.mu.Lock()
	nodes.fail = 2 // the stop's delete, and the next sync's
	nodes.mu.Unlock()
	poolReady(h)
	// The kubelet's heartbeats stop: the Node goes NotReady.
	now := h.clk.Now()
	nodes.setStartup(pid, Startup{Registered: now.Add(-5 * time.Minute), GPUsSeen: true, GPUsNow: true, Standby: true})
	h.eventually("the stopped instance's Node deleted", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		registered, _ := nodes.Registered(pid)
		return !registered
	})
}

// A standby instance started for demand never comes up with the marks a
// front end put on its old Node when it was scaled down into the pool
// (cluster-autoscaler's ToBeDeletedByClusterAutoscaler, a cordon): its
// old Node, still there, is deleted before the start, and the kubelet
// registers a fresh one as it boots.
func TestStandbyStartClearsTheOldNode(t *testing.T) {
	nodes := &flakyNodes{fakeNodes: newFakeNodes()}
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes})
	pid := warmingWithNode(t, h, nodes.fakeNodes)
	nodes.mu.Lock()
	nodes.fail = 1 // the stop's delete: the old Node, with its marks, stays
	nodes.mu.Unlock()
	poolReady(h)
	if registered, _ := nodes.Registered(pid); !registered {
		t.Fatal("the stop's failed delete removed the Node anyway")
	}
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("the instance started", func() bool {
		insts, _ := h.mgr.Instances("g")
		return len(insts) == 1 && !insts[0].StartedAt.IsZero()
	})
	if registered, _ := nodes.Registered(pid); registered {
		t.Fatal("the instance started with its old Node (and whatever marks it carries) still there")
	}
}

// A standby pool's member that the reaper deletes (its GPUs never came)
// leaves the target alone: it never counted in it. Before, the target
// dropped by one, and cluster-autoscaler, which never raises a target
// that is too low, lost a scale-up.
func TestReapedPoolMemberLeavesTheTarget(t *testing.T) {
	nodes := newFakeNodes()
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes})
	first := warmingUp(h)
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil { // takes the warming instance
		t.Fatal(err)
	}
	now := h.clk.Now()
	nodes.setStartup(cloud.ProviderID("sim", first), Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true})
	var refill string
	h.eventually("the pool's next order running", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		for _, in := range h.engine.Instances("test") {
			if in.Name != first && in.State == cloud.StateRunning {
				refill = in.Name
				return true
			}
		}
		return false
	})
	if !orderedForPool(refill) {
		t.Fatalf("%s is not the pool's order", refill)
	}
	now = h.clk.Now()
	nodes.setStartup(cloud.ProviderID("sim", refill), Startup{Registered: now, Ready: now, Standby: true}) // no GPUs, ever
	h.eventually("the GPU-less pool member reaped", func() bool {
		h.clk.Step(time.Minute)
		h.mgr.syncer.kick("sim")
		return h.metric("gpuscaler_gpu_startup_timeouts_total", map[string]string{"group": "g"}) == 1
	})
	h.settle(30 * time.Second)
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Fatalf("target %d after the pool's member was reaped, want 1", n)
	}
}

// Without Nodes to tell by, a running pool order found after a restart is
// capacity: taken for the pool, a node that serves would be stopped with
// its pods.
func TestRestartWithoutNodesKeepsAPoolOrderAsCapacity(t *testing.T) {
	h := newHarness(t, standbyGroup, sim.Options{}, Options{})
	warmingUp(h)
	h.restart()
	h.settle(30 * time.Second)
	if n, _ := h.mgr.TargetSize("g"); n != 1 {
		t.Fatalf("target %d after the restart, want 1: without Nodes the running instance may serve", n)
	}
}

// A warming instance's pull starts once its Node registers, beside its
// GPUs' start-up and warmFor, not after them: the warm-up runs at the full
// price. It stops only once both are done.
func TestStandbyPullsWhileItsGPUsStart(t *testing.T) {
	doc := strings.Replace(standbyGroup, "standby: {size: 1, warmFor: 60s}", "standby: {size: 1, warmFor: 60s, prePullImages: [vllm/vllm-openai:v0.6.3]}", 1)
	nodes := newFakeNodes()
	h := newHarness(t, doc, sim.Options{}, Options{Nodes: nodes})
	pid := cloud.ProviderID("sim", warmingUp(h))
	nodes.setStartup(pid, Startup{Registered: h.clk.Now(), Standby: true}) // no GPUs yet
	h.eventually("the pull asked for before the GPUs showed", func() bool {
		h.mgr.syncer.kick("sim")
		return nodes.pulled(pid)
	})
	nodes.setPull(pid, Pull{Started: true, Done: true})
	for range 4 {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		time.Sleep(20 * time.Millisecond)
	}
	if in := h.engine.Instances("test"); len(in) != 1 || in[0].State != cloud.StateRunning {
		t.Fatalf("stopped before its GPUs showed: %+v", in)
	}
	now := h.clk.Now()
	nodes.setStartup(pid, Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true, Standby: true})
	h.eventually("stopped once its GPUs showed", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		in := h.engine.Instances("test")
		return len(in) == 1 && in[0].State == cloud.StateStopped
	})
}
