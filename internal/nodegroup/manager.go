package nodegroup

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// DefaultResolveAfter is how long after a lost create answer a list must
// start before its silence means the order did not land, and how long
// after an instance was recorded a list must start before its silence
// means the instance is gone: clouds' lists can lag their orders.
const DefaultResolveAfter = time.Minute

// DefaultStartTimeout bounds each cloud call Start makes (the catalog, the
// offerings, the first list, with their retries): a cloud that never
// answers stops start-up with an error instead of hanging it.
const DefaultStartTimeout = 2 * time.Minute

// Options are a Manager's collaborators. All are optional.
type Options struct {
	// Clock drives every timer; default the real clock.
	Clock clock.WithTicker
	// Logger receives the core's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the core's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Metrics, when set, are the process's series, shared with the cores
	// of earlier configurations (a reload) so that counters count on;
	// Registerer is then not used.
	Metrics *Metrics
	// Nodes tells whether an instance's Node registered, and deletes the
	// Nodes of instances that are gone. Without it nothing is taken for
	// never-registered and no Node is deleted.
	Nodes Nodes
	// Events receives what operators should see as Kubernetes Events.
	Events EventSink
	// Bootstrap renders the startup script of each instance before it is
	// ordered; nil orders instances with no user data.
	Bootstrap Bootstrapper
	// Manage selects the groups this Manager scales; nil means all. The
	// instances of the other configured groups are left alone (another
	// process owns them) but count toward the cluster's cost cap.
	Manage func(group string) bool
	// GPULabel is an extra node label key that carries the accelerator
	// name (cluster-autoscaler's --gpu-label); empty for none.
	GPULabel string
	// ResolveAfter overrides the configuration's sync.listLag (default
	// DefaultResolveAfter).
	ResolveAfter time.Duration
	// StartTimeout overrides DefaultStartTimeout.
	StartTimeout time.Duration
	// Manual leaves the syncs to the caller (Sync) instead of a background
	// loop per cloud, so that a driver on a virtual clock (the simulator)
	// decides when each happens and can wait for the core to be Idle.
	Manual bool
	// Serial runs the core's background work (creates, starts, stops,
	// deletes) one piece at a time, in the order it was asked for, rather
	// than side by side: a driver on a virtual clock then sees the same
	// cloud calls in the same order from run to run, so which of two
	// calls meets the last of a location's capacity never depends on
	// goroutine scheduling. With Manual only; the simulator sets both.
	Serial bool
	// Entropy is where instance names' random suffixes come from; default
	// crypto/rand. A seeded source makes names repeat.
	Entropy io.Reader
	// Install is this install's ID (config.OwnershipConfig.InstallID),
	// recorded with every order; Start refuses a cloud that holds
	// instances of the cluster name another install ordered. Empty: no
	// ID is recorded, and every instance of the cluster name is taken.
	Install string
}

// Manager is the node-group core, a facade over small parts that each own
// one rule: store (memory and reads), sizer (target sizes), offerings
// (availability and backoff), orderer (creates), launcher (the launch
// API), deleter, syncer, reaper, costGuard and templater. Reads answer from
// memory; cloud calls run in the background. Create it with New, then call
// Start; everything it does that writes to a cloud stops when Start's
// context ends.
type Manager struct {
	cfg     *config.Config
	clock   clock.WithTicker
	log     *slog.Logger
	clients map[string]*client

	store     *store
	offerings *offerings
	cost      *costGuard
	catalog   *catalog
	templater *templater
	orderer   *orderer
	deleter   *deleter
	sizer     *sizer
	syncer    *syncer
	reaper    *reaper
	launcher  *launcher
	// epoch tells this Manager's Offers versions from another's.
	epoch int64

	wg sync.WaitGroup
	// busy counts the background work running (see Idle).
	busy atomic.Int64
	// manual: no sync loops (Options.Manual); syncs counts Sync's calls.
	manual bool
	syncs  int
	// serial holds the background work waiting its turn (Options.Serial).
	serial *serialQueue
	ctxMu  sync.RWMutex
	ctx    context.Context
	cancel context.CancelFunc
	// accepting: Start succeeded; writes are refused before, and once its
	// context is done (ErrUnavailable), so that none is acknowledged by
	// a core that will not carry it out.
	accepting atomic.Bool
	// inherited: Inherit handed this core a running predecessor's
	// knowledge, and its start-up hold (orderer.holdUntil).
	inherited bool
}

