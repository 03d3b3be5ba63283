// Package chaos runs the node-group core through randomized campaigns of
// scale-ups, scale-downs, deletes, spot reclaims and restarts while the
// cloud fails, and checks after each run what gpuscaler promises: no
// instance ordered twice, none left running without an owner, sizes
// within bounds, and the core and the cloud agreeing once the faults stop
// (docs/reliability.md).
//
// `make test` runs a few campaigns; `make chaos` many. A failed campaign
// prints its seed; -chaos.seed replays its sequence of actions (their
// timing against the core's goroutines varies from run to run).
package chaos

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
	gsruntime "github.com/gpuscaler/gpuscaler/internal/runtime"
)

var (
	runs = flag.Int("chaos.runs", 3, "how many randomized campaigns to run")
	seed = flag.Uint64("chaos.seed", 0, "replay the campaign of this seed (0: a new seed per campaign)")
)

// campaignConfig keeps every period short so that a campaign takes
// seconds: syncs every 100 ms, leaks collected after 1 s.
const campaignConfig = `
clusterName: chaos
sync: {period: 100ms, requestsPerSecond: 100000, maxConcurrentCreates: 4, offeringBackoff: 300ms, createRetries: 3}
leakedInstances: {gracePeriod: 1s}
clouds:
  sim: {bootDelay: 40ms, deleteDelay: 30ms, defaultCapacity: 6}
nodeGroups:
  - {name: a, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], maxSize: 6}
  - {name: b, cloud: sim, instanceType: 1A100.22V, locations: [FIN-01], capacityPolicy: prefer-spot, minSize: 1, maxSize: 4}
  - {name: c, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 2}
`

// faults are the campaign's cloud failures while it acts.
const (
	// faultRate is the share of API calls answered 503.
	faultRate = 0.2
	// unknownRate is the share of creates that take effect but whose
	// answer is lost.
	unknownRate = 0.15
	// listLag keeps accepted orders out of lists for a while, as a real
	// cloud's eventually consistent listing does.
	listLag = 60 * time.Millisecond
	// resolveAfter is how long the core waits for a list to show an order
	// (lost answer or fresh instance): longer than listLag, as the
	// default minute is longer than a real cloud's lag.
	resolveAfter = 300 * time.Millisecond
)

// TestCampaigns runs -chaos.runs campaigns, each from its own seed.
func TestCampaigns(t *testing.T) {
	if testing.Short() {
		t.Skip("campaigns take seconds each")
	}
	n := *runs
	if *seed != 0 {
		n = 1
	}
	for i := range n {
		s := *seed
		if s == 0 {
			s = uint64(time.Now().UnixNano()) + uint64(i)
		}
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			c := newCampaign(t, s)
			defer func() {
				if t.Failed() {
					t.Logf("replay with: go test ./test/chaos -run TestCampaigns -chaos.seed=%d\n%s", s, c.logs.String())
				}
			}()
			c.act()
			c.settle()
		})
	}
}

// campaign is one randomized run against one simulated cloud.
type campaign struct {
	t      *testing.T
	rng    *rand.Rand
	cfg    *config.Config
	engine *sim.Engine
	logs   *coretest.LogBuffer
	mgr    *nodegroup.Manager
	// reg is the running core's metrics registry.
	reg  *prometheus.Registry
	stop func()
	// counts of what was done, for the report.
	actions, restarts, reclaims int
	// reclaimed are the instances the campaign took away: the only ones
	// the core may find vanished.
	reclaimed map[string]bool
}

func newCampaign(t *testing.T, s uint64) *campaign {
	cfg, err := config.Parse([]byte(campaignConfig))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sim.NewEngine(gsruntime.SimConfig(*cfg.Clouds.Sim), sim.Options{OutcomeUnknownRate: unknownRate, ListLag: listLag})
	if err != nil {
		t.Fatal(err)
	}
	engine.SetFaultRate(faultRate)
	c := &campaign{t: t, rng: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15)), cfg: cfg, engine: engine, logs: &coretest.LogBuffer{},
		reclaimed: map[string]bool{}}
	c.start()
	t.Cleanup(func() { c.stop() })
	return c
}

