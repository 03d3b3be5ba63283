package nodegroup

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// standbyOn starts a harness on standbyGroup behind a wrapped provider
// and waits for its pool's stopped instance.
func standbyOn(t *testing.T) (*harness, *wrapped, cloud.Instance) {
	t.Helper()
	w := &wrapped{}
	h := newWrappedHarness(t, standbyGroup, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	return h, w, poolStopped(h)
}

// poolStopped waits until g's pool holds a stopped instance and the core
// knows it stopped (the stop's answer recorded, as the oldest stopped
// instance's gauge shows): only then may a launch take it.
func poolStopped(h *harness) cloud.Instance {
	h.t.Helper()
	stopped := poolReady(h)
	h.eventually("the core knows the instance stopped", func() bool {
		return h.metric("gpuscaler_standby_oldest_created_timestamp_seconds", map[string]string{"group": "g"}) > 0
	})
	return stopped
}

// fromPool is a launch of name that takes from g's pool on the offering
// of the stopped instance.
func fromPool(name string, stopped cloud.Instance) LaunchRequest {
	return LaunchRequest{Owner: "karpenter", Cloud: "sim", Name: name, Template: "g", Standby: true,
		Offering: cloud.OfferingKey{InstanceType: stopped.InstanceType, Location: stopped.Location, CapacityType: stopped.CapacityType}}
}

// atCloud returns the cloud's instance of a name.
func atCloud(h *harness, name string) (cloud.Instance, bool) {
	for _, in := range h.engine.Instances("test") {
		if in.Name == name {
			return in, true
		}
	}
	return cloud.Instance{}, false
}

// A launch from standby hands the pool's stopped instance over at the
// cloud (renamed for the launch and owned by its owner, so a restarted
// core and a repeated Create both find it by name) and starts it: no
// order, the start delay instead of a boot. The group's target does not
// move, and the pool refills.
func TestLaunchTakesFromTheStandbyPool(t *testing.T) {
	h, w, stopped := standbyOn(t)
	ctx := context.Background()
	req := fromPool("nc-1", stopped)
	other := req
	other.Name, other.Image = "nc-0", "another-image"
	if _, err := h.mgr.Launch(ctx, other); !errors.Is(err, ErrNoStandby) {
		t.Fatalf("a launch asking for another image than the pool's: %v, want ErrNoStandby", err)
	}
	in, err := h.mgr.Launch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if in.Name != "nc-1" || in.ProviderID != "sim://nc-1" || in.Owner != "karpenter" || in.Unresolved || in.StartedAt.IsZero() {
		t.Fatalf("launched %+v", in)
	}
	at, ok := atCloud(h, "nc-1")
	if !ok || at.ID != stopped.ID || at.Owner != "karpenter" || at.Group != "" || at.State != cloud.StatePending {
		t.Fatalf("at the cloud: %+v (the pool's instance was %s)", at, stopped.ID)
	}
	if _, ok := atCloud(h, stopped.Name); ok {
		t.Fatalf("the cloud still lists %s under its pool name", stopped.Name)
	}
	if creates, _ := w.counts(); creates != 1 {
		t.Fatalf("%d creates by the launch, want the pool's one", creates)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("the pool's group target moved to %d", n)
	}
	// Its pool is empty until the refill warms.
	next := fromPool("nc-2", stopped)
	if _, err := h.mgr.Launch(ctx, next); !errors.Is(err, ErrNoStandby) {
		t.Fatalf("a second launch from an empty pool: %v, want ErrNoStandby", err)
	}
	h.clk.Step(15 * time.Second)
	h.mgr.syncer.kick("sim")
	h.eventually("it runs one start delay later", func() bool {
		got, ok := h.mgr.LaunchedNamed("nc-1")
		return ok && got.State == StateRunning
	})
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "ok"}); v != 1 {
		t.Errorf("standby starts %v, want 1", v)
	}
	poolReady(h)
	if creates, _ := w.counts(); creates != 2 {
		t.Errorf("%d creates, want 2: the pool's first, and its refill", creates)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("target %d after the refill", n)
	}
	// A restart finds the handed-over instance as launched, not pooled.
	h.restart()
	h.settle(time.Minute)
	if got, ok := h.mgr.LaunchedNamed("nc-1"); !ok || got.ProviderID != "sim://nc-1" {
		t.Fatalf("after a restart: %+v %v", got, ok)
	}
	if n := h.metric("gpuscaler_nodegroup_instances", map[string]string{"group": "g", "state": "standby"}); n != 1 {
		t.Fatalf("%v standby instances after a restart, want the refill only", n)
	}
}

