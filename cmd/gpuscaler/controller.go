package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
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
			return runController(cmd.Context(), cfg, getenv, leaderElect, log)
		},
	}
	src.addFlags(cmd)
	cmd.Flags().BoolVar(&leaderElect, "leader-elect", true, "elect a leader among replicas (a Lease in the pod's namespace)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-address", "", "overrides metrics.address (host:port, or 0 to turn it off)")
	return cmd
}

// runController runs the core and the NodeProvisioner controller until ctx
// is done.
func runController(ctx context.Context, cfg *config.Config, getenv func(string) string, leaderElect bool, log *slog.Logger) error {
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
	boot, err := newBootstrap(cfg, clouds, log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	opts := nodegroup.Options{Logger: log, Registerer: reg, Registered: clouds.registered, Manage: managedBy(cfg, config.ManagedByNodeProvisioner)}
	if boot.renderer != nil {
		opts.Bootstrap = boot.renderer
	}
	core, err := nodegroup.New(cfg, clouds.providers, opts)
	if err != nil {
		return err
	}
	boot.instanceIP = core.InstanceIP
	if err := core.Start(ctx); err != nil {
		return fmt.Errorf("start node groups: %w", err)
	}
	defer core.Wait()
	for _, run := range append(clouds.background, boot.background...) {
		go func() {
			if err := run(ctx); err != nil {
				log.Error("background task failed", "error", err)
				cancel()
			}
		}()
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	var ready atomic.Bool
	if cfg.Metrics.Address != "0" {
		lis, err := net.Listen("tcp", cfg.Metrics.Address)
		if err != nil {
			return fmt.Errorf("metrics.address: %w", err)
		}
		srv := &http.Server{Handler: opsHandler(reg, &ready), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = serveHTTP(ctx, srv, lis) }()
		log.Info("serving metrics and health", "address", lis.Addr().String())
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
	r := &provisioner.Reconciler{Client: mgr.GetClient(), Core: core, Deleter: core, Recorder: mgr.GetEventRecorder("gpuscaler"), Logger: log.With("controller", "nodeprovisioner")}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	log.Info("starting the NodeProvisioner controller", "groups", len(cfg.NodeGroups), "leaderElection", leaderElect)
	ready.Store(true)
	return mgr.Start(ctx)
}