// start starts a core, again and again while the cloud fails its first
// list (as a crash-looping process would).
func (c *campaign) start() {
	c.t.Helper()
	log := slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for attempt := 0; ; attempt++ {
		reg := prometheus.NewRegistry()
		mgr, err := nodegroup.New(c.cfg, map[string]cloud.Provider{sim.Name: c.engine.Account(c.cfg.ClusterName)},
			nodegroup.Options{Logger: log, Registerer: reg, ResolveAfter: resolveAfter})
		if err != nil {
			c.t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := mgr.Start(ctx); err != nil {
			cancel()
			mgr.Wait()
			if attempt == 20 {
				c.t.Fatalf("the core did not start in 20 attempts: %v", err)
			}
			continue
		}
		c.mgr, c.reg, c.stop = mgr, reg, func() { cancel(); mgr.Wait() }
		return
	}
}

// act runs 40 to 80 random actions a few milliseconds apart, checking the
// bounds of every group after each.
func (c *campaign) act() {
	ctx := context.Background()
	steps := 40 + c.rng.IntN(41)
	for range steps {
		g := c.cfg.NodeGroups[c.rng.IntN(len(c.cfg.NodeGroups))]
		switch p := c.rng.IntN(100); {
		case p < 35:
			_ = c.mgr.IncreaseSize(ctx, g.Name, 1+c.rng.IntN(3)) // refused past maxSize: fine
		case p < 55:
			_ = c.mgr.DecreaseTargetSize(ctx, g.Name, -1)
		case p < 75:
			var ids []string
			insts, _ := c.mgr.Instances(g.Name)
			for _, in := range insts {
				if in.State == nodegroup.StateRunning && c.rng.IntN(3) == 0 {
					ids = append(ids, in.ProviderID)
				}
			}
			if len(ids) > 0 {
				_ = c.mgr.DeleteNodes(ctx, g.Name, ids) // refused below minSize: fine
			}
		case p < 83:
			if insts := c.engine.Instances(c.cfg.ClusterName); len(insts) > 0 {
				name := insts[c.rng.IntN(len(insts))].Name
				if c.engine.Reclaim(name) == nil {
					c.reclaims++
					c.reclaimed[name] = true
				}
			}
		case p < 90:
			// A crash: the old core stops wherever it was (creates in
			// flight included) and a new one rebuilds from the cloud.
			c.stop()
			c.start()
			c.restarts++
		default:
			time.Sleep(time.Duration(c.rng.IntN(100)) * time.Millisecond)
		}
		c.actions++
		c.checkBounds(false)
		time.Sleep(time.Duration(c.rng.IntN(20)) * time.Millisecond)
	}
}

// checkBounds: every group's target at most its max, and once settled at
// least its min. (Between syncs it may dip below: unfulfilled and failed
// slots may always be removed, and the next sync orders back to minSize.)
func (c *campaign) checkBounds(settled bool) {
	c.t.Helper()
	for _, g := range c.cfg.NodeGroups {
		n, err := c.mgr.TargetSize(g.Name)
		if err != nil {
			c.t.Fatal(err)
		}
		if n > g.MaxSize || settled && n < g.MinSize {
			c.t.Errorf("group %s: target %d outside [%d, %d]", g.Name, n, g.MinSize, g.MaxSize)
		}
	}
}

// settle stops the faults, waits past the leak collector's grace period
// until the core and the cloud agree, and checks the invariants.
func (c *campaign) settle() {
	c.t.Helper()
	c.engine.SetFaultRate(0)
	c.engine.SetOutcomeUnknownRate(0)
	grace := c.cfg.LeakedInstances.GracePeriod.Duration
	settledAfter := time.Now().Add(grace + time.Second)
	deadline := time.Now().Add(30 * time.Second)
	var why string
	for {
		why = c.disagreement()
		if why == "" && time.Now().After(settledAfter) {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the core and the cloud never agreed after %d actions, %d restarts, %d reclaims: %s",
				c.actions, c.restarts, c.reclaims, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.checkBounds(true)
	c.checkVanished()
	c.t.Logf("%d actions, %d restarts, %d reclaims; %d instances at the end", c.actions, c.restarts, c.reclaims,
		len(c.engine.Instances(c.cfg.ClusterName)))
}

// vanishedRE finds the instances the core took for vanished in its log.
var vanishedRE = regexp.MustCompile(`msg="instance vanished[^"]*" group=\S+ instance=(\S+)`)

// checkVanished: every instance the core took for vanished was taken away
// by the campaign. Any other ran on while its Node would have been deleted
// and a replacement ordered (paid twice).
func (c *campaign) checkVanished() {
	c.t.Helper()
	for _, m := range vanishedRE.FindAllStringSubmatch(c.logs.String(), -1) {
		if !c.reclaimed[m[1]] {
			c.t.Errorf("instance %s was taken for vanished while it ran: its Node would have been deleted and a replacement ordered", m[1])
		}
	}
}

// disagreement describes how the core and the cloud differ, "" when they
// agree: each name at most once at the cloud (no order paid twice); every
// instance at the cloud a running member of its group (none unowned,
// none still booting or being deleted); every member of a group running
// at the cloud, or a failed order the core reports; no more members than
// the target.
func (c *campaign) disagreement() string {
	byGroup := map[string][]string{}
	seen := map[string]bool{}
	for _, in := range c.engine.Instances(c.cfg.ClusterName) {
		if seen[in.Name] {
			return "two instances named " + in.Name
		}
		seen[in.Name] = true
		if in.State != cloud.StateRunning {
			return fmt.Sprintf("instance %s is %s", in.Name, in.State)
		}
		byGroup[in.Group] = append(byGroup[in.Group], in.Name)
	}
	for group, names := range byGroup {
		if !slices.ContainsFunc(c.cfg.NodeGroups, func(g config.NodeGroup) bool { return g.Name == group }) {
			return fmt.Sprintf("instances %v of no group %q", names, group)
		}
	}
	for _, g := range c.cfg.NodeGroups {
		insts, err := c.mgr.Instances(g.Name)
		if err != nil {
			return err.Error()
		}
		var members []string
		for _, in := range insts {
			switch {
			case in.ErrorCode != "" && in.State != nodegroup.StateRunning:
				// A failed order, reported: not at the cloud.
			case in.State != nodegroup.StateRunning:
				return fmt.Sprintf("member %s of %s is %v", in.Name, g.Name, in.State)
			default:
				members = append(members, in.Name)
			}
		}
		cloudNames := byGroup[g.Name]
		slices.Sort(members)
		slices.Sort(cloudNames)
		if !slices.Equal(members, cloudNames) {
			return fmt.Sprintf("group %s: the core has %s, the cloud %s", g.Name, strings.Join(members, ","), strings.Join(cloudNames, ","))
		}
		if target, _ := c.mgr.TargetSize(g.Name); len(insts) > target {
			return fmt.Sprintf("group %s: %d members for a target of %d", g.Name, len(insts), target)
		}
	}
	return ""
}
