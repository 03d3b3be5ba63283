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
	corev1 "k8s.io/api/core/v1"
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

// Policy is the autoscaler a run puts in front of the core.
type Policy string

// Policies.
const (
	// NodeProvisioner is gpuscaler's own controller: its planner
	// (utilization band, warm buffer, pending pods on capacity on the
	// way) every loop, and idle nodes beyond the buffer removed after the
	// spec's scaleDownDelay.
	NodeProvisioner Policy = "nodeprovisioner"
	// Baseline behaves as cluster-autoscaler does with its defaults: a
	// loop every 10 s that waits until the oldest pending GPU pod is 30 s
	// old (not with a standby pool: the chart then runs it with
	// --bypassed-scheduler-names, which skips the wait), bin-packs the
	// pending pods onto new nodes (no buffer, no utilization target), removes nodes empty for scaleDownUnneededTime
	// (10 min), and none within scaleDownDelayAfterAdd (10 min) of a
	// scale-up.
	Baseline Policy = "cluster-autoscaler"
	// Foresight knows each pod's arrival in advance: every loop it orders,
	// bin-packed as the baseline does (no buffer), the capacity that the
	// pods arriving within one start-up time (boot, GPU start-up and a
	// loop) will need, and it removes a node as soon as it is empty and no
	// pod arriving within that time needs it. No policy that reacts can do
	// better on the same cloud: its waits are the floor (what remains is
	// stock-outs and capacity the pool's maxSize denies), its GPU-hours
	// near it. The others are reported against it.
	Foresight Policy = "foresight"
)

// Cluster-autoscaler's defaults the baseline follows
// (../docs/simulate.md cites them).
const (
	caGPUBatchWait    = 30 * time.Second
	caUnneededTime    = 10 * time.Minute
	caDelayAfterAdd   = 10 * time.Minute
	defaultLoop       = 10 * time.Second
	defaultGPUStartup = time.Minute
	// defaultStandbyGPUStartup is a standby instance's GPU start-up once
	// started: the device plugin registering again.
	defaultStandbyGPUStartup = 15 * time.Second
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
	// allocatable (drivers, device plugin); default 1 min.
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
	// to its GPUs allocatable: drivers installed and images pulled at its
	// warm-up, only the device plugin registers again; default 15 s.
	StandbyGPUStartup time.Duration
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
	// Progress, when set, is called about every simulated hour.
	Progress func(done, total time.Duration)
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
	// bootDelay is the simulated cloud's, for Nodes' start-up; startDelay
	// its start of a stopped instance.
	bootDelay, startDelay time.Duration
	// start is when the run begins: 0, the trace's start, or for the
	// foresight policy one start-up time before its first arrival.
	start time.Duration
	// demand learns the pool's demand for the forecast (Options.Forecast).
	demand *forecast.Demand
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
	cfg := runConfig(opts)
	simCfg := daemon.SimConfig(*cfg.Clouds.Sim)
	if opts.Seed == 0 {
		opts.Seed = max(uint64(simCfg.Seed), sim.DefaultSeed)
	}
	simCfg.Seed = int64(opts.Seed)
	// Faults and API latency would make the core's creates wait on the
	// clock from its own goroutines, and the outcome depend on their
	// timing: a run leaves them out.
	simCfg.FaultRate, simCfg.APILatency = 0, nil
	// The foresight policy knows the first arrivals too: it may order for
	// them one start-up time before the trace begins, as it does for every
	// later one. Reactive policies have nothing to act on before then.
	var start time.Duration
	boot := sim.DefaultBootDelay
	if simCfg.BootDelay != nil {
		boot = *simCfg.BootDelay
	}
	if opts.Policy == Foresight && len(trace.Pods) > 0 {
		start = min(0, trace.Pods[0].At-(boot+opts.GPUStartup+opts.Loop))
	}
	// A standby pool stands ready before any pod asks for it, as in a
	// cluster that has kept one: the run begins early enough for the pools
	// to be ordered, boot, warm up and stop before the first arrival, their
	// cost counted as the foresight policy's early orders are. A trace that
	// opens with a burst would otherwise measure the pool's first warm-up.
	if lead := standbyLead(&cfg, boot, opts); lead > 0 && len(trace.Pods) > 0 {
		start = min(start, trace.Pods[0].At-lead)
	}
	clk := clocktesting.NewFakeClock(epoch.Add(start))
	engine, err := sim.NewEngine(simCfg, sim.Options{Clock: clk})
	if err != nil {
		return nil, fmt.Errorf("clouds.sim: %w", err)
	}
	r := &run{opts: opts, trace: trace, clock: clk, engine: engine, now: start, start: start, nextSync: start, reg: prometheus.NewRegistry(), cl: newCluster(),
		bootDelay: sim.DefaultBootDelay, startDelay: engine.StartDelay(), res: &Result{Policy: opts.Policy, Trace: trace.Name, Standby: opts.Standby},
		failed: map[string][]string{}, instances: map[string][]nodegroup.Instance{}}
	if simCfg.BootDelay != nil {
		r.bootDelay = *simCfg.BootDelay
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
		r.demand = forecast.NewDemand()
		r.res.Forecast = true
	}
	for _, g := range cfg.NodeGroups {
		if g.Cloud == sim.Name {
			r.groups = append(r.groups, g.Name)
		}
	}
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
	return r, nil
}

