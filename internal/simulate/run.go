package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
	"github.com/gpuscaler/gpuscaler/internal/forecast/standby"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// Cluster-autoscaler's defaults the baseline follows
// (../docs/simulate.md cites them).
const (
	caGPUBatchWait  = 30 * time.Second
	caUnneededTime  = 10 * time.Minute
	caDelayAfterAdd = 10 * time.Minute
	defaultLoop     = 10 * time.Second
	// defaultTrainFor is how long the forecast learns before it orders.
	defaultTrainFor = 24 * time.Hour
	// drainFor bounds how long after the trace's last arrival a run goes
	// on, for the pods still running or waiting.
	drainFor = 12 * time.Hour
	// idleWait bounds how long (real time) the core may take to settle
	// what it was asked before a run gives up.
	idleWait = time.Minute
)

// epoch is the virtual clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Options are one run's settings.
type Options struct {
	// Config is gpuscaler's configuration; its groups on the simulated
	// cloud form the pool.
	Config *config.Config
	// Provisioner is the NodeProvisioner spec (NodeProvisioner policy);
	// its nodeGroups default to every group on the simulated cloud.
	Provisioner v1alpha1.NodeProvisionerSpec
	Policy      Policy
	// Seed drives the simulated cloud (stock-outs, reclaims) and instance
	// names; the same seed gives the same numbers. 0 takes clouds.sim.seed.
	Seed uint64
	// Loop is the autoscaler's loop period (cluster-autoscaler's
	// --scan-interval, the NodeProvisioner controller's requeue); default
	// 10 s. The core lists the cloud every sync.period of the Config.
	Loop time.Duration
	// GPUStartup is the time from an instance running to its GPUs being
	// allocatable (drivers, device plugin); default FactGPUStartup.
	GPUStartup time.Duration
	// Sample is how often the timeline is sampled; default 5 min.
	Sample time.Duration
	// Standby, when above 0, gives every group of the pool without a
	// standby section a standby pool of this size (within its maxSize):
	// what the pool would do with one (docs/standby.md).
	Standby int
	// StandbyRefillAfter is the refillAfter of the pools Standby gives
	// (config.Standby.RefillAfter); 0: they refill at once.
	StandbyRefillAfter time.Duration
	// StandbyScaleDownAfter is the scaleDownAfter of the pools Standby
	// gives (config.Standby.ScaleDownAfter); 0: none.
	StandbyScaleDownAfter time.Duration
	// StandbyGPUStartup is the time from a standby instance running again
	// to its GPUs allocatable; default FactStandbyGPUStartup.
	StandbyGPUStartup time.Duration
	// GPUStartupByGPUs sets GPUStartup and StandbyGPUStartup for the
	// nodes of a GPU count (8: eight-GPU nodes, whose fabric manager
	// starts too); counts it leaves out take GPUStartup and
	// StandbyGPUStartup. No source publishes a start-up by count.
	GPUStartupByGPUs map[int]time.Duration
	// PrePull gives every group of the pool without prePullImages the
	// trace's images: its nodes pull them as they join, while their GPUs
	// start (config.NodeGroup.PrePullImages).
	PrePull bool
	// PullRate is how fast a node pulls the trace's images, in MB/s;
	// default FactPullRate. The pools Standby gives pull every image of
	// the trace while they warm (standby.prePullImages).
	PullRate float64
	// Forecast has the NodeProvisioner policy also order ahead of demand:
	// a forecast profile (internal/forecast) learns the pool's demand,
	// GPUs asked for by running and pending pods, and once it has learned
	// for TrainFor (default a day), each loop plans for the most it
	// expects within one start-up time as if that many one-GPU pods were
	// pending. The Provisioner spec's forecast.maxExtraHourlyCost, when
	// set, caps what is ordered ahead as it does in a cluster.
	Forecast bool
	TrainFor time.Duration
	// MeasureFrom leaves out of the results what happens before it: the
	// waits of pods that arrive earlier, and the GPU-hours and cost until
	// then (a forecast's training days, for every policy alike).
	MeasureFrom time.Duration
	// Progress, when set, is called about every simulated hour with the
	// run's column name (Result.Name) and how far it is.
	Progress func(name string, done, total time.Duration)
	// Logger receives the core's logs; default none.
	Logger *slog.Logger
}

