// Package chaos runs the node-group core through randomized campaigns of
// scale-ups, scale-downs, deletes, spot reclaims and restarts while the
// cloud fails, and checks after each run what gpuscaler promises: no
// instance ordered twice, none left running without an owner, sizes
// within bounds, and the core and the cloud agreeing once the faults stop
// (docs/reliability.md).
//
// `make test` runs a few campaigns; `make chaos` many. A failed campaign
// prints its seed; -chaos.seed replays its sequence of actions and the
// seed of the cloud's faults, lost answers and stock-outs. Their timing
// against the core's goroutines, which run on the real clock, varies from
// run to run, and with it which request meets which fault: a replay is
// the same campaign, not the same interleaving.
package chaos

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

var (
	runs        = flag.Int("chaos.runs", 2, "how many randomized campaigns to run on each cloud on the wall clock (TestCampaigns)")
	virtualRuns = flag.Int("chaos.virtual-runs", 40, "how many randomized campaigns to run on each cloud on a virtual clock (TestVirtualCampaigns)")
	seed        = flag.Uint64("chaos.seed", 0, "replay the campaign of this seed (0: a new seed per campaign)")
	clouds      = flag.String("chaos.clouds", "sim,verda,kamatera,scaleway,gcp", "the clouds to run campaigns on, comma-separated")
	dump        = flag.String("chaos.log", "", "write the last campaign's log to this file")
)

// TestCampaigns runs -chaos.runs campaigns on each cloud of -chaos.clouds,
// each from its own seed, on the wall clock: the core's goroutines, the
// fakes' HTTP servers on loopback sockets and the campaign race as they
// do in a process, so which request meets which fault varies from run to
// run and a replay is the same campaign, not the same interleaving.
func TestCampaigns(t *testing.T) {
	if testing.Short() {
		t.Skip("campaigns take seconds each")
	}
	runCampaigns(t, *runs, false)
}

// TestVirtualCampaigns runs -chaos.virtual-runs campaigns on each cloud,
// each in a testing/synctest bubble: time is virtual and moves only when
// every goroutine of the campaign waits, the fakes serve on in-memory
// connections, and faults and instance names come from the seed. A
// campaign takes a few tens of milliseconds rather than seconds, so many
// more run, and a seed replays its campaign: the same actions, faults and
// names, at the same virtual times; goroutines that are runnable at the
// same instant still run in the Go scheduler's order, so a failure seen
// once may need a few replays (-count) to show again.
func TestVirtualCampaigns(t *testing.T) {
	n := *virtualRuns
	if testing.Short() {
		n = min(n, 5) // the quick loop (make test-unit) runs a few
	}
	runCampaigns(t, n, true)
}

// runCampaigns runs n campaigns (one of -chaos.seed when set) on each
// cloud of -chaos.clouds, on a virtual clock or the wall clock.
func runCampaigns(t *testing.T, n int, virtual bool) {
	if *seed != 0 {
		n = 1
	}
	for _, name := range strings.Split(*clouds, ",") {
		build, ok := backends[name]
		if !ok {
			t.Fatalf("-chaos.clouds: no backend %q", name)
		}
		for i := range n {
			s := *seed
			if s == 0 {
				s = uint64(time.Now().UnixNano()) + uint64(i)
			}
			run := func(t *testing.T) {
				c := newCampaign(t, build(t, s, virtual), s)
				defer func() {
					if *dump != "" {
						_ = os.WriteFile(*dump, []byte(c.logs.String()), 0o600)
					}
					if t.Failed() {
						t.Logf("replay with: go test ./test/chaos -run %s -chaos.clouds=%s -chaos.seed=%d\n%s", testName(virtual), name, s, c.logs.String())
					}
				}()
				c.act()
				c.settle()
			}
			t.Run(fmt.Sprintf("%s/seed=%d", name, s), func(t *testing.T) {
				if !virtual {
					run(t)
					return
				}
				defer watchdog(name, s)()
				synctest.Test(t, run)
			})
		}
	}
}

// testName is the test that runs campaigns on the clock asked for.
func testName(virtual bool) string {
	if virtual {
		return "TestVirtualCampaigns"
	}
	return "TestCampaigns"
}

// stuckAfter is how long a campaign on the virtual clock may take on the
// wall clock: a second is plenty; one that takes this long has stopped its
// bubble's clock (a goroutine waiting on a mutex its holder keeps while it
// sleeps is not durably blocked) and would otherwise hang until the test
// binary's timeout.
const stuckAfter = 2 * time.Minute

// watchdog crashes the test binary with every goroutine's stack when the
// campaign of seed on cloud runs past stuckAfter; the returned func stops
// it.
func watchdog(cloud string, seed uint64) (stop func()) {
	timer := time.AfterFunc(stuckAfter, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("the %s campaign of seed %d ran %s on the virtual clock: its bubble is stuck", cloud, seed, stuckAfter))
	})
	return func() { timer.Stop() }
}