// New builds a Manager for a validated configuration and one Provider per
// configured cloud, keyed by cloud name.
func New(cfg *config.Config, providers map[string]cloud.Provider, opts Options) (*Manager, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ResolveAfter <= 0 {
		opts.ResolveAfter = DefaultResolveAfter
		if cfg.Sync.ListLag != nil {
			opts.ResolveAfter = cfg.Sync.ListLag.Duration
		}
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	met := opts.Metrics
	if met == nil {
		met = NewMetrics(opts.Registerer)
	}
	ev := &events{sink: opts.Events}
	if opts.Entropy == nil {
		opts.Entropy = rand.Reader
	}
	m := &Manager{cfg: cfg, clock: opts.Clock, log: opts.Logger, clients: map[string]*client{}, epoch: time.Now().UnixNano(), manual: opts.Manual}
	if opts.Serial && opts.Manual {
		m.serial = &serialQueue{}
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.cancel() // nothing runs before Start
	syncNow := map[string]chan struct{}{}
	for name, p := range providers {
		m.clients[name] = newClient(p, cfg.Sync.RequestsPerSecond, cfg.Sync.MaxConcurrentCreates, opts.Clock, met)
		m.clients[name].install = opts.Install
		syncNow[name] = make(chan struct{}, 1)
	}
	for _, g := range cfg.NodeGroups {
		if _, ok := m.clients[g.Cloud]; !ok {
			return nil, fmt.Errorf("node group %q: cloud %q has no provider", g.Name, g.Cloud)
		}
	}
	if err := checkOptions(cfg, providers); err != nil {
		return nil, err
	}
	s := newStore(cfg, opts.Manage)
	s.entropy = opts.Entropy
	s.refused = func(mem *member, from, to phase) {
		met.refusedMoves.WithLabelValues(mem.group(), from.String(), to.String()).Inc()
		m.log.Error("member phase change refused: the lifecycle has no such move", "group", mem.group(), "instance", mem.name, "from", from.String(), "to", to.String())
	}
	m.store = s
	m.offerings = newOfferings(opts.Clock, cfg, met)
	met.preset(cfg, opts.Manage)
	m.cost = &costGuard{cfg: cfg, store: s, offerings: m.offerings}
	m.catalog = &catalog{store: s, clients: m.clients, clock: opts.Clock, log: opts.Logger, types: map[string]map[string]cloud.InstanceType{},
		clusterCap: cfg.MaxHourlyCost}
	m.templater = &templater{store: s, gpuLabel: opts.GPULabel, topology: map[string]cloud.Topology{}}
	for name, p := range providers {
		if tp, ok := p.(cloud.Topology); ok {
			m.templater.topology[name] = tp
		}
	}
	m.syncer = &syncer{cfg: cfg, store: s, offerings: m.offerings, cost: m.cost, catalog: m.catalog, nodes: opts.Nodes,
		clients: m.clients, clock: opts.Clock, log: opts.Logger, metrics: met, resolveAfter: opts.ResolveAfter, startTimeout: opts.StartTimeout, syncNow: syncNow, reissuePending: map[string]bool{},
		owners: newOwners(opts.Install, cfg.Ownership.TakeOver), foreignSeen: map[string]bool{}, orphanSince: map[string]map[string]time.Time{}}
	for name := range m.clients {
		m.syncer.reissuePending[name] = true
	}
	m.deleter = &deleter{clients: m.clients, clock: opts.Clock, log: opts.Logger, metrics: met, events: ev,
		done: m.syncer.kick, run: m.run, inflight: map[string]bool{}, notBefore: map[string]time.Time{}}
	m.deleter.outcome = func(inst cloud.Instance, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if mem, ok := s.pids.get(inst.ProviderID); ok && mem.name == inst.Name && (inst.ID == "" || inst.ID == mem.id) {
			if err != nil {
				mem.extras().deleteErr = err.Error()
			} else {
				x := mem.extras()
				x.deleteErr, x.deleted = "", true
			}
		}
	}
	queues := map[string]*createQueue{}
	for name := range m.clients {
		queues[name] = newCreateQueue(cfg.Sync.MaxConcurrentCreates)
	}
	m.orderer = &orderer{store: s, offerings: m.offerings, cost: m.cost, templater: m.templater, deleter: m.deleter,
		clients: m.clients, queues: queues, boot: opts.Bootstrap, retries: *cfg.Sync.CreateRetries, clock: opts.Clock, log: opts.Logger,
		metrics: met, events: ev, run: m.run, kick: m.syncer.kick, ctx: m.context}
	m.sizer = &sizer{store: s, offerings: m.offerings, cost: m.cost, orderer: m.orderer, deleter: m.deleter,
		clock: opts.Clock, log: opts.Logger, metrics: met, events: ev, ctx: m.context, maxIncrease: cfg.Sync.MaxIncrease, clients: m.clients, nodes: opts.Nodes}
	m.orderer.publish = m.sizer.publishLocked
	m.reaper = &reaper{cfg: cfg, store: s, offerings: m.offerings, deleter: m.deleter, nodes: opts.Nodes, clock: opts.Clock,
		log: opts.Logger, metrics: met, events: ev, duplicates: map[string]*duplicate{}, unknown: map[string]int{},
		streak: map[string]int{}, gpuStreak: map[string]int{}, gen: map[string]int{}}
	m.syncer.sizer, m.syncer.reaper, m.syncer.deleter = m.sizer, m.reaper, m.deleter
	m.syncer.startups = &startups{nodes: opts.Nodes, catalog: m.catalog, metrics: met}
	m.launcher = &launcher{store: s, offerings: m.offerings, cost: m.cost, catalog: m.catalog, templater: m.templater,
		orderer: m.orderer, deleter: m.deleter, clients: m.clients}
	return m, nil
}

// run starts background work that Wait waits for: in a goroutine of
// its own, or with Options.Serial in the queue's turn.
func (m *Manager) run(fn func()) {
	m.wg.Add(1)
	m.busy.Add(1)
	done := func() {
		m.busy.Add(-1)
		m.wg.Done()
	}
	if m.serial != nil {
		m.serial.push(fn, done)
		return
	}
	go func() {
		defer done()
		fn()
	}()
}

// serialQueue runs work one piece at a time in the order pushed, on one
// goroutine while there is any.
type serialQueue struct {
	mu      sync.Mutex
	work    []func()
	running bool
}

// push queues fn, then done once fn returns.
func (q *serialQueue) push(fn, done func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.work = append(q.work, func() {
		defer done()
		fn()
	})
	if !q.running {
		q.running = true
		go q.drain()
	}
}

func (q *serialQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.work) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		fn := q.work[0]
		q.work = q.work[1:]
		q.mu.Unlock()
		fn()
	}
}

