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
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/externalgrpc"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

func newProviderCommand(g *globalFlags) *cobra.Command {
	var src source
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Serve the cluster-autoscaler external gRPC cloud provider",
		Long: `provider serves the cluster-autoscaler external gRPC CloudProvider API over the node groups of
the config file. Run cluster-autoscaler with --cloud-provider=externalgrpc and a --cloud-config whose
address points here. The config is validated before anything starts.

Users of the DataCrunch autoscaler keep their --nodes flags and DATACRUNCH_* variables; users of
the Verda gRPC provider keep their config.yaml, .env file and --config/--port/--log-level flags.`,
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
			if metricsAddr != "" {
				cfg.Metrics.Address = metricsAddr
			}
			return runProvider(cmd.Context(), cfg, getenv, log)
		},
	}
	src.addFlags(cmd)
	cmd.Flags().StringVar(&metricsAddr, "metrics-address", "", "overrides metrics.address (host:port, or 0 to turn it off)")
	return cmd
}

// runProvider runs the provider until ctx is done.
func runProvider(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

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
	opts := nodegroup.Options{Logger: log, Registerer: reg, Registered: clouds.registered, Manage: managedBy(cfg, config.ManagedByClusterAutoscaler)}
	if boot.renderer != nil {
		opts.Bootstrap = boot.renderer
	}
	mgr, err := nodegroup.New(cfg, clouds.providers, opts)
	if err != nil {
		return err
	}
	boot.instanceIP = mgr.InstanceIP

	var ready atomic.Bool
	eg, ctx := errgroup.WithContext(ctx)
	if cfg.Metrics.Address != "0" {
		lis, err := net.Listen("tcp", cfg.Metrics.Address)
		if err != nil {
			return fmt.Errorf("metrics.address: %w", err)
		}
		srv := &http.Server{Handler: opsHandler(reg, &ready), ReadHeaderTimeout: 10 * time.Second}
		eg.Go(func() error { return serveHTTP(ctx, srv, lis) })
		log.Info("serving metrics and health", "address", lis.Addr().String())
	}
	if err := mgr.Start(ctx); err != nil {
		cancel()
		_ = eg.Wait()
		return fmt.Errorf("start node groups: %w", err)
	}
	for _, run := range append(clouds.background, boot.background...) {
		eg.Go(func() error { return run(ctx) })
	}

	srv, err := externalgrpc.NewServer(mgr, externalgrpc.Options{
		Logger:     log,
		Registerer: reg,
		GPULabel:   cfg.Provider.GPULabel,
		TLS:        externalgrpc.TLSFiles{CertFile: cfg.Provider.TLS.CertFile, KeyFile: cfg.Provider.TLS.KeyFile, CACertFile: cfg.Provider.TLS.CACertFile},
	})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Provider.ListenAddress)
	if err != nil {
		return fmt.Errorf("provider.listenAddress: %w", err)
	}
	log.Info("serving cluster-autoscaler gRPC", "address", lis.Addr().String(), "tls", cfg.Provider.TLS.Enabled(), "groups", len(cfg.NodeGroups))
	ready.Store(true)
	eg.Go(func() error { return srv.Serve(ctx, lis) })
	err = eg.Wait()
	mgr.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// opsHandler serves /metrics, /healthz (the process is up) and /readyz
// (the node groups were rebuilt and the gRPC server is serving).
func opsHandler(g prometheus.Gatherer, ready *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
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

// serveHTTP serves until ctx is done, then shuts down gracefully.
func serveHTTP(ctx context.Context, srv *http.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return nil
	}
}

// managedBy selects the groups one owner scales.
func managedBy(cfg *config.Config, owner string) func(string) bool {
	owned := map[string]bool{}
	for _, g := range cfg.NodeGroups {
		owned[g.Name] = g.ManagedBy == owner
	}
	return func(group string) bool { return owned[group] }
}
