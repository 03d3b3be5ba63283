package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Options are a Manager's collaborators. All are optional.
type Options struct {
	// Clock drives every timer; default the real clock.
	Clock clock.WithTicker
	// Logger receives the core's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the core's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Registered reports whether a Node with the provider ID has joined the
	// cluster. When set, running instances that never register within the
	// leaked-instance grace period are treated as leaked.
	Registered func(providerID string) bool
	// Bootstrap renders the startup script of each instance before it is
	// ordered; nil orders instances with no user data.
	Bootstrap Bootstrapper
	// Manage selects the groups this Manager scales; nil means all. The
	// instances of the other configured groups are left alone (another
	// process, the cluster-autoscaler provider or the NodeProvisioner
	// controller, owns them) and are never taken for leaks.
	Manage func(group string) bool
}

// Bootstrapper renders the user data an instance boots with.
type Bootstrapper interface {
	UserData(ctx context.Context, spec cloud.CreateSpec) (string, error)
}

// Releaser is implemented by Bootstrappers that hold something per
// instance (a minted join token, a script on the script server); Release is
// called when an order for the instance did not go through.
type Releaser interface {
	Release(ctx context.Context, name string)
}

// Manager is the node-group core. Reads answer from memory; cloud calls run
// in the background. Create it with New, then call Start.
type Manager struct {
	cfg     *config.Config
	clock   clock.WithTicker
	log     *slog.Logger
	metrics *metrics
	opts    Options

	clients map[string]*client // by cloud name
	order   []string           // group names in config order

	mu     sync.RWMutex
	groups map[string]*group
	// foreign are configured groups another process manages.
	foreign map[string]bool
	// byProviderID indexes every member (and its aliases) by provider ID.
	byProviderID map[string]*member
	// unavailable holds stocked-out offerings per cloud until the time given.
	unavailable map[string]map[cloud.OfferingKey]time.Time
	// offerings caches each cloud's last Offerings answer.
	offerings map[string]map[cloud.OfferingKey]cloud.Offering
	// leaks tracks ownerless and unregistered instances.
	leaks map[leakKey]*leak
	// lastSync is when each cloud's last successful list started.
	lastSync map[string]time.Time

	syncNow map[string]chan struct{}
	wg      sync.WaitGroup
	ctx     context.Context
}

// group is one node group's state.
type group struct {
	cfg config.NodeGroup
	// index is the group's position in the config file, for error paths.
	index    int
	itype    cloud.InstanceType
	gpuModel gpu.Model
	target   int
	members  map[string]*member // by instance name
	template templateCache
}

// phase is where a member is in its life.
type phase int

const (
	// phaseCreating: the create is queued or in flight, or its outcome is
	// being resolved.
	phaseCreating phase = iota
	// phaseCreated: the cloud knows the instance (pending or running).
	phaseCreated
	// phaseFailed: the create gave up; the slot waits for its deletion.
	phaseFailed
	// phaseDeleting: the instance is being deleted; it no longer counts
	// toward the target.
	phaseDeleting
)

// member is one slot of a group: an instance, or the order for one.
type member struct {
	name       string
	group      string
	providerID string
	phase      phase
	inst       *cloud.Instance
	offering   cloud.OfferingKey
	price      float64
	createdAt  time.Time
	// recordedAt is when the core learnt of the cloud instance; a list that
	// started earlier cannot be expected to show it.
	recordedAt time.Time
	// cancelled asks an in-flight create to delete what it creates.
	cancelled bool
	errCode   string
	errMsg    string
	errClass  ErrorClass
}

// leakKey names an instance suspected of being leaked.
type leakKey struct {
	cloud, name string
	// unregistered: in a group, but its Node never joined; otherwise the
	// instance belongs to no configured group.
	unregistered bool
}