// Idle reports whether no background work runs: no create and no delete
// in flight or queued. With Options.Manual it is how a driver knows that
// what it asked for has reached the cloud; without, the sync loops keep
// it false. A create or delete waiting to retry (on the clock) keeps it
// false too; a delete that gave up is asked again by a later sync, not
// before.
func (m *Manager) Idle() bool { return m.busy.Load() == 0 }

// Sync is one period's sync of every cloud, as the background loop makes
// it (a list folded in; every few, a refresh of the offerings and the
// catalog): for Options.Manual only, whose caller decides when. Calls must
// not overlap.
func (m *Manager) Sync(ctx context.Context) error {
	if !m.manual {
		return errors.New("Sync: the core syncs by itself (Options.Manual is off)")
	}
	names := make([]string, 0, len(m.clients))
	for name := range m.clients {
		names = append(names, name)
	}
	sort.Strings(names)
	m.syncs++
	for _, name := range names {
		if err := m.syncer.tick(ctx, name, m.syncs); err != nil {
			return fmt.Errorf("sync of cloud %q: %w", name, err)
		}
	}
	return nil
}

// context is the context of the background work of the current Start.
func (m *Manager) context() context.Context {
	m.ctxMu.RLock()
	defer m.ctxMu.RUnlock()
	return m.ctx
}

