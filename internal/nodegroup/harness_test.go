package nodegroup

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// harness runs a Manager against the simulated cloud on a fake clock that
// warps forward whenever something waits on it, so minutes of cloud time
// pass in milliseconds while every goroutine still sees a consistent clock.
type harness struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	cfg    *config.Config
	engine *sim.Engine
	acct   *sim.Cloud
	mgr    *Manager
	cancel context.CancelFunc
	opts   Options
	// provider is what the Manager talks to: the account, or a wrapper.
	provider cloud.Provider
	reg      *prometheus.Registry
}

const baseConfig = `
clusterName: test
sync: {period: 30s, requestsPerSecond: 10000, maxConcurrentCreates: 8}
clouds:
  sim: {bootDelay: 60s, deleteDelay: 10s}
`

func newHarness(t *testing.T, doc string, simOpts sim.Options, opts Options) *harness {
	t.Helper()
	return newWrappedHarness(t, doc, simOpts, opts, nil)
}

// newWrappedHarness is newHarness with the account behind a wrapper that
// wrap returns (nil: none).
func newWrappedHarness(t *testing.T, doc string, simOpts sim.Options, opts Options, wrap func(*sim.Cloud) cloud.Provider) *harness {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	simOpts.Clock = clk
	engine, err := sim.NewEngine(simConfig(*cfg.Clouds.Sim), simOpts)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, clk: clk, cfg: cfg, engine: engine, acct: engine.Account(cfg.ClusterName), opts: opts}
	if wrap != nil {
		h.provider = wrap(h.acct)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			if clk.HasWaiters() {
				clk.Step(250 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() {
		h.stop()
		close(stop)
		<-done
	})
	h.start()
	return h
}

func (h *harness) start() {
	h.t.Helper()
	opts := h.opts
	opts.Clock = h.clk
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	h.reg = prometheus.NewRegistry()
	opts.Registerer = h.reg
	p := h.provider
	if p == nil {
		p = h.acct
	}
	mgr, err := New(h.cfg, map[string]cloud.Provider{"sim": p}, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Start(ctx); err != nil {
		cancel()
		h.t.Fatalf("start: %v", err)
	}
	h.mgr, h.cancel = mgr, cancel
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		h.mgr.Wait()
		h.cancel = nil
	}
}

// restart stops the Manager and starts a new one on the same cloud, as a
// provider process restart would.
func (h *harness) restart() {
	h.stop()
	h.start()
}

func testLogger() *slog.Logger {
	if os.Getenv("GPUSCALER_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// eventually polls cond for up to 20 s of real time.
func (h *harness) eventually(what string, cond func() bool, explain ...func() string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, e := range explain {
				h.t.Log(e())
			}
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// states counts a group's members by state, with failed ones apart.
func (h *harness) states(group string) (running, creating, deleting, failed int) {
	h.t.Helper()
	insts, err := h.mgr.Instances(group)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, in := range insts {
		switch {
		case in.ErrorCode != "":
			failed++
		case in.State == StateRunning:
			running++
		case in.State == StateCreating:
			creating++
		case in.State == StateDeleting:
			deleting++
		}
	}
	return
}

// cloudInstances returns the live (not deleting) instances at the cloud by group.
func (h *harness) cloudInstances() map[string][]cloud.Instance {
	out := map[string][]cloud.Instance{}
	for _, in := range h.engine.Instances(h.cfg.ClusterName) {
		if in.State != cloud.StateDeleting {
			out[in.Group] = append(out[in.Group], in)
		}
	}
	return out
}

// fakeNodes is the cluster's Nodes as the core sees them: provider IDs
// registered by hand, and the Node deletes the core asked for.
type fakeNodes struct {
	mu         sync.Mutex
	registered map[string]bool
	startup    map[string]Startup // by provider ID, of registered Nodes
	unsynced   bool
	deleted    [][]string
	pods       map[string][]string // by provider ID: pods that run work
	// pulls are the pre-pulls by provider ID, once asked for (PrePull);
	// pullAsks and pullEnds count PrePull and EndPrePull calls.
	pulls              map[string]Pull
	pullAsks, pullEnds int
}

func newFakeNodes() *fakeNodes {
	return &fakeNodes{registered: map[string]bool{}, startup: map[string]Startup{}, pods: map[string][]string{}, pulls: map[string]Pull{}}
}

func (f *fakeNodes) Startup(ids ...string) (Startup, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if f.registered[id] {
			return f.startup[id], true
		}
	}
	return Startup{}, false
}

func (f *fakeNodes) Registered(ids ...string) (bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unsynced {
		return false, false
	}
	for _, id := range ids {
		if f.registered[id] {
			return true, true
		}
	}
	return false, true
}

func (f *fakeNodes) Delete(_ context.Context, ids ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, ids)
	for _, id := range ids {
		delete(f.registered, id)
	}
	return nil
}

func (f *fakeNodes) Untaint(_ context.Context, key string, ids ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if st, ok := f.startup[id]; ok && key == TaintStandby {
			st.Standby = false
			f.startup[id] = st
		}
	}
	return nil
}

func (f *fakeNodes) Workloads(_ context.Context, ids ...string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if f.registered[id] {
			return f.pods[id], nil
		}
	}
	return nil, nil
}