// Run plays a trace through the real core and the policy on a virtual
// clock and returns what it measured.
func Run(ctx context.Context, trace Trace, opts Options) (*Result, error) {
	r, err := newRun(ctx, trace, opts)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	if err := r.play(ctx); err != nil {
		return nil, err
	}
	return r.result(), nil
}

// run is one run's state.
type run struct {
	opts   Options
	trace  Trace
	clock  *clocktesting.FakeClock
	engine *sim.Engine
	core   *nodegroup.Manager
	reg    *prometheus.Registry
	stop   func()
	groups []string
	// gpuBatchWait is how old the baseline's oldest pending GPU pod must
	// be before it scales up: caGPUBatchWait, or none with a standby pool.
	gpuBatchWait time.Duration
	// bootDelay is the simulated cloud's median boot, which the forecast
	// looks ahead by; bootLead its 95th percentile, which the oracle looks
	// ahead by, so that it is seldom late.
	bootDelay, bootLead time.Duration
	// startDelay and startLead are the same of a standby instance's start:
	// the forecast and the oracle serve pods expected within a start's
	// lead time from the standby pools (provisioner.OrdersAhead).
	startDelay, startLead time.Duration
	// standbyJoins counts the nodes started from standby that joined.
	standbyJoins int
	// gpusOf is each group's instance type's GPU count.
	gpusOf map[string]int
	// prePull are the images each group's standby pool pulls while an
	// instance warms (standby.prePullImages, and the group's), on its
	// nodes once started; joinPull those its nodes pull as they join
	// (prePullImages), of sizes imageGB.
	prePull, joinPull map[string][]string
	imageGB           map[string]float64
	// start is when the run begins: 0, the trace's start, or for the
	// oracle one start-up time before its first arrival.
	start time.Duration
	// demand learns the pool's demand for the forecast (Options.Forecast).
	demand *forecast.Demand
	// exemplar is the last pod seen waiting of each shape: the pods the
	// forecast expects are made in its likeness (tolerations, priority),
	// as the controller makes them.
	exemplar map[forecast.Shape]Pod
	// aheadBefore is how many pods the last loop planned ahead for;
	// lastAhead how many of them the last plan took.
	aheadBefore, lastAhead int
	// standby sizes the standby pools of groups with standby.forecast.
	standby *standby.Sizer

	cl   *cluster
	pods []*pod
	// next is the first pod of pods that has not arrived.
	next int
	// running are the pods placed, by the time they finish.
	running []*pod
	// failed are, per group, the orders that failed; instances all the
	// core's instances (observe).
	failed    map[string][]string
	instances map[string][]nodegroup.Instance
	// nextSync is when the core lists the cloud next.
	nextSync time.Duration
	// dirty: the cluster or the core changed since the last plan, which
	// last is.
	dirty bool
	last  *plan.Plan
	// observed: observe has read the core since it last changed.
	observed bool
	now      time.Duration
	// lastAdd is when the policy last scaled up.
	lastAdd time.Duration
	res     *Result
	// paid integrates GPUs held and spend between events.
	heldGPUs float64
	spend    float64
}