// Start loads each cloud's catalog and offerings, rebuilds every group from
// the cloud's instance list, and starts the background sync. It returns an
// error when a group's instance type or MIG profile does not exist, or a
// cloud cannot be listed; background work stops when ctx is done.
func (m *Manager) Start(ctx context.Context) error {
	m.ctxMu.Lock()
	m.ctx = ctx
	m.ctxMu.Unlock()
	m.store.mu.Lock()
	m.syncer.startups.since = m.clock.Now()
	m.reaper.since = m.syncer.startups.since
	// In place of a core that stopped (a reload, sharing its Metrics), the
	// gauges are this configuration's: a removed group's go, the rest are
	// published again from what was handed over.
	m.syncer.metrics.resetGauges()
	for _, g := range m.store.groups {
		m.sizer.publishLocked(g)
	}
	m.store.mu.Unlock()
	if !m.manual && !m.inherited {
		// A driven core (simulate, drills) has no predecessor, and its
		// clock moves only between the driver's steps.
		m.orderer.holdUntil = map[string]time.Time{}
		for name, c := range m.clients {
			lag := m.syncer.resolveAfter
			if l, ok := c.p.(cloud.ListLagger); ok {
				lag = l.ListLag()
			}
			if lag > 0 {
				m.orderer.holdUntil[name] = m.syncer.startups.since.Add(lag)
			}
		}
	}
	m.orderer.start(ctx)
	// A core a reload hands over to leaves another install's instances
	// alone, as the one before it did; only a start refuses them.
	m.syncer.refuseForeign = !m.inherited
	warm := m.isWarm()
	for cloudName := range m.clients {
		if warm[cloudName] {
			continue
		}
		if err := m.startCall(ctx, cloudName, "catalog", func(cctx context.Context) error { return m.catalog.load(cctx, cloudName) }); err != nil {
			return err
		}
	}
	if err := m.publishCaps(); err != nil {
		return err
	}
	for cloudName := range m.clients {
		if !warm[cloudName] {
			_ = m.startCall(ctx, cloudName, "offerings", func(cctx context.Context) error {
				m.syncer.refreshOfferings(cctx, cloudName)
				return nil
			})
		}
		if err := m.syncer.sync(ctx, cloudName, true); err != nil {
			return fmt.Errorf("initial list of cloud %q: %w", cloudName, err)
		}
	}
	m.accepting.Store(true)
	if m.manual {
		return nil
	}
	for cloudName := range m.clients {
		m.run(func() { m.syncer.loop(ctx, cloudName) })
	}
	return nil
}

// Warm reads ahead of Start, from every cloud at once, what Start would
// otherwise wait on: the catalog, the offerings and the first list. A
// reload calls it while the core before this one still serves, so that
// the hand-over, which holds writes, makes no cloud call: with a slow
// cloud, a write held for seconds would be refused, and
// cluster-autoscaler backs a group off for a failed scale-up. The list
// is older than the hand-over; what the core before learned since comes
// with Inherit, and a list that lags is what the sync is built for.
//
// A cloud for which listAhead is false (nil: none) is not listed ahead:
// one whose list follows the configuration's groups (GCP's MIGs) is
// listed at Start, once it follows the new ones.
func (m *Manager) Warm(ctx context.Context, listAhead func(cloudName string) bool) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	lists := map[string]warmed{}
	for cloudName := range m.clients {
		wg.Go(func() {
			var err error
			m.store.mu.RLock()
			_, checked := m.catalog.types[cloudName] // by Check
			m.store.mu.RUnlock()
			if !checked {
				err = m.startCall(ctx, cloudName, "catalog", func(cctx context.Context) error { return m.catalog.load(cctx, cloudName) })
			}
			var w warmed
			if err == nil {
				_ = m.startCall(ctx, cloudName, "offerings", func(cctx context.Context) error {
					m.syncer.refreshOfferings(cctx, cloudName)
					return nil
				})
				if w.listed = listAhead == nil || listAhead(cloudName); w.listed {
					w.start = m.clock.Now()
					w.insts, err = m.syncer.list(ctx, cloudName, true)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("cloud %q: %w", cloudName, err))
				return
			}
			lists[cloudName] = w
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	m.syncer.warmMu.Lock()
	m.syncer.warm = lists
	m.syncer.warmMu.Unlock()
	return nil
}

// isWarm reports the clouds Warm read ahead, list included; the others'
// catalogs and offerings are read again at Start, as their lists are (a
// GCP's offerings follow its groups' MIGs too).
func (m *Manager) isWarm() map[string]bool {
	m.syncer.warmMu.Lock()
	defer m.syncer.warmMu.Unlock()
	out := make(map[string]bool, len(m.syncer.warm))
	for c, w := range m.syncer.warm {
		out[c] = w.listed
	}
	return out
}

// publishCaps sets the cost caps' gauges in the currency of the prices
// they cap, once the catalogs are loaded. A cluster-wide cap over groups
// priced in different currencies is refused: it would add euros to
// dollars.
func (m *Manager) publishCaps() error {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	currencies := map[string][]string{}
	for _, g := range s.groups {
		c := g.itype.PriceCurrency()
		currencies[c] = append(currencies[c], g.cfg.Name)
		if g.cfg.MaxHourlyCost > 0 {
			m.syncer.metrics.costLimit.WithLabelValues(g.cfg.Name, c).Set(g.cfg.MaxHourlyCost)
		}
	}
	if m.cfg.MaxHourlyCost <= 0 {
		return nil
	}
	if len(currencies) > 1 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(currencies)) {
			parts = append(parts, fmt.Sprintf("%s (%s)", c, strings.Join(slices.Sorted(slices.Values(currencies[c])), ", ")))
		}
		return fmt.Errorf("maxHourlyCost: the node groups are priced in %s; one cap cannot add them up: set maxHourlyCost per group instead", strings.Join(parts, " and "))
	}
	cur := "USD"
	for c := range currencies {
		cur = c
	}
	m.syncer.metrics.costLimit.WithLabelValues("", cur).Set(m.cfg.MaxHourlyCost)
	return nil
}

