// Package daemon wires what one gpuscaler process runs under its front
// end: the clouds, the cluster's Node index, the script server and join
// token reaper (owned by the process, across config reloads), and the
// node-group core of the configuration in force, rebuilt on each reload.
// The provider, the controller and the Karpenter operator build it the
// same way; whatever writes to a cloud runs only inside Lead, which a
// command calls while its replica holds the leader lease.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/gpuscaler/gpuscaler/internal/bootstrap"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
	"github.com/gpuscaler/gpuscaler/internal/forecast/configmap"
	"github.com/gpuscaler/gpuscaler/internal/forecast/standby"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/pending"
	"github.com/gpuscaler/gpuscaler/internal/serve"
)

// Options configure a Runtime.
type Options struct {
	// Owner is the managedBy value of the groups this process scales
	// (config.ManagedBy*); the others are left to their owner. Empty
	// takes every group (Preflight checks them all).
	Owner string
	// Getenv reads credentials; default os.Getenv.
	Getenv func(string) string
	// EnvOrigin says where Getenv's value of a variable came from ("the
	// environment", a .env file's path), so that an error about a value
	// names its source; default none.
	EnvOrigin func(string) string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Kubeconfig, when set, replaces the config's kubeconfig (the
	// --kubeconfig flag); KubeContext picks a context of it other than
	// its current one (--context). See RestConfig.
	Kubeconfig, KubeContext string
	// Kube is the cluster access used when neither the config nor
	// Kubeconfig names one: the controller's or Karpenter's own, which
	// need the cluster; nil leaves the process without cluster access
	// (the provider with no kubeconfig).
	Kube *rest.Config
	// Override, when set, puts the command line's settings over every
	// configuration file Watch reads, as they were put over the first.
	Override func(*config.Config)
	// Namespace is where the process runs the pods that pull standby
	// instances' images: its own; default PodNamespace().
	Namespace string
	// Version is the binary's stamped version (gpuscaler_build_info);
	// empty or "dev" reads the module's.
	Version string
	// RestartToApply makes Watch check a change that only a restart puts
	// in force (ErrRestartNeeded) as start-up would check it, online, and
	// then end with ErrRestartToApply, so that the process exits and its
	// supervisor starts it again with the new file, in the same pod. A
	// change that fails the checks is refused like any bad change, and the
	// process keeps serving: a bad config never costs the only replica.
	RestartToApply bool

	// preflight, set by Preflight, leaves out of Build what only the
	// place the process runs in can answer.
	preflight *PreflightOptions
}

// Runtime is one process's clouds, script server and core. Build it, run
// its background work with Run, and call Lead while this replica leads.
type Runtime struct {
	opts    Options
	log     *slog.Logger
	clouds  *clouds
	pending *pending.Pods // nil without cluster access
	// standby sizes the standby pools of groups with standby.forecast
	// while this replica leads.
	standby *standby.Sizer
	scripts *bootstrap.Server
	process *prometheus.Registry
	metrics *nodegroup.Metrics // the cores', registered in process
	evicted *serve.Evictions   // the listeners', registered in process
	scfg    *config.Config     // the config the process was built with

	// file is the configuration file's content in force, and extra the
	// node groups that come from the cluster (SetExtraGroups); the core
	// runs their union. Guarded by switching.
	file  *config.Config
	extra []config.NodeGroup

	// mu guards gen; switching serializes Lead and Reload; writes pass
	// through gate, which holds them while one core hands over to the
	// next.
	mu        sync.RWMutex
	gen       *generation
	switching sync.Mutex
	leadCtx   context.Context // set while leading
	gate      *gate
	// groupObject is SetGroupObject's, for the waits' pool label.
	groupObject atomic.Pointer[func(group string) *corev1.ObjectReference]
	// reloads counts the config file's changes by result (Watch).
	reloads *prometheus.CounterVec
	// install is this install's ID, recorded with every order (see
	// installID); "" when unknown.
	install string
}

// generation is one configuration's core.
type generation struct {
	cfg    *config.Config
	core   *nodegroup.Manager
	cancel context.CancelFunc // set while the core runs
}

