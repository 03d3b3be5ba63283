package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/externalgrpc"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/serve"
)

func newProviderCommand(g *globalFlags) *cobra.Command {
	var src source
	var reloadPeriod time.Duration
	var restartToApply bool
	var statusConfigMap string
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Serve the cluster-autoscaler external gRPC cloud provider",
		Example: `  gpuscaler provider --config config.yaml
  gpuscaler provider --config config.yaml --restart-on-config-change   # as the chart runs it
  gpuscaler provider --nodes 0:3:1H100.80S.30V:FIN-01:h100 --port 8086   # DataCrunch flags`,
		Long: `provider serves the cluster-autoscaler external gRPC CloudProvider API over the node groups of
the config file. Run cluster-autoscaler with --cloud-provider=externalgrpc and a --cloud-config whose
address points here. The config is validated before anything starts; a native config file is
reloaded when it changes (an invalid one is refused and the old one kept). With
--restart-on-config-change, a change that only a restart applies (clouds, listeners, cluster
access) is checked as start-up would check it and, if it passes, the process exits with status 0 for
its supervisor to start it again (the chart's provider Deployment does this: one pod, never lost to a
bad config); without it, such a change is refused until the process is restarted.

Users of the DataCrunch autoscaler keep their --nodes flags and DATACRUNCH_* variables; users of
the Verda gRPC provider keep their config.yaml, .env file and --config/--port/--log-level flags.`,
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
			opts := env.runtimeOptions(config.ManagedByClusterAutoscaler, log, g.kube)
			opts.Override = src.override
			opts.RestartToApply = restartToApply
			return runProvider(cmd.Context(), cfg, src.reloadPath(), reloadPeriod, statusConfigMap, opts, env, log)
		},
	}
	src.addFlags(cmd)
	src.addListenerFlags(cmd)
	cmd.Flags().StringVar(&src.metricsAddr, "metrics-address", "", "overrides metrics.address (host:port, or 0 to turn it off)")
	cmd.Flags().DurationVar(&reloadPeriod, "config-reload-period", 10*time.Second, "how often the config file is checked for changes")
	cmd.Flags().StringVar(&statusConfigMap, "status-config-map", "cluster-autoscaler-status",
		"cluster-autoscaler's status ConfigMap in gpuscaler's namespace (its --status-config-map-name): Events of orders no Node shows (a stock-out on every offering, a cost cap) go on it, for kubectl describe; \"\" leaves them on gpuscaler's pod")
	cmd.Flags().BoolVar(&restartToApply, "restart-on-config-change", false,
		"exit (status 0) when a config change that needs a restart passes start-up's checks, for the supervisor to start gpuscaler with it")
	return cmd
}