// writable returns ErrUnavailable unless the core runs: started, and
// Start's context not done.
func (m *Manager) writable(what string) error {
	if !m.accepting.Load() {
		return fmt.Errorf("%s: %w: not started", what, ErrUnavailable)
	}
	if m.context().Err() != nil {
		return fmt.Errorf("%s: %w: stopped", what, ErrUnavailable)
	}
	return nil
}

// startCall runs one of Start's cloud calls under the start deadline.
func (m *Manager) startCall(ctx context.Context, cloudName, what string, call func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, m.syncer.startTimeout)
	defer cancel()
	err := call(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("cloud %q did not answer (%s) within %s at start: %w", cloudName, what, m.syncer.startTimeout, err)
	}
	return err
}

// Wait blocks until all background work has stopped (after Start's context
// is done).
func (m *Manager) Wait() { m.wg.Wait() }

// Groups returns every managed group in configuration order.
func (m *Manager) Groups() []Info {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Info, 0, len(s.order))
	for _, name := range s.order {
		out = append(out, s.groups[name].info())
	}
	return out
}

// Group returns one managed group's description.
func (m *Manager) Group(name string) (Info, bool) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[name]
	if !ok {
		return Info{}, false
	}
	return g.info(), true
}

// info describes the group. Front ends ask for it on every call
// (cluster-autoscaler once per node per loop), so it is built once per
// target size and shared: callers get a copy.
func (g *group) info() Info {
	if c := g.described.Load(); c != nil && c.target == g.target {
		return c.info
	}
	c := &described{target: g.target, info: Info{
		Name:         g.cfg.Name,
		Cloud:        g.cfg.Cloud,
		InstanceType: g.cfg.InstanceType,
		MinSize:      g.cfg.MinSize,
		MaxSize:      g.cfg.MaxSize,
		Debug: fmt.Sprintf("%s: %s on %s in %v (%s), size %d..%d, target %d",
			g.cfg.Name, g.cfg.InstanceType, g.cfg.Cloud, g.cfg.Locations, g.cfg.CapacityPolicy, g.cfg.MinSize, g.cfg.MaxSize, g.target),
	}}
	g.described.Store(c) // under a read lock two callers may both build it: the same value
	return c.info
}

// described is a group's Info as of a target size.
type described struct {
	target int
	info   Info
}

// GroupForProviderID returns the group that owns the instance with the
// given provider ID (canonical or alias); launched instances have none.
func (m *Manager) GroupForProviderID(providerID string) (string, bool) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	mem, ok := s.pids.get(providerID)
	if !ok || mem.group() == "" || mem.pooled() {
		return "", false // a standby instance is no node of the group's
	}
	return mem.group(), true
}

