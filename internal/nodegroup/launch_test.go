package nodegroup

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

var h100 = cloud.OfferingKey{InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: cloud.OnDemand}

// The launch API orders one machine outside any group's target, records
// its owner at the cloud, and hands it back by provider ID.
func TestLaunchAndTerminate(t *testing.T) {
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{})
	ctx := context.Background()
	in, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100, Template: "g",
		Labels: map[string]string{"karpenter.sh/nodepool": "gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	if in.Owner != "karpenter" || in.ProviderID != cloud.ProviderID("sim", in.Name) || in.Price == 0 {
		t.Fatalf("launched %+v", in)
	}
	if _, ok := h.mgr.GroupForProviderID(in.ProviderID); ok {
		t.Fatal("a launched instance counts as a group member")
	}
	if got, ok := h.mgr.LaunchedInstance(in.ProviderID); !ok || got.Name != in.Name {
		t.Fatalf("by provider ID: %+v %v", got, ok)
	}
	if got, ok := h.mgr.LaunchedNamed(in.Name); !ok || got.ProviderID != in.ProviderID {
		t.Fatalf("by name: %+v %v", got, ok)
	}
	if n, _ := h.mgr.TargetSize("g"); n != 0 {
		t.Fatalf("the template group's target moved to %d", n)
	}
	at := h.engine.Instances("test")
	if len(at) != 1 || at[0].Owner != "karpenter" || at[0].Group != "" {
		t.Fatalf("at the cloud: %+v", at)
	}
	// A restart finds it again, as launched, and leaves it alone.
	h.restart()
	h.settle(2 * time.Hour)
	if got := h.mgr.Launched("karpenter"); len(got) != 1 || got[0].Name != in.Name {
		t.Fatalf("after a restart, launched = %+v", got)
	}
	if h.engine.Count("test") != 1 {
		t.Fatal("the core collected a launched instance")
	}
	if err := h.mgr.Terminate(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	h.eventually("the instance gone", func() bool { return h.engine.Count("test") == 0 })
	h.eventually("the launch forgotten", func() bool { return len(h.mgr.Launched("")) == 0 })
	if _, ok := h.mgr.LaunchedInstance(in.ProviderID); ok {
		t.Fatal("a gone instance is still found by provider ID")
	}
	if err := h.mgr.Terminate(ctx, in.ProviderID); !errors.Is(err, ErrNotLaunched) {
		t.Fatalf("terminating a gone instance: %v", err)
	}
}

// A stock-out is an insufficient-capacity error, and the offering is then
// skipped by every order (group or launch) for the backoff period.
func TestLaunchStockOut(t *testing.T) {
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{})
	h.engine.SetCapacity(h100, 0)
	ctx := context.Background()
	_, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100})
	if !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("launch on a stocked-out offering: %v", err)
	}
	h.engine.SetCapacity(h100, 5)
	calls := h.engine.Calls()["create"]
	if _, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100}); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("launch during the stock-out backoff: %v", err)
	}
	if h.engine.Calls()["create"] != calls {
		t.Fatal("a backed-off offering was ordered")
	}
}

// A lost answer is resolved by a later list before Launch returns: the
// instance is returned, not ordered twice.
func TestLaunchLostAnswer(t *testing.T) {
	h := newHarness(t, oneGroupLeaky, sim.Options{OutcomeUnknownRate: 1, ListLag: 10 * time.Second}, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100})
	if err != nil {
		t.Fatal(err)
	}
	if h.engine.Count("test") != 1 || h.engine.Calls()["create"] != 1 || in.Name == "" {
		t.Fatalf("instances %d, creates %d", h.engine.Count("test"), h.engine.Calls()["create"])
	}
}

// A launch whose answer was lost, then listed failed (a queued create that
// stocked out), returns a capacity error and deletes the instance: nobody
// else knows it, and a caller that tried the next offering would
// otherwise leave it billing, or wait on it until its context ended. The
// name is free again once the delete is done.
func TestLaunchLostAnswerFailedAtTheCloud(t *testing.T) {
	h, w := wrappedOn(t)
	w.loseCreateAnswers()
	var failing atomic.Bool
	failing.Store(true)
	w.mu.Lock()
	w.onList = func(insts []cloud.Instance) []cloud.Instance {
		if failing.Load() {
			return listedFailed(insts, cloud.ErrCapacity)
		}
		return insts
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100, Name: "nc-1"}
	if _, err := h.mgr.Launch(ctx, req); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("launch of an order the cloud failed: %v, want a capacity error", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the launch waited for its context instead of the list's answer")
	}
	// The offering is skipped now, as after any stock-out; the next one
	// waits for the name.
	next := req
	next.Offering = cloud.OfferingKey{InstanceType: "1V100.6V", Location: "FIN-01", CapacityType: cloud.OnDemand}
	if _, err := h.mgr.Launch(ctx, req); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("a launch on the offering that failed: %v, want a capacity error", err)
	}
	if _, err := h.mgr.Launch(ctx, next); !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("a launch of the name while its failed instance is deleted: %v, want a transient error", err)
	}
	failing.Store(false)
	w.mu.Lock()
	w.onCreate = nil
	w.mu.Unlock()
	h.settle(2 * time.Minute)
	h.eventually("the failed instance deleted", func() bool {
		_, ok := h.mgr.LaunchedNamed("nc-1")
		return h.engine.Count("test") == 0 && !ok
	})
	in, err := h.mgr.Launch(ctx, next)
	if err != nil || in.Name != "nc-1" {
		t.Fatalf("launch once the name is free: %+v, %v", in, err)
	}
}