// A transfer whose answer is lost may have landed or not, and a list
// tells: landed, the launch returns the instance under its new name and
// starts it, the pool forgets it (no second pool member of one
// instance); not landed, the launch fails retryably and the instance is
// the pool's again, to be taken by the next launch.
func TestLaunchFromStandbyLostTransferAnswer(t *testing.T) {
	h, w, stopped := standbyOn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Not landed: refused after the request went out, nothing changed.
	w.mu.Lock()
	w.onTransfer = func(context.Context, cloud.Instance, string, string) (cloud.Instance, error) {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrOutcomeUnknown, "transfer", "connection reset")
	}
	w.mu.Unlock()
	if _, err := h.mgr.Launch(ctx, fromPool("nc-1", stopped)); !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("a transfer that did not land: %v, want a transient error", err)
	}
	if in, ok := atCloud(h, stopped.Name); !ok || in.State != cloud.StateStopped {
		t.Fatalf("the pool's instance after a transfer that did not land: %+v", in)
	}
	if _, ok := h.mgr.LaunchedNamed("nc-1"); ok {
		t.Fatal("a launch that did not land is still recorded")
	}

	// Landed: the answer lost after the cloud renamed it.
	w.mu.Lock()
	w.onTransfer = func(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
		if _, err := w.transfer(ctx, inst, name, owner); err != nil {
			return cloud.Instance{}, err
		}
		return cloud.Instance{}, cloud.Errorf(cloud.ErrOutcomeUnknown, "transfer", "connection reset after the cloud took it")
	}
	w.mu.Unlock()
	in, err := h.mgr.Launch(ctx, fromPool("nc-1", stopped))
	if err != nil {
		t.Fatalf("a transfer that landed, its answer lost: %v", err)
	}
	if in.Name != "nc-1" || in.ProviderID != "sim://nc-1" || in.Unresolved {
		t.Fatalf("launched %+v", in)
	}
	if at, _ := atCloud(h, "nc-1"); at.ID != stopped.ID {
		t.Fatalf("launched %s, want the pool's instance %s, back in the pool after the first transfer", at.ID, stopped.ID)
	}
	h.clk.Step(15 * time.Second)
	h.mgr.syncer.kick("sim")
	h.eventually("it runs", func() bool {
		got, _ := h.mgr.LaunchedNamed("nc-1")
		return got.State == StateRunning
	})
	h.settle(30 * time.Second)
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("target %d", n)
	}
	for _, in := range h.engine.Instances("test") {
		if in.ID == stopped.ID && in.Name != "nc-1" {
			t.Fatalf("the handed-over instance is listed as %+v", in)
		}
	}
}

// A handed-over instance whose start is not confirmed stays the owner's:
// the launch reports the error, and the next core (a restart here) finds
// it stopped under its new name and starts it, rather than deleting it as
// a stopped launched instance or ordering another.
func TestHandedOverInstanceStartedAfterARestart(t *testing.T) {
	h, w, stopped := standbyOn(t)
	var refused atomic.Bool
	refused.Store(true)
	var fresh atomic.Int32 // orders not the pool's
	w.mu.Lock()
	w.onCreate = func(_ context.Context, spec cloud.CreateSpec) (cloud.Instance, error, bool) {
		if !orderedForPool(spec.Name) {
			fresh.Add(1)
		}
		return cloud.Instance{}, nil, false
	}
	w.onStart = func(_ context.Context, inst cloud.Instance) (error, bool) {
		if inst.Name == "nc-1" && refused.Load() {
			return cloud.Errorf(cloud.ErrTransient, "start", "503 service unavailable"), true
		}
		return nil, false
	}
	w.mu.Unlock()
	ctx := context.Background()
	if _, err := h.mgr.Launch(ctx, fromPool("nc-1", stopped)); !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("a start that failed: %v, want a transient error", err)
	}
	if got, ok := h.mgr.LaunchedNamed("nc-1"); !ok || got.ProviderID != "sim://nc-1" {
		t.Fatalf("the handed-over instance: %+v %v", got, ok)
	}
	h.stop()
	refused.Store(false)
	h.start()
	h.settle(time.Minute)
	h.eventually("the handed-over instance running", func() bool {
		in, ok := atCloud(h, "nc-1")
		return ok && in.State == cloud.StateRunning && in.Owner == "karpenter"
	})
	// The pool refills; a restart while its order warms up may count that
	// order as capacity (no Nodes to tell by here) and refill once more.
	// Nothing replaces the handed-over instance: no order but the pool's.
	if creates, deletes := w.counts(); deletes != 0 || creates > 3 || fresh.Load() != 0 {
		for _, in := range h.engine.Instances("test") {
			t.Logf("at cloud: %s %s owner=%q standby=%v state=%s created=%v", in.ID, in.Name, in.Owner, in.Standby, in.State, in.CreatedAt)
		}
		t.Fatalf("%d creates (%d not the pool's), %d deletes: the handed-over instance was replaced", creates, fresh.Load(), deletes)
	}
}