func newRun(ctx context.Context, trace Trace, opts Options) (*run, error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	cfg := runConfig(opts, trace)
	if err := standbyAllowed(&cfg); err != nil {
		return nil, err
	}
	simCfg := daemon.SimConfig(*cfg.Clouds.Sim)
	if opts.Seed == 0 {
		opts.Seed = max(uint64(simCfg.Seed), sim.DefaultSeed)
	}
	simCfg.Seed = int64(opts.Seed)
	// Faults and API latency would make the core's creates wait on the
	// clock from its own goroutines, and the outcome depend on their
	// timing: a run leaves them out.
	simCfg.FaultRate, simCfg.APILatency = 0, nil
	// The oracle knows the first arrivals too: it may order for
	// them one start-up time before the trace begins, as it does for every
	// later one. Reactive policies have nothing to act on before then.
	var start time.Duration
	boot := sim.DefaultBootDelay
	if simCfg.BootDelay != nil {
		boot = *simCfg.BootDelay
	}
	if simCfg.BootDelayP95 != nil {
		boot = max(boot, *simCfg.BootDelayP95)
	}
	if opts.Policy == Oracle && len(trace.Pods) > 0 {
		start = min(0, trace.Pods[0].At-(boot+opts.longestGPUStartup()+opts.Loop))
	}
	// A standby pool stands ready before any pod asks for it, as in a
	// cluster that has kept one: the run begins early enough for the pools
	// to be ordered, boot, warm up and stop before the first arrival, their
	// cost counted as the oracle's early orders are. A trace that
	// opens with a burst would otherwise measure the pool's first warm-up.
	if lead := standbyLead(&cfg, boot, opts); lead > 0 && len(trace.Pods) > 0 {
		start = min(start, trace.Pods[0].At-lead)
	}
	types, err := daemon.SimCatalog(*cfg.Clouds.Sim)
	if err != nil {
		return nil, fmt.Errorf("clouds.sim: %w", err)
	}
	clk := clocktesting.NewFakeClock(epoch.Add(start))
	engine, err := sim.NewEngine(simCfg, sim.Options{Clock: clk, Catalog: types})
	if err != nil {
		return nil, fmt.Errorf("clouds.sim: %w", err)
	}
	r := &run{opts: opts, trace: trace, clock: clk, engine: engine, now: start, start: start, nextSync: start, reg: prometheus.NewRegistry(), cl: newCluster(opts.PullRate),
		bootDelay: sim.DefaultBootDelay, res: &Result{Policy: opts.Policy, Trace: trace.Name, Standby: opts.Standby},
		failed: map[string][]string{}, instances: map[string][]nodegroup.Instance{}}
	if simCfg.BootDelay != nil {
		r.bootDelay = *simCfg.BootDelay
	}
	r.bootLead = r.bootDelay
	if simCfg.BootDelayP95 != nil {
		r.bootLead = max(r.bootLead, *simCfg.BootDelayP95)
	}
	r.startDelay = sim.DefaultStartDelay
	if simCfg.StartDelay != nil {
		r.startDelay = *simCfg.StartDelay
	}
	r.startLead = r.startDelay
	if simCfg.StartDelayP95 != nil {
		r.startLead = max(r.startLead, *simCfg.StartDelayP95)
	}
	// The chart runs cluster-autoscaler without its wait for more GPU pods
	// when a group keeps a standby pool (--bypassed-scheduler-names): the
	// baseline does too.
	r.gpuBatchWait = caGPUBatchWait
	for i := range cfg.NodeGroups {
		if g := &cfg.NodeGroups[i]; g.Cloud == sim.Name && g.StandbyMaxSize() > 0 {
			r.gpuBatchWait = 0
		}
	}
	if opts.Forecast {
		r.demand, r.exemplar = forecast.NewDemand(), map[forecast.Shape]Pod{}
		r.res.Forecast = true
	}
	r.readGroups(&cfg, types)
	if len(opts.Provisioner.NodeGroups) > 0 {
		r.groups = opts.Provisioner.NodeGroups
	}
	if len(r.groups) == 0 {
		return nil, errors.New("simulate needs node groups on the simulated cloud (cloud: sim)")
	}
	if err := r.startCore(ctx, &cfg); err != nil {
		return nil, err
	}
	core := r.core
	for _, name := range r.groups {
		if _, ok := core.Group(name); !ok {
			r.stop()
			return nil, fmt.Errorf("node group %q: not in the config", name)
		}
	}
	for _, p := range trace.Pods {
		obj := podObject(p)
		req := plan.Requests(obj)
		r.pods = append(r.pods, &pod{Pod: p, obj: obj, req: req, gpu: plan.GPUEquivalents(req)})
	}
	r.res.Floor, r.res.FloorGPUHours, r.res.Unfit = r.floor()
	return r, nil
}