// Build builds the clouds, the Node index, the script server and the core
// of cfg. Nothing talks to a cloud until Lead.
func Build(ctx context.Context, cfg *config.Config, opts Options) (*Runtime, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.EnvOrigin == nil {
		opts.EnvOrigin = func(string) string { return "" }
	}
	if opts.Namespace == "" {
		opts.Namespace = PodNamespace(opts.Getenv)
	}
	if opts.preflight.readsFiles() {
		warnLooseSecretFiles(cfg, opts.Logger)
	}
	cs, err := buildClouds(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	r := &Runtime{opts: opts, log: opts.Logger, clouds: cs, scfg: cfg, file: cfg, process: prometheus.NewRegistry(), gate: newGate()}
	if opts.preflight == nil {
		if r.install, err = installID(ctx, cfg, cs.kube); err != nil {
			return nil, err
		}
		if r.install == "" && realClouds(cfg) {
			r.log.Warn("no install ID: without cluster access or ownership.installID, instances are ordered without one, and those " +
				"of another gpuscaler sharing this clusterName on the same cloud account are not told apart")
		}
	}
	// Until Lead starts the core, writes wait for it (bounded), then are
	// refused by the core that does not run.
	r.gate.close()
	r.process.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(opts.Version))
	// The cores of every configuration share one set of series: a reload
	// does not reset the counters.
	r.metrics = nodegroup.NewMetrics(r.process)
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuscaler_config_reloads_total",
		Help: "Changes of the config file seen, by result: applied; refused (the configuration in force stays; the log and a ConfigRejected Event on the pod and, in controller mode, on each NodeProvisioner say why); restart (it needed a restart and passed start-up's checks: the process exited to start with it).",
	}, []string{"result"})
	for _, result := range []string{"applied", "refused", "restart"} {
		r.reloads.WithLabelValues(result)
	}
	r.process.MustRegister(r.reloads)
	if opts.preflight == nil {
		if pod := ownPod(opts.Getenv); pod != nil && cs.nodes != nil {
			// The process's own Events, and those of orders no Node
			// carries (a stock-out on every offering, a cost cap), go to
			// its pod, through the Node index's recorder.
			cs.nodes.SetFallback(pod)
		}
	}
	if r.evicted, err = serve.NewEvictions(r.process, opts.Logger); err != nil {
		return nil, err
	}
	if cs.kube != nil && cs.nodes != nil {
		r.pending = pending.New(cs.kube, nil)
		// Each GPU pod's wait by its node's pool, group and how the node
		// came, from the Node index and the core in force (memory).
		r.pending.SetOrigin(pending.NodeOrigin(cs.nodes.Node,
			func(providerID string) (string, bool) { return r.Core().GroupForProviderID(providerID) },
			r.poolOf,
			func(group, providerID string) time.Time {
				insts, _ := r.Core().Instances(group)
				for _, in := range insts {
					if in.ProviderID == providerID {
						return in.StartedAt
					}
				}
				return time.Time{}
			}))
		r.process.MustRegister(r.pending)
	}
	if r.scripts, err = newScriptServer(cfg, r.InstanceIP, r.process, opts); err != nil {
		return nil, err
	}
	var store forecast.Store // in memory only without cluster access
	if cs.kube != nil {
		store = &configmap.Store{ConfigMaps: cs.kube.CoreV1().ConfigMaps(opts.Namespace), Name: StandbyForecastConfigMap}
	}
	r.standby, err = standby.New(standby.Options{Core: func() standby.Core { return r.Core() }, Groups: r.standbyGroups,
		Store: store, Logger: opts.Logger.With("component", "standby-forecast"), Registerer: r.process})
	if err != nil {
		return nil, err
	}
	gen, err := r.newGeneration(cfg)
	if err != nil {
		return nil, err
	}
	r.gen = gen
	return r, nil
}