// campaign is one randomized run against one cloud.
type campaign struct {
	t    *testing.T
	rng  *rand.Rand
	b    *backend
	cfg  *config.Config
	logs *coretest.LogBuffer
	mgr  *nodegroup.Manager
	// reg is the running core's metrics registry; events its Events.
	reg    *prometheus.Registry
	events *eventLog
	stop   func()
	// counts of what was done, for the report.
	actions, restarts, reclaims, stockouts int
	// stockoutsMet counts the orders the cores saw refused for want of
	// capacity (gpuscaler_stockouts_total, summed over every core).
	stockoutsMet float64
	// soldOut are the offerings the campaign sold out, until it restores
	// them.
	soldOut map[cloud.OfferingKey]bool
	// reclaimed are the instances the campaign took away: the only ones
	// the core may find vanished.
	reclaimed map[string]bool
	// failedCreates counts the failed orders seen reported.
	failedCreates int
	// existed are the instances seen running or stopped at the cloud
	// (sampled after every action and while settling).
	existed map[string]bool
	// prov is the running process's backend: a restart builds a new one,
	// a reload keeps it (the runtime keeps its clouds across reloads).
	prov cloud.Provider
	log  *slog.Logger
	// names is where every core of the campaign draws instance names.
	names *entropy
	// maxSizes are the groups' configured maxSize, which reloads raise by
	// one and put back.
	maxSizes map[string]int
	reloads  int
	// remade counts the reloads that changed a group's machine.
	remade int
	// claims are the NodeClaims the Karpenter model keeps, by name (the
	// machine's name): each gets at most one instance; noLaunch is set
	// when the backend has no launch API to play it on.
	claims    map[string]bool
	nextClaim int
	noLaunch  bool
	launched  int
	// fromPool counts the launches that took a standby pool's machine.
	fromPool int
	// carried are, per group, the failures counted by the cores this
	// process ran before the last reload (a reload starts a core with
	// its own metrics; the failed orders it inherits were counted there).
	carried map[string]float64
	// reads are the durations of the front ends' reads during the
	// campaign (see readLoop).
	readsMu   sync.Mutex
	readTimes []time.Duration
	// nodes are the cluster's Nodes, which outlive process restarts.
	nodes *clusterNodes
}

func newCampaign(t *testing.T, b *backend, s uint64) *campaign {
	c := &campaign{t: t, rng: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15)), b: b, cfg: b.cfg, logs: &coretest.LogBuffer{},
		reclaimed: map[string]bool{}, existed: map[string]bool{}, soldOut: map[cloud.OfferingKey]bool{}, maxSizes: map[string]int{},
		claims: map[string]bool{}, nodes: newClusterNodes(s, b.providerID)}
	c.nodes.lostAfter = b.lostAfter
	c.nodes.orphanLimit = 2*resolveAfter + 6*b.cfg.Sync.Period.Duration
	for _, g := range b.cfg.NodeGroups {
		c.maxSizes[g.Name] = g.MaxSize
	}
	c.names = &entropy{src: rand.NewChaCha8([32]byte(binary.LittleEndian.AppendUint64(make([]byte, 24), s)))}
	c.log = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b.faults(true)
	c.start()
	// The kubelets run on their own, whatever the campaign is doing (a
	// reload's read ahead, a restart's retries may take seconds).
	kctx, stopKubelets := context.WithCancel(context.Background())
	kubelets := make(chan struct{})
	go func() {
		defer close(kubelets)
		for kctx.Err() == nil {
			c.nodes.kubelets(c.b.instances(), time.Now())
			c.readsMu.Lock()
			mgr, reg := c.mgr, c.reg
			c.readsMu.Unlock()
			c.nodes.health(time.Now(), mgr, func() int { return okLists(reg) })
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		stopKubelets()
		<-kubelets
		c.stop()
	})
	return c
}

// entropy is the campaign's one source of instance names, drawn by every
// core it runs in turn: seeded, so that a replay names its instances as
// the run it replays did.
type entropy struct {
	mu  sync.Mutex
	src *rand.ChaCha8
}

func (e *entropy) Read(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.src.Read(p)
}

// eventLog keeps a core's Events.
type eventLog struct {
	mu     sync.Mutex
	events []nodegroup.Event
}

func (l *eventLog) Event(ev nodegroup.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

// warned reports whether a Warning named the instance.
func (l *eventLog) warned(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.events, func(ev nodegroup.Event) bool { return ev.Type == "Warning" && ev.Instance == name })
}

// start starts a core, again and again while the cloud fails its first
// list (as a crash-looping process would).
func (c *campaign) start() {
	c.t.Helper()
	c.prov = c.b.provider(c.log)
	c.carried = map[string]float64{}
	c.events = &eventLog{}
	c.startCore(nil, nil, nil)
}

// newCore makes a core of c.cfg on the process's backend, not started.
func (c *campaign) newCore() (*nodegroup.Manager, *prometheus.Registry) {
	c.t.Helper()
	reg := prometheus.NewRegistry()
	mgr, err := nodegroup.New(c.cfg, map[string]cloud.Provider{c.b.name: c.prov},
		nodegroup.Options{Logger: c.log, Registerer: reg, Events: c.events, ResolveAfter: resolveAfter, Bootstrap: c.b.bootstrap, Entropy: c.names, Nodes: c.nodes})
	if err != nil {
		c.t.Fatal(err)
	}
	return mgr, reg
}

