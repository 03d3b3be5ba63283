package externalgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// fakeCore is an in-memory Core: the wire under test here is the
// translation to and from gRPC, not the node-group logic (the contract tests
// drive the real core).
type fakeCore struct {
	mu        sync.Mutex
	groups    []nodegroup.Info
	byPID     map[string]string
	sizes     map[string]int
	instances map[string][]nodegroup.Instance
	templates map[string]*corev1.Node
	options   map[string]*config.AutoscalingOptions
	gpuTypes  []string
	// err, when set, is returned by every call that can fail.
	err error

	// What the core was called with.
	deltas   []int
	deleted  []string
	priced   []string
	pod      *corev1.Pod
	interval [2]time.Time
}

// known reports the injected error or an unknown group; c.mu is held.
func (c *fakeCore) known(group string) error {
	if c.err != nil {
		return c.err
	}
	if _, ok := c.sizes[group]; !ok {
		return fmt.Errorf("group %q: %w", group, nodegroup.ErrGroupNotFound)
	}
	return nil
}

func (c *fakeCore) Groups() []nodegroup.Info { return c.groups }

func (c *fakeCore) Group(name string) (nodegroup.Info, bool) {
	for _, g := range c.groups {
		if g.Name == name {
			return g, true
		}
	}
	return nodegroup.Info{}, false
}

func (c *fakeCore) GroupForProviderID(pid string) (string, bool) {
	g, ok := c.byPID[pid]
	return g, ok
}

func (c *fakeCore) TargetSize(group string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.known(group); err != nil {
		return 0, err
	}
	return c.sizes[group], nil
}

func (c *fakeCore) IncreaseSize(_ context.Context, group string, delta int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deltas = append(c.deltas, delta)
	return c.known(group)
}

func (c *fakeCore) DecreaseTargetSize(_ context.Context, group string, delta int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deltas = append(c.deltas, delta)
	return c.known(group)
}

func (c *fakeCore) DeleteNodes(_ context.Context, group string, ids []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleted = append(c.deleted, ids...)
	return c.known(group)
}

func (c *fakeCore) EachInstance(group string, fn func(nodegroup.Instance)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.known(group); err != nil {
		return err
	}
	for _, in := range c.instances[group] {
		fn(in)
	}
	return nil
}

func (c *fakeCore) Template(group string) (*corev1.Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.known(group); err != nil {
		return nil, err
	}
	return c.templates[group], nil
}

func (c *fakeCore) NodePrice(pid string, labels map[string]string, start, end time.Time) (float64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.priced = append(c.priced, pid, labels["gpuscaler.dev/node-group"])
	c.interval = [2]time.Time{start, end}
	return 2.5, c.err
}

func (c *fakeCore) PodPrice(pod *corev1.Pod, start, end time.Time) (float64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pod, c.interval = pod, [2]time.Time{start, end}
	return 1.25, c.err
}

func (c *fakeCore) AutoscalingOptions(group string) (*config.AutoscalingOptions, bool) {
	o, ok := c.options[group]
	return o, ok
}

func (c *fakeCore) GPUTypes() []string { return c.gpuTypes }

func (c *fakeCore) Refresh(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// newFakeCore has two groups, "h100" with two instances and a GPU template
// and "cpu" with none.
func newFakeCore() *fakeCore {
	gpuNode := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "template-h100", Labels: map[string]string{"gpuscaler.dev/accelerator": "h100"}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
		},
	}
	return &fakeCore{
		groups: []nodegroup.Info{
			{Name: "h100", MinSize: 1, MaxSize: 4, Debug: "h100: 8H100 in FIN-01"},
			{Name: "cpu", MaxSize: 2, Debug: "cpu"},
		},
		byPID: map[string]string{"sim://a": "h100", "sim://gone": "deleted-group"},
		sizes: map[string]int{"h100": 2, "cpu": 0},
		instances: map[string][]nodegroup.Instance{"h100": {
			{ProviderID: "sim://a", State: nodegroup.StateRunning},
			{ProviderID: "sim://b", State: nodegroup.StateCreating},
		}},
		templates: map[string]*corev1.Node{"h100": gpuNode},
		options:   map[string]*config.AutoscalingOptions{},
		gpuTypes:  []string{"h100", "a100-80gb"},
	}
}