// A start refused for capacity (the host given up while it was stopped)
// deletes the handed-over instance and answers a capacity error, the
// offering skipped as after a stock-out: the caller's next NodeClaim goes
// elsewhere.
func TestLaunchFromStandbyStartRefused(t *testing.T) {
	h, w, stopped := standbyOn(t)
	w.mu.Lock()
	w.onStart = func(_ context.Context, inst cloud.Instance) (error, bool) {
		return cloud.Errorf(cloud.ErrCapacity, "start", "not enough resources"), true
	}
	w.mu.Unlock()
	ctx := context.Background()
	if _, err := h.mgr.Launch(ctx, fromPool("nc-1", stopped)); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("a start refused: %v, want a capacity error", err)
	}
	if v := h.metric("gpuscaler_standby_starts_total", map[string]string{"group": "g", "result": "failed"}); v != 1 {
		t.Errorf("failed standby starts %v, want 1", v)
	}
	h.eventually("the handed-over instance deleted", func() bool { _, ok := atCloud(h, "nc-1"); return !ok })
	if _, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Name: "nc-2", Offering: fromPool("", stopped).Offering}); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("an order on the offering just refused: %v, want it skipped", err)
	}
}

// Terminated while its transfer is in flight (Karpenter deleting the
// NodeClaim), the handed-over instance is deleted once the transfer lands:
// neither the pool nor the launch keeps it.
func TestLaunchFromStandbyTerminatedMidTransfer(t *testing.T) {
	h, w, stopped := standbyOn(t)
	entered, release := make(chan struct{}), make(chan struct{})
	w.mu.Lock()
	w.onTransfer = func(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
		close(entered)
		<-release
		return w.transfer(ctx, inst, name, owner)
	}
	w.mu.Unlock()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { _, err := h.mgr.Launch(ctx, fromPool("nc-1", stopped)); done <- err }()
	<-entered
	if err := h.mgr.Terminate(ctx, "sim://nc-1"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err == nil {
		t.Fatal("a launch terminated during its transfer answered success")
	}
	h.eventually("the handed-over instance deleted", func() bool {
		_, ok := atCloud(h, "nc-1")
		_, held := h.mgr.LaunchedNamed("nc-1")
		return !ok && !held
	})
	if _, ok := atCloud(h, stopped.Name); ok {
		t.Fatal("the instance is back under its pool name")
	}
}

// A list that lags behind a transfer shows the handed-over instance under
// its old name, in its pool: it is the launched instance now, and the
// pool must not take it back (a second member of one instance, which a
// scale-up would start and a trim delete).
func TestLaggingListDoesNotPoolAHandedOverInstance(t *testing.T) {
	h, w, stopped := standbyOn(t)
	var lag atomic.Bool
	lag.Store(true)
	w.mu.Lock()
	w.onList = func(insts []cloud.Instance) []cloud.Instance {
		if !lag.Load() {
			return insts
		}
		out := insts[:0:0]
		for _, in := range insts {
			if in.Name == "nc-1" {
				in = stopped // as it was before the transfer
			}
			out = append(out, in)
		}
		return out
	}
	w.mu.Unlock()
	if _, err := h.mgr.Launch(context.Background(), fromPool("nc-1", stopped)); err != nil {
		t.Fatal(err)
	}
	h.settle(time.Minute)
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.settle(time.Minute)
	if insts, _ := h.mgr.Instances("g"); len(insts) != 1 || insts[0].Name == stopped.Name {
		t.Fatalf("the group's members %+v: the handed-over instance was taken back under its old name", insts)
	}
	lag.Store(false)
	h.settle(time.Minute)
	if _, deletes := w.counts(); deletes != 0 {
		t.Fatalf("%d deletes", deletes)
	}
	if in, ok := atCloud(h, "nc-1"); !ok || in.Owner != "karpenter" {
		t.Fatalf("the handed-over instance: %+v", in)
	}
}

// Terminated while its transfer's answer is lost (Karpenter deleting a
// NodeClaim whose Create timed out), the instance is deleted once a list
// shows it under the launch's name, and the pool forgets it: its member
// does not stay behind, leaving for ever and counted in the pool.
func TestLaunchFromStandbyTerminatedWhileUnresolved(t *testing.T) {
	h, w, stopped := standbyOn(t)
	w.mu.Lock()
	w.onTransfer = func(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
		if _, err := w.transfer(ctx, inst, name, owner); err != nil {
			return cloud.Instance{}, err
		}
		return cloud.Instance{}, cloud.Errorf(cloud.ErrOutcomeUnknown, "transfer", "connection reset after the cloud took it")
	}
	var lagging atomic.Bool // lists leave the renamed instance out until the Terminate
	lagging.Store(true)
	w.onList = func(insts []cloud.Instance) []cloud.Instance {
		if !lagging.Load() {
			return insts
		}
		return slices.DeleteFunc(insts, func(in cloud.Instance) bool { return in.Name == "nc-1" })
	}
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := h.mgr.Launch(ctx, fromPool("nc-1", stopped)); done <- err }()
	h.eventually("the launch unresolved", func() bool {
		got, ok := h.mgr.LaunchedNamed("nc-1")
		return ok && got.Unresolved
	})
	if err := h.mgr.Terminate(context.Background(), "sim://nc-1"); err != nil {
		t.Fatal(err)
	}
	lagging.Store(false)
	h.eventually("the handed-over instance deleted", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		_, ok := atCloud(h, "nc-1")
		return !ok
	})
	cancel()
	<-done
	h.eventually("the pool holding its refill only", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		return h.metric("gpuscaler_nodegroup_instances", map[string]string{"group": "g", "state": "standby"}) == 1 && stoppedIn(h, "g") == 1
	})
	for _, in := range h.engine.Instances("test") {
		if in.ID == stopped.ID {
			t.Fatalf("the handed-over instance is still at the cloud: %+v", in)
		}
	}
}