// standbyAllowed refuses a standby pool on a group whose cloud cannot
// hold one, as validate does: --standby gives every group a pool.
func standbyAllowed(cfg *config.Config) error {
	for i := range cfg.NodeGroups {
		if g := &cfg.NodeGroups[i]; g.Standby != nil {
			if why := config.StandbyRefused(g, cfg.Clouds); why != "" {
				return fmt.Errorf("node group %s: no standby pool: %s", g.Name, why)
			}
		}
	}
	return nil
}

// readGroups notes the pool's groups on the simulated cloud: their names,
// GPU counts, and the images their nodes pull (as they warm for a standby
// pool, as they join); and the currency the pool's prices are in, the
// first group's (one cloud's catalog prices all in one).
func (r *run) readGroups(cfg *config.Config, types []cloud.InstanceType) {
	r.prePull, r.joinPull, r.gpusOf, r.imageGB = map[string][]string{}, map[string][]string{}, map[string]int{}, r.trace.images()
	for _, g := range cfg.NodeGroups {
		if g.Cloud != sim.Name {
			continue
		}
		r.groups = append(r.groups, g.Name)
		for _, t := range types {
			if t.Name == g.InstanceType {
				r.gpusOf[g.Name] = t.GPUCount
				if r.res.Currency == "" {
					r.res.Currency = t.PriceCurrency()
				}
			}
		}
		if g.Standby != nil {
			r.prePull[g.Name] = g.StandbyImages()
		}
		r.joinPull[g.Name] = g.PrePullImages
	}
	if r.res.Currency == "" {
		r.res.Currency = cloud.InstanceType{}.PriceCurrency()
	}
}