// lockedBuffer is a log sink safe to read while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dial runs a Server over core on a loopback port and dials it.
func dial(t *testing.T, core Core, opts Options) *grpc.ClientConn {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if fc, ok := core.(*fakeCore); ok && opts.AutoscalingOptions == nil {
		opts.AutoscalingOptions = fc.AutoscalingOptions
	}
	srv, err := NewServer(inforce.Fixed[Core](core), opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return conn
}

func TestNodeGroupsAndForNode(t *testing.T) {
	c := pb.NewCloudProviderClient(dial(t, newFakeCore(), Options{}))
	ctx := call(t)
	resp, err := c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	g := resp.GetNodeGroups()
	if len(g) != 2 || g[0].GetId() != "h100" || g[0].GetMinSize() != 1 || g[0].GetMaxSize() != 4 ||
		g[0].GetDebug() != "h100: 8H100 in FIN-01" || g[1].GetId() != "cpu" {
		t.Fatalf("NodeGroups = %v", g)
	}
	tests := []struct {
		providerID, want string
	}{
		{"sim://a", "h100"},
		{"sim://unknown", ""},    // another pool's node
		{"", ""},                 // a node without a provider ID
		{"sim://gone", ""},       // resolved to a group no longer configured
		{"kind://control-0", ""}, // another cloud
	}
	for _, tt := range tests {
		got, err := c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: tt.providerID, Name: "n"}})
		if err != nil || got.GetNodeGroup() == nil || got.GetNodeGroup().GetId() != tt.want {
			t.Errorf("NodeGroupForNode(%q) = %v, %v; want group %q", tt.providerID, got, err, tt.want)
		}
	}
}

func TestErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", nodegroup.ErrGroupNotFound), codes.NotFound},
		{fmt.Errorf("x: %w", nodegroup.ErrSizeLimit), codes.InvalidArgument},
		{fmt.Errorf("x: %w", nodegroup.ErrInvalidDelta), codes.InvalidArgument},
		{fmt.Errorf("x: %w", nodegroup.ErrNotInGroup), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", nodegroup.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("x: %w", nodegroup.ErrCostLimit), codes.ResourceExhausted},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{errors.New("cloud API: 502"), codes.Internal},
	}
	core := newFakeCore()
	c := pb.NewCloudProviderClient(dial(t, core, Options{}))
	pod, _ := (&corev1.Pod{}).Marshal()
	rpcs := map[string]func(ctx context.Context) error{
		"TargetSize": func(ctx context.Context) error {
			_, err := c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "h100"})
			return err
		},
		"IncreaseSize": func(ctx context.Context) error {
			_, err := c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "h100", Delta: 1})
			return err
		},
		"DecreaseTargetSize": func(ctx context.Context) error {
			_, err := c.NodeGroupDecreaseTargetSize(ctx, &pb.NodeGroupDecreaseTargetSizeRequest{Id: "h100", Delta: -1})
			return err
		},
		"DeleteNodes": func(ctx context.Context) error {
			_, err := c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "h100", Nodes: []*pb.ExternalGrpcNode{{ProviderID: "sim://a"}}})
			return err
		},
		"Nodes": func(ctx context.Context) error {
			_, err := c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "h100"})
			return err
		},
		"Template": func(ctx context.Context) error {
			_, err := c.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "h100"})
			return err
		},
		"GetOptions": func(ctx context.Context) error {
			_, err := c.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: "h100"})
			return err
		},
		"NodePrice": func(ctx context.Context) error {
			_, err := c.PricingNodePrice(ctx, &pb.PricingNodePriceRequest{Node: &pb.ExternalGrpcNode{ProviderID: "sim://a"}})
			return err
		},
		"PodPrice": func(ctx context.Context) error {
			_, err := c.PricingPodPrice(ctx, &pb.PricingPodPriceRequest{PodBytes: pod})
			return err
		},
		"Refresh": func(ctx context.Context) error {
			_, err := c.Refresh(ctx, &pb.RefreshRequest{})
			return err
		},
	}
	for _, tt := range tests {
		core.mu.Lock()
		core.err = tt.err
		core.mu.Unlock()
		for name, rpc := range rpcs {
			err := rpc(call(t))
			if status.Code(err) != tt.want || !strings.Contains(status.Convert(err).Message(), tt.err.Error()) {
				t.Errorf("%s with core error %q = %v; want code %s carrying the message", name, tt.err, err, tt.want)
			}
		}
	}
}

func TestUnknownGroupIsNotFound(t *testing.T) {
	c := pb.NewCloudProviderClient(dial(t, newFakeCore(), Options{}))
	ctx := call(t)
	_, err1 := c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "nope"})
	_, err2 := c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "nope"})
	_, err3 := c.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "nope"})
	_, err4 := c.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: "nope"})
	for i, err := range []error{err1, err2, err3, err4} {
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "nope") {
			t.Errorf("call %d on an unknown group: %v", i, err)
		}
	}
}

