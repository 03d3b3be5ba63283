package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/forecast/configmap"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
)

// controllerFlags are the controller command's own flags.
type controllerFlags struct {
	leaderElect      bool
	leaderElectionNS string
	reloadPeriod     time.Duration
	leaseDuration    time.Duration
	leaseRenew       time.Duration
	leaseRetryPeriod time.Duration
	leaderElectionID string
	// forecastConfigMap names the ConfigMap, in the pod's namespace, that
	// keeps what the pools learned of their demand.
	forecastConfigMap string
}

func newControllerCommand(g *globalFlags) *cobra.Command {
	var src source
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the NodeProvisioner controller (GPU pools sized by utilization targets and warm buffers)",
		Example: `  gpuscaler controller --config config.yaml                     # the current kubeconfig context
  gpuscaler controller --config config.yaml --context staging --leader-elect=false`,
		Long: `controller watches NodeProvisioner objects and sizes their node groups from the config file by
pending GPU pods, a GPU utilization band and a warm buffer of idle GPU nodes. It needs cluster access
(--kubeconfig, the config's kubeconfig, else $KUBECONFIG, ~/.kube/config or in-cluster, as kubectl
reads them; --context picks a context) and the CRD in deploy/crds.

Replicas elect a leader; only the leader runs the node-group core (orders, deletes, min sizes,
leak clean-up) and the reconciler. Every replica serves health and metrics and follows config
changes, so a standby takes over with the configuration in force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			env := src.environ(log)
			cfg, err := src.load(cmd.Context(), env)
			if err != nil {
				return err
			}
			for _, w := range src.warnings {
				log.Warn(w)
			}
			if f.leaderElectionNS == "" {
				f.leaderElectionNS = daemon.PodNamespace(os.Getenv)
			}
			opts := env.runtimeOptions(config.ManagedByNodeProvisioner, log, g.kube)
			opts.Override = src.override
			return runController(cmd.Context(), cfg, src.reloadPath(), f, opts, env, log)
		},
	}
	src.addFlags(cmd)
	cmd.Flags().BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader among replicas with a Lease")
	cmd.Flags().StringVar(&f.leaderElectionNS, "leader-election-namespace", "",
		"namespace of the leader Lease; default the pod's own (POD_NAMESPACE, or the service account's), else kube-system")
	cmd.Flags().StringVar(&f.leaderElectionID, "leader-election-id", "gpuscaler-controller", "name of the leader Lease")
	cmd.Flags().DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a lease holds without renewal")
	cmd.Flags().DurationVar(&f.leaseRenew, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before it gives up")
	cmd.Flags().DurationVar(&f.leaseRetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to take the lease")
	cmd.Flags().StringVar(&src.metricsAddr, "metrics-address", "", "overrides metrics.address (host:port, or 0 to turn it off)")
	cmd.Flags().StringVar(&f.forecastConfigMap, "forecast-configmap", "gpuscaler-forecast",
		"the ConfigMap, in the pod's namespace, that keeps the pools' learned demand across restarts")
	cmd.Flags().DurationVar(&f.reloadPeriod, "config-reload-period", 10*time.Second, "how often the config file is checked for changes")
	return cmd
}

// runController runs the NodeProvisioner controller until ctx is done.
// With a native config file, a changed file is picked up without a restart
// (an invalid one is refused and the old one kept).
func runController(ctx context.Context, cfg *config.Config, cfgPath string, f controllerFlags, opts daemon.Options, env *environ, log *slog.Logger) error {
	// client-go's own logs (reflectors, leader election) in the same
	// stream and format as gpuscaler's.
	klog.SetSlogLogger(log.With("component", "client-go"))
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	rc, err := daemon.RestConfig(opts.KubeconfigOf(cfg), opts.KubeContext)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	opts.Kube = rc // the core's cluster access is the controller's
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rt, err := daemon.Build(ctx, cfg, opts)
	if err != nil {
		return err
	}
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        f.leaderElectionID,
		LeaderElectionNamespace: f.leaderElectionNS,
		LeaseDuration:           &f.leaseDuration,
		RenewDeadline:           &f.leaseRenew,
		RetryPeriod:             &f.leaseRetryPeriod,
		HealthProbeBindAddress:  "0",
	})
	if err != nil {
		return err
	}
	// Events of instances no Node carries go on their pool's
	// NodeProvisioner, once the controller is built below.
	var pools atomic.Pointer[provisioner.Reconciler]
	rt.SetGroupObject(func(group string) *corev1.ObjectReference {
		if r := pools.Load(); r != nil {
			return r.PoolOf(group)
		}
		return nil
	})
	errc := make(chan error, 3)
	// The process's own work (Node index, script server, token reaper) runs
	// on every replica; an error in it stops the process.
	go func() {
		if err := rt.Run(ctx); err != nil {
			errc <- err
		}
	}()
	// The core writes to clouds: only the leader runs it.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return rt.Lead(ctx, nil)
	})); err != nil {
		return err
	}
	if cfgPath != "" {
		recorder := mgr.GetEventRecorder("gpuscaler")
		go func() {
			err := rt.Watch(ctx, cfgPath, f.reloadPeriod, func(err error) {
				provisioner.ReportReload(ctx, mgr.GetClient(), recorder, cfgPath, err)
			})
			if err != nil {
				errc <- fmt.Errorf("config reload: %w", err)
			}
		}()
	}
	var ready atomic.Bool
	// controller-runtime's own metrics (REST client, work queue,
	// reconciles, leader election) beside gpuscaler's.
	ops, err := listenOps(cfg, prometheus.Gatherers{rt, withoutRuntime{ctrlmetrics.Registry}}, &ready, rt.Evictions(), log)
	if err != nil {
		return err
	}
	go func() {
		if err := ops(ctx); err != nil {
			errc <- err
		}
	}()
	existing := &provisioner.ExistingGroups{GPULabel: cfg.Provider.GPULabel, MaxGroupSize: cfg.Sync.MaxGroupSize,
		FileGroups: rt.FileGroups, Apply: rt.SetExtraGroups, Logger: log.With("controller", "nodeprovisioner")}
	if d, ok := rt.Describer(config.CloudGCP); ok {
		existing.Describer, existing.Zone, existing.ClusterName = d, cfg.Clouds.GCP.Zone, cfg.ClusterName
		existing.Adopt = rt.AdoptInstanceGroups
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	store := &configmap.Store{ConfigMaps: kube.CoreV1().ConfigMaps(daemon.PodNamespace(os.Getenv)), Name: f.forecastConfigMap}
	forecaster, err := provisioner.NewForecaster(store, nil, rt.Registerer())
	if err != nil {
		return err
	}
	r := &provisioner.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Core: daemon.InForce(rt, func(m *nodegroup.Manager) provisioner.Core { return m }), Recorder: mgr.GetEventRecorder("gpuscaler"),
		Logger: log.With("controller", "nodeprovisioner"), Existing: existing, Forecaster: forecaster}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	pools.Store(r)
	log.Info("starting the NodeProvisioner controller", "groups", len(cfg.NodeGroups), "leaderElection", f.leaderElect,
		"leaseNamespace", f.leaderElectionNS, "reload", cfgPath != "")
	ready.Store(true)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	select {
	case err := <-errc:
		cancel()
		<-done
		return err
	case err := <-done:
		return err
	}
}

// withoutRuntime gathers a registry's families but the Go runtime's and
// the process's, which gpuscaler's own registry serves already (served
// twice, the scrape would fail).
type withoutRuntime struct{ prometheus.Gatherer }

// Gather implements prometheus.Gatherer.
func (w withoutRuntime) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := w.Gatherer.Gather()
	return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool {
		return strings.HasPrefix(mf.GetName(), "go_") || strings.HasPrefix(mf.GetName(), "process_")
	}), err
}