// leak is what is known of a suspected leak.
type leak struct {
	first    time.Time
	reported bool
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
	m := &Manager{
		cfg:          cfg,
		clock:        opts.Clock,
		log:          opts.Logger,
		metrics:      newMetrics(opts.Registerer),
		opts:         opts,
		clients:      map[string]*client{},
		groups:       map[string]*group{},
		foreign:      map[string]bool{},
		byProviderID: map[string]*member{},
		unavailable:  map[string]map[cloud.OfferingKey]time.Time{},
		offerings:    map[string]map[cloud.OfferingKey]cloud.Offering{},
		leaks:        map[leakKey]*leak{},
		lastSync:     map[string]time.Time{},
		syncNow:      map[string]chan struct{}{},
	}
	for name, p := range providers {
		m.clients[name] = newClient(p, cfg.Sync.RequestsPerSecond, cfg.Sync.MaxConcurrentCreates, opts.Clock, m.metrics)
		m.unavailable[name] = map[cloud.OfferingKey]time.Time{}
		m.syncNow[name] = make(chan struct{}, 1)
	}
	for i, g := range cfg.NodeGroups {
		if _, ok := m.clients[g.Cloud]; !ok {
			return nil, fmt.Errorf("node group %q: cloud %q has no provider", g.Name, g.Cloud)
		}
		if opts.Manage != nil && !opts.Manage(g.Name) {
			m.foreign[g.Name] = true
			continue
		}
		m.groups[g.Name] = &group{cfg: g, index: i, members: map[string]*member{}}
		m.order = append(m.order, g.Name)
	}
	return m, nil
}

// Start loads each cloud's catalog, rebuilds every group from the cloud's
// instance list, and starts the background sync. It returns an error when a
// group's instance type or MIG profile does not exist, or a cloud cannot be
// listed; background work stops when ctx is done.
func (m *Manager) Start(ctx context.Context) error {
	m.ctx = ctx
	for cloudName, c := range m.clients {
		if err := m.loadCatalog(ctx, cloudName, c); err != nil {
			return err
		}
		m.refreshOfferings(ctx, cloudName, c)
		if err := m.syncCloud(ctx, cloudName, c, true); err != nil {
			return fmt.Errorf("initial list of cloud %q: %w", cloudName, err)
		}
	}
	for cloudName, c := range m.clients {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.syncLoop(ctx, cloudName, c)
		}()
	}
	return nil
}

// Wait blocks until all background work has stopped (after Start's context
// is done).
func (m *Manager) Wait() { m.wg.Wait() }

// loadCatalog resolves each group's instance type on one cloud, with retries
// for transient failures.
func (m *Manager) loadCatalog(ctx context.Context, cloudName string, c *client) error {
	var types []cloud.InstanceType
	err := retry(ctx, m.clock, 5, func() error {
		var err error
		types, err = c.instanceTypes(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("catalog of cloud %q: %w", cloudName, err)
	}
	byName := make(map[string]cloud.InstanceType, len(types))
	for _, t := range types {
		byName[t.Name] = t
	}
	var errs []error
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range m.order {
		g := m.groups[name]
		i := g.index
		if g.cfg.Cloud != cloudName {
			continue
		}
		t, ok := byName[g.cfg.InstanceType]
		if !ok {
			errs = append(errs, fmt.Errorf("nodeGroups[%d].instanceType: %q is not in the catalog of cloud %q", i, g.cfg.InstanceType, cloudName))
			continue
		}
		g.itype = t
		if t.GPUModel != "" {
			model, ok := gpu.LookupModel(t.GPUModel)
			if !ok {
				errs = append(errs, fmt.Errorf("nodeGroups[%d].instanceType: GPU model %q of %q is unknown", i, t.GPUModel, t.Name))
				continue
			}
			g.gpuModel = model
		}
		if g.cfg.MIG != nil {
			if t.GPUCount == 0 {
				errs = append(errs, fmt.Errorf("nodeGroups[%d].mig: instance type %q has no GPU", i, t.Name))
				continue
			}
			if _, err := gpu.MIGResources(t.GPUModel, g.cfg.MIG.Profile, g.cfg.MIG.Strategy, t.GPUCount); err != nil {
				errs = append(errs, fmt.Errorf("nodeGroups[%d].mig: %w", i, err))
				continue
			}
		}
		g.template = templateCache{}
	}
	return errors.Join(errs...)
}

// retry runs fn up to attempts times while it fails with a retryable error,
// backing off exponentially from one second.
func retry(ctx context.Context, clk clock.Clock, attempts int, fn func() error) error {
	delay := time.Second
	var err error
	for i := 0; i < attempts; i++ {
		if err = fn(); err == nil || !cloud.Retryable(err) {
			return err
		}
		if i == attempts-1 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(delay):
		}
		delay *= 2
	}
	return err
}

// Groups returns every group in configuration order.
func (m *Manager) Groups() []Info {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Info, 0, len(m.order))
	for _, name := range m.order {
		out = append(out, m.groups[name].info())
	}
	return out
}