// complete checks a run's options and fills in their defaults.
func (opts Options) complete() (Options, error) {
	if opts.Config == nil || opts.Config.Clouds.Sim == nil {
		return opts, errors.New("simulate needs a config with clouds.sim and node groups on it")
	}
	if opts.Policy == "" {
		opts.Policy = NodeProvisioner
	}
	if _, ok := opts.Policy.step(); !ok {
		return opts, fmt.Errorf("policy %q: want one of %v", opts.Policy, Policies())
	}
	if opts.Loop <= 0 {
		opts.Loop = defaultLoop
	}
	if opts.GPUStartup < 0 {
		return opts, fmt.Errorf("GPU start-up %s: negative", opts.GPUStartup)
	}
	if opts.GPUStartup == 0 {
		opts.GPUStartup = FactGPUStartup
	}
	if opts.Sample <= 0 {
		opts.Sample = 5 * time.Minute
	}
	if opts.Standby < 0 || opts.StandbyGPUStartup < 0 || opts.StandbyRefillAfter < 0 || opts.StandbyScaleDownAfter < 0 {
		return opts, fmt.Errorf("standby %d, standby GPU start-up %s, refill after %s, scale down after %s: negative",
			opts.Standby, opts.StandbyGPUStartup, opts.StandbyRefillAfter, opts.StandbyScaleDownAfter)
	}
	if opts.StandbyGPUStartup == 0 {
		opts.StandbyGPUStartup = FactStandbyGPUStartup
	}
	for n, d := range opts.GPUStartupByGPUs {
		if n < 1 || d < 0 {
			return opts, fmt.Errorf("GPU start-up of %d-GPU nodes %s: want a count of 1 or more and a duration of 0 or more", n, d)
		}
	}
	if opts.PullRate < 0 || math.IsNaN(opts.PullRate) {
		return opts, fmt.Errorf("pull rate %v MB/s: want more than 0", opts.PullRate)
	}
	if opts.PullRate == 0 {
		opts.PullRate = FactPullRate
	}
	if _, err := provisioner.MaxExtraHourlyCost(opts.Provisioner.Forecast); err != nil {
		return opts, err
	}
	if fc := opts.Provisioner.Forecast; fc != nil && fc.CoveragePercent != nil && (*fc.CoveragePercent < 50 || *fc.CoveragePercent > 99) {
		return opts, fmt.Errorf("forecast.coveragePercent %d: want 50 to 99, as the NodeProvisioner CRD does", *fc.CoveragePercent)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Forecast && opts.TrainFor == 0 {
		opts.TrainFor = defaultTrainFor
	}
	if opts.Forecast && opts.Policy != NodeProvisioner {
		return opts, fmt.Errorf("forecast: only the %s policy orders ahead of a forecast", NodeProvisioner)
	}
	return opts, nil
}

// longestGPUStartup is the longest GPU start-up of a cold node: what
// orders ahead and warm-ups allow for.
func (opts Options) longestGPUStartup() time.Duration {
	d := opts.GPUStartup
	for _, by := range opts.GPUStartupByGPUs {
		d = max(d, by)
	}
	return d
}

// joined is how long a cold node takes from its Node's registration to
// running a pod without a pull: its GPUs' start-up, or the pull of its
// group's prePullImages beside it when that is longer (the longest of the
// pool's groups).
func (r *run) joined() time.Duration {
	d := r.opts.longestGPUStartup()
	for _, images := range r.joinPull {
		var pull time.Duration
		for _, img := range images {
			pull += pullTime(r.imageGB[img], r.opts.PullRate)
		}
		d = max(d, pull)
	}
	return d
}

// runConfig is the configuration a run plays: opts.Config with standby
// pools of opts.Standby, and no client-side limits the simulated cloud
// does not need.
func runConfig(opts Options, trace Trace) config.Config {
	cfg := *opts.Config
	cfg.NodeGroups = slices.Clone(cfg.NodeGroups)
	images := trace.images()
	for i := range cfg.NodeGroups {
		g := &cfg.NodeGroups[i]
		if opts.Standby > 0 && g.Cloud == sim.Name && g.Standby == nil && g.ManagedBy != config.ManagedByKarpenter {
			g.Standby = &config.Standby{Size: min(opts.Standby, g.MaxSize), PrePullImages: slices.Sorted(maps.Keys(images))}
			if opts.StandbyRefillAfter > 0 {
				g.Standby.RefillAfter = &metav1.Duration{Duration: opts.StandbyRefillAfter}
			}
			if opts.StandbyScaleDownAfter > 0 {
				g.Standby.ScaleDownAfter = &metav1.Duration{Duration: opts.StandbyScaleDownAfter}
			}
		}
		if opts.PrePull && g.Cloud == sim.Name && len(g.PrePullImages) == 0 {
			g.PrePullImages = slices.Sorted(maps.Keys(images))
		}
		if g.Cloud == sim.Name && g.Standby != nil {
			// gpuscaler stops a warming instance once its GPUs showed and
			// its prePullImages, pulled from its Node's registration on,
			// are on it (docs/standby.md), not before: the run has no
			// Nodes for the core to watch, so the warm-up is the longer of
			// the two, warmFor at least.
			s := *g.Standby
			var pull time.Duration
			for _, img := range g.StandbyImages() {
				pull += pullTime(images[img], opts.PullRate)
			}
			warm := max(opts.longestGPUStartup(), pull)
			if warm > s.StandbyWarmFor() {
				s.WarmFor = &metav1.Duration{Duration: warm}
			}
			g.Standby = &s
		}
	}
	// The client-side rate limit runs on real time and protects a real
	// cloud's API; the simulated one is in the process.
	cfg.Sync.RequestsPerSecond = 1e9
	// Creates take no virtual time here; one worker keeps their order,
	// and so which one meets a stock-out, the same from run to run.
	cfg.Sync.MaxConcurrentCreates = 1
	return cfg
}

// startCore starts the run's core on cfg, and the sizer of the standby
// pools a forecast sizes.
func (r *run) startCore(ctx context.Context, cfg *config.Config) error {
	clk, engine, opts := r.clock, r.engine, r.opts
	core, err := nodegroup.New(cfg, map[string]cloud.Provider{sim.Name: engine.Account(cfg.ClusterName)}, nodegroup.Options{
		Clock: clk, Logger: opts.Logger, Registerer: r.reg, Manual: true, Serial: true,
		Entropy: rand.NewChaCha8(seedBytes(opts.Seed)),
	})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	if err := core.Start(cctx); err != nil {
		cancel()
		return err
	}
	r.core = core
	r.stop = func() { cancel(); core.Wait() }
	// Standby pools a forecast sizes are sized as the process sizes
	// them, once a sync, on the run's clock.
	var forecasted []config.NodeGroup
	for _, g := range cfg.NodeGroups {
		if g.Cloud == sim.Name && g.Standby != nil && g.Standby.Forecast != nil {
			forecasted = append(forecasted, g)
		}
	}
	if len(forecasted) > 0 {
		if r.standby, err = standby.New(standby.Options{Core: func() standby.Core { return core }, Clock: clk,
			Groups: func() []config.NodeGroup { return forecasted }}); err != nil {
			r.stop()
			return err
		}
	}
	return nil
}

// standbyLead is how long before the first arrival the pools of cfg's
// groups with standby need to be ready: an order's boot, the GPUs'
// start-up, the longest warmFor, and a few of the core's syncs and the
// policy's loops for the orders and the stops; 0 without a pool.
func standbyLead(cfg *config.Config, boot time.Duration, opts Options) time.Duration {
	var warm time.Duration
	pools := false
	for i := range cfg.NodeGroups {
		if g := &cfg.NodeGroups[i]; g.Cloud == sim.Name && g.StandbyMaxSize() > 0 {
			pools = true
			warm = max(warm, g.Standby.StandbyWarmFor())
		}
	}
	if !pools {
		return 0
	}
	return boot + opts.longestGPUStartup() + warm + 3*max(cfg.Sync.Period.Duration, opts.Loop)
}

func seedBytes(seed uint64) [32]byte {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
	}
	b[31] = 0x5e
	return b
}

