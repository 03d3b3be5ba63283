package externalgrpc

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// caDefaults are options as cluster-autoscaler sends them: every field set.
func caDefaults() *pb.NodeGroupAutoscalingOptions {
	return &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    0.5,
		ScaleDownGpuUtilizationThreshold: 0.6,
		ZeroOrMaxNodeScaling:             true,
		IgnoreDaemonSetsUtilization:      true,
		ScaleDownUnneededDuration:        durationpb.New(10 * time.Minute),
		ScaleDownUnreadyDuration:         durationpb.New(20 * time.Minute),
		MaxNodeProvisionDuration:         durationpb.New(15 * time.Minute),
	}
}

func TestGetOptions(t *testing.T) {
	core := newFakeCore()
	core.options["h100"] = &config.AutoscalingOptions{
		ScaleDownGPUUtilizationThreshold: ptr.To(0.3),
		ScaleDownUnneededTime:            &metav1.Duration{Duration: 30 * time.Minute},
	}
	core.sizes["all"] = 0
	core.options["all"] = &config.AutoscalingOptions{
		ScaleDownUtilizationThreshold:    ptr.To(0.1),
		ScaleDownGPUUtilizationThreshold: ptr.To(0.2),
		ZeroOrMaxNodeScaling:             ptr.To(false),
		IgnoreDaemonSetsUtilization:      ptr.To(false),
		ScaleDownUnneededTime:            &metav1.Duration{Duration: time.Minute},
		ScaleDownUnreadyTime:             &metav1.Duration{Duration: 2 * time.Minute},
		MaxNodeProvisionTime:             &metav1.Duration{Duration: 3 * time.Minute},
	}
	c := pb.NewCloudProviderClient(dial(t, core, Options{}))

	partial := caDefaults()
	partial.ScaleDownGpuUtilizationThreshold = 0.3
	partial.ScaleDownUnneededDuration = durationpb.New(30 * time.Minute)
	tests := []struct {
		group string
		want  *pb.NodeGroupAutoscalingOptions // nil: Unimplemented
	}{
		{"cpu", nil},
		{"h100", partial},
		{"all", &pb.NodeGroupAutoscalingOptions{
			ScaleDownUtilizationThreshold:    0.1,
			ScaleDownGpuUtilizationThreshold: 0.2,
			ScaleDownUnneededDuration:        durationpb.New(time.Minute),
			ScaleDownUnreadyDuration:         durationpb.New(2 * time.Minute),
			MaxNodeProvisionDuration:         durationpb.New(3 * time.Minute),
		}},
	}
	for _, tt := range tests {
		resp, err := c.NodeGroupGetOptions(call(t), &pb.NodeGroupAutoscalingOptionsRequest{Id: tt.group, Defaults: caDefaults()})
		if tt.want == nil {
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("%s without overrides: %v, %v; want Unimplemented", tt.group, resp, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.group, err)
		}
		if got := resp.GetNodeGroupAutoscalingOptions(); !proto.Equal(got, tt.want) {
			t.Errorf("%s options\n got %v\nwant %v", tt.group, got, tt.want)
		}
	}
}

func TestPricing(t *testing.T) {
	core := newFakeCore()
	c := pb.NewCloudProviderClient(dial(t, core, Options{}))
	ctx := call(t)
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	end := start.Add(90 * time.Minute)
	np, err := c.PricingNodePrice(ctx, &pb.PricingNodePriceRequest{
		Node:           &pb.ExternalGrpcNode{Name: "template-node", Labels: map[string]string{"gpuscaler.dev/node-group": "h100"}},
		StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(end),
	})
	if err != nil || np.GetPrice() != 2.5 {
		t.Fatalf("node price = %v, %v", np.GetPrice(), err)
	}
	core.mu.Lock()
	priced, interval := core.priced, core.interval
	core.mu.Unlock()
	if len(priced) != 2 || priced[0] != "" || priced[1] != "h100" || !interval[0].Equal(start) || !interval[1].Equal(end) {
		t.Fatalf("core priced %v over %v", priced, interval)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "ml"}}
	b, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	pp, err := c.PricingPodPrice(ctx, &pb.PricingPodPriceRequest{PodBytes: b, StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(end)})
	if err != nil || pp.GetPrice() != 1.25 {
		t.Fatalf("pod price = %v, %v", pp.GetPrice(), err)
	}
	core.mu.Lock()
	got := core.pod
	core.mu.Unlock()
	if got.Name != "trainer" || got.Namespace != "ml" {
		t.Fatalf("core priced pod %s/%s", got.Namespace, got.Name)
	}
	if _, err := c.PricingPodPrice(ctx, &pb.PricingPodPriceRequest{PodBytes: []byte{0xff, 0x01}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("garbage pod bytes: %v", err)
	}
}

func TestGPUAndLifecycleRPCs(t *testing.T) {
	tests := []struct {
		name, label, want string
	}{
		{"default label", "", "gpuscaler.dev/accelerator"},
		{"configured label", "example.com/gpu", "example.com/gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := pb.NewCloudProviderClient(dial(t, newFakeCore(), Options{GPULabel: tt.label}))
			ctx := call(t)
			l, err := c.GPULabel(ctx, &pb.GPULabelRequest{})
			if err != nil || l.GetLabel() != tt.want {
				t.Fatalf("GPULabel = %v, %v", l, err)
			}
			types, err := c.GetAvailableGPUTypes(ctx, &pb.GetAvailableGPUTypesRequest{})
			if err != nil || len(types.GetGpuTypes()) != 2 || types.GetGpuTypes()["h100"] == nil || types.GetGpuTypes()["a100-80gb"] == nil {
				t.Fatalf("GPU types = %v, %v", types, err)
			}
			if _, err := c.Refresh(ctx, &pb.RefreshRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Cleanup(ctx, &pb.CleanupRequest{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMetricsLogsAndHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	conn := dial(t, newFakeCore(), Options{Registerer: reg, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	c := pb.NewCloudProviderClient(conn)
	ctx := call(t)
	for range 2 {
		if _, err := c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "h100"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "missing"}); status.Code(err) != codes.NotFound {
		t.Fatal(err)
	}
	requests, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	var observed uint64
	for _, mf := range requests {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			switch mf.GetName() {
			case "gpuscaler_grpc_requests_total":
				counts[labels["method"]+"/"+labels["code"]] = m.GetCounter().GetValue()
			case "gpuscaler_grpc_request_duration_seconds":
				if labels["method"] == "NodeGroupTargetSize" {
					observed = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if counts["NodeGroupTargetSize/OK"] != 2 || counts["NodeGroupTargetSize/NotFound"] != 1 || observed != 3 {
		t.Errorf("requests %v, %d latencies observed", counts, observed)
	}
	out := logs.String()
	for _, want := range []string{`"method":"NodeGroupTargetSize"`, `"group":"missing"`, `"code":"NotFound"`, `"error":`, `"duration":`} {
		if !strings.Contains(out, want) {
			t.Errorf("debug log lacks %s:\n%s", want, out)
		}
	}

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", h, err)
	}

	// A second server on the same registry is a configuration error, not a panic.
	if _, err := NewServer(inforce.Fixed[Core](newFakeCore()), Options{Registerer: reg}); err == nil {
		t.Fatal("duplicate metric registration accepted")
	}
}