// TargetSize returns a group's target size: running instances plus those
// being created or that failed to be created, not those being deleted.
func (m *Manager) TargetSize(name string) (int, error) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[name]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	return g.target, nil
}

// Instances returns a group's members, sorted by name.
func (m *Manager) Instances(name string) ([]Instance, error) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	out := make([]Instance, 0, len(g.members))
	for _, mem := range g.members {
		if !mem.pooled() {
			out = append(out, mem.view())
		}
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// EachInstance calls fn with each of a group's members, in no order: what
// cluster-autoscaler's loop asks of every group, answered without a copy
// of the group. The instances come without Aliases (Instances has them),
// which would cost an allocation per member. fn runs under the core's read
// lock and must not call the Manager.
func (m *Manager) EachInstance(name string, fn func(Instance)) error {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	for _, mem := range g.members {
		if !mem.pooled() {
			fn(mem.summary())
		}
	}
	return nil
}

// view renders a member for front ends.
func (mem *member) view() Instance {
	in := mem.summary()
	in.Aliases = mem.aliases()
	return in
}

// summary is the member's view without its aliases.
func (mem *member) summary() Instance {
	k, x := mem.offering(), mem.peek()
	in := Instance{
		ProviderID:   mem.providerID,
		Name:         mem.name,
		InstanceType: k.InstanceType,
		Location:     k.Location,
		CapacityType: string(k.CapacityType),
		CreatedAt:    mem.createdAt.Time(),
		StartedAt:    x.startedAt,
		Owner:        x.owner,
		Price:        mem.price,
	}
	switch mem.phase {
	case phaseCreating, phaseUnknown:
		in.State = StateCreating
		in.Unresolved = true
	case phaseFailed:
		in.State = StateCreating
		in.ErrorCode, in.ErrorMessage, in.ErrorClass = x.errCode, x.errMsg, x.errClass
	case phaseDeleting:
		in.State = StateDeleting
		if x.deleteErr != "" {
			in.ErrorCode, in.ErrorMessage, in.ErrorClass = CodeDeleteFailed, x.deleteErr, ErrorClassOther
		}
	case phaseCreated:
		in.State = StateCreating
		if mem.state == stateRunning {
			in.State = StateRunning
		}
	}
	return in
}

// InstanceIP returns the address the cloud reports for an instance, by
// name; ok is false for names the core does not know or that have none yet.
func (m *Manager) InstanceIP(name string) (string, bool) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, g := range append([]*group{s.launches}, mapValues(s.groups)...) {
		if mem, ok := g.members[name]; ok {
			if ip := mem.addr(); ip != "" {
				return ip, true
			}
		}
	}
	return "", false
}

func mapValues(gs map[string]*group) []*group {
	out := make([]*group, 0, len(gs))
	for _, g := range gs {
		out = append(out, g)
	}
	return out
}

// GPUTypes returns the accelerator label values of every GPU group.
func (m *Manager) GPUTypes() []string {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, name := range s.order {
		acc := s.groups[name].gpuModel.Accelerator
		if acc != "" && !seen[acc] {
			seen[acc] = true
			out = append(out, acc)
		}
	}
	sort.Strings(out)
	return out
}

// Refresh is called by cluster-autoscaler at the start of each loop. It
// never waits on a cloud: the background sync keeps the state fresh, and
// Refresh only asks for an early sync when the last one is older than the
// sync period.
func (m *Manager) Refresh(context.Context) error {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	for cloudName, last := range s.lastSync {
		if m.clock.Since(last) > m.cfg.Sync.Period.Duration {
			m.syncer.kick(cloudName)
		}
	}
	return nil
}

// Template returns the Node a new instance of the group registers as.
func (m *Manager) Template(name string) (*corev1.Node, error) { return m.templater.template(name) }

// IncreaseSize raises a group's target by delta and returns at once; the
// instances are created in the background. It refuses a delta past the
// group's maximum size or a cost cap, and while the group backs off.
func (m *Manager) IncreaseSize(_ context.Context, name string, delta int) error {
	if err := m.writable("IncreaseSize"); err != nil {
		return err
	}
	return m.sizer.increase(name, delta, false)
}