// newGeneration builds a configuration's core, not started.
func (r *Runtime) newGeneration(cfg *config.Config) (*generation, error) {
	renderer, err := newRenderer(cfg, r.clouds, r.scripts, r.log)
	if err != nil {
		return nil, err
	}
	opts := nodegroup.Options{Logger: r.log, Metrics: r.metrics, Manage: managedBy(cfg, r.opts.Owner), GPULabel: cfg.Provider.GPULabel,
		Install: r.install}
	if renderer != nil {
		opts.Bootstrap = renderer
	}
	if r.clouds.nodes != nil {
		opts.Nodes, opts.Events = r.clouds.nodes, r.clouds.nodes
	}
	core, err := nodegroup.New(cfg, r.clouds.providers, opts)
	if err != nil {
		return nil, err
	}
	return &generation{cfg: cfg, core: core}, nil
}

// StandbyForecastConfigMap is the ConfigMap, in the process's namespace,
// that keeps what the groups' standby forecasts learned.
const StandbyForecastConfigMap = "gpuscaler-standby-forecast"

// standbyGroups are the groups in force this process scales whose
// standby pool a forecast sizes.
func (r *Runtime) standbyGroups() []config.NodeGroup {
	cfg := r.Config()
	owned := managedBy(cfg, r.opts.Owner)
	var out []config.NodeGroup
	for _, g := range cfg.NodeGroups {
		if owned(g.Name) && g.Standby != nil && g.Standby.Forecast != nil {
			out = append(out, g)
		}
	}
	return out
}

// managedBy selects the groups one owner scales.
func managedBy(cfg *config.Config, owner string) func(string) bool {
	owned := map[string]bool{}
	for _, g := range cfg.NodeGroups {
		owned[g.Name] = owner == "" || g.ManagedBy == owner
	}
	return func(group string) bool { return owned[group] }
}

// Run runs the process's background work (the Node index, the pending GPU
// pods, the simulated cloud's kubelets, the script server, the join token
// reaper) until ctx is done. The first failure of any of them is
// returned: the command stops on it rather than run without, say, a script
// server nodes need.
func (r *Runtime) Run(ctx context.Context) error {
	eg, ctx := errgroup.WithContext(ctx)
	for _, run := range r.clouds.background {
		eg.Go(func() error { return run(ctx) })
	}
	if r.pending != nil {
		eg.Go(func() error { return r.pending.Run(ctx) })
	}
	if r.scripts != nil {
		eg.Go(func() error { return serveScripts(ctx, r.scripts, r.scfg.ScriptServer, r.evicted, r.log) })
	}
	if r.clouds.kube != nil && mintsTokens(r.scfg) {
		eg.Go(func() error { return reapTokens(ctx, r.clouds, r.log) })
	}
	return eg.Wait()
}

// mintsTokens reports whether any group mints bootstrap tokens, which
// the reaper deletes; a tokenSecretRef's Secret is the operator's, and
// deleting kube-system's bootstrap tokens is granted only to minting configs.
func mintsTokens(cfg *config.Config) bool {
	for _, g := range cfg.NodeGroups {
		if b := g.Bootstrap; b != nil && b.MintToken {
			return true
		}
	}
	return false
}

// Lead runs the core of the configuration in force until ctx is done: the
// first list rebuilds every group, then the core orders, deletes and syncs.
// Call it only while this replica holds the leader lease (or when it runs
// alone); it returns when ctx is done, with the core stopped. started, if
// not nil, hears once whether the core started.
func (r *Runtime) Lead(ctx context.Context, started func(error)) error {
	if started == nil {
		started = func(error) {}
	}
	r.switching.Lock()
	r.mu.RLock()
	gen := r.gen
	r.mu.RUnlock()
	err := r.start(ctx, gen)
	r.gate.open()
	if err != nil {
		r.switching.Unlock()
		started(err)
		return err
	}
	r.leadCtx = ctx
	r.switching.Unlock()
	started(nil)
	sized := make(chan struct{})
	go func(period time.Duration) {
		defer close(sized)
		_ = r.standby.Run(ctx, period)
	}(gen.cfg.Sync.Period.Duration)
	r.log.Info("leading: the node-group core runs", "groups", len(gen.core.Groups()))
	<-ctx.Done()
	<-sized // the standby sizer's last step is done with the core
	r.switching.Lock()
	defer r.switching.Unlock()
	r.leadCtx = nil
	r.mu.RLock()
	gen = r.gen
	r.mu.RUnlock()
	// The writes in flight return before the core stops; later ones are
	// refused by the stopped core.
	r.gate.close()
	gen.stop()
	r.gate.open()
	return nil
}