// complete checks a run's options and fills in their defaults.
func (opts Options) complete() (Options, error) {
	if opts.Config == nil || opts.Config.Clouds.Sim == nil {
		return opts, errors.New("simulate needs a config with clouds.sim and node groups on it")
	}
	if opts.Policy == "" {
		opts.Policy = NodeProvisioner
	}
	if opts.Policy != NodeProvisioner && opts.Policy != Baseline && opts.Policy != Foresight {
		return opts, fmt.Errorf("policy %q: want %s, %s or %s", opts.Policy, NodeProvisioner, Baseline, Foresight)
	}
	if opts.Loop <= 0 {
		opts.Loop = defaultLoop
	}
	if opts.GPUStartup < 0 {
		return opts, fmt.Errorf("GPU start-up %s: negative", opts.GPUStartup)
	}
	if opts.GPUStartup == 0 {
		opts.GPUStartup = defaultGPUStartup
	}
	if opts.Sample <= 0 {
		opts.Sample = 5 * time.Minute
	}
	if opts.Standby < 0 || opts.StandbyGPUStartup < 0 || opts.StandbyRefillAfter < 0 || opts.StandbyScaleDownAfter < 0 {
		return opts, fmt.Errorf("standby %d, standby GPU start-up %s, refill after %s, scale down after %s: negative",
			opts.Standby, opts.StandbyGPUStartup, opts.StandbyRefillAfter, opts.StandbyScaleDownAfter)
	}
	if opts.StandbyGPUStartup == 0 {
		opts.StandbyGPUStartup = defaultStandbyGPUStartup
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

// runConfig is the configuration a run plays: opts.Config with standby
// pools of opts.Standby, and no client-side limits the simulated cloud
// does not need.
func runConfig(opts Options) config.Config {
	cfg := *opts.Config
	cfg.NodeGroups = slices.Clone(cfg.NodeGroups)
	for i := range cfg.NodeGroups {
		if g := &cfg.NodeGroups[i]; opts.Standby > 0 && g.Cloud == sim.Name && g.Standby == nil && g.ManagedBy != config.ManagedByKarpenter {
			g.Standby = &config.Standby{Size: min(opts.Standby, g.MaxSize)}
			if opts.StandbyRefillAfter > 0 {
				g.Standby.RefillAfter = &metav1.Duration{Duration: opts.StandbyRefillAfter}
			}
			if opts.StandbyScaleDownAfter > 0 {
				g.Standby.ScaleDownAfter = &metav1.Duration{Duration: opts.StandbyScaleDownAfter}
			}
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
		Clock: clk, Logger: opts.Logger, Registerer: r.reg, Manual: true,
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
	return boot + opts.GPUStartup + warm + 3*max(cfg.Sync.Period.Duration, opts.Loop)
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
			r.opts.Progress(t, end)
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
		r.res.waits = append(r.res.waits, t-p.At)
	case p.requeued > 0 && p.since >= r.opts.MeasureFrom:
		r.res.requeueWaits = append(r.res.requeueWaits, t-p.since)
	}
	i, _ := slices.BinarySearchFunc(r.running, p.done, func(q *pod, d time.Duration) int { return cmp.Compare(q.done, d) })
	r.running = slices.Insert(r.running, i, p)
}

// account adds the GPU-hours and spend from the last event until t.
func (r *run) account(t time.Duration) {
	from := r.now // the foresight policy's orders before the trace count
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
	var acted bool
	var err error
	switch r.opts.Policy {
	case NodeProvisioner:
		acted, err = r.provision(ctx)
	case Baseline:
		acted, err = r.baseline(ctx)
	case Foresight:
		acted, err = r.foresight(ctx)
	}
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

// observe folds the core's instances into the cluster: a Node for each
// new one (Ready its boot and GPU start-up after its creation), a lost
// Node for each gone, and what the pool holds and costs now. The core
// changes only when it syncs or is asked for something, so a loop that
// did neither since the last observe skips it.
func (r *run) observe() {
	r.observed = true
	seen := map[string]bool{}
	r.heldGPUs, r.spend = 0, 0
	clear(r.failed)
	for _, g := range r.groups {
		tmpl, err := r.core.Template(g)
		if err != nil {
			continue
		}
		gpus := plan.GPUEquivalents(tmpl.Status.Allocatable)
		r.spend += r.core.GroupSpend(g)
		var fresh []nodegroup.Instance
		r.instances[g] = r.instances[g][:0]
		_ = r.core.EachInstance(g, func(in nodegroup.Instance) {
			if in.ErrorCode != "" && in.State != nodegroup.StateRunning {
				r.instances[g] = append(r.instances[g], in)
				if in.State != nodegroup.StateDeleting {
					r.failed[g] = append(r.failed[g], in.ProviderID)
				}
				return // a failed order: nothing is paid for
			}
			r.heldGPUs += gpus
			if in.State == nodegroup.StateDeleting {
				r.instances[g] = append(r.instances[g], in)
				return
			}
			seen[in.Name] = true
			if _, ok := r.cl.nodes[in.Name]; !ok {
				fresh = append(fresh, in)
			}
		})
		slices.Sort(r.failed[g])
		slices.SortFunc(r.instances[g], func(a, b nodegroup.Instance) int { return cmp.Compare(a.Name, b.Name) })
		for _, in := range fresh {
			r.dirty = true
			obj := tmpl.DeepCopy()
			obj.Name, obj.Spec.ProviderID = in.Name, in.ProviderID
			readyAt := in.CreatedAt.Sub(epoch) + r.bootDelay + r.opts.GPUStartup
			if !in.StartedAt.IsZero() {
				// Started from standby: warmed up once already.
				readyAt = in.StartedAt.Sub(epoch) + r.startDelay + r.opts.StandbyGPUStartup
			}
			r.cl.join(&node{
				name: in.Name, group: g, providerID: in.ProviderID, obj: obj, gpus: gpus,
				readyAt: readyAt, free: obj.Status.Allocatable.DeepCopy(),
				emptySince: -1, unneededSince: -1,
			})
		}
	}
	var lost []string
	for name := range r.cl.nodes {
		if !seen[name] {
			lost = append(lost, name)
		}
	}
	slices.Sort(lost) // their pods go back to pending in a repeatable order
	for _, name := range lost {
		if n := r.cl.nodes[name]; n != nil {
			r.dirty = true
			r.res.NodesLost++
			r.res.PodsRequeued += r.cl.lose(n, r.now)
		}
	}
	r.running = slices.DeleteFunc(r.running, func(p *pod) bool { return p.node == nil })
}

// instancesOf answers the planner's question for the core's instances of
// a group from what observe read last: the core has done nothing since
// (observe follows every change the run asks for). Every other instance
// has a Node, made by observe, so it holds only those without one (failed
// or being deleted): the planner passes over instances a Node carries,
// and the run need not copy and sort the pool's every instance each loop.
func (r *run) instancesOf(group string) ([]nodegroup.Instance, error) {
	return r.instances[group], nil
}

// provision is one pass of the NodeProvisioner controller over the pool;
// it reports whether it asked the core for anything. The plan is made
// again only when the cluster or the core changed since the last one, or
// pods wait: otherwise it would be the same.
func (r *run) provision(ctx context.Context) (bool, error) {
	ahead, whole := r.ahead()
	asked := false
	// A plan made for pods expected is made again once none are: the
	// nodes it kept for them may go.
	aheadBefore := r.aheadBefore
	r.aheadBefore = len(ahead)
	maxExtra := math.Inf(1)
	if fc := r.opts.Provisioner.Forecast; fc != nil && fc.MaxExtraHourlyCost != "" {
		maxExtra, _ = provisioner.MaxExtraHourlyCost(fc) // checked by Run
	}
	if r.dirty || len(r.cl.pending) > 0 || r.last == nil || len(ahead) > 0 || aheadBefore > 0 {
		pool, p, planned, err := r.planAhead(r.opts.Provisioner, ahead, maxExtra)
		if err != nil {
			return false, err
		}
		r.last, r.lastAhead, r.dirty = &p, planned, false
		if asked = r.scaleUp(ctx, pool, p); asked && p.Reason != provisioner.ReasonForecast {
			return true, nil // as the controller: only orders ahead let scale-down go on
		}
	} else if len(r.last.Add) > 0 && r.last.Reason != provisioner.ReasonForecast {
		return false, nil // the core refused it last time; nothing changed since
	}
	// As the controller: a forecast that vouches for the pool lets its
	// idle nodes go sooner.
	spec := r.opts.Provisioner
	if r.demand != nil && spec.Forecast == nil {
		spec.Forecast = &v1alpha1.Forecast{} // as the CRD defaults it
	}
	delay := provisioner.ScaleDownDelay(spec, whole && maxExtra > 0 && r.lastAhead == len(ahead))
	doomed := map[string]bool{}
	for _, name := range r.last.Remove {
		doomed[name] = true
	}
	// As the controller: as many as a group's standby pool takes back go
	// after its scaleDownAfter.
	down, err := r.scaleDown(ctx, func(n *node) bool { return doomed[n.name] }, delay, true, provisioner.NewPoolReturns(r.core).Take)
	return asked || down, err
}

// baseline is one loop of the cluster-autoscaler-like baseline; it reports
// whether it asked the core for anything.
func (r *run) baseline(ctx context.Context) (bool, error) {
	oldest := r.now
	for _, p := range r.cl.pending {
		oldest = min(oldest, p.since)
	}
	if len(r.cl.pending) > 0 && r.now-oldest >= r.gpuBatchWait {
		// Bin-packing onto new nodes, with the capacity on the way counted:
		// the planner with no buffer and no utilization band.
		pool, p, err := r.plan(v1alpha1.NodeProvisionerSpec{})
		if err != nil {
			return false, err
		}
		if r.scaleUp(ctx, pool, p) {
			return true, nil
		}
	}
	// Unneeded nodes are timed all along; none goes within
	// scaleDownDelayAfterAdd of a scale-up.
	cooling := r.res.ScaleUps > 0 && r.now-r.lastAdd < caDelayAfterAdd
	return r.scaleDown(ctx, func(n *node) bool { return n.ready && len(n.pods) == 0 }, caUnneededTime, !cooling, nil)
}

// foresight is one loop of the perfect-foresight policy; it reports
// whether it asked the core for anything.
func (r *run) foresight(ctx context.Context) (bool, error) {
	soon := r.upcoming(r.bootDelay + r.opts.GPUStartup + r.opts.Loop)
	if len(r.cl.pending)+len(soon) > 0 {
		extra := make([]*corev1.Pod, len(soon))
		for i, p := range soon {
			extra[i] = p.obj
		}
		pool, p, err := r.plan(v1alpha1.NodeProvisionerSpec{}, extra...)
		if err != nil {
			return false, err
		}
		if r.scaleUp(ctx, pool, p) {
			return true, nil
		}
	}
	keep := r.neededBy(soon)
	return r.scaleDown(ctx, func(n *node) bool { return n.ready && len(n.pods) == 0 && !keep[n] }, 0, true, nil)
}

// upcoming are the pods that arrive within d from now, in arrival order.
func (r *run) upcoming(d time.Duration) []*pod {
	end := r.next
	for end < len(r.pods) && r.pods[end].At <= r.now+d {
		end++
	}
	return r.pods[r.next:end]
}

// neededBy are the empty Ready nodes that the pending pods and then soon
// take when placed first fit, after the room of the nodes that run pods
// and of those still starting: the rest nothing will use before a new
// order could replace them. It places them on copies of the nodes' room,
// as schedule places pods.
func (r *run) neededBy(soon []*pod) map[*node]bool {
	var busy, empty []*node
	for _, n := range r.cl.readyNodes() {
		if len(n.pods) > 0 {
			busy = append(busy, n)
		} else {
			empty = append(empty, n)
		}
	}
	nodes := append(append(busy, r.cl.booting...), empty...)
	room := make([]*node, len(nodes))
	of := make(map[*node]*node, len(nodes))
	for i, n := range nodes {
		room[i] = &node{obj: n.obj, free: n.free.DeepCopy(), freeGPUs: n.freeGPUs}
		of[room[i]] = n
	}
	needed := map[*node]bool{}
	for _, p := range append(slices.Clone(r.cl.pending), soon...) {
		if n := firstFit(room, p); n != nil {
			plan.Subtract(n.free, p.req)
			n.freeGPUs -= p.gpu
			needed[of[n]] = true
		}
	}
	return needed
}

// plan is the planner's decision for a spec over the cluster as it is,
// made as the controller makes it; extra are pods taken as pending too
// (the foresight policy's pods to come).
func (r *run) plan(spec v1alpha1.NodeProvisionerSpec, extra ...*corev1.Pod) (plan.Pool, plan.Plan, error) {
	pool, snapshot, pending, err := r.view(spec)
	if err != nil {
		return pool, plan.Plan{}, err
	}
	return pool, plan.Compute(pool, snapshot, append(slices.Clip(pending), extra...)), nil
}

// planAhead is plan with the pods a forecast expects planned for as the
// controller plans them (provisioner.PlanAhead), within maxExtra an hour.
// It returns how many of them the plan took.
func (r *run) planAhead(spec v1alpha1.NodeProvisionerSpec, expected []*corev1.Pod, maxExtra float64) (plan.Pool, plan.Plan, int, error) {
	pool, snapshot, pending, err := r.view(spec)
	if err != nil {
		return pool, plan.Plan{}, 0, err
	}
	p, ahead := provisioner.PlanAhead(pool, snapshot, pending, expected, maxExtra)
	return pool, p, ahead, nil
}

// view is the planner's input for a spec: the pool, its nodes and the
// pods that wait.
func (r *run) view(spec v1alpha1.NodeProvisionerSpec) (plan.Pool, []plan.Node, []*corev1.Pod, error) {
	pool, err := r.pool(spec)
	if err != nil {
		return pool, nil, nil, err
	}
	nodes, pods, pending := r.cl.objects()
	groupOf := func(n *corev1.Node) string { return r.cl.nodes[n.Name].group }
	snapshot, _ := provisioner.Snapshot(pool, nodes, pods, groupOf, r.instancesOf)
	return pool, snapshot, pending, nil
}

// pool is the planner's input for a spec over the run's groups, built from
// the core as the controller builds it.
func (r *run) pool(spec v1alpha1.NodeProvisionerSpec) (plan.Pool, error) {
	var groups []plan.Group
	for _, name := range r.groups {
		info, _ := r.core.Group(name)
		tmpl, err := r.core.Template(name)
		if err != nil {
			return plan.Pool{}, err
		}
		target, _ := r.core.TargetSize(name)
		price, ok := r.core.GroupPrice(name)
		_, backingOff := r.core.Backoff(name)
		groups = append(groups, plan.Group{Name: name, Template: tmpl, Nodes: target, MinSize: info.MinSize, MaxSize: info.MaxSize,
			Unavailable: backingOff || !ok, Price: price, Spend: r.core.GroupSpend(name)})
	}
	return provisioner.Pool(spec, groups)
}

// scaleUp asks the core for what the plan adds; it reports whether it
// added any.
func (r *run) scaleUp(ctx context.Context, pool plan.Pool, p plan.Plan) bool {
	added := false
	for _, g := range pool.Groups {
		n := p.Add[g.Name]
		if n == 0 {
			continue
		}
		if err := r.core.IncreaseSize(ctx, g.Name, n); err != nil {
			r.opts.Logger.Debug("scale-up refused", "group", g.Name, "delta", n, "error", err)
			continue
		}
		r.res.ScaleUps++
		r.res.NodesAdded += n
		added = true
	}
	if added {
		r.lastAdd = r.now
	}
	return added
}

// scaleDown times the nodes that are unneeded (a node stops being unneeded
// when it no longer is) and, if it may, deletes those unneeded for at
// least delay, or those early (non-nil) lets go sooner. It reports whether
// it deleted any.
func (r *run) scaleDown(ctx context.Context, unneeded func(*node) bool, delay time.Duration, may bool, early func(group string, idle time.Duration) bool) (bool, error) {
	byGroup := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(r.cl.nodes)) { // early spends a pool's room: the same nodes from run to run
		n := r.cl.nodes[name]
		switch {
		case !unneeded(n):
			n.unneededSince = -1
		case n.unneededSince < 0:
			n.unneededSince = r.now
		case may && len(n.pods) == 0 && (r.now-n.unneededSince >= delay || early != nil && early(n.group, r.now-n.unneededSince)):
			byGroup[n.group] = append(byGroup[n.group], n.providerID)
		}
	}
	deleted := false
	for _, g := range r.groups {
		pids := byGroup[g]
		if len(pids) == 0 {
			continue
		}
		slices.Sort(pids)
		if err := r.core.DeleteNodes(ctx, g, pids); err != nil {
			r.opts.Logger.Debug("scale-down refused", "group", g, "error", err)
			continue
		}
		gone := map[string]bool{}
		for _, pid := range pids {
			gone[pid] = true
		}
		for _, n := range r.cl.nodes {
			if gone[n.providerID] {
				r.cl.remove(n)
			}
		}
		r.res.NodesRemoved += len(pids)
		deleted = true
	}
	return deleted, nil
}

// ahead feeds the forecast the demand now, by shape of pod, and returns
// the pods it adds to the plan (forecast.Demand.Ahead within one start-up
// time: boot, GPU start-up, a loop, for the spec's coverage), and whether
// it ordered ahead for every shape it has seen (provisioner.Outlook's
// Whole). None without a forecast, or before it has learned
// Options.TrainFor.
func (r *run) ahead() (out []*corev1.Pod, whole bool) {
	if r.demand == nil {
		return nil, false
	}
	now := epoch.Add(r.now)
	count := map[forecast.Shape]int{}
	for _, p := range r.cl.pending {
		count[forecast.Shape{GPUs: p.GPUs, MIG: p.MIG}]++
	}
	for _, p := range r.running {
		if p.node != nil && p.started { // not one a reclaim put back in the queue
			count[forecast.Shape{GPUs: p.GPUs, MIG: p.MIG}]++
		}
	}
	r.demand.Observe(now, count)
	if r.demand.Learned(now) < r.opts.TrainFor {
		return nil, false
	}
	whole = r.demand.AllTrusted()
	for _, w := range r.demand.Ahead(now, r.bootDelay+r.opts.GPUStartup+r.opts.Loop, provisioner.Coverage(r.opts.Provisioner.Forecast)) {
		for i := range w.Pods {
			out = append(out, podObject(Pod{Name: fmt.Sprintf("forecast-%d-%s-%d", w.Shape.GPUs, w.Shape.MIG, i), GPUs: w.Shape.GPUs, MIG: w.Shape.MIG}))
		}
	}
	r.res.ForecastPeak = max(r.res.ForecastPeak, len(out))
	return out, whole
}