// IncreaseSizeFresh is IncreaseSize with every instance ordered anew,
// none started from the group's standby pool: a forecast orders a boot's
// lead ahead of the pods it expects, and leaves the pool to those it
// expects within a start's (StandbyReady).
func (m *Manager) IncreaseSizeFresh(_ context.Context, name string, delta int) error {
	if err := m.writable("IncreaseSizeFresh"); err != nil {
		return err
	}
	return m.sizer.increase(name, delta, true)
}

// SetStandbySize sizes a group's standby pool for the demand a forecast
// expects: n is bounded below by standby.size and above by
// standby.forecast.maxSize, and the pool is brought to it (warmed
// instances ordered, or the newest let go). It returns the size in force;
// a group without standby.forecast is an error.
func (m *Manager) SetStandbySize(_ context.Context, name string, n int) (int, error) {
	if err := m.writable("SetStandbySize"); err != nil {
		return 0, err
	}
	s := m.store
	s.mu.Lock()
	defer s.mu.Unlock()
	return m.sizer.setStandbySize(name, n)
}

// replacementKey marks a context of ForReplacement.
type replacementKey struct{}

// ForReplacement marks a DeleteNodes that replaces its nodes (rotation
// past a lifetime, defragmentation, drift): they are deleted, never
// returned to a standby pool, where they would live on.
func ForReplacement(ctx context.Context) context.Context {
	return context.WithValue(ctx, replacementKey{}, true)
}

// replacing reports whether ctx comes from ForReplacement.
func replacing(ctx context.Context) bool {
	v, _ := ctx.Value(replacementKey{}).(bool)
	return v
}

// StandbyReturn is how many of a group's nodes a scale-down would send
// back to its standby pool now, stopped rather than deleted
// (sizer.returnLocked), and how long such a node stays unneeded first
// (standby.scaleDownAfter; 0: the front end's own delay). room is 0
// without a pool, on a cloud that cannot stop instances, or with the pool
// full.
func (m *Manager) StandbyReturn(name string) (room int, after time.Duration) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[name]
	if !ok || g.cfg.StandbyMaxSize() == 0 {
		return 0, 0
	}
	if _, ok := m.sizer.clients[g.cfg.Cloud].stopper(); !ok {
		return 0, 0
	}
	return max(g.standbySize()-g.counts[stateStandby], 0), g.cfg.Standby.StandbyScaleDownAfter()
}

// StandbyReady is how many instances of a group's standby pool an
// IncreaseSize could take now: stopped ones (but those whose start was
// refused within sync.offeringBackoff), and ones still warming for the
// pool. 0 without a pool.
func (m *Manager) StandbyReady(name string) int {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[name]
	if !ok || g.cfg.StandbyMaxSize() == 0 || g.counts[stateStandby] == 0 {
		return 0
	}
	n, now := 0, m.clock.Now()
	for _, mem := range g.members {
		if g.takeRank(mem, now, m.offerings.backoff) >= 0 {
			n++
		}
	}
	return n
}

// DecreaseTargetSize lowers a group's target by -delta without touching
// any running instance: it withdraws orders not yet fulfilled.
func (m *Manager) DecreaseTargetSize(_ context.Context, name string, delta int) error {
	if err := m.writable("DecreaseTargetSize"); err != nil {
		return err
	}
	return m.sizer.decrease(name, delta)
}

// DeleteNodes deletes the instances with the given provider IDs from a
// group and lowers its target accordingly; see sizer.deleteNodes. While
// the group's standby pool is short, a healthy node goes back to it
// instead, unless ctx comes from ForReplacement.
func (m *Manager) DeleteNodes(ctx context.Context, name string, providerIDs []string) error {
	if err := m.writable("DeleteNodes"); err != nil {
		return err
	}
	return m.sizer.deleteNodes(ctx, name, providerIDs)
}

// Backoff reports whether a group gets no new orders now, and why: its
// orders failed for quota, configuration or cost reasons, or its instances
// never registered. Stock-outs back off single offerings instead; a group
// whose every offering stocked out has ok true with reason OutOfResources.
func (m *Manager) Backoff(name string) (Backoff, bool) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	if b, ok := m.offerings.backedOff(name); ok {
		return Backoff{Reason: b.reason, Message: b.message, Until: b.until}, true
	}
	g, ok := s.groups[name]
	if !ok {
		return Backoff{}, false
	}
	if _, usable, _ := m.offerings.groupPrices(g); !usable {
		until := time.Time{}
		for _, k := range candidates(g) {
			if t, ok := m.offerings.stockedOut[g.cfg.Cloud][k]; ok && (until.IsZero() || t.Before(until)) {
				until = t
			}
		}
		return Backoff{Reason: CodeOutOfResources, Message: "no offering of the group is available", Until: until}, true
	}
	return Backoff{}, false
}