// startCore starts a core on the process's backend, handed what prev
// knew (a reload) or not (nil: a process start): warmed, the core a
// reload made and warmed while prev still served (nil: a new one).
func (c *campaign) startCore(prev, warmed *nodegroup.Manager, warmedReg *prometheus.Registry) {
	c.t.Helper()
	for attempt := 0; ; attempt++ {
		mgr, reg := warmed, warmedReg
		if mgr == nil {
			mgr, reg = c.newCore()
		}
		warmed = nil       // a start that fails is tried again on a fresh core
		events := c.events // the process's Event sink outlives its cores
		if prev != nil {
			mgr.Inherit(prev)
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
		c.readsMu.Lock()
		c.mgr, c.reg, c.events = mgr, reg, events
		c.readsMu.Unlock()
		c.stop = func() { cancel(); mgr.Wait() }
		return
	}
}

// act runs 40 to 80 random actions a few milliseconds apart, checking the
// bounds of every group after each, while a reader reads as the front
// ends do.
func (c *campaign) act() {
	ctx := context.Background()
	readCtx, stopReading := context.WithCancel(ctx)
	read := make(chan struct{})
	go func() { defer close(read); c.readLoop(readCtx) }()
	defer func() {
		stopReading()
		<-read
		c.checkReads()
	}()
	steps := 40 + c.rng.IntN(41)
	for range steps {
		g := c.cfg.NodeGroups[c.rng.IntN(len(c.cfg.NodeGroups))]
		switch p := c.rng.IntN(100); {
		case p < 8:
			c.autoscalerLoop(ctx, g)
		case p < 12:
			c.reload()
		case p < 20:
			c.karpenter(ctx)
		case p < 35:
			_ = c.mgr.IncreaseSize(ctx, g.Name, 1+c.rng.IntN(3)) // refused past maxSize: fine
		case p < 55:
			_ = c.mgr.DecreaseTargetSize(ctx, g.Name, -1)
		case p < 75:
			var ids []string
			for _, in := range c.members(g.Name) {
				// Running nodes at random, and failed orders, as
				// cluster-autoscaler removes those.
				if in.ProviderID != "" && (in.Failed() || in.State == nodegroup.StateRunning && c.rng.IntN(3) == 0) {
					ids = append(ids, in.ProviderID)
				}
			}
			if len(ids) > 0 {
				c.deleteNodes(ctx, g.Name, ids) // refused below minSize: fine
			}
		case p < 83:
			if insts := c.atCloud(); len(insts) > 0 {
				name := insts[c.rng.IntN(len(insts))].Name
				if c.b.lose(name) {
					c.log.Info("chaos: the cloud takes an instance away", "instance", name)
					c.reclaims++
					c.reclaimed[name] = true
				}
			}
		case p < 90:
			// A crash: the old core stops wherever it was (creates in
			// flight included) and a new one rebuilds from the cloud.
			c.checkReported()
			c.stockoutsMet += counter(c.t, c.reg, "gpuscaler_stockouts_total", "")
			c.log.Info("chaos: the process crashes and restarts")
			c.stop()
			c.start()
			c.restarts++
		case p < 95:
			c.stockOut(g)
		default:
			time.Sleep(time.Duration(c.rng.IntN(100)) * time.Millisecond)
		}
		c.actions++
		c.checkBounds(false)
		c.checkSpend()
		c.sample()
		time.Sleep(time.Duration(c.rng.IntN(20)) * time.Millisecond)
	}
}

// autoscalerLoop does to a group what cluster-autoscaler's core does each
// loop besides scaling (pkg/core/static_autoscaler.go): fixNodeGroupSize
// lowers a target above the instances it lists (without looking at
// minSize); removeOldUnregisteredNodes deletes instances that have not
// become nodes for --max-node-provision-time (here booting ones past
// provisionTime), capped at minSize unless
// --force-delete-unregistered-nodes, at random; deleteCreatedNodesWithErrors
// deletes failed orders.
func (c *campaign) autoscalerLoop(ctx context.Context, g config.NodeGroup) {
	insts := c.members(g.Name)
	target, _ := c.mgr.TargetSize(g.Name)
	if d := target - len(insts); d > 0 {
		_ = c.mgr.DecreaseTargetSize(ctx, g.Name, -d) // refused below minSize or a booting instance: fine
	}
	force := c.rng.IntN(2) == 0
	var unregistered, failed []string
	for _, in := range insts {
		switch {
		case in.ProviderID == "":
		case in.Failed():
			failed = append(failed, in.ProviderID)
		case in.State == nodegroup.StateCreating && time.Since(in.CreatedAt) > provisionTime:
			unregistered = append(unregistered, in.ProviderID)
		}
	}
	if !force {
		unregistered = unregistered[:max(0, min(len(unregistered), len(insts)-g.MinSize))]
	}
	if len(unregistered) > 0 {
		c.deleteNodes(ctx, g.Name, unregistered) // refused below minSize: fine
	}
	if len(failed) > 0 {
		c.deleteNodes(ctx, g.Name, failed)
	}
}

// deleteNodes deletes nodes as cluster-autoscaler does: it marks their
// Nodes for deletion first (ToBeDeletedByClusterAutoscaler) and takes the
// mark off when the delete is refused.
func (c *campaign) deleteNodes(ctx context.Context, group string, ids []string) {
	c.nodes.mark(true, time.Now(), ids...)
	if err := c.mgr.DeleteNodes(ctx, group, ids); err != nil {
		c.nodes.mark(false, time.Now(), ids...)
	}
}

// members lists a group's members by name (none for an unknown group):
// the campaign draws from them in an order its seed decides, not the
// core's map order.
func (c *campaign) members(group string) []nodegroup.Instance {
	insts, _ := c.mgr.Instances(group)
	slices.SortFunc(insts, byName)
	return insts
}

// atCloud lists the cloud's instances by name.
func (c *campaign) atCloud() []cloud.Instance {
	insts := c.b.instances()
	slices.SortFunc(insts, byInstanceName)
	return insts
}

func byName(a, b nodegroup.Instance) int { return strings.Compare(a.Name, b.Name) }

func byInstanceName(a, b cloud.Instance) int { return strings.Compare(a.Name, b.Name) }

// karpenter plays Karpenter's NodeClaim lifecycle on the launch API: a
// new NodeClaim's Create, with a short deadline and retried as its
// lifecycle controller retries an error, adopting the machine of its name
// when one exists, else taking a stopped machine from the first group's
// standby pool on any of its offerings, else ordering (as the
// gpuscaler-karpenter provider's Create does); or the deletion of a
// NodeClaim's machine. Each NodeClaim's name must get at most one
// instance, and a pool's machine at most one owner, whatever the
// timeouts, lost answers, restarts and reloads.
func (c *campaign) karpenter(ctx context.Context) {
	if c.noLaunch {
		return
	}
	if len(c.claims) > 0 && c.rng.IntN(3) == 0 {
		names := slices.Sorted(maps.Keys(c.claims)) // in an order the seed decides
		name := names[c.rng.IntN(len(names))]
		if in, ok := c.mgr.LaunchedNamed(name); ok {
			if err := c.mgr.Terminate(ctx, in.ProviderID); err == nil {
				delete(c.claims, name)
			}
		}
		return
	}
	c.nextClaim++
	name := fmt.Sprintf("nc-%03d", c.nextClaim)
	g := c.cfg.NodeGroups[0]
	req := nodegroup.LaunchRequest{Owner: "karpenter", Cloud: c.b.name, Name: name, Template: g.Name,
		Offering: cloud.OfferingKey{InstanceType: g.InstanceType, Location: g.Locations[0], CapacityType: cloud.OnDemand}}
	for range 3 {
		if _, ok := c.mgr.LaunchedNamed(name); ok {
			break
		}
		lctx, cancel := context.WithTimeout(ctx, time.Duration(5+c.rng.IntN(200))*time.Millisecond)
		err := c.fromStandby(lctx, g, req)
		if errors.Is(err, nodegroup.ErrNoStandby) {
			_, err = c.mgr.Launch(lctx, req)
		}
		cancel()
		if err == nil {
			c.launched++
			break
		}
		if _, made := c.mgr.LaunchedNamed(name); !made && c.launched == 0 && cloud.IsClass(err, cloud.ErrInvalid) {
			// A backend without launches (GCP's MIGs) refuses the first:
			// the model sits out. Once one landed, a refusal is this
			// claim's alone, and the claim is kept for its machine.
			c.noLaunch = true
			return
		}
	}
	c.claims[name] = true
}

// fromStandby tries a launch from g's standby pool on each of g's
// offerings, as the provider's Create tries each candidate: the error of
// the first that is not ErrNoStandby, or ErrNoStandby.
func (c *campaign) fromStandby(ctx context.Context, g config.NodeGroup, req nodegroup.LaunchRequest) error {
	req.Standby = true
	for _, loc := range g.Locations {
		for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
			req.Offering.Location, req.Offering.CapacityType = loc, ct
			_, err := c.mgr.Launch(ctx, req)
			if err == nil {
				c.fromPool++
			}
			if !errors.Is(err, nodegroup.ErrNoStandby) {
				return err
			}
		}
	}
	return nodegroup.ErrNoStandby
}