func (f *fakeNodes) PrePull(_ context.Context, _ []string, ids ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pullAsks++
	if _, ok := f.pulls[ids[0]]; !ok {
		f.pulls[ids[0]] = Pull{Started: true}
	}
	return nil
}

func (f *fakeNodes) PrePulled(_ []string, ids ...string) Pull {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if p, ok := f.pulls[id]; ok {
			return p
		}
	}
	return Pull{}
}

func (f *fakeNodes) EndPrePull(_ context.Context, ids ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if _, ok := f.pulls[id]; ok {
			delete(f.pulls, id)
			f.pullEnds++
		}
	}
	return nil
}

// asks counts the PrePull calls.
func (f *fakeNodes) asks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pullAsks
}

// pulled reports whether a pull on the Node under id is under way (asked
// for and not ended).
func (f *fakeNodes) pulled(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.pulls[id]
	return ok
}

// setPull says how far the pull on the Node under id has come.
func (f *fakeNodes) setPull(id string, p Pull) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls[id] = p
}

// bind puts pods that run work on the Node under id.
func (f *fakeNodes) bind(id string, pods ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[id] = pods
}

func (f *fakeNodes) register(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered[id] = true
}

// setStartup registers a Node under id, as far as s says it has come.
func (f *fakeNodes) setStartup(id string, s Startup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered[id] = true
	f.startup[id] = s
}

func (f *fakeNodes) deletedIDs() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.deleted...)
}

// wrapped is the simulated cloud with hooks, for failures the simulated
// cloud cannot make by itself.
type wrapped struct {
	cloud.Provider
	mu       sync.Mutex
	onCreate func(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error, bool)
	onDelete func(inst cloud.Instance) (error, bool)
	onList   func([]cloud.Instance) []cloud.Instance
	onStart  func(ctx context.Context, inst cloud.Instance) (error, bool)
	// onStop runs before a stop goes to the cloud (a test holds it).
	onStop func(inst cloud.Instance)
	// onTransfer runs instead of the transfer when set; transfer is the
	// simulated cloud's, for a hook to call.
	onTransfer func(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error)
	// refusalRetried plays a cloud that goes on trying a refused start
	// (a GCE MIG): cloud.Stopper.RefusedStaysStopped is false.
	refusalRetried bool
	creates        int
	deletes        int
	// deleted counts the delete calls by instance name: the core sends
	// a delete again for an instance still listed while it goes.
	deleted map[string]int
}

func (w *wrapped) Create(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error) {
	w.mu.Lock()
	w.creates++
	hook := w.onCreate
	w.mu.Unlock()
	if hook != nil {
		if in, err, handled := hook(ctx, spec); handled {
			return in, err
		}
	}
	return w.Provider.Create(ctx, spec)
}

func (w *wrapped) Delete(ctx context.Context, inst cloud.Instance) error {
	w.mu.Lock()
	w.deletes++
	if w.deleted == nil {
		w.deleted = map[string]int{}
	}
	w.deleted[inst.Name]++
	hook := w.onDelete
	w.mu.Unlock()
	if hook != nil {
		if err, handled := hook(inst); handled {
			return err
		}
	}
	return w.Provider.Delete(ctx, inst)
}

func (w *wrapped) List(ctx context.Context) ([]cloud.Instance, error) {
	out, err := w.Provider.List(ctx)
	w.mu.Lock()
	hook := w.onList
	w.mu.Unlock()
	if err == nil && hook != nil {
		out = hook(out)
	}
	return out, err
}

// wrappedOn starts a harness on one group of the simulated cloud behind a
// wrapped provider whose hooks a test sets.
func wrappedOn(t *testing.T) (*harness, *wrapped) {
	w := &wrapped{}
	h := newWrappedHarness(t, oneGroupLeaky, sim.Options{}, Options{}, func(c *sim.Cloud) cloud.Provider { w.Provider = c; return w })
	return h, w
}

// loseCreateAnswers makes every create that the cloud carries out lose its
// answer, as a connection reset after the request went through does.
func (w *wrapped) loseCreateAnswers() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onCreate = func(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error, bool) {
		if _, err := w.Provider.Create(ctx, spec); err != nil {
			return cloud.Instance{}, err, true
		}
		return cloud.Instance{}, cloud.Errorf(cloud.ErrOutcomeUnknown, "create", "connection reset after the cloud took it"), true
	}
}

