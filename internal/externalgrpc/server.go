package externalgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/serve"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// Registerer receives the gRPC metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// GPULabel is the node label key reported to cluster-autoscaler;
	// default gpu.LabelAccelerator.
	GPULabel string
	// TLS enables mTLS when any file is set; then all three are required.
	TLS TLSFiles
	// AutoscalingOptions returns a group's cluster-autoscaler option
	// overrides (the config's nodeGroups[*].autoscalingOptions); nil: none.
	AutoscalingOptions func(group string) (*config.AutoscalingOptions, bool)
	// Evictions counts the connections the listener closes to make room;
	// nil counts nowhere.
	Evictions *serve.Evictions
}

// Per-connection bounds of the gRPC server, and its listener's tiers
// (serve.Handshakes): connections still in their handshake, and
// authenticated ones (cluster-autoscaler holds one).
const (
	maxStreams   = 32
	maxRecvBytes = 4 << 20
	// MaxUnauthenticated is how many connections may wait for their
	// handshake; past it the oldest of them is closed.
	MaxUnauthenticated = 64
	// MaxAuthenticated is how many connections may hold a place after it.
	MaxAuthenticated = 64
)

// Server is the gRPC server of the CloudProvider service.
type Server struct {
	grpc    *grpc.Server
	health  *health.Server
	log     *slog.Logger
	evicted func(reason string)
}

// NewServer builds the server over the core in force. It fails when the
// TLS files are incomplete or unreadable.
func NewServer(core inforce.Core[Core], opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.GPULabel == "" {
		opts.GPULabel = gpu.LabelAccelerator
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	serverOpts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(observe(opts.Logger, m)),
		// Bounds no peer may stretch: a handshake (TLS included) within
		// 10 s, a few streams per connection (cluster-autoscaler calls one
		// at a time), pings no more often than every 10 s, and a
		// connection idle for 5 minutes closed (cluster-autoscaler calls
		// every scan interval and dials again when it needs to).
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.MaxConcurrentStreams(maxStreams),
		grpc.MaxRecvMsgSize(maxRecvBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute, Time: 2 * time.Minute, Timeout: 20 * time.Second}),
	}
	creds := insecure.NewCredentials()
	if opts.TLS.Enabled() {
		tc, err := opts.TLS.serverConfig()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	admit, err := newAdmitting(creds, opts.Registerer, opts.Logger)
	if err != nil {
		return nil, err
	}
	serverOpts = append(serverOpts, grpc.Creds(admit))
	s := &Server{grpc: grpc.NewServer(serverOpts...), health: health.NewServer(), log: opts.Logger,
		evicted: opts.Evictions.For("grpc")}
	pb.RegisterCloudProviderServer(s.grpc, &service{core: core, gpuLabel: opts.GPULabel, options: opts.AutoscalingOptions})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s, nil
}

// Serve serves on lis, within the listener's tiers, until ctx is done,
// then stops gracefully (in-flight calls finish, for at most 10 seconds).
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	lis = serve.Handshakes(lis, serve.Tiers{Unauthenticated: MaxUnauthenticated, Authenticated: MaxAuthenticated, Evicted: s.evicted})
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		s.grpc.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// metrics are the gRPC server's Prometheus series.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_grpc_requests_total",
			Help: "cluster-autoscaler gRPC requests by method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuscaler_grpc_request_duration_seconds",
			Help:    "cluster-autoscaler gRPC request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}, []string{"method"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register gRPC metrics: %w", err)
			}
		}
	}
	return m, nil
}

// observe logs and measures every call.
func observe(log *slog.Logger, m *metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		method := path.Base(info.FullMethod)
		code := status.Code(err)
		elapsed := time.Since(start)
		m.requests.WithLabelValues(method, code.String()).Inc()
		m.duration.WithLabelValues(method).Observe(elapsed.Seconds())
		if log.Enabled(ctx, slog.LevelDebug) {
			attrs := []any{"method", method, "code", code.String(), "duration", elapsed}
			if g, ok := req.(interface{ GetId() string }); ok && g.GetId() != "" {
				attrs = append(attrs, "group", g.GetId())
			}
			if err != nil {
				attrs = append(attrs, "error", err)
			}
			log.Debug("grpc call", attrs...)
		}
		return resp, err
	}
}
