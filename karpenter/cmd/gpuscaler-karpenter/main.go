// Command gpuscaler-karpenter is a Karpenter operator whose cloud provider
// is gpuscaler: Karpenter core's provisioning, disruption, lifecycle and
// garbage-collection controllers, unchanged, launching GPU machines on the
// clouds of gpuscaler's config file through its node-group core.
//
// It is its own Go module and binary (see docs/karpenter.md): Karpenter
// core needs a newer Go than the rest of gpuscaler, and would more than
// double the size of the cluster-autoscaler provider's binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/samber/lo"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	karpcp "sigs.k8s.io/karpenter/pkg/cloudprovider"
	cpmetrics "sigs.k8s.io/karpenter/pkg/cloudprovider/metrics"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	corecontrollers "sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/serve"
	"github.com/gpuscaler/gpuscaler/karpenter/cloudprovider"
	"github.com/gpuscaler/gpuscaler/karpenter/controllers"
)

func main() {
	ctx, op := operator.NewOperator()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, op); err != nil {
		fmt.Fprintln(os.Stderr, "gpuscaler-karpenter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, op *operator.Operator) error {
	opts := fromContext(ctx)
	var level slog.Level
	if err := level.UnmarshalText([]byte(opts.logLevel)); err != nil {
		return fmt.Errorf("--gpuscaler-log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("component", "gpuscaler")
	cfg, err := config.Load(opts.configPath)
	if err != nil {
		return err
	}
	// Without a kubeconfig of its own, the core reaches the cluster as
	// Karpenter does (its --kubeconfig, $KUBECONFIG, ~/.kube/config or
	// in-cluster, by controller-runtime's rules).
	rt, err := daemon.Build(ctx, cfg, daemon.Options{Owner: config.ManagedByKarpenter, Logger: log, Kube: op.GetConfig()})
	if err != nil {
		return err
	}
	errc := make(chan error, 3)
	// gpuscaler's core metrics (cloud calls, spend, leaks) beside
	// Karpenter's own on METRICS_PORT.
	if cfg.Metrics.Address != "0" {
		lis, err := net.Listen("tcp", cfg.Metrics.Address)
		if err != nil {
			return fmt.Errorf("metrics.address: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(rt, promhttp.HandlerOpts{}))
		srv := serve.HTTP(mux, serve.Limits{Evicted: rt.Evictions().For("metrics")})
		go func() {
			if err := serve.Run(ctx, srv, lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics server: %w", err)
			}
		}()
		log.Info("serving gpuscaler's metrics", "address", lis.Addr().String())
	}
	// The process's own work (the Node index, the script server) runs on
	// every replica.
	go func() {
		if err := rt.Run(ctx); err != nil {
			errc <- err
		}
	}()
	go func() {
		err := rt.Watch(ctx, opts.configPath, opts.reloadPeriod, func(err error) {
			if err != nil {
				log.Error("config reload refused; keeping the configuration in force", "error", err)
			}
		})
		if err != nil {
			errc <- fmt.Errorf("config reload: %w", err)
		}
	}()
	// The core writes to clouds: only the leader runs it.
	started := make(chan struct{})
	if err := op.Manager.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return rt.Lead(ctx, func(err error) {
			if err == nil {
				close(started)
			}
		})
	})); err != nil {
		return err
	}
	core := daemon.InForce(rt, func(m *nodegroup.Manager) cloudprovider.Core { return m })
	provider := cloudprovider.New(cloudprovider.Options{
		Kube: op.GetClient(), Core: core, Started: started,
		Templates: func(name string) (config.NodeGroup, bool) {
			for _, g := range rt.Config().NodeGroups {
				if g.Name == name {
					return g, true
				}
			}
			return config.NodeGroup{}, false
		},
	})
	undecorated := cpmetrics.Decorate(provider)
	var cp karpcp.CloudProvider = overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	matcher, err := health.NewRepairPolicyMatcher(ctx, cp)
	if err != nil {
		return fmt.Errorf("repair policies: %w", err)
	}
	cluster := state.NewCluster(op.Clock, op.GetClient(), cp, state.WithRepairPolicyMatcher(matcher))
	op.WithControllers(ctx, corecontrollers.NewControllers(ctx, op.Manager, op.Clock, op.GetClient(), op.EventRecorder,
		cp, undecorated, cluster, op.InstanceTypeStore, op.PredictionStore,
		corecontrollers.WithRegistrationHook(controllers.StandbyHandover{Client: op.GetClient()}))...)
	op.WithControllers(ctx,
		&controllers.NodeClass{Client: op.GetClient(), Checker: provider},
		&controllers.Leaks{Reader: op.Manager.GetAPIReader(), Core: core, Period: opts.leakPeriod, Grace: opts.leakGrace, Logger: log},
	)
	log.Info("starting the Karpenter operator", "templates", len(cfg.NodeGroups), "config", opts.configPath)
	done := make(chan struct{})
	go func() {
		defer close(done)
		op.Start(ctx)
	}()
	select {
	case err := <-errc:
		return err
	case <-done:
		return lo.Ternary(ctx.Err() != nil, error(nil), fmt.Errorf("the operator stopped"))
	}
}