// listedFailed shows every listed instance as a GCP MIG member that stocked
// out: failed, with the cloud's error class (nil: a cloud that gives none,
// whose next orders do not skip the offering).
func listedFailed(insts []cloud.Instance, class error) []cloud.Instance {
	for i := range insts {
		insts[i].State, insts[i].Error, insts[i].ErrorClass = cloud.StateFailed, "ZONE_RESOURCE_POOL_EXHAUSTED", class
	}
	return insts
}

// Stop, Start and StoppedPrice pass through to the simulated cloud's
// cloud.Stopper.
func (w *wrapped) Stop(ctx context.Context, inst cloud.Instance) error {
	w.mu.Lock()
	hook := w.onStop
	w.mu.Unlock()
	if hook != nil {
		hook(inst)
	}
	return w.Provider.(cloud.Stopper).Stop(ctx, inst)
}

func (w *wrapped) Start(ctx context.Context, inst cloud.Instance) error {
	w.mu.Lock()
	hook := w.onStart
	w.mu.Unlock()
	if hook != nil {
		if err, handled := hook(ctx, inst); handled {
			return err
		}
	}
	return w.Provider.(cloud.Stopper).Start(ctx, inst)
}

// Transfer passes through to the simulated cloud's cloud.Transferer, or
// to onTransfer.
func (w *wrapped) Transfer(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
	w.mu.Lock()
	hook := w.onTransfer
	w.mu.Unlock()
	if hook != nil {
		return hook(ctx, inst, name, owner)
	}
	return w.transfer(ctx, inst, name, owner)
}

func (w *wrapped) transfer(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
	return w.Provider.(cloud.Transferer).Transfer(ctx, inst, name, owner)
}

func (w *wrapped) RefusedStaysStopped() bool {
	return !w.refusalRetried && w.Provider.(cloud.Stopper).RefusedStaysStopped()
}

func (w *wrapped) StoppedPrice(k cloud.OfferingKey) float64 {
	return w.Provider.(cloud.Stopper).StoppedPrice(k)
}

func (w *wrapped) counts() (creates, deletes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.creates, w.deletes
}

// deletedInstances is how many instances were sent a delete, each counted
// once however many it was sent.
func (w *wrapped) deletedInstances() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.deleted)
}

// series returns the series of the Manager's registry whose labels
// include labels.
func (h *harness) series(name string, labels map[string]string) []*dto.Metric {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// metric sums the counters or gauges of the Manager's registry whose labels
// include labels; -1 when there is none.
func (h *harness) metric(name string, labels map[string]string) float64 {
	h.t.Helper()
	ms := h.series(name, labels)
	if len(ms) == 0 {
		return -1
	}
	sum := 0.0
	for _, m := range ms {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// histogram sums the count and sum of the histograms of the Manager's
// registry whose labels include labels.
func (h *harness) histogram(name string, labels map[string]string) (count uint64, sum float64) {
	h.t.Helper()
	for _, m := range h.series(name, labels) {
		count += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	return count, sum
}

// settle lets cloud time pass and the core act on it.
func (h *harness) settle(d time.Duration) {
	h.t.Helper()
	for elapsed := time.Duration(0); elapsed < d; elapsed += 30 * time.Second {
		h.clk.Step(30 * time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
}

// simConfig is the runtime's clouds.sim conversion, for tests of the core
// (which cannot import the runtime that imports it).
func simConfig(c config.SimConfig) sim.Config {
	d := func(v *metav1.Duration) *time.Duration {
		if v == nil {
			return nil
		}
		return sim.Duration(v.Duration)
	}
	return sim.Config{Seed: c.Seed, Locations: c.Locations, DefaultCapacity: c.DefaultCapacity,
		BootDelay: d(c.BootDelay), DeleteDelay: d(c.DeleteDelay), APILatency: d(c.APILatency),
		FaultRate: c.FaultRate, SpotReclaimRate: c.SpotReclaimRate,
		StartDelay: d(c.StartDelay), StartFailureRate: c.StartFailureRate, StoppedPrice: c.StoppedPrice}
}

// runOneThenDelete orders one instance of group g, waits until it runs,
// and deletes it as a front end does.
func (h *harness) runOneThenDelete(g string) {
	h.t.Helper()
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, g, 1); err != nil {
		h.t.Fatal(err)
	}
	h.eventually("1 running", func() bool { r, _, _, _ := h.states(g); return r == 1 })
	insts, _ := h.mgr.Instances(g)
	if err := h.mgr.DeleteNodes(ctx, g, []string{insts[0].ProviderID}); err != nil {
		h.t.Fatal(err)
	}
}
