package sim

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestEngine(t *testing.T, cfg Config, opts Options) (*Engine, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	opts.Clock = clk
	e, err := NewEngine(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e, clk
}

func spec(name string, ct cloud.CapacityType) cloud.CreateSpec {
	return cloud.CreateSpec{Name: name, Group: "g", InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: ct}
}

func TestCapacityAndStockOut(t *testing.T) {
	two := 2
	e, clk := newTestEngine(t, Config{DefaultCapacity: &two, DeleteDelay: Duration(time.Second)}, Options{})
	acct := e.Account("c1")
	ctx := context.Background()
	for i := range 2 {
		if _, err := acct.Create(ctx, spec(fmt.Sprintf("n%d", i), cloud.OnDemand)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := acct.Create(ctx, spec("n2", cloud.OnDemand))
	if !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("third create: %v, want capacity error", err)
	}
	// Spot is a separate pool.
	if _, err := acct.Create(ctx, spec("s0", cloud.Spot)); err != nil {
		t.Fatalf("spot create: %v", err)
	}
	key := cloud.OfferingKey{InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: cloud.OnDemand}
	if available(t, acct, key) {
		t.Fatal("full offering reported available")
	}
	if err := acct.Delete(ctx, cloud.Instance{Name: "n0"}); err != nil {
		t.Fatal(err)
	}
	if available(t, acct, key) {
		t.Fatal("capacity freed before the instance is gone")
	}
	clk.Step(time.Second)
	if !available(t, acct, key) {
		t.Fatal("capacity not freed after deletion")
	}
	if _, err := acct.Create(ctx, spec("n3", cloud.OnDemand)); err != nil {
		t.Fatalf("create after free: %v", err)
	}
	e.SetCapacity(key, 0)
	if available(t, acct, key) {
		t.Fatal("SetCapacity(0) left the offering available")
	}
}

func available(t *testing.T, c *Cloud, k cloud.OfferingKey) bool {
	t.Helper()
	offs, err := c.Offerings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offs {
		if o.Key() == k {
			return o.Available
		}
	}
	t.Fatalf("offering %v not listed", k)
	return false
}

func TestLifecycleOnFakeClock(t *testing.T) {
	e, clk := newTestEngine(t, Config{}, Options{})
	acct := e.Account("c1")
	ctx := context.Background()
	in, err := acct.Create(ctx, spec("a", cloud.OnDemand))
	if err != nil {
		t.Fatal(err)
	}
	if in.State != cloud.StatePending || in.ProviderID != "sim://a" {
		t.Fatalf("created %+v", in)
	}
	clk.Step(DefaultBootDelay - time.Millisecond)
	if got := state(t, acct, "a"); got != cloud.StatePending {
		t.Fatalf("before boot delay: %s", got)
	}
	clk.Step(time.Millisecond)
	if got := state(t, acct, "a"); got != cloud.StateRunning {
		t.Fatalf("after boot delay: %s", got)
	}
	if err := acct.Delete(ctx, in); err != nil {
		t.Fatal(err)
	}
	if got := state(t, acct, "a"); got != cloud.StateDeleting {
		t.Fatalf("after delete: %s", got)
	}
	clk.Step(DefaultDeleteDelay)
	if got := state(t, acct, "a"); got != "" {
		t.Fatalf("after delete delay: %s", got)
	}
	// Delete is idempotent.
	if err := acct.Delete(ctx, in); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

func state(t *testing.T, c *Cloud, name string) cloud.InstanceState {
	t.Helper()
	insts, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range insts {
		if in.Name == name {
			return in.State
		}
	}
	return ""
}

func TestOwnershipAndNames(t *testing.T) {
	e, _ := newTestEngine(t, Config{}, Options{})
	a, b := e.Account("a"), e.Account("b")
	ctx := context.Background()
	if _, err := a.Create(ctx, spec("x", cloud.OnDemand)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, spec("y", cloud.OnDemand)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, spec("x", cloud.OnDemand)); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("duplicate name: %v", err)
	}
	la, _ := a.List(ctx)
	if len(la) != 1 || la[0].Name != "x" || la[0].Group != "g" {
		t.Fatalf("cluster a lists %+v", la)
	}
	// Deleting another cluster's instance does nothing.
	if err := a.Delete(ctx, cloud.Instance{Name: "y"}); err != nil {
		t.Fatal(err)
	}
	if state(t, b, "y") != cloud.StatePending {
		t.Fatal("cluster a deleted cluster b's instance")
	}
}

func TestInvalidOrders(t *testing.T) {
	e, _ := newTestEngine(t, Config{}, Options{})
	acct := e.Account("c")
	for _, s := range []cloud.CreateSpec{
		{Name: "a", InstanceType: "nope", Location: "FIN-01", CapacityType: cloud.OnDemand},
		{Name: "a", InstanceType: "1V100.6V", Location: "MARS-01", CapacityType: cloud.OnDemand},
		{Name: "a", InstanceType: "1V100.6V", Location: "FIN-01", CapacityType: "reserved"},
		{Name: "", InstanceType: "1V100.6V", Location: "FIN-01", CapacityType: cloud.OnDemand},
	} {
		if _, err := acct.Create(context.Background(), s); !errors.Is(err, cloud.ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", s, err)
		}
	}
}

func TestFaultsAreSeededAndNearRate(t *testing.T) {
	run := func(seed int64) []bool {
		e, _ := newTestEngine(t, Config{Seed: seed, FaultRate: 0.2}, Options{})
		acct := e.Account("c")
		out := make([]bool, 2000)
		for i := range out {
			_, err := acct.List(context.Background())
			if err != nil && !errors.Is(err, cloud.ErrTransient) {
				t.Fatalf("fault of wrong class: %v", err)
			}
			out[i] = err != nil
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	fails, same, differ := 0, true, false
	for i := range a {
		if a[i] {
			fails++
		}
		same = same && a[i] == b[i]
		differ = differ || a[i] != c[i]
	}
	if !same {
		t.Error("same seed gave different faults")
	}
	if !differ {
		t.Error("different seeds gave the same faults")
	}
	if rate := float64(fails) / float64(len(a)); rate < 0.17 || rate > 0.23 {
		t.Errorf("fault rate %.3f, want about 0.2", rate)
	}
}

func TestOutcomeUnknownCreateLands(t *testing.T) {
	e, _ := newTestEngine(t, Config{}, Options{OutcomeUnknownRate: 1})
	acct := e.Account("c")
	_, err := acct.Create(context.Background(), spec("u", cloud.OnDemand))
	if !errors.Is(err, cloud.ErrOutcomeUnknown) {
		t.Fatalf("err = %v", err)
	}
	if n := e.Count("c"); n != 1 {
		t.Fatalf("%d instances, want the one that landed", n)
	}
}

func TestSpotReclaimDeterministic(t *testing.T) {
	run := func() []string {
		e, clk := newTestEngine(t, Config{Seed: 3, SpotReclaimRate: 0.5}, Options{})
		acct := e.Account("c")
		for i := range 8 {
			s := spec(fmt.Sprintf("s%d", i), cloud.Spot)
			if _, err := acct.Create(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		}
		var order []string
		for range 48 * 6 {
			clk.Step(10 * time.Minute)
			for i := range 8 {
				name := fmt.Sprintf("s%d", i)
				if state(t, acct, name) == "" && !contains(order, name) {
					order = append(order, name)
				}
			}
		}
		return order
	}
	a, b := run(), run()
	if len(a) < 4 {
		t.Fatalf("only %d of 8 spot instances reclaimed in 48h at 0.5/h", len(a))
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("reclaims differ under one seed: %v vs %v", a, b)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestCapacityOverrideMustMatch(t *testing.T) {
	_, err := NewEngine(Config{Capacity: []Capacity{{InstanceType: "nope", Count: 1}}}, Options{})
	if err == nil {
		t.Fatal("override matching nothing accepted")
	}
}

func TestSpotReclaimChancePerHour(t *testing.T) {
	const n = 1000
	capacity := n
	e, clk := newTestEngine(t, Config{Seed: 11, SpotReclaimRate: 0.3, DefaultCapacity: &capacity, BootDelay: Duration(0)}, Options{})
	acct := e.Account("c")
	for i := range n {
		if _, err := acct.Create(context.Background(), spec(fmt.Sprintf("s%d", i), cloud.Spot)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acct.Create(context.Background(), spec("od", cloud.OnDemand)); err != nil {
		t.Fatal(err)
	}
	e.Count("c") // boot everything now
	clk.Step(time.Hour)
	left := e.Count("c") - 1
	if rate := 1 - float64(left)/n; rate < 0.26 || rate > 0.34 {
		t.Errorf("%.3f of spot instances reclaimed in the first hour, want about 0.3", rate)
	}
	clk.Step(24 * time.Hour)
	if got := e.Instances("c"); len(got) != 1 || got[0].Name != "od" {
		t.Errorf("after a day %d instances are left, want only the on-demand one", len(got))
	}
}

func TestRatesOutOfRange(t *testing.T) {
	for _, cfg := range []Config{{FaultRate: -0.1}, {FaultRate: 1.1}, {SpotReclaimRate: 2}} {
		if _, err := NewEngine(cfg, Options{}); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestCallCounters(t *testing.T) {
	e, _ := newTestEngine(t, Config{}, Options{})
	acct := e.Account("c")
	ctx := context.Background()
	for range 3 {
		if _, err := acct.List(ctx); err != nil {
			t.Fatal(err)
		}
	}
	in, err := acct.Create(ctx, spec("a", cloud.OnDemand))
	if err != nil {
		t.Fatal(err)
	}
	if err := acct.Delete(ctx, in); err != nil {
		t.Fatal(err)
	}
	if _, err := acct.Offerings(ctx); err != nil {
		t.Fatal(err)
	}
	e.Count("c") // test reads are not API calls
	want := map[string]int{"list": 3, "create": 1, "delete": 1, "offerings": 1}
	if got := e.Calls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
}

func TestAPILatencyWaitsOnTheClock(t *testing.T) {
	e, clk := newTestEngine(t, Config{APILatency: Duration(time.Second)}, Options{})
	acct := e.Account("c")
	done := make(chan error)
	go func() {
		_, err := acct.List(context.Background())
		done <- err
	}()
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
	select {
	case err := <-done:
		t.Fatalf("call returned before its latency: %v", err)
	default:
	}
	clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A cancelled caller stops waiting, with a transient error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := acct.List(ctx); !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("cancelled call: %v", err)
	}
}

func TestChangedAndNextEvent(t *testing.T) {
	e, clk := newTestEngine(t, Config{}, Options{})
	if _, ok := e.NextEvent(); ok {
		t.Fatal("event scheduled on an empty engine")
	}
	ch := e.Changed()
	if _, err := e.Account("c").Create(context.Background(), spec("a", cloud.OnDemand)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("create did not signal a change")
	}
	next, ok := e.NextEvent()
	if !ok || !next.Equal(t0.Add(DefaultBootDelay)) {
		t.Fatalf("next event %v %v, want the boot at %v", next, ok, t0.Add(DefaultBootDelay))
	}
	ch = e.Changed()
	clk.Step(DefaultBootDelay)
	e.Count("c")
	select {
	case <-ch:
	default:
		t.Fatal("boot did not signal a change")
	}
}

// A stopped instance bills the stopped price and gives its capacity back;
// a start takes it again (refused, ErrCapacity, when none is left) and
// the instance runs StartDelay later; deleting a stopped instance frees
// nothing twice.
func TestStopAndStart(t *testing.T) {
	one := 1
	e, clk := newTestEngine(t, Config{DefaultCapacity: &one, BootDelay: Duration(time.Minute), StartDelay: Duration(10 * time.Second),
		DeleteDelay: Duration(time.Second)}, Options{})
	acct := e.Account("c1")
	ctx := context.Background()
	a, err := acct.Create(ctx, spec("a", cloud.OnDemand))
	if err != nil {
		t.Fatal(err)
	}
	if err := acct.Stop(ctx, a); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("stopping a booting instance: %v, want invalid", err)
	}
	clk.Step(time.Minute)
	if err := acct.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if in := e.Instances("c1")[0]; in.State != cloud.StateStopped || !in.Standby {
		t.Fatalf("after stop: %+v, want stopped standby", in)
	}
	key := cloud.OfferingKey{InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: cloud.OnDemand}
	if !available(t, acct, key) {
		t.Fatal("a stopped instance still holds its capacity")
	}
	if _, err := acct.Create(ctx, spec("b", cloud.OnDemand)); err != nil {
		t.Fatal(err)
	}
	if err := acct.Start(ctx, a); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("start with the capacity taken: %v, want a capacity error", err)
	}
	if err := acct.Delete(ctx, cloud.Instance{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if err := acct.Start(ctx, a); err != nil {
		t.Fatal(err)
	}
	if in := e.Instances("c1")[0]; in.State != cloud.StatePending || in.Standby {
		t.Fatalf("after start: %+v, want pending", in)
	}
	clk.Step(10 * time.Second)
	if in := e.Instances("c1")[0]; in.State != cloud.StateRunning {
		t.Fatalf("start delay after start: %+v, want running", in)
	}
	if err := acct.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := acct.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if n := e.Count("c1"); n != 0 {
		t.Fatalf("%d instances after deleting the stopped one", n)
	}
	for i := range 2 { // the capacity is whole again: one, not zero or two
		_, err := acct.Create(ctx, spec(fmt.Sprintf("c%d", i), cloud.OnDemand))
		if (i == 0) != (err == nil) {
			t.Fatalf("create %d after the delete: %v", i, err)
		}
	}
	if got := acct.StoppedPrice(key); got != DefaultStoppedPrice {
		t.Fatalf("stopped price %v, want the default %v", got, DefaultStoppedPrice)
	}
}

// A stopped instance is renamed and re-owned in one call, which may be
// sent again after a lost answer; a running one, a taken name and another
// cluster's instance are refused.
func TestTransfer(t *testing.T) {
	e, clk := newTestEngine(t, Config{BootDelay: Duration(time.Second), StartDelay: Duration(time.Second)}, Options{})
	acct := e.Account("c1")
	ctx := context.Background()
	a, err := acct.Create(ctx, spec("pool-a", cloud.OnDemand))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acct.Create(ctx, spec("taken", cloud.OnDemand)); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if _, err := acct.Transfer(ctx, a, "claim-1", "karpenter"); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("transfer of a running instance: %v, want invalid", err)
	}
	if err := acct.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := acct.Transfer(ctx, a, "taken", "karpenter"); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("transfer to a taken name: %v, want invalid", err)
	}
	if _, err := e.Account("c2").Transfer(ctx, a, "claim-1", "karpenter"); !errors.Is(err, cloud.ErrNotFound) {
		t.Fatalf("transfer from another cluster: %v, want not found", err)
	}
	e.LoseNext("transfer")
	if _, err := acct.Transfer(ctx, a, "claim-1", "karpenter"); !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("lost answer: %v, want transient", err)
	}
	got, err := acct.Transfer(ctx, a, "claim-1", "karpenter") // sent again
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.Instance{Name: "claim-1", ID: a.ID, ProviderID: "sim://claim-1", Owner: "karpenter", State: cloud.StateStopped}
	if got.Name != want.Name || got.ID != want.ID || got.ProviderID != want.ProviderID || got.Owner != want.Owner || got.Group != "" || got.State != want.State {
		t.Fatalf("transferred: %+v, want %+v", got, want)
	}
	var names []string
	for _, in := range e.Instances("c1") {
		names = append(names, in.Name+"/"+in.Group+in.Owner)
	}
	if fmt.Sprint(names) != "[claim-1/karpenter taken/g]" {
		t.Fatalf("listed %v", names)
	}
	if err := acct.Start(ctx, got); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if in := e.Instances("c1")[0]; in.Name != "claim-1" || in.State != cloud.StateRunning {
		t.Fatalf("after start: %+v", in)
	}
}

// At a start failure rate of 1, every start is refused.
func TestStartFailureRate(t *testing.T) {
	e, clk := newTestEngine(t, Config{StartFailureRate: 1, BootDelay: Duration(time.Second)}, Options{})
	acct := e.Account("c1")
	ctx := context.Background()
	a, err := acct.Create(ctx, spec("a", cloud.OnDemand))
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if err := acct.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := acct.Start(ctx, a); !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("start: %v, want refused", err)
	}
}

// With a 95th percentile above the median, each boot is a draw of its
// own: over many boots the median and the 95th percentile come out as
// configured, and the same seed draws the same boots.
func TestBootDelaysAreDrawn(t *testing.T) {
	boots := func(seed int64) []time.Duration {
		many := 1000
		e, _ := newTestEngine(t, Config{Seed: seed, DefaultCapacity: &many, BootDelay: Duration(time.Minute), BootDelayP95: Duration(3 * time.Minute)}, Options{})
		acct := e.Account("c1")
		var out []time.Duration
		for i := range 400 {
			name := fmt.Sprintf("n%d", i)
			if _, err := acct.Create(context.Background(), spec(name, cloud.OnDemand)); err != nil {
				t.Fatal(err)
			}
			at, ok := e.RunningAt(name)
			if !ok {
				t.Fatalf("%s: no running time", name)
			}
			out = append(out, at.Sub(t0))
		}
		return out
	}
	a, b := boots(7), boots(7)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed drew other boots")
	}
	slices.Sort(a)
	if med := a[len(a)/2]; med < 54*time.Second || med > 66*time.Second {
		t.Errorf("median boot %s, want about 1m", med)
	}
	if p95 := a[len(a)*95/100]; p95 < 150*time.Second || p95 > 210*time.Second {
		t.Errorf("95th percentile %s, want about 3m", p95)
	}
	// Without a 95th percentile, every boot takes the delay.
	e, _ := newTestEngine(t, Config{BootDelay: Duration(time.Minute)}, Options{})
	if _, err := e.Account("c1").Create(context.Background(), spec("x", cloud.OnDemand)); err != nil {
		t.Fatal(err)
	}
	if at, _ := e.RunningAt("x"); at.Sub(t0) != time.Minute {
		t.Errorf("boot %s, want the constant 1m", at.Sub(t0))
	}
}