func TestResizeAndDeleteArguments(t *testing.T) {
	core := newFakeCore()
	c := pb.NewCloudProviderClient(dial(t, core, Options{}))
	ctx := call(t)
	if _, err := c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "h100", Delta: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NodeGroupDecreaseTargetSize(ctx, &pb.NodeGroupDecreaseTargetSizeRequest{Id: "h100", Delta: -2}); err != nil {
		t.Fatal(err)
	}
	nodes := []*pb.ExternalGrpcNode{{ProviderID: "sim://a", Name: "a"}, {ProviderID: "sim://b", Name: "b"}}
	if _, err := c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "h100", Nodes: nodes}); err != nil {
		t.Fatal(err)
	}
	// A node without a provider ID cannot be matched to an instance: nothing
	// of the request is deleted.
	bad := []*pb.ExternalGrpcNode{{ProviderID: "sim://c"}, {Name: "no-id"}}
	if _, err := c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "h100", Nodes: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("node without providerID: %v", err)
	}
	core.mu.Lock()
	defer core.mu.Unlock()
	if !slices.Equal(core.deltas, []int{3, -2}) || !slices.Equal(core.deleted, []string{"sim://a", "sim://b"}) {
		t.Fatalf("core saw deltas %v, deletions %v", core.deltas, core.deleted)
	}
}

func TestNodesStates(t *testing.T) {
	core := newFakeCore()
	core.instances["h100"] = []nodegroup.Instance{
		{ProviderID: "sim://run", State: nodegroup.StateRunning},
		{ProviderID: "sim://new", State: nodegroup.StateCreating},
		{ProviderID: "sim://del", State: nodegroup.StateDeleting},
		{ProviderID: "sim://stock", State: nodegroup.StateCreating, ErrorCode: "OUT_OF_STOCK",
			ErrorMessage: "no 8H100 anywhere", ErrorClass: nodegroup.ErrorClassOutOfResources},
		{ProviderID: "sim://quota", State: nodegroup.StateCreating, ErrorCode: "QUOTA",
			ErrorMessage: "quota exceeded", ErrorClass: nodegroup.ErrorClassOther},
	}
	c := pb.NewCloudProviderClient(dial(t, core, Options{}))
	resp, err := c.NodeGroupNodes(call(t), &pb.NodeGroupNodesRequest{Id: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id        string
		state     pb.InstanceStatus_InstanceState
		code, msg string
		class     int32
	}{
		// By provider ID: the answer's order, whatever the core's.
		{"sim://del", pb.InstanceStatus_instanceDeleting, "", "", 0},
		{"sim://new", pb.InstanceStatus_instanceCreating, "", "", 0},
		{"sim://quota", pb.InstanceStatus_instanceCreating, "QUOTA", "quota exceeded", 99},
		{"sim://run", pb.InstanceStatus_instanceRunning, "", "", 0},
		{"sim://stock", pb.InstanceStatus_instanceCreating, "OUT_OF_STOCK", "no 8H100 anywhere", 1},
	}
	got := resp.GetInstances()
	if len(got) != len(want) {
		t.Fatalf("%d instances, want %d", len(got), len(want))
	}
	for i, w := range want {
		st := got[i].GetStatus()
		if got[i].GetId() != w.id || st.GetInstanceState() != w.state {
			t.Errorf("instance %d = %v, want %s in %v", i, got[i], w.id, w.state)
		}
		if (w.code == "") != (st.GetErrorInfo() == nil) {
			t.Errorf("%s: errorInfo %v", w.id, st.GetErrorInfo())
		}
		ei := st.GetErrorInfo()
		if ei.GetErrorCode() != w.code || ei.GetErrorMessage() != w.msg || ei.GetInstanceErrorClass() != w.class {
			t.Errorf("%s: errorInfo %v, want %s/%s/%d", w.id, ei, w.code, w.msg, w.class)
		}
	}
}

func TestTemplate(t *testing.T) {
	core := newFakeCore()
	core.sizes["broken"] = 0 // a known group whose core returns no template
	c := pb.NewCloudProviderClient(dial(t, core, Options{}))
	ctx := call(t)
	resp, err := c.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	if err := node.Unmarshal(resp.GetNodeBytes()); err != nil {
		t.Fatal(err)
	}
	if q := node.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 8 || node.Name != "template-h100" {
		t.Fatalf("template %s allocatable %v", node.Name, node.Status.Allocatable)
	}
	got, err := c.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "broken"})
	if status.Code(err) != codes.Internal || len(got.GetNodeBytes()) != 0 {
		t.Fatalf("nil template = %v, %v; want an Internal error, never empty bytes", got, err)
	}
}
