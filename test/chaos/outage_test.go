package chaos

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// outage is how long the cloud's API is down in the drill, on a virtual
// clock.
const outage = 10 * time.Minute

// TestCloudOutageDrill takes the cloud's API down for ten minutes (on a
// virtual clock: the core's timers, retries and backoffs run on it) while
// cluster-autoscaler keeps calling every 10 s. Every read answers from
// memory and the same as before; a scale-up is taken and its orders fail
// with a reported error once their retries give up; a delete is taken and
// held; nothing is taken for vanished. When the API returns,
// cluster-autoscaler removes the failed slots and, once the group's
// backoff has passed, asks again, as it does; the delete goes through, and
// the core and the cloud agree with no instance ordered twice.
func TestCloudOutageDrill(t *testing.T) {
	cfg, err := config.Parse([]byte(campaignConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sync.Period.Duration = 30 * time.Second // the default
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	engine, err := sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: sim.Name, cfg: cfg, instances: func() []cloud.Instance { return engine.Instances(cfg.ClusterName) }}
	c := &campaign{t: t, b: b, cfg: cfg, logs: &coretest.LogBuffer{}, reclaimed: map[string]bool{}, reg: prometheus.NewRegistry()}
	c.mgr, err = nodegroup.New(cfg, map[string]cloud.Provider{sim.Name: engine.Account(cfg.ClusterName)}, nodegroup.Options{
		Clock: clk, Logger: slog.New(slog.NewTextHandler(c.logs, nil)), Registerer: c.reg, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); c.mgr.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("core log:\n%s", c.logs.String())
		}
	}()
	// run moves the virtual clock by d a second at a time, letting the
	// core's goroutines act on each tick, with a sync every period and
	// cluster-autoscaler's loop (Refresh and reads) every 10 s.
	var read func()
	elapsed := time.Duration(0)
	run := func(d time.Duration) {
		t.Helper()
		for end := elapsed + d; elapsed < end; {
			clk.Step(time.Second)
			elapsed += time.Second
			if elapsed%cfg.Sync.Period.Duration == 0 {
				_ = c.mgr.Sync(ctx) // fails while the cloud is down
			}
			if elapsed%(10*time.Second) == 0 && read != nil {
				if err := c.mgr.Refresh(ctx); err != nil {
					t.Fatalf("Refresh: %v", err)
				}
				read()
			}
			settle(t, c.mgr)
		}
	}
	if err := c.mgr.IncreaseSize(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	run(time.Minute)
	if why := c.disagreement(); why != "" {
		t.Fatalf("before the outage: %s", why)
	}
	before := c.reads(t)
	running, _ := c.mgr.Instances("a")
	doomed := running[0].ProviderID

	engine.SetFaultRate(1)
	if err := c.mgr.IncreaseSize(ctx, "a", 2); err != nil {
		t.Fatalf("a scale-up during the outage was refused: %v", err)
	}
	if err := c.mgr.DeleteNodes(ctx, "a", []string{doomed}); err != nil {
		t.Fatalf("a delete during the outage was refused: %v", err)
	}
	loops := 0
	read = func() {
		now := c.reads(t)
		for pid, group := range before.groupOf {
			if now.groupOf[pid] != group {
				t.Fatalf("at %s into the outage %s is in group %q, was %q", elapsed, pid, now.groupOf[pid], group)
			}
			if pid != doomed && now.state[pid] != nodegroup.StateRunning {
				t.Fatalf("at %s into the outage %s is %v, was running", elapsed, pid, now.state[pid])
			}
		}
		loops++
	}
	run(outage)
	read = nil
	insts, _ := c.mgr.Instances("a")
	var failed []string
	for _, in := range insts {
		if in.ErrorCode != "" && in.State != nodegroup.StateRunning && in.State != nodegroup.StateDeleting {
			failed = append(failed, in.ProviderID)
		}
	}
	if len(failed) != 2 {
		t.Fatalf("after the outage %d failed slots reported, want the 2 ordered during it: %+v", len(failed), insts)
	}
	if n := c.reads(t).state[doomed]; n != nodegroup.StateDeleting {
		t.Errorf("the instance deleted during the outage is %v, want deleting (held until the API returns)", n)
	}
	if got := c.failures("a"); got < 2 {
		t.Errorf("gpuscaler_scale_up_failures_total for a = %v, want at least 2", got)
	}
	c.checkVanished()

	engine.SetFaultRate(0)
	if err := c.mgr.DeleteNodes(ctx, "a", failed); err != nil {
		t.Fatalf("removing the failed slots: %v", err)
	}
	for waited := time.Duration(0); ; waited += 10 * time.Second {
		err := c.mgr.IncreaseSize(ctx, "a", 2)
		if err == nil {
			break
		}
		if !errors.Is(err, nodegroup.ErrBackingOff) || waited > 30*time.Minute {
			t.Fatalf("asking again after the outage: %v", err)
		}
		run(10 * time.Second)
	}
	run(2 * time.Minute)
	if why := c.disagreement(); why != "" {
		t.Fatalf("after the outage: %s", why)
	}
	if n, _ := c.mgr.TargetSize("a"); n != 4 {
		t.Errorf("target %d after the outage, want 4 (3 + 2 - 1)", n)
	}
	if got, ok := c.reads(t).state[doomed]; ok {
		t.Errorf("the instance deleted during the outage is still there (%v)", got)
	}
	c.checkVanished()
	t.Logf("%d loops of reads over %s of outage; %d scale-up orders failed, were reported and ordered again", loops, outage, len(failed))
}

// settle waits (real time) until the core's goroutines have done what the
// last tick let them: no create or delete in flight, or one waiting on the
// virtual clock.
func settle(t *testing.T, mgr *nodegroup.Manager) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Millisecond)
	for !mgr.Idle() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
}

// caView is what cluster-autoscaler reads of the groups.
type caView struct {
	groupOf map[string]string
	state   map[string]nodegroup.State
}

// reads makes every read of cluster-autoscaler's loop: each group, its
// target and instances, and the group of each instance; none may fail.
func (c *campaign) reads(t *testing.T) caView {
	t.Helper()
	v := caView{groupOf: map[string]string{}, state: map[string]nodegroup.State{}}
	for _, info := range c.mgr.Groups() {
		if _, err := c.mgr.TargetSize(info.Name); err != nil {
			t.Fatalf("TargetSize(%s): %v", info.Name, err)
		}
		insts, err := c.mgr.Instances(info.Name)
		if err != nil {
			t.Fatalf("Instances(%s): %v", info.Name, err)
		}
		for _, in := range insts {
			group, _ := c.mgr.GroupForProviderID(in.ProviderID)
			v.groupOf[in.ProviderID], v.state[in.ProviderID] = group, in.State
		}
	}
	return v
}

// failures sums gpuscaler_scale_up_failures_total of one group, over
// every reason, in the running core's registry.
func (c *campaign) failures(group string) float64 {
	families, err := c.reg.Gather()
	if err != nil {
		c.t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "gpuscaler_scale_up_failures_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "group" && l.GetValue() == group }) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