// start starts a generation's core under ctx.
func (r *Runtime) start(ctx context.Context, gen *generation) error {
	gctx, cancel := context.WithCancel(ctx)
	if err := gen.core.Start(gctx); err != nil {
		cancel()
		gen.core.Wait()
		return fmt.Errorf("start node groups: %w", err)
	}
	gen.cancel = cancel
	return nil
}

// stop stops a generation's core and waits for its background work.
func (g *generation) stop() {
	if g.cancel != nil {
		g.cancel()
		g.core.Wait()
		g.cancel = nil
	}
}

// ErrRestartNeeded is a reload that changes what the process owns (clouds,
// cluster access, the script server): it needs a restart.
var ErrRestartNeeded = errors.New("restart gpuscaler to apply this change")

// ErrRestartToApply ends Watch (with Options.RestartToApply) when a change
// that needs a restart passed start-up's checks: the process should exit
// and be started again with it.
var ErrRestartToApply = errors.New("exiting to start again with the changed configuration")

// Reload puts a new configuration file in force, with the extra groups
// (SetExtraGroups). It is refused (and the old one stays) when the clouds,
// kubeconfig or script server section changed, or when its groups do not
// resolve against the clouds' catalogs. While leading, the old core stops
// before the new one starts, so two cores never order at once; if the new
// one cannot start, the old one starts again.
func (r *Runtime) Reload(ctx context.Context, cfg *config.Config) error {
	r.switching.Lock()
	defer r.switching.Unlock()
	return r.apply(ctx, cfg, r.extra)
}

// SetExtraGroups puts node groups that come from the cluster rather than
// the file (a NodeProvisioner's existing instance groups) in force beside
// the file's, replacing the previous extra groups. It is refused, and
// the groups in force stay, when the union is not a valid configuration
// (a name taken twice, say) or does not resolve against the catalogs.
func (r *Runtime) SetExtraGroups(ctx context.Context, groups []config.NodeGroup) error {
	r.switching.Lock()
	defer r.switching.Unlock()
	return r.apply(ctx, r.file, groups)
}

// FileGroups returns the node groups of the configuration file in force
// (without the extra groups).
func (r *Runtime) FileGroups() []config.NodeGroup {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.file.NodeGroups
}

// AdoptInstanceGroups returns the MIGs the configuration in force hands
// over to NodeProvisioners (clouds.gcp.adoptInstanceGroups).
func (r *Runtime) AdoptInstanceGroups() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.file.Clouds.GCP == nil {
		return nil
	}
	return r.file.Clouds.GCP.AdoptInstanceGroups
}

// union returns the file's configuration with the extra groups added,
// defaulted and validated.
func union(file *config.Config, extra []config.NodeGroup) (*config.Config, error) {
	if len(extra) == 0 {
		return file, nil
	}
	cfg := *file
	cfg.NodeGroups = append(slices.Clone(file.NodeGroups), extra...)
	if err := config.Complete(&cfg); err != nil {
		return nil, fmt.Errorf("node groups from the cluster: %w", err)
	}
	return &cfg, nil
}