// Group returns one group's description.
func (m *Manager) Group(name string) (Info, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g, ok := m.groups[name]
	if !ok {
		return Info{}, false
	}
	return g.info(), true
}

func (g *group) info() Info {
	return Info{
		Name:         g.cfg.Name,
		Cloud:        g.cfg.Cloud,
		InstanceType: g.cfg.InstanceType,
		MinSize:      g.cfg.MinSize,
		MaxSize:      g.cfg.MaxSize,
		Debug: fmt.Sprintf("%s: %s on %s in %v (%s), size %d..%d, target %d",
			g.cfg.Name, g.cfg.InstanceType, g.cfg.Cloud, g.cfg.Locations, g.cfg.CapacityPolicy, g.cfg.MinSize, g.cfg.MaxSize, g.target),
	}
}

// GroupForProviderID returns the group that owns the instance with the
// given provider ID (canonical or alias).
func (m *Manager) GroupForProviderID(providerID string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mem, ok := m.byProviderID[providerID]
	if !ok {
		return "", false
	}
	return mem.group, true
}

// TargetSize returns a group's target size: running instances plus those
// being created or that failed to be created, not those being deleted.
func (m *Manager) TargetSize(name string) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g, ok := m.groups[name]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	return g.target, nil
}

// Instances returns a group's members, sorted by name.
func (m *Manager) Instances(name string) ([]Instance, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g, ok := m.groups[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	out := make([]Instance, 0, len(g.members))
	for _, mem := range g.members {
		out = append(out, mem.view())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (mem *member) view() Instance {
	in := Instance{
		ProviderID:   mem.providerID,
		Name:         mem.name,
		InstanceType: mem.offering.InstanceType,
		Location:     mem.offering.Location,
		CapacityType: string(mem.offering.CapacityType),
		CreatedAt:    mem.createdAt,
	}
	switch mem.phase {
	case phaseCreating:
		in.State = StateCreating
	case phaseFailed:
		in.State = StateCreating
		in.ErrorCode, in.ErrorMessage, in.ErrorClass = mem.errCode, mem.errMsg, mem.errClass
	case phaseDeleting:
		in.State = StateDeleting
	case phaseCreated:
		in.State = StateCreating
		if mem.inst != nil && mem.inst.State == cloud.StateRunning {
			in.State = StateRunning
		}
	}
	return in
}

// InstanceIP returns the address the cloud reports for an instance, by
// name; ok is false for names the core does not know or that have none yet.
func (m *Manager) InstanceIP(name string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, g := range m.groups {
		if mem, ok := g.members[name]; ok && mem.inst != nil && mem.inst.IP != "" {
			return mem.inst.IP, true
		}
	}
	return "", false
}

// AutoscalingOptions returns a group's cluster-autoscaler option overrides.
func (m *Manager) AutoscalingOptions(name string) (*config.AutoscalingOptions, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g, ok := m.groups[name]
	if !ok || g.cfg.AutoscalingOptions == nil {
		return nil, false
	}
	return g.cfg.AutoscalingOptions, true
}

// GPUTypes returns the accelerator label values of every GPU group.
func (m *Manager) GPUTypes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, name := range m.order {
		acc := m.groups[name].gpuModel.Accelerator
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
	m.mu.RLock()
	defer m.mu.RUnlock()
	for cloudName, last := range m.lastSync {
		if m.clock.Since(last) > m.cfg.Sync.Period.Duration {
			m.kick(cloudName)
		}
	}
	return nil
}

// kick asks for an early sync of one cloud without blocking.
func (m *Manager) kick(cloudName string) {
	select {
	case m.syncNow[cloudName] <- struct{}{}:
	default:
	}
}