// collectGarbage terminates every launched machine no NodeClaim holds, as
// Karpenter's garbage collection does (pkg/controllers/nodeclaim/
// garbagecollection: the provider's List against the NodeClaims): a
// Terminate the core took whose delete a restart cut short leaves one,
// which the new process lists as a live launch.
func (c *campaign) collectGarbage() {
	if c.noLaunch {
		return
	}
	launched := c.mgr.Launched("karpenter")
	slices.SortFunc(launched, byName)
	for _, in := range launched {
		if !c.claims[in.Name] && in.State != nodegroup.StateDeleting {
			_ = c.mgr.Terminate(context.Background(), in.ProviderID)
		}
	}
}

// releaseClaims deletes every NodeClaim's machine, as Karpenter does when
// the NodeClaims go, retrying until the core takes each delete.
func (c *campaign) releaseClaims() {
	c.t.Helper()
	ctx := context.Background()
	// A NodeClaim whose machine never shows (never launched, or not
	// listed yet) is let go after a while: the leak collector takes what
	// landed.
	giveUp, deadline := time.Now().Add(5*time.Second), time.Now().Add(20*time.Second)
	for len(c.claims) > 0 && time.Now().Before(deadline) {
		for _, name := range slices.Sorted(maps.Keys(c.claims)) {
			in, ok := c.mgr.LaunchedNamed(name)
			switch {
			case !ok && time.Now().After(giveUp):
				delete(c.claims, name)
			case ok && c.mgr.Terminate(ctx, in.ProviderID) == nil:
				delete(c.claims, name)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// provisionTime is the campaigns' --max-node-provision-time.
const provisionTime = 150 * time.Millisecond

// reload puts a new configuration in force as the runtime does while
// leading: the old core stops, the new one inherits what it knew and
// starts, on the same backend. It raises a group's maxSize by one, or
// puts it back when its target allows; one reload in three also changes
// how the group's instances are made (a label on and off), which
// replaces its standby pool's instances.
func (c *campaign) reload() {
	c.t.Helper()
	next := *c.cfg
	next.NodeGroups = slices.Clone(c.cfg.NodeGroups)
	i := c.rng.IntN(len(next.NodeGroups))
	g := &next.NodeGroups[i]
	switch base := c.maxSizes[g.Name]; {
	case g.MaxSize == base:
		g.MaxSize++
	default:
		if target, _ := c.mgr.TargetSize(g.Name); target <= base {
			g.MaxSize = base
		}
	}
	if c.rng.IntN(3) == 0 {
		const generation = "chaos.gpuscaler.dev/generation"
		g.Labels = maps.Clone(g.Labels)
		if _, on := g.Labels[generation]; on {
			delete(g.Labels, generation)
		} else {
			if g.Labels == nil {
				g.Labels = map[string]string{}
			}
			g.Labels[generation] = "2"
		}
		c.remade++
	}
	c.log.Info("chaos: a config reload", "group", g.Name, "maxSize", g.MaxSize, "labels", g.Labels)
	c.checkReported()
	prev := c.mgr
	// As the runtime does: the new core reads the cloud ahead while the
	// old one serves (a failed read ahead is read again at Start).
	cur := c.cfg
	c.cfg = &next
	warmed, warmedReg := c.newCore()
	c.cfg = cur
	if c.b.latency != nil && c.rng.IntN(2) == 0 {
		// A slow cloud: the read ahead takes several syncs of the old
		// core, whose deletes and vanished instances it must not undo.
		c.b.latency(time.Duration(50+c.rng.IntN(250)) * time.Millisecond)
		defer c.b.latency(c.baseLatency())
	}
	_ = warmed.Warm(context.Background(), nil)
	c.stop()
	// The old core's counters once it has stopped: an order that fails
	// while it stops is counted there, and handed over failed.
	c.stockoutsMet += counter(c.t, c.reg, "gpuscaler_stockouts_total", "")
	for _, g := range c.cfg.NodeGroups {
		c.carried[g.Name] += counter(c.t, c.reg, "gpuscaler_scale_up_failures_total", g.Name)
	}
	before := map[string]int{}
	for _, g := range c.cfg.NodeGroups {
		before[g.Name], _ = prev.TargetSize(g.Name)
	}
	c.cfg = &next
	logged := len(c.logs.String())
	c.startCore(prev, warmed, warmedReg)
	c.reloads++
	// Every write the old core acknowledged survives the handover: a
	// target set by a front end is not lowered by a reload, but for a
	// node a front end was deleting whose instance the new core's first
	// list shows gone (the front end meant the target to drop with it),
	// and for an instance a restart adopted, which no write asked for,
	// found gone (a slow cloud's read ahead leaves the old core time to
	// adopt one that a lost delete of the process before had removed).
	since := c.logs.String()[logged:]
	for _, g := range c.cfg.NodeGroups {
		meant := strings.Count(since, `msg="an instance marked for deletion is gone; it is not replaced" group=`+g.Name+" ") +
			strings.Count(since, `msg="an instance adopted at start is gone; deleted before the restart, it is not replaced" group=`+g.Name+" ")
		if after, _ := c.mgr.TargetSize(g.Name); after+meant < min(before[g.Name], g.MaxSize) {
			c.t.Errorf("group %s: a reload took the target from %d to %d: acknowledged writes dropped", g.Name, before[g.Name], after)
		}
	}
}

// baseLatency is what the backend's API calls take outside slow reloads.
func (c *campaign) baseLatency() time.Duration {
	if c.b.name == sim.Name {
		return 0 // the simulated cloud answers in process
	}
	return fakeLatency
}

// readLoop reads every group's target and instances, as
// cluster-autoscaler does each loop, until ctx ends, timing each read.
func (c *campaign) readLoop(ctx context.Context) {
	for ctx.Err() == nil {
		c.readsMu.Lock()
		mgr := c.mgr
		c.readsMu.Unlock()
		for _, g := range c.b.cfg.NodeGroups {
			start := time.Now()
			_, _ = mgr.TargetSize(g.Name)
			_, _ = mgr.Instances(g.Name)
			c.readsMu.Lock()
			c.readTimes = append(c.readTimes, time.Since(start))
			c.readsMu.Unlock()
		}
		time.Sleep(time.Millisecond)
	}
}

// checkReads: the reads' p99 is under 100 ms (cluster-autoscaler's gRPC
// calls time out after 5 s, and it makes a few hundred a loop).
func (c *campaign) checkReads() {
	c.t.Helper()
	c.readsMu.Lock()
	defer c.readsMu.Unlock()
	if len(c.readTimes) == 0 {
		return
	}
	slices.Sort(c.readTimes)
	if p99 := c.readTimes[len(c.readTimes)*99/100]; p99 > 100*time.Millisecond {
		c.t.Errorf("reads' p99 %s over %d reads, want under 100ms", p99, len(c.readTimes))
	}
}

// stockOut sells out one of a group's offerings at the cloud, or brings
// it back if the campaign sold it out before: its orders meet the cloud's
// own stock-out answer (Verda's 503, Scaleway's out_of_stock, a Kamatera
// command's failure, a MIG member's ZONE_RESOURCE_POOL_EXHAUSTED).
func (c *campaign) stockOut(g config.NodeGroup) {
	k := cloud.OfferingKey{InstanceType: g.InstanceType, Location: g.Locations[c.rng.IntN(len(g.Locations))], CapacityType: cloud.OnDemand}
	if g.CapacityPolicy != config.PolicyOnDemandOnly && c.rng.IntN(2) == 0 {
		k.CapacityType = cloud.Spot
	}
	if c.soldOut[k] {
		c.b.engine.SetCapacity(k, offeringCapacity)
		delete(c.soldOut, k)
		return
	}
	c.log.Info("chaos: an offering sells out", "offering", k)
	c.b.engine.SetCapacity(k, 0)
	c.soldOut[k] = true
	c.stockouts++
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
		// The target never drops below the live members that count
		// toward it (cluster-autoscaler never raises a target that is
		// too low): but for those past maxSize, which a restart leaves
		// to scale-down.
		live := 0
		for _, in := range c.members(g.Name) {
			if in.State != nodegroup.StateDeleting && !in.Failed() {
				live++
			}
		}
		if again, _ := c.mgr.TargetSize(g.Name); again == n && live > n && n < g.MaxSize {
			c.t.Errorf("group %s: target %d below its %d live members", g.Name, n, live)
		}
	}
}

// checkSpend: what the cloud's instances cost per hour never exceeds the
// cluster's maxHourlyCost, nor a group's its own.
func (c *campaign) checkSpend() {
	c.t.Helper()
	total, byGroup := c.b.spend()
	if limit := c.cfg.MaxHourlyCost; limit > 0 && total > limit+1e-9 {
		c.t.Errorf("at %s the cloud's instances cost %.2f/h, over the cluster's maxHourlyCost %.2f: %s",
			time.Now().Format(time.TimeOnly+".000"), total, limit, c.b.priced(""))
	}
	for _, g := range c.cfg.NodeGroups {
		if limit := g.MaxHourlyCost; limit > 0 && byGroup[g.Name] > limit+1e-9 {
			c.t.Errorf("at %s group %s's instances cost %.2f/h, over its maxHourlyCost %.2f: %s",
				time.Now().Format(time.TimeOnly+".000"), g.Name, byGroup[g.Name], limit, c.b.priced(g.Name))
		}
	}
}

// checkReported: every failed order the running core shows was reported,
// by a Warning Event naming it and in gpuscaler_scale_up_failures_total
// for its group.
func (c *campaign) checkReported() {
	c.t.Helper()
	for _, g := range c.cfg.NodeGroups {
		insts, err := c.mgr.Instances(g.Name)
		if err != nil {
			c.t.Fatal(err)
		}
		failed := 0
		for _, in := range insts {
			if !in.Failed() {
				continue // not an order (a delete's error is not a failed create)
			}
			failed++
			if !c.events.warned(in.Name) {
				c.t.Errorf("group %s: failed order %s (%s) has no Warning Event", g.Name, in.Name, in.ErrorCode)
			}
		}
		if counted := counter(c.t, c.reg, "gpuscaler_scale_up_failures_total", g.Name) + c.carried[g.Name]; counted < float64(failed) {
			c.t.Errorf("group %s: %d failed orders, %v counted in gpuscaler_scale_up_failures_total", g.Name, failed, counted)
		}
		c.failedCreates += failed
	}
}

// counter sums a counter's series for a group ("": every series).
// okLists is how many lists a core's registry counts as answered.
func okLists(reg *prometheus.Registry) int {
	if reg == nil {
		return 0
	}
	families, _ := reg.Gather()
	n := 0.0
	for _, f := range families {
		if f.GetName() != "gpuscaler_cloud_api_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			op, result := "", ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "operation":
					op = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			if op == "list" && result == "ok" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int(n)
}

func counter(t *testing.T, reg *prometheus.Registry, name, group string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if group == "" {
				sum += m.GetCounter().GetValue()
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" && l.GetValue() == group {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// settle stops the faults, waits past the leak collector's grace period
// until the core and the cloud agree, and checks the invariants.
func (c *campaign) settle() {
	c.t.Helper()
	c.checkReported()
	c.releaseClaims()
	c.b.faults(false)
	for k := range c.soldOut {
		c.b.engine.SetCapacity(k, offeringCapacity)
	}
	grace := c.cfg.LeakedInstances.GracePeriod.Duration
	settledAfter := time.Now().Add(grace + time.Second + c.b.settleAfter)
	deadline := time.Now().Add(30 * time.Second)
	var why string
	for i := 0; ; i++ {
		if i%25 == 0 {
			c.collectGarbage()
			c.scaleDownPastMax()
		}
		why = c.disagreement()
		if why == "" {
			why = c.b.leftovers()
		}
		if why == "" && time.Now().After(settledAfter) {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the core and the cloud never agreed after %d actions, %d restarts, %d reclaims: %s",
				c.actions, c.restarts, c.reclaims, why)
		}
		c.checkSpend()
		c.sample()
		time.Sleep(20 * time.Millisecond)
	}
	c.checkBounds(true)
	c.checkSpend()
	c.checkNodes()
	c.checkVanished()
	c.checkDecreases()
	c.checkLifecycle()
	c.checkScaleDown()
	c.stockoutsMet += counter(c.t, c.reg, "gpuscaler_stockouts_total", "")
	logs := c.logs.String()
	c.t.Logf("%s: %d actions, %d restarts, %d reloads (%d changed a machine), %d NodeClaims launched (%d from standby), %d reclaims, %d offerings sold out (%v stock-outs met), %d failed orders reported; standby: %d stopped, %d started, %d starts failed, %d replaced after a machine change, %d scaled-down nodes returned; faults: %s; %d instances at the end",
		c.b.describe(), c.actions, c.restarts, c.reloads, c.remade, c.launched, c.fromPool, c.reclaims, c.stockouts, c.stockoutsMet, c.failedCreates,
		strings.Count(logs, `msg="standby instance warmed and stopped"`), strings.Count(logs, `msg="standby instance started"`),
		strings.Count(logs, `msg="standby instance would not start`), strings.Count(logs, `msg="replacing a standby instance made under`),
		strings.Count(logs, `msg="a deleted node goes back to the standby pool instead"`), c.b.injected(), len(c.b.instances()))
}

// scaleDownPastMax deletes the running members of a group past its
// maxSize, as cluster-autoscaler's scale-down deletes the nodes it does not
// need (every node of a settling campaign is empty). A restart rebuilds a
// group from the cloud with its target capped at maxSize and leaves the
// rest to scale-down: one way there is a delete the old process took and
// could not finish (its retry cut short), which cluster-autoscaler picks
// again once its deletion taint is older than five minutes
// (actuation.IsNodeBeingDeleted, MaxCloudProviderNodeDeletionTime).
func (c *campaign) scaleDownPastMax() {
	ctx := context.Background()
	for _, g := range c.cfg.NodeGroups {
		target, _ := c.mgr.TargetSize(g.Name)
		var running []string
		for _, in := range c.members(g.Name) {
			if in.State == nodegroup.StateRunning && in.ProviderID != "" {
				running = append(running, in.ProviderID)
			}
		}
		if target < g.MaxSize || len(running) <= target {
			continue
		}
		slices.Sort(running)
		c.deleteNodes(ctx, g.Name, running[target:])
	}
}

// decreasedRE finds the instances the core deleted for a target decrease.
var decreasedRE = regexp.MustCompile(`msg="deleting instance" cloud=\S+ instance=(\S+) .*reason="target decreased"`)

// checkDecreases: no target decrease deleted an instance the cloud had. A
// decrease withdraws orders not yet made; taking a booting GPU instance
// (cluster-autoscaler's fixNodeGroupSize decreases groups whose nodes are
// slow to register) buys it again at the next order, every cycle.
func (c *campaign) checkDecreases() {
	c.t.Helper()
	for _, m := range decreasedRE.FindAllStringSubmatch(c.logs.String(), -1) {
		c.t.Errorf("a target decrease deleted instance %s, which the cloud had: it will be bought again", m[1])
	}
}

// lifecycleRE finds what the cores' own checks of a member's lifecycle
// and of the target against the members reported.
var lifecycleRE = regexp.MustCompile(`level=ERROR msg="(member phase change refused|target and members disagree)[^"]*"[^\n]*`)

// checkLifecycle: no core refused a phase change or found its target and
// members apart, in any process of the campaign.
func (c *campaign) checkLifecycle() {
	c.t.Helper()
	for _, m := range lifecycleRE.FindAllString(c.logs.String(), -1) {
		c.t.Errorf("the core found its own state inconsistent: %s", m)
	}
}

// vanishedRE finds the instances the core took for vanished in its log.
var vanishedRE = regexp.MustCompile(`msg="instance vanished[^"]*" group=\S+ instance=(\S+)`)

// sample records the instances at the cloud now, and plays their
// kubelets.
func (c *campaign) sample() {
	insts := c.b.instances()
	for _, in := range insts {
		// Seen running (or stopped, billing its disk): an order the
		// cloud failed and took back (a MIG member that stocked out)
		// never ran, and its replacement pays nothing twice.
		if in.State == cloud.StateRunning || in.State == cloud.StateStopped {
			c.existed[in.Name] = true
		}
	}
	c.nodes.kubelets(insts, time.Now())
}

// checkNodes: once settled, no NotReady Node of a stopped instance
// outlives two syncs (cluster-autoscaler counts each against the
// cluster's health, and stops scaling past 3 and 45 %), and no node
// started from a standby pool for demand carries a deletion mark a front
// end put on its Node before (it would bill in full and take no pod). A
// node marked since, or marked by a process that crashed before it
// deleted it, is a front end's to delete again.
func (c *campaign) checkNodes() {
	c.t.Helper()
	// The gate, over the whole campaign: a Node whose first delete is
	// lost goes at the next sync's retry, so two syncs of a running core
	// (a crash or a slow cloud stretch a sync), once the cloud lists a
	// lost instance stopped.
	if closed := c.nodes.unhealthy(2); closed != "" {
		c.t.Errorf("the stopped instances' Nodes froze cluster-autoscaler: %s", closed)
	}
	if o := c.nodes.orphaned(); o != "" {
		c.t.Errorf("a NotReady Node outlived its instance past twice the list lag and six syncs: %s", o)
	}
	if stale := c.nodes.stale(c.b.instances(), time.Now(), 2*c.cfg.Sync.Period.Duration+100*time.Millisecond); stale != "" {
		c.t.Errorf("stopped instances keep their NotReady Nodes past two syncs: %s", stale)
	}
	for _, g := range c.cfg.NodeGroups {
		for _, in := range c.members(g.Name) {
			if !in.StartedAt.IsZero() && in.State != nodegroup.StateDeleting && c.nodes.markedBefore(in.ProviderID, in.StartedAt) {
				c.t.Errorf("group %s's node %s was started for demand with the deletion mark of its old Node", g.Name, in.Name)
			}
		}
	}
}

// checkVanished: every instance the core took for vanished that was seen
// at the cloud was taken away by the campaign, or deleted by a process
// that crashed before the cloud showed the delete. Any other ran on while
// its Node would have been deleted and a replacement ordered (paid
// twice). (An order that never made an instance, its answer lost, may be
// taken for vanished: nothing ran, nothing is paid twice.)
//
// The crashed delete is no fault of the core's: the next process lists
// the instance as running, and only its Node tells it apart from a
// reclaim: a front end's deletion taint (syncer.leaving), or no Node at
// all for an instance adopted at start (syncer.nodeless); either drops it
// from the target unreplaced. The campaigns run the core without Nodes.
func (c *campaign) checkVanished() {
	c.t.Helper()
	asked, cutShort := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(c.logs.String(), "\n") {
		switch {
		case strings.Contains(line, `msg="chaos: the process crashes and restarts"`):
			maps.Copy(cutShort, asked)
		case deletingRE.MatchString(line):
			asked[deletingRE.FindStringSubmatch(line)[1]] = true
		}
		m := vanishedRE.FindStringSubmatch(line)
		if m == nil || c.existed != nil && !c.existed[m[1]] || c.reclaimed[m[1]] || cutShort[m[1]] {
			continue
		}
		c.t.Errorf("instance %s was taken for vanished while it ran: its Node would have been deleted and a replacement ordered", m[1])
	}
}

// deletingRE finds the instance of a core's delete.
var deletingRE = regexp.MustCompile(`msg="deleting instance" cloud=\S+ instance=(\S+)`)

// disagreement describes how the core and the cloud differ, "" when they
// agree: each name at most once at the cloud (no order paid twice); every
// instance at the cloud a running member of its group (none unowned,
// none still booting or being deleted); every member of a group running
// at the cloud, or a failed order the core reports; no more members than
// the target.
func (c *campaign) disagreement() string {
	byGroup := map[string][]string{}
	standby := map[string]int{}
	seen := map[string]bool{}
	for _, in := range c.b.instances() {
		if seen[in.Name] {
			return "two instances named " + in.Name
		}
		seen[in.Name] = true
		if in.State == cloud.StateStopped && in.Standby {
			standby[in.Group]++ // a standby pool's: no member
			continue
		}
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
		if standby[g.Name] > g.StandbySize() {
			// Fewer may be kept, where maxSize or a cost cap leaves no room.
			return fmt.Sprintf("group %s: %d stopped standby instances for a pool of %d", g.Name, standby[g.Name], g.StandbySize())
		}
	}
	return ""
}
