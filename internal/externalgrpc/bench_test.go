package externalgrpc

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	gsruntime "github.com/gpuscaler/gpuscaler/internal/runtime"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// benchCluster is a core with `nodes` running instances spread over 100
// groups, served over gRPC on loopback.
type benchCluster struct {
	svc      *service
	client   pb.CloudProviderClient
	engine   *sim.Engine
	groups   []string
	nodes    []*pb.ExternalGrpcNode
	heapUsed uint64
}

func newBenchCluster(b *testing.B, nodes int) *benchCluster {
	b.Helper()
	const groups = 100
	var doc strings.Builder
	fmt.Fprintf(&doc, "clusterName: bench\nsync: {period: 1h, requestsPerSecond: 1000000, maxConcurrentCreates: 64}\n")
	fmt.Fprintf(&doc, "clouds:\n  sim: {bootDelay: 0s, defaultCapacity: 1000000}\nnodeGroups:\n")
	for i := range groups {
		fmt.Fprintf(&doc, "  - {name: g%03d, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: %d}\n", i, nodes/groups)
	}
	cfg, err := config.Parse([]byte(doc.String()))
	if err != nil {
		b.Fatal(err)
	}
	engine, err := sim.NewEngine(gsruntime.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	log := slog.New(slog.DiscardHandler)
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{"sim": engine.Account("bench")}, nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); mgr.Wait() })
	if err := mgr.Start(ctx); err != nil {
		b.Fatal(err)
	}
	bc := &benchCluster{svc: &service{core: mgr, gpuLabel: "gpuscaler.dev/accelerator"}, engine: engine}
	for i := range groups {
		name := fmt.Sprintf("g%03d", i)
		bc.groups = append(bc.groups, name)
		if err := mgr.IncreaseSize(ctx, name, nodes/groups); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		created := 0
		for _, g := range bc.groups {
			insts, _ := mgr.Instances(g)
			for _, in := range insts {
				if in.CreatedAt.IsZero() || in.InstanceType == "" {
					continue
				}
				created++
			}
		}
		if created == nodes && engine.Count("bench") == nodes {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d instances created", created, nodes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	bc.heapUsed = after.HeapInuse - before.HeapInuse
	for _, g := range bc.groups {
		insts, _ := mgr.Instances(g)
		for _, in := range insts {
			bc.nodes = append(bc.nodes, &pb.ExternalGrpcNode{ProviderID: in.ProviderID, Name: in.Name})
		}
	}
	srv, err := NewServer(mgr, Options{Logger: log, Registerer: prometheus.NewRegistry(), AutoscalingOptions: config.OptionsOf(cfg)})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	bc.client = pb.NewCloudProviderClient(conn)
	return bc
}

// caller is one way of making the loop's calls: over gRPC, or straight into
// the service (the provider's own work).
type caller interface {
	Refresh(context.Context, *pb.RefreshRequest) (*pb.RefreshResponse, error)
	NodeGroups(context.Context, *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error)
	NodeGroupForNode(context.Context, *pb.NodeGroupForNodeRequest) (*pb.NodeGroupForNodeResponse, error)
	NodeGroupTargetSize(context.Context, *pb.NodeGroupTargetSizeRequest) (*pb.NodeGroupTargetSizeResponse, error)
	NodeGroupNodes(context.Context, *pb.NodeGroupNodesRequest) (*pb.NodeGroupNodesResponse, error)
}

type grpcCaller struct{ c pb.CloudProviderClient }

func (g grpcCaller) Refresh(ctx context.Context, r *pb.RefreshRequest) (*pb.RefreshResponse, error) {
	return g.c.Refresh(ctx, r)
}
func (g grpcCaller) NodeGroups(ctx context.Context, r *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error) {
	return g.c.NodeGroups(ctx, r)
}
func (g grpcCaller) NodeGroupForNode(ctx context.Context, r *pb.NodeGroupForNodeRequest) (*pb.NodeGroupForNodeResponse, error) {
	return g.c.NodeGroupForNode(ctx, r)
}
func (g grpcCaller) NodeGroupTargetSize(ctx context.Context, r *pb.NodeGroupTargetSizeRequest) (*pb.NodeGroupTargetSizeResponse, error) {
	return g.c.NodeGroupTargetSize(ctx, r)
}
func (g grpcCaller) NodeGroupNodes(ctx context.Context, r *pb.NodeGroupNodesRequest) (*pb.NodeGroupNodesResponse, error) {
	return g.c.NodeGroupNodes(ctx, r)
}

// loop is one cluster-autoscaler loop as the provider sees it.
func (bc *benchCluster) loop(b *testing.B, c caller) {
	ctx := context.Background()
	if _, err := c.Refresh(ctx, &pb.RefreshRequest{}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.NodeGroups(ctx, &pb.NodeGroupsRequest{}); err != nil {
		b.Fatal(err)
	}
	for _, n := range bc.nodes {
		if _, err := c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: n}); err != nil {
			b.Fatal(err)
		}
	}
	for _, g := range bc.groups {
		if _, err := c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: g}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: g}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAutoscalerLoop measures one cluster-autoscaler loop (Refresh,
// NodeGroups, NodeGroupForNode per node, TargetSize and Nodes per group)
// over real gRPC on loopback, and the same calls made straight into the
// service; the ratio is the provider's own share of the loop. It fails if
// the loop makes any cloud API call.
func BenchmarkAutoscalerLoop(b *testing.B) {
	for _, nodes := range []int{1000, 10000} {
		bc := newBenchCluster(b, nodes)
		for _, mode := range []struct {
			name string
			c    caller
		}{{"grpc", grpcCaller{bc.client}}, {"direct", bc.svc}} {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, mode.name), func(b *testing.B) {
				calls := bc.engine.Calls()
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					bc.loop(b, mode.c)
				}
				b.StopTimer()
				if after := bc.engine.Calls(); fmt.Sprint(after) != fmt.Sprint(calls) {
					b.Fatalf("the loop called the cloud: %v -> %v", calls, after)
				}
				b.ReportMetric(float64(bc.heapUsed)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(bc.heapUsed)/float64(nodes), "heap-B/instance")
			})
		}
	}
}