// runProvider runs the provider until ctx is done. It is the only writer
// of its groups, so it leads from the start.
func runProvider(ctx context.Context, cfg *config.Config, reloadPath string, reloadPeriod time.Duration, statusConfigMap string, opts daemon.Options, env *environ, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// client-go's own logs (reflectors, leader election) in the same
	// stream and format as gpuscaler's.
	klog.SetSlogLogger(log.With("component", "client-go"))
	rt, err := daemon.Build(ctx, cfg, opts)
	if err != nil {
		return err
	}
	var ready atomic.Bool
	eg, ctx := errgroup.WithContext(ctx)
	if status := rt.EventsOnStatusConfigMap(statusConfigMap); status != nil {
		eg.Go(func() error { status.Watch(ctx, 30*time.Second); return nil })
	}
	eg.Go(func() error { return rt.Run(ctx) })
	ops, err := listenOps(cfg, rt, &ready, rt.Evictions(), log)
	if err != nil {
		cancel()
		_ = eg.Wait()
		return err
	}
	eg.Go(func() error { return ops(ctx) })
	leading := make(chan error, 1)
	eg.Go(func() error { return rt.Lead(ctx, func(err error) { leading <- err }) })
	select {
	case err := <-leading:
		if err != nil {
			cancel()
			_ = eg.Wait()
			return err
		}
	case <-ctx.Done():
		return eg.Wait()
	}
	if reloadPath != "" {
		eg.Go(func() error { return rt.Watch(ctx, reloadPath, reloadPeriod, func(error) {}) })
	}
	srv, err := externalgrpc.NewServer(daemon.InForce(rt, func(m *nodegroup.Manager) externalgrpc.Core { return m }), externalgrpc.Options{
		Logger:     log,
		Registerer: rt.Registerer(),
		GPULabel:   cfg.Provider.GPULabel,
		TLS: externalgrpc.TLSFiles{CertFile: cfg.Provider.TLS.CertFile, KeyFile: cfg.Provider.TLS.KeyFile,
			CACertFile: cfg.Provider.TLS.CACertFile, ClientNames: cfg.Provider.TLS.ClientNames},
		AutoscalingOptions: rt.AutoscalingOptions,
		Evictions:          rt.Evictions(),
	})
	if err != nil {
		cancel()
		_ = eg.Wait()
		return err
	}
	lis, err := net.Listen("tcp", cfg.Provider.ListenAddress)
	if err != nil {
		cancel()
		_ = eg.Wait()
		return fmt.Errorf("provider.listenAddress: %w", err)
	}
	if !config.IsLoopback(cfg.Provider.ListenAddress) && !cfg.Provider.TLS.Enabled() {
		log.Warn("INSECURE: the gRPC provider listens off loopback without mTLS; anyone who reaches "+
			cfg.Provider.ListenAddress+" can scale groups and delete nodes (provider.insecure is set)", "address", cfg.Provider.ListenAddress)
	}
	if cfg.Provider.TLS.Enabled() && len(cfg.Provider.TLS.ClientNames) == 0 {
		log.Warn("provider.tls.clientNames is empty: any client certificate the CA signed may scale groups and delete nodes; name cluster-autoscaler's")
	}
	log.Info("serving cluster-autoscaler gRPC", "address", lis.Addr().String(), "tls", cfg.Provider.TLS.Enabled(), "groups", len(cfg.NodeGroups))
	ready.Store(true)
	eg.Go(func() error { return srv.Serve(ctx, lis) })
	err = eg.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	if errors.Is(err, daemon.ErrRestartToApply) {
		log.Info("exiting to start again with the changed configuration", "change", err)
		return nil
	}
	return err
}

// opsHandler serves /metrics, /healthz (the process is up) and /readyz
// (the node groups were rebuilt and the front end is serving).
func opsHandler(g prometheus.Gatherer, ready *atomic.Bool) http.Handler {
	mux := healthMux(ready)
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}

// healthMux serves /healthz and /readyz.
func healthMux(ready *atomic.Bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// listenOps opens the metrics listener (metrics.address) and the health
// one (metrics.healthAddress), those that are set, and returns what
// serves them until ctx is done.
func listenOps(cfg *config.Config, g prometheus.Gatherer, ready *atomic.Bool, ev *serve.Evictions, log *slog.Logger) (func(context.Context) error, error) {
	type listener struct {
		name string
		lis  net.Listener
		srv  *http.Server
	}
	var ls []listener
	closeAll := func() {
		for _, l := range ls {
			_ = l.lis.Close()
		}
	}
	open := func(name, field, addr string, h http.Handler) error {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("%s: %w", field, err)
		}
		ls = append(ls, listener{name: name, lis: lis, srv: serve.HTTP(h, serve.Limits{Evicted: ev.For(name)})})
		return nil
	}
	if cfg.Metrics.Address != "0" {
		if err := open("metrics", "metrics.address", cfg.Metrics.Address, opsHandler(g, ready)); err != nil {
			return nil, err
		}
	}
	if cfg.Metrics.HealthAddress != "" {
		if err := open("health", "metrics.healthAddress", cfg.Metrics.HealthAddress, healthMux(ready)); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) error {
		eg, ctx := errgroup.WithContext(ctx)
		for _, l := range ls {
			log.Info("serving "+l.name, "address", l.lis.Addr().String())
			eg.Go(func() error {
				if err := serve.Run(ctx, l.srv, l.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
					return fmt.Errorf("%s server: %w", l.name, err)
				}
				return nil
			})
		}
		return eg.Wait()
	}, nil
}