// apply puts file and extra in force; the caller holds switching.
func (r *Runtime) apply(ctx context.Context, file *config.Config, extra []config.NodeGroup) error {
	cfg, err := union(file, extra)
	if err != nil {
		return err
	}
	switch {
	case !reflect.DeepEqual(cfg.Clouds, r.scfg.Clouds):
		return fmt.Errorf("the clouds section changed: %w", ErrRestartNeeded)
	case cfg.Kubeconfig != r.scfg.Kubeconfig:
		return fmt.Errorf("kubeconfig changed: %w", ErrRestartNeeded)
	case cfg.Ownership.InstallID != r.scfg.Ownership.InstallID:
		return fmt.Errorf("ownership.installID changed: %w", ErrRestartNeeded)
	case !reflect.DeepEqual(cfg.ScriptServer, r.scfg.ScriptServer):
		return fmt.Errorf("%s changed: %w", changedField("scriptServer", cfg.ScriptServer, r.scfg.ScriptServer), ErrRestartNeeded)
	case !reflect.DeepEqual(cfg.Provider, r.scfg.Provider):
		return fmt.Errorf("%s changed: %w", changedField("provider", cfg.Provider, r.scfg.Provider), ErrRestartNeeded)
	case !reflect.DeepEqual(cfg.Metrics, r.scfg.Metrics):
		return fmt.Errorf("%s changed: %w", changedField("metrics", cfg.Metrics, r.scfg.Metrics), ErrRestartNeeded)
	case !reflect.DeepEqual(cloudGroups(cfg), cloudGroups(r.scfg)):
		return fmt.Errorf("groups on Kamatera or Scaleway changed their locations, instance type or cloud options (the cloud is built from them): %w", ErrRestartNeeded)
	}
	next, err := r.newGeneration(cfg)
	if err != nil {
		return err
	}
	if err := next.core.Check(ctx); err != nil {
		return err
	}
	if r.leadCtx != nil {
		// Read ahead while the old core serves: the hand-over below
		// holds writes, and must make no cloud call. GCP lists the MIGs
		// of the groups it is given (setGroups, in the hand-over): with
		// other groups, its list waits for the hand-over.
		if err := next.core.Warm(ctx, listableAhead(r.current().cfg, cfg)); err != nil {
			return err
		}
	}
	r.mu.RLock()
	old := r.gen
	r.mu.RUnlock()
	defer func() {
		r.mu.RLock()
		r.clouds.setGroups(r.gen.cfg)
		r.mu.RUnlock()
	}()
	if r.leadCtx != nil {
		// The handover: writes in flight return, later ones wait; the old
		// core stops, and the new one takes over what it knew before its
		// first list, so that nothing acknowledged or ordered is lost.
		r.gate.close()
		defer r.gate.open()
		old.stop()
		next.core.Inherit(old.core)
		r.clouds.setGroups(cfg)
		if err := r.start(r.leadCtx, next); err != nil {
			r.clouds.setGroups(old.cfg)
			restarted, rerr := r.newGeneration(old.cfg)
			if rerr == nil {
				restarted.core.Inherit(old.core)
				rerr = r.start(r.leadCtx, restarted)
			}
			if rerr != nil {
				return errors.Join(err, fmt.Errorf("and the old configuration did not start again: %w", rerr))
			}
			r.mu.Lock()
			r.gen = restarted
			r.mu.Unlock()
			return err
		}
	}
	r.mu.Lock()
	r.gen = next
	r.file, r.extra = file, extra
	r.mu.Unlock()
	return nil
}

// Watch polls a config file (a mounted ConfigMap included: the content is
// compared, which follows its symlink swaps) and reloads it when it
// changes. report hears every outcome: nil for a reload, the error for a
// refused one (the old configuration stays); the pod the process runs in
// gets each as an Event. It returns nil when ctx is done, or, with
// Options.RestartToApply, an error wrapping ErrRestartToApply when a
// change needs a restart and passed start-up's checks.
func (r *Runtime) Watch(ctx context.Context, path string, period time.Duration, report func(error)) error {
	last, err := config.ReadFile(path)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var restart error
	every(ctx, period, func() {
		data, err := config.ReadFile(path)
		if err != nil || bytes.Equal(data, last) {
			return
		}
		last = data
		cfg, err := config.Decode(data)
		if err == nil && r.opts.Override != nil {
			r.opts.Override(cfg)
		}
		if err == nil {
			err = config.Locate(config.Complete(cfg), data)
		}
		if err == nil {
			err = r.Reload(ctx, cfg)
		}
		if errors.Is(err, ErrRestartNeeded) && r.opts.RestartToApply {
			err = r.checkRestart(ctx, cfg, err)
		}
		switch {
		case errors.Is(err, ErrRestartToApply):
			r.reloads.WithLabelValues("restart").Inc()
			r.log.Info("config change needs a restart and passed start-up's checks; exiting to start with it", "path", path, "change", err)
			restart = err
			stop()
		case err != nil:
			r.reloads.WithLabelValues("refused").Inc()
			r.log.Error("config change refused; keeping the configuration in force", "path", path, "error", err)
		default:
			r.reloads.WithLabelValues("applied").Inc()
			r.log.Info("config reloaded", "path", path)
		}
		if r.clouds.nodes != nil {
			r.clouds.nodes.PodEvent(reloadEvent(path, err))
		}
		report(err)
	})
	return restart
}

