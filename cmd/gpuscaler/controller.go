package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
)

func newControllerCommand(g *globalFlags) *cobra.Command {
	var src source
	var leaderElect bool
	var metricsAddr string
	var reloadPeriod time.Duration
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the NodeProvisioner controller (GPU pools sized by utilization targets and warm buffers)",
		Long: `controller watches NodeProvisioner objects and sizes their node groups from the config file by
pending GPU pods, a GPU utilization band and a warm buffer of idle GPU nodes. It needs cluster access
(the config's kubeconfig, or in-cluster) and the CRD in deploy/crds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			getenv, err := envWithDotEnv(".env")
			if err != nil {
				return err
			}
			cfg, err := src.load(getenv)
			if err != nil {
				return err
			}
			if cfg.Kubeconfig == "" {
				cfg.Kubeconfig = "in-cluster"
			}
			if metricsAddr != "" {
				cfg.Metrics.Address = metricsAddr
			}
			reloadPath := ""
			if src.configPath != "" && !src.imported() {
				reloadPath = src.configPath
			}
			return runController(cmd.Context(), cfg, reloadPath, reloadPeriod, getenv, leaderElect, log)
		},
	}
	src.addFlags(cmd)
	cmd.Flags().BoolVar(&leaderElect, "leader-elect", true, "elect a leader among replicas (a Lease in the pod's namespace)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-address", "", "overrides metrics.address (host:port, or 0 to turn it off)")
	cmd.Flags().DurationVar(&reloadPeriod, "config-reload-period", 10*time.Second, "how often the config file is checked for changes")
	return cmd
}

// runController runs the NodeProvisioner controller until ctx is done.
// With a native config file, a changed file is picked up without a restart
// (an invalid one is refused and the old one kept); the clouds section needs
// a restart.
func runController(ctx context.Context, cfg *config.Config, cfgPath string, reloadPeriod time.Duration, getenv func(string) string, leaderElect bool, log *slog.Logger) error {
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clouds, err := buildClouds(ctx, cfg, getenv, log)
	if err != nil {
		return err
	}
	for _, run := range clouds.background {
		go func() {
			if err := run(ctx); err != nil {
				log.Error("background task failed", "error", err)
				cancel()
			}
		}()
	}
	gatherer := &swapGatherer{}
	build := func(ctx context.Context, next *config.Config) (provisioner.Runtime, error) {
		if !reflect.DeepEqual(next.Clouds, cfg.Clouds) {
			return nil, errors.New("the clouds section changed: restart gpuscaler to apply it")
		}
		return startRuntime(ctx, next, clouds, gatherer, log)
	}
	core := &provisioner.Swappable{}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		LeaderElection:          leaderElect,
		LeaderElectionID:        "gpuscaler-controller",
		LeaderElectionNamespace: "kube-system",
		HealthProbeBindAddress:  "0",
	})
	if err != nil {
		return err
	}
	reloader := &provisioner.Reloader{Path: cfgPath, Period: reloadPeriod, Core: core, Build: build, Client: mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("gpuscaler"), Logger: log.With("component", "config-reload")}
	if cfgPath != "" {
		if err := reloader.Start(ctx); err != nil {
			return err
		}
		go func() { _ = reloader.Run(ctx) }()
	} else {
		rt, err := build(ctx, cfg)
		if err != nil {
			return err
		}
		defer rt.Stop()
		if err := provisioner.SetRuntime(core, rt); err != nil {
			return err
		}
	}
	var ready atomic.Bool
	if cfg.Metrics.Address != "0" {
		lis, err := net.Listen("tcp", cfg.Metrics.Address)
		if err != nil {
			return fmt.Errorf("metrics.address: %w", err)
		}
		srv := &http.Server{Handler: opsHandler(gatherer, &ready), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = serveHTTP(ctx, srv, lis) }()
		log.Info("serving metrics and health", "address", lis.Addr().String())
	}
	r := &provisioner.Reconciler{Client: mgr.GetClient(), Core: core, Deleter: core, Recorder: mgr.GetEventRecorder("gpuscaler"), Logger: log.With("controller", "nodeprovisioner")}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	log.Info("starting the NodeProvisioner controller", "groups", len(cfg.NodeGroups), "leaderElection", leaderElect, "reload", cfgPath != "")
	ready.Store(true)
	return mgr.Start(ctx)
}

// runtime is one configuration's core and bootstrap, with its own context.
type coreRuntime struct {
	*nodegroup.Manager
	cancel context.CancelFunc
}

// Stop ends the runtime's background work and waits for it.
func (r *coreRuntime) Stop() {
	r.cancel()
	r.Wait()
}

// startRuntime starts the core (and bootstrap) for a configuration.
func startRuntime(ctx context.Context, cfg *config.Config, cs *clouds, g *swapGatherer, log *slog.Logger) (*coreRuntime, error) {
	boot, err := newBootstrap(cfg, cs, log)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := nodegroup.Options{Logger: log, Registerer: reg, Registered: cs.registered, Manage: managedBy(cfg, config.ManagedByNodeProvisioner)}
	if boot.renderer != nil {
		opts.Bootstrap = boot.renderer
	}
	core, err := nodegroup.New(cfg, cs.providers, opts)
	if err != nil {
		return nil, err
	}
	boot.instanceIP = core.InstanceIP
	rctx, cancel := context.WithCancel(ctx)
	if err := core.Start(rctx); err != nil {
		cancel()
		return nil, fmt.Errorf("start node groups: %w", err)
	}
	for _, run := range boot.background {
		go func() { _ = run(rctx) }()
	}
	g.set(reg)
	return &coreRuntime{Manager: core, cancel: cancel}, nil
}

// swapGatherer serves the metrics of the runtime in force.
type swapGatherer struct {
	mu  sync.RWMutex
	cur prometheus.Gatherer
}

func (s *swapGatherer) set(g prometheus.Gatherer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = g
}

// Gather implements prometheus.Gatherer.
func (s *swapGatherer) Gather() ([]*dto.MetricFamily, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cur == nil {
		return nil, nil
	}
	return s.cur.Gather()
}