// Launches share the cluster's cost cap.
func TestLaunchCostCap(t *testing.T) {
	doc := baseConfig + `
maxHourlyCost: 3
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5}
`
	h := newHarness(t, doc, sim.Options{}, Options{})
	ctx := context.Background()
	if _, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100}); !errors.Is(err, ErrCostLimit) {
		t.Fatalf("a launch past the cap: %v", err)
	}
}

// Offers answers from memory: the catalog and the listed offerings, with a
// stock-out shown unavailable until its backoff ends, and a new Version on
// every change.
func TestOffers(t *testing.T) {
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{})
	before, ok := h.mgr.Offers("sim", nil)
	if !ok || len(before.Types) == 0 || len(before.Offerings) == 0 {
		t.Fatalf("offers: %v, %d types, %d offerings", ok, len(before.Types), len(before.Offerings))
	}
	if _, ok := h.mgr.Offers("verda", nil); ok {
		t.Fatal("offers of a cloud that is not configured")
	}
	find := func(o Offers, k cloud.OfferingKey) cloud.Offering {
		for _, of := range o.Offerings {
			if of.Key() == k {
				return of
			}
		}
		t.Fatalf("offering %s not listed", k)
		return cloud.Offering{}
	}
	if of := find(before, h100); !of.Available || of.Price == 0 || before.Regions[h100.Location] == "" {
		t.Fatalf("offering %+v, regions %v", of, before.Regions)
	}
	calls := h.engine.Calls()
	again, _ := h.mgr.Offers("sim", nil)
	if again.Version != before.Version || h.engine.Calls()["offerings"] != calls["offerings"] {
		t.Fatal("a second read changed the version or called the cloud")
	}
	h.engine.SetCapacity(h100, 0)
	if _, err := h.mgr.Launch(context.Background(), LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100}); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("launch: %v", err)
	}
	after, _ := h.mgr.Offers("sim", nil)
	if after.Version == before.Version || find(after, h100).Available || after.ValidUntil.IsZero() {
		t.Fatalf("after a stock-out: version %v (was %v), available %v, valid until %v", after.Version, before.Version, find(after, h100).Available, after.ValidUntil)
	}
}

// After a restart, under a cost cap, a launch waits for a list that can
// show what the process before ordered, and the cap counts it: launched
// at once, it went over the cap while a lagging list hid a group's last
// orders (found by the chaos campaigns).
func TestLaunchAfterRestartCountsWhatALaggingListHides(t *testing.T) {
	doc := baseConfig + `
maxHourlyCost: 3
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5}
`
	h := newHarness(t, doc, sim.Options{ListLag: 40 * time.Second}, Options{ResolveAfter: time.Minute})
	ctx := context.Background()
	if _, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100}); err != nil {
		t.Fatal(err)
	}
	h.restart() // its first list leaves the launch out
	_, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100})
	if !errors.Is(err, ErrCostLimit) {
		t.Fatalf("a second launch after the restart: %v, want refused by the cap", err)
	}
	if n := h.engine.Count("test"); n != 1 {
		t.Fatalf("%d instances at the cloud under a cap for 1", n)
	}
}

// A machine terminated just after its launch, whose delete fails for a
// while, and which a lagging list leaves out at first: the core keeps it
// as being deleted until a list can judge it, rather than dropping it,
// adopting it live when a later list shows it again, and then taking its
// retried delete for a vanish (seen in a chaos campaign).
func TestTerminatedLaunchIsNeverAdoptedAgain(t *testing.T) {
	w := &wrapped{}
	blocked := true
	w.onDelete = func(cloud.Instance) (error, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if blocked {
			return cloud.Errorf(cloud.ErrTransient, "delete", "503 service unavailable"), true
		}
		return nil, false
	}
	h := newWrappedHarness(t, oneGroupLeaky, sim.Options{ListLag: 45 * time.Second}, Options{ResolveAfter: time.Minute},
		func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	ctx := context.Background()
	in, err := h.mgr.Launch(ctx, LaunchRequest{Owner: "karpenter", Cloud: "sim", Offering: h100})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.mgr.Terminate(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	for range 12 { // two minutes of syncs: the first lists leave it out, the later show it
		h.mgr.syncer.kick("sim")
		time.Sleep(2 * time.Millisecond)
		for _, got := range h.mgr.Launched("karpenter") {
			if got.State != StateDeleting {
				t.Fatalf("the terminated machine is back as %v", got.State)
			}
		}
		h.clk.Step(10 * time.Second)
	}
	w.mu.Lock()
	blocked = false
	w.mu.Unlock()
	h.settle(10 * time.Minute)
	if n := h.engine.Count("test"); n != 0 {
		t.Errorf("%d instances left", n)
	}
	if v := h.metric("gpuscaler_instances_vanished_total", nil); v > 0 {
		t.Errorf("%v instances taken for vanished", v)
	}
}