// Launch orders one instance outside any group: see LaunchRequest.
func (m *Manager) Launch(ctx context.Context, req LaunchRequest) (Instance, error) {
	if err := m.writable("Launch"); err != nil {
		return Instance{}, err
	}
	return m.launcher.launch(ctx, req)
}

// Terminate deletes a launched instance by provider ID (or alias).
func (m *Manager) Terminate(ctx context.Context, providerID string) error {
	if err := m.writable("Terminate"); err != nil {
		return err
	}
	return m.launcher.terminate(ctx, providerID)
}

// Launched returns the instances launched by owner ("" for every owner).
func (m *Manager) Launched(owner string) []Instance { return m.launcher.launched(owner) }

// LaunchedInstance returns the launched instance with a provider ID (or
// one of its aliases), from memory.
func (m *Manager) LaunchedInstance(providerID string) (Instance, bool) {
	return m.launcher.find(providerID, false)
}

// LaunchedNamed returns the launched instance of a name, from memory.
func (m *Manager) LaunchedNamed(name string) (Instance, bool) { return m.launcher.find(name, true) }

// Check loads each cloud's catalog (of the clouds named, or of all) and
// resolves every group against it, without listing or ordering anything:
// a configuration that passes starts.
func (m *Manager) Check(ctx context.Context, clouds ...string) error {
	for cloudName := range m.clients {
		if len(clouds) > 0 && !slices.Contains(clouds, cloudName) {
			continue
		}
		if err := m.catalog.load(ctx, cloudName); err != nil {
			return err
		}
	}
	return nil
}

// Advice says, for each group, what its cloud will order differently from
// its configuration (today: an image its instance type does not accept,
// replaced by one it does). Call it after Check; it asks the clouds'
// catalogs, so it may call them.
func (m *Manager) Advice(ctx context.Context, clouds ...string) []string {
	var out []string
	for i, g := range m.cfg.NodeGroups {
		if len(clouds) > 0 && !slices.Contains(clouds, g.Cloud) {
			continue
		}
		c, ok := m.clients[g.Cloud]
		if !ok {
			continue
		}
		if a, ok := c.p.(cloud.Advisor); ok {
			for _, f := range a.Advise(ctx, g.Name, g.InstanceType, g.Locations, g.CloudOptions) {
				out = append(out, fmt.Sprintf("nodeGroups[%d]: %s", i, f))
			}
		}
		chooser, ok := c.p.(cloud.ImageChooser)
		if !ok {
			continue
		}
		chosen, changed, err := chooser.Image(ctx, g.InstanceType, g.Image)
		if err == nil && changed {
			asked := g.Image
			if asked == "" {
				asked = "the cloud's default image"
			}
			out = append(out, fmt.Sprintf("nodeGroups[%d].image: %s does not run on %s; orders will use %s", i, asked, g.InstanceType, chosen))
		}
	}
	return out
}

// CheckOptions asks a cloud whether it takes these cloudOptions (a
// GPUNodeClass's, say), as start-up asks for the config's groups; an
// unconfigured cloud takes none.
func (m *Manager) CheckOptions(cloudName string, opts map[string]string) []*cloud.OptionError {
	c, ok := m.clients[cloudName]
	if !ok || len(opts) == 0 {
		return nil
	}
	return c.p.CheckOptions(opts)
}

// checkOptions asks each cloud whether it takes its groups' cloudOptions,
// so that a misspelt key or a bad value stops start-up, naming the field,
// rather than fail every order.
func checkOptions(cfg *config.Config, providers map[string]cloud.Provider) error {
	var errs []error
	for i, g := range cfg.NodeGroups {
		if len(g.CloudOptions) == 0 {
			continue
		}
		for _, e := range providers[g.Cloud].CheckOptions(g.CloudOptions) {
			errs = append(errs, fmt.Errorf("nodeGroups[%d].cloudOptions[%s]: %s", i, e.Key, e.Detail))
		}
	}
	return errors.Join(errs...)
}