// checkRestart runs start-up's checks (Preflight, online: credentials,
// files, every group against its cloud's catalog) on a change that needs
// a restart. It returns ErrRestartToApply with why when the change passes,
// so that the process exits to start with it, or the checks' errors.
func (r *Runtime) checkRestart(ctx context.Context, cfg *config.Config, why error) error {
	opts := r.opts
	opts.Override = nil // already put over cfg
	opts.Owner = ""     // as gpuscaler validate: every group
	if _, err := Preflight(ctx, cfg, opts, PreflightOptions{Online: true}); err != nil {
		return fmt.Errorf("%w; the changed configuration fails start-up's checks: %w", why, err)
	}
	return fmt.Errorf("%w; it passed start-up's checks: %w", why, ErrRestartToApply)
}

// changedField names the first field, under prefix, in which a and b
// (two values of one struct type) differ, by its JSON name; prefix itself
// when none can be named.
func changedField(prefix string, a, b any) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer && !va.IsNil() && !vb.IsNil() {
		va, vb = va.Elem(), vb.Elem()
	}
	if va.Kind() != reflect.Struct || va.Type() != vb.Type() {
		return prefix
	}
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if !f.IsExported() || reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		return changedField(prefix+"."+name, va.Field(i).Interface(), vb.Field(i).Interface())
	}
	return prefix
}

// Config returns the configuration in force.
func (r *Runtime) Config() *config.Config { return r.current().cfg }

// Core returns the node-group core of the configuration in force. Front
// ends that outlive reloads call it for every request.
func (r *Runtime) Core() *nodegroup.Manager { return r.current().core }

func (r *Runtime) current() *generation {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.gen
}

// Gather serves the process's metrics, the core's among them.
func (r *Runtime) Gather() ([]*dto.MetricFamily, error) {
	return r.process.Gather()
}

// Evictions counts what the process's listeners close to make room.
func (r *Runtime) Evictions() *serve.Evictions { return r.evicted }

// Registerer receives a front end's own metrics, for the process's life.
func (r *Runtime) Registerer() prometheus.Registerer { return r.process }

// InstanceIP answers the script server from the core in force.
func (r *Runtime) InstanceIP(name string) (string, bool) { return r.Core().InstanceIP(name) }

// cloudGroup is what a cloud backend built from the node groups reads of
// one group (Kamatera's datacenters and passwords, Scaleway's zones,
// GCP's instance groups).
type cloudGroup struct {
	Name, Cloud, InstanceType string
	Locations                 []string
	Options                   map[string]string
}

// cloudGroups are the groups of the clouds whose backend is built from
// them.
func cloudGroups(cfg *config.Config) []cloudGroup {
	var out []cloudGroup
	for _, g := range cfg.NodeGroups {
		switch g.Cloud {
		case config.CloudKamatera, config.CloudScaleway:
			out = append(out, cloudGroup{Name: g.Name, Cloud: g.Cloud, InstanceType: g.InstanceType, Locations: g.Locations, Options: g.CloudOptions})
		}
	}
	return out
}

// PodNamespace is the namespace the process runs in: POD_NAMESPACE (the
// chart sets it from the downward API), else its service account's, else
// kube-system.
func PodNamespace(getenv func(string) string) string {
	if ns := getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "kube-system"
}