// A handed-over instance's Node registers again with the pool's taints,
// not its owner's: the standby taint stays until the owner has claimed
// the Node (Karpenter's registration, which syncs the NodeClaim's taints
// onto it), so no pod lands on a node without the taints its owner
// meant it to have.
func TestHandedOverNodeKeepsItsTaintUntilClaimed(t *testing.T) {
	nodes := newFakeNodes()
	h := newHarness(t, standbyGroup, sim.Options{}, Options{Nodes: nodes})
	warmingWithNode(t, h, nodes)
	stopped := poolStopped(h)
	in, err := h.mgr.Launch(context.Background(), fromPool("nc-1", stopped))
	if err != nil {
		t.Fatal(err)
	}
	now := h.clk.Now()
	nodes.setStartup(in.ProviderID, Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, GPUsNow: true, Standby: true})
	h.settle(2 * time.Minute)
	if st, _ := nodes.Startup(in.ProviderID); !st.Standby {
		t.Fatal("the standby taint was lifted before the owner claimed the Node")
	}
	nodes.setStartup(in.ProviderID, Startup{Registered: now, Ready: now, GPUs: now, GPUsSeen: true, Standby: true, Claimed: true})
	h.eventually("the standby taint lifted once the Node is claimed", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		st, _ := nodes.Startup(in.ProviderID)
		return !st.Standby
	})
}

// A start whose answer says the instance runs already (an earlier start
// landed with its answer lost; Scaleway answers 400) is not a final
// refusal: the launch answers a transient error only, which a caller that
// classifies errors retries, and keeps the instance, running. Before, the
// cause's ErrInvalid showed through errors.Is and cloud.Class, and the
// chaos campaigns' Karpenter model took the backend for one without
// launches and never collected the instance (Scaleway seeds
// 1795904403568662922 and 1795905225265274720).
func TestLaunchFromStandbyStartLandedUnconfirmed(t *testing.T) {
	h, w, stopped := standbyOn(t)
	w.mu.Lock()
	w.onStart = func(ctx context.Context, inst cloud.Instance) (error, bool) {
		if err := w.Provider.(cloud.Stopper).Start(ctx, inst); err != nil {
			return err, true
		}
		return cloud.Errorf(cloud.ErrInvalid, "poweron", "400 precondition_failed: server should be stopped"), true
	}
	w.mu.Unlock()
	_, err := h.mgr.Launch(context.Background(), fromPool("nc-1", stopped))
	if !cloud.IsClass(err, cloud.ErrTransient) || errors.Is(err, cloud.ErrInvalid) || !cloud.Retryable(err) {
		t.Fatalf("a start that landed unconfirmed: %v (class %v), want a transient error and nothing else", err, cloud.Class(err))
	}
	if _, ok := h.mgr.LaunchedNamed("nc-1"); !ok {
		t.Fatal("the handed-over instance is not a launched member")
	}
	h.eventually("the handed-over instance running", func() bool {
		h.clk.Step(30 * time.Second)
		in, ok := atCloud(h, "nc-1")
		return ok && in.State == cloud.StateRunning && in.Owner == "karpenter"
	})
}