// settle waits until the core has done what it was asked (its creates and
// deletes have reached the simulated cloud).
func (r *run) settle() error {
	deadline := time.Now().Add(idleWait)
	for !r.core.Idle() {
		if time.Now().After(deadline) {
			return fmt.Errorf("at %s: the core did not settle within %s", r.now, idleWait)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// play runs the trace to its end and then until every pod has finished
// (or drainFor has passed).
func (r *run) play(ctx context.Context) error {
	end := r.trace.End()
	nextLoop, nextSample, nextProgress := r.start, time.Duration(0), time.Hour
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		t := r.nextEvent(min(nextLoop, nextSample))
		if r.next == len(r.pods) && len(r.running) == 0 && len(r.cl.pending) == 0 {
			break // every pod has run
		}
		if t > end+drainFor {
			r.account(end + drainFor)
			r.now = end + drainFor
			break
		}
		r.account(t)
		r.now = t
		r.clock.SetTime(epoch.Add(t))
		if r.opts.Progress != nil && t >= nextProgress {
			r.opts.Progress(r.res.Name(), t, end)
			nextProgress += time.Hour
		}
		r.arrive(t)
		r.finish(t)
		if r.cl.becomeReady(t) {
			r.dirty = true
		}
		if t == nextLoop {
			if err := r.loop(); err != nil {
				return err
			}
			nextLoop += r.opts.Loop
		}
		r.cl.schedule(t, func(p *pod) { r.started(p, t) })
		if t == nextSample {
			r.sample()
			nextSample += r.opts.Sample
		}
	}
	for _, p := range r.cl.pending {
		if p.requeued == 0 && p.At >= r.opts.MeasureFrom {
			r.res.Unplaced++
			r.res.waits = append(r.res.waits, r.now-p.At)
		}
	}
	r.res.Simulated = r.now
	return nil
}

// nextEvent is the time of the next thing that happens: a pod's arrival
// or end, a node ready, or by (the policy's next loop or sample).
func (r *run) nextEvent(by time.Duration) time.Duration {
	t := by
	if r.next < len(r.pods) {
		t = min(t, r.pods[r.next].At)
	}
	if len(r.running) > 0 {
		t = min(t, r.running[0].done)
	}
	if at, ok := r.cl.nextReady(); ok {
		t = min(t, max(at, r.now))
	}
	return t
}

// arrive makes the pods that arrive by t pending.
func (r *run) arrive(t time.Duration) {
	for r.next < len(r.pods) && r.pods[r.next].At <= t {
		p := r.pods[r.next]
		r.cl.arrive(p, t)
		if r.demand != nil {
			r.demand.Arrive(epoch.Add(t), forecast.Shape{GPUs: p.GPUs, MIG: p.MIG})
		}
		r.next++
		r.dirty = true
	}
}

// finish ends the pods whose work is done by t.
func (r *run) finish(t time.Duration) {
	for len(r.running) > 0 && r.running[0].done <= t {
		p := r.running[0]
		r.running = r.running[1:]
		if p.node != nil && p.started && p.done <= t {
			r.cl.finish(p, t)
			r.res.Finished++
			r.dirty = true
		}
	}
}

// started records a pod the scheduler placed at t: its wait, and its end
// among the running pods.
func (r *run) started(p *pod, t time.Duration) {
	r.dirty = true
	switch {
	case p.requeued == 0 && p.At >= r.opts.MeasureFrom:
		r.res.waits = append(r.res.waits, p.start-p.At)
		r.res.parts.add(p)
	case p.requeued > 0 && p.since >= r.opts.MeasureFrom:
		r.res.requeueWaits = append(r.res.requeueWaits, p.start-p.since)
	}
	i, _ := slices.BinarySearchFunc(r.running, p.done, func(q *pod, d time.Duration) int { return cmp.Compare(q.done, d) })
	r.running = slices.Insert(r.running, i, p)
}

// account adds the GPU-hours and spend from the last event until t.
func (r *run) account(t time.Duration) {
	from := r.now // the oracle's orders before the trace count
	if r.opts.MeasureFrom > 0 {
		from = max(r.now, r.opts.MeasureFrom)
	}
	if t <= from {
		return
	}
	h := (t - from).Hours()
	r.res.GPUHoursPaid += r.heldGPUs * h
	r.res.GPUHoursUsed += r.cl.used * h
	r.res.Cost += r.spend * h
}

// loop is one autoscaler loop: the core syncs (as its period says), the
// cluster learns of new and lost instances, and the policy decides; what
// the core was asked for is waited for and observed.
func (r *run) loop() error {
	ctx := context.Background()
	// The core lists the cloud once per sync period, as its loop does
	// (cluster-autoscaler's Refresh asks for no more).
	if r.now >= r.nextSync {
		if err := r.core.Sync(ctx); err != nil {
			return err
		}
		r.nextSync = r.now + r.opts.Config.Sync.Period.Duration
		if r.standby != nil {
			if err := r.standby.Step(ctx); err != nil {
				return err
			}
		}
		if err := r.settle(); err != nil {
			return err
		}
		r.observed = false
	}
	if !r.observed {
		r.observe()
	}
	step, _ := r.opts.Policy.step() // checked by complete
	acted, err := step(r, ctx)
	if err != nil {
		return err
	}
	// Orders that failed (every offering stocked out) are withdrawn, as
	// the controller does, so that a group's target holds live orders.
	for _, g := range r.groups {
		if pids := r.failed[g]; len(pids) > 0 {
			_ = r.core.DeleteNodes(ctx, g, pids)
			acted = true
		}
	}
	if !acted {
		return nil
	}
	r.dirty = true
	if err := r.settle(); err != nil {
		return err
	}
	r.observe()
	return nil
}
