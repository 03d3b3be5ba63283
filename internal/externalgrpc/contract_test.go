package externalgrpc

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera/kamateratest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

const contractConfig = `
clusterName: contract
sync: {period: 200ms, requestsPerSecond: 1000}
clouds:
  sim: {bootDelay: 100ms, deleteDelay: 50ms}
nodeGroups:
  - name: h100
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01, FIN-02]
    capacityPolicy: prefer-spot
    maxSize: 10
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    labels: {team: ml}
  - name: mig
    cloud: sim
    instanceType: 8H100.80S.176V
    locations: [FIN-03]
    maxSize: 2
    mig: {profile: all-1g.10gb, strategy: mixed}
    autoscalingOptions: {scaleDownUnneededTime: 20m, scaleDownGpuUtilizationThreshold: 0.3}
  - name: scarce
    cloud: sim
    instanceType: 1A100.22V
    locations: [ICE-01]
    capacityPolicy: spot-only
    maxSize: 3
`

type fixture struct {
	client pb.CloudProviderClient
	conn   *grpc.ClientConn
	engine *sim.Engine
	mgr    *nodegroup.Manager
	// account is the engine account the backend's instances live in.
	account string
}

// kamateraContractConfig is contractConfig's groups on Kamatera, which
// sells CPU servers on demand only: same names and sizes, CPU types, no
// MIG, and the scarce group's datacenter out of stock.
const kamateraContractConfig = `
clusterName: contract
sync: {period: 200ms, requestsPerSecond: 1000}
clouds:
  kamatera: {image: ubuntu_server_24.04_64-bit}
nodeGroups:
  - {name: h100, cloud: kamatera, instanceType: 8B-32768, locations: [EU, EU-FR], maxSize: 10, labels: {team: ml}}
  - {name: mig, cloud: kamatera, instanceType: 16B-65536, locations: [US-NY2], maxSize: 2}
  - {name: scarce, cloud: kamatera, instanceType: 4A-8192, locations: [IL], maxSize: 3}
`

// scalewayContractConfig is contractConfig's groups on Scaleway, which
// sells GPUs on demand only: an H100, eight H100s partitioned with MIG,
// and an L4 zone out of stock.
const scalewayContractConfig = `
clusterName: contract
sync: {period: 200ms, requestsPerSecond: 1000}
clouds:
  scaleway: {}
nodeGroups:
  - {name: h100, cloud: scaleway, instanceType: H100-1-80G, locations: [fr-par-2, pl-waw-2], maxSize: 10, labels: {team: ml},
     taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: mig, cloud: scaleway, instanceType: H100-SXM-8-80G, locations: [fr-par-2], maxSize: 2, mig: {profile: all-1g.10gb, strategy: mixed}}
  - {name: scarce, cloud: scaleway, instanceType: L4-1-24G, locations: [fr-par-1], maxSize: 3}
`

// gcpContractConfig is contractConfig's groups as GCP managed instance
// groups (one per zone, named after the group), on demand, the scarce
// group's zone out of stock.
const gcpContractConfig = `
clusterName: contract
sync: {period: 200ms, requestsPerSecond: 1000}
clouds:
  gcp: {project: contract-project}
nodeGroups:
  - {name: h100, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1-a, us-central1-b], maxSize: 10, labels: {team: ml}}
  - {name: mig, cloud: gcp, instanceType: a2-highgpu-1g, locations: [europe-west4-a], maxSize: 2}
  - {name: scarce, cloud: gcp, instanceType: n2-standard-8, locations: [us-central1-b], maxSize: 3}
`

// backends are the clouds the contract tests run against: the simulated
// cloud directly, and Verda's, Kamatera's, Scaleway's and GCP's backends
// over their fake APIs (themselves on a simulated engine), through their
// real clients.
var backends = []string{"sim", "verda", "kamatera", "scaleway", "gcp"}

// gpuBackends are the backends whose catalogs have GPUs and spot.
var gpuBackends = []string{"sim", "verda"}

// forEachBackend runs a contract test once per backend.
func forEachBackend(t *testing.T, test func(t *testing.T, backend string)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

// gpuTemplateBackends are the backends whose catalogs have the GPU types
// the template contract needs (one H100, eight H100s for MIG).
var gpuTemplateBackends = []string{"sim", "verda", "scaleway"}

// forEachBackendOf runs a contract test once per backend of a list.
func forEachBackendOf(t *testing.T, list []string, test func(t *testing.T, backend string)) {
	for _, b := range list {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

// forEachGPUBackend runs a contract test of GPU templates, GPU types or
// spot prices once per backend that sells them.
func forEachGPUBackend(t *testing.T, test func(t *testing.T, backend string)) {
	for _, b := range gpuBackends {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

// newFixture serves the real core over a backend on a loopback port and
// returns a client, as cluster-autoscaler would dial it.
func newFixture(t testing.TB, doc, backend string) *fixture {
	t.Helper()
	if backend == "verda" {
		doc = strings.ReplaceAll(doc, "cloud: sim", "cloud: verda")
		doc = strings.Replace(doc, "clouds:\n", "clouds:\n  verda: {}\n", 1)
	}
	switch backend {
	case "kamatera":
		doc = kamateraContractConfig
	case "scaleway":
		doc = scalewayContractConfig
	case "gcp":
		doc = gcpContractConfig
	}
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var engine *sim.Engine
	switch backend {
	case "kamatera":
		engine, err = kamateratest.NewEngine(sim.Config{BootDelay: sim.Duration(100 * time.Millisecond), DeleteDelay: sim.Duration(50 * time.Millisecond)}, sim.Options{})
	case "gcp":
		engine, err = gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(100 * time.Millisecond), DeleteDelay: sim.Duration(50 * time.Millisecond)}, sim.Options{})
	case "scaleway":
		engine, err = scwtest.NewEngine(sim.Config{BootDelay: sim.Duration(100 * time.Millisecond), DeleteDelay: sim.Duration(50 * time.Millisecond)}, sim.Options{})
	case "verda":
		engine, err = verdatest.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	default:
		engine, err = sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	engine.SetCapacity(cloud.OfferingKey{InstanceType: "1A100.22V", Location: "ICE-01", CapacityType: cloud.Spot}, 0)
	engine.SetCapacity(cloud.OfferingKey{InstanceType: "4A-8192", Location: "IL", CapacityType: cloud.OnDemand}, 0)
	engine.SetCapacity(cloud.OfferingKey{InstanceType: "L4-1-24G", Location: "fr-par-1", CapacityType: cloud.OnDemand}, 0)
	engine.SetCapacity(cloud.OfferingKey{InstanceType: "n2-standard-8", Location: "us-central1-b", CapacityType: cloud.OnDemand}, 0)
	log := slog.New(slog.DiscardHandler)
	f := &fixture{engine: engine, account: cfg.ClusterName}
	var prov cloud.Provider = engine.Account(cfg.ClusterName)
	if backend == "gcp" {
		fake := gcptest.New(engine, gcptest.Options{Project: "contract-project"})
		t.Cleanup(fake.Close)
		groups := map[string]gcp.Group{}
		for _, g := range cfg.NodeGroups {
			for _, z := range g.Locations {
				fake.AddGroup(z, g.Name, g.InstanceType)
			}
			groups[g.Name] = gcp.NewGroup(g.Name, g.InstanceType, g.Locations, nil)
		}
		clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
		if err != nil {
			t.Fatal(err)
		}
		prov, f.account = gcp.New(clients, gcp.Options{Project: "contract-project", Groups: groups, PollInterval: 10 * time.Millisecond,
			CreateWatch: 2 * time.Second, Logger: log}), "gcp-account"
	}
	if backend == "scaleway" {
		const secretKey, projectID = "11111111-2222-4333-8444-555555555555", "22222222-2222-4222-8222-222222222222"
		fake := scwtest.New(engine, scwtest.Options{SecretKey: secretKey})
		t.Cleanup(fake.Close)
		client, err := scaleway.NewClient(scaleway.ClientOptions{AccessKey: "SCWACCESSKEY0000TEST", SecretKey: secretKey, ProjectID: projectID,
			APIURL: fake.URL, RequestsPerSecond: 1000})
		if err != nil {
			t.Fatal(err)
		}
		prov, f.account = scaleway.New(client, scaleway.Options{ClusterName: cfg.ClusterName, ProjectID: projectID,
			Zones: []string{"fr-par-1", "fr-par-2", "pl-waw-2"}, RetryBase: time.Millisecond, Logger: log}), "scaleway-account"
	}
	if backend == "kamatera" {
		fake := kamateratest.New(engine, kamateratest.Options{ClientID: "id", Secret: "secret", CommandDelay: 20 * time.Millisecond})
		t.Cleanup(fake.Close)
		api, err := kamatera.NewClient(kamatera.ClientOptions{BaseURL: fake.URL, ClientID: "id", Secret: "secret",
			RequestsPerSecond: 1000, RetryBase: time.Millisecond, PollInterval: 5 * time.Millisecond, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		prov, f.account = kamatera.New(api, kamatera.Options{ClusterName: cfg.ClusterName, Image: cfg.Clouds.Kamatera.Image, Logger: log}), "kamatera-account"
	}
	if backend == "verda" {
		fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "secret", CreateAnswersJSON: true, IgnoreScriptPaging: true})
		t.Cleanup(fake.Close)
		api, err := verda.NewClient(verda.ClientOptions{BaseURL: fake.URL + "/v1", ClientID: "id", ClientSecret: "secret",
			RequestsPerSecond: 1000, RetryBase: time.Millisecond, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		prov, f.account = verda.New(api, verda.Options{ClusterName: cfg.ClusterName, Logger: log}), "verda-account"
	}
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{backend: prov},
		nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), ResolveAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(inforce.Fixed[Core](mgr), Options{Logger: log, Registerer: prometheus.NewRegistry(), AutoscalingOptions: config.OptionsOf(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
		mgr.Wait()
	})
	f.client, f.conn, f.mgr = pb.NewCloudProviderClient(conn), conn, mgr
	return f
}

func call(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // cluster-autoscaler's default
	t.Cleanup(cancel)
	return ctx
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestContractNodeGroupsAndLookup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		f := newFixture(t, contractConfig, backend)
		ctx := call(t)
		groups, err := f.client.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, g := range groups.GetNodeGroups() {
			ids = append(ids, g.GetId())
			if g.GetMaxSize() == 0 || g.GetDebug() == "" {
				t.Errorf("group %+v incomplete", g)
			}
		}
		if !slices.Equal(ids, []string{"h100", "mig", "scarce"}) {
			t.Fatalf("groups %v", ids)
		}
		if _, err := f.client.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "h100", Delta: 2}); err != nil {
			t.Fatal(err)
		}
		// The target counts the orders in flight at once.
		ts, err := f.client.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "h100"})
		if err != nil || ts.GetTargetSize() != 2 {
			t.Fatalf("target during scale-up = %v, %v", ts.GetTargetSize(), err)
		}
		nodes := instancesOf(t, f, "h100", 2)
		// A fake node for an unregistered instance carries only its provider ID.
		got, err := f.client.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: nodes[0].GetId(), Name: nodes[0].GetId()}})
		if err != nil || got.GetNodeGroup().GetId() != "h100" {
			t.Fatalf("NodeGroupForNode(managed) = %v, %v", got, err)
		}
		// Unmanaged nodes (control plane, other pools) get an empty group, not an error.
		for _, pid := range []string{"", "kind://cp-0", "sim://not-ours"} {
			got, err := f.client.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: pid, Name: "cp-0"}})
			if err != nil || got.GetNodeGroup() == nil || got.GetNodeGroup().GetId() != "" {
				t.Fatalf("NodeGroupForNode(%q) = %v, %v", pid, got, err)
			}
		}
		if _, err := f.client.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
			t.Fatalf("unknown group: %v", err)
		}
	})
}

// instancesOf waits until a group lists n instances and returns them.
func instancesOf(t *testing.T, f *fixture, group string, n int) []*pb.Instance {
	t.Helper()
	var out []*pb.Instance
	wait(t, "instances of "+group, func() bool {
		resp, err := f.client.NodeGroupNodes(call(t), &pb.NodeGroupNodesRequest{Id: group})
		if err != nil {
			t.Fatal(err)
		}
		out = resp.GetInstances()
		return len(out) == n
	})
	return out
}

// TestContractInstanceIDsAreProviderIDs registers the instances as Nodes
// the way the simulated kubelet does and checks cluster-autoscaler's key
// rule: instance id == node.spec.providerID.
func TestContractInstanceIDsAreProviderIDs(t *testing.T) {
	f := newFixture(t, contractConfig, "sim")
	ctx := call(t)
	if _, err := f.client.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "h100", Delta: 3}); err != nil {
		t.Fatal(err)
	}
	wait(t, "3 running", func() bool {
		resp, _ := f.client.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "h100"})
		running := 0
		for _, in := range resp.GetInstances() {
			if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
				running++
			}
		}
		return running == 3
	})
	kube := fake.NewClientset()
	reg := sim.NewRegistrar(f.engine.Account("contract"), kube, sim.RegistrarOptions{Logger: slog.New(slog.DiscardHandler)})
	if err := reg.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	nodeList, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodeList.Items) != 3 {
		t.Fatalf("%d nodes registered, %v", len(nodeList.Items), err)
	}
	resp, _ := f.client.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "h100"})
	var ids []string
	for _, in := range resp.GetInstances() {
		ids = append(ids, in.GetId())
	}
	for _, n := range nodeList.Items {
		if !slices.Contains(ids, n.Spec.ProviderID) {
			t.Errorf("node %s providerID %q not among instance ids %v", n.Name, n.Spec.ProviderID, ids)
		}
		got, err := f.client.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{
			ProviderID: n.Spec.ProviderID, Name: n.Name, Labels: n.Labels,
		}})
		if err != nil || got.GetNodeGroup().GetId() != "h100" {
			t.Errorf("registered node %s resolves to %v, %v", n.Name, got, err)
		}
		if n.Labels["team"] != "ml" || n.Labels[nodegroup.LabelNodeGroup] != "h100" || len(n.Spec.Taints) != 1 {
			t.Errorf("node %s registered without the template's labels or taints: %v %v", n.Name, n.Labels, n.Spec.Taints)
		}
		if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 1 {
			t.Errorf("node %s allocatable nvidia.com/gpu = %v", n.Name, q.String())
		}
	}
}

func TestContractTemplates(t *testing.T) {
	forEachBackendOf(t, gpuTemplateBackends, func(t *testing.T, backend string) {
		f := newFixture(t, contractConfig, backend)
		ctx := call(t)
		tests := []struct {
			group string
			res   corev1.ResourceName
			want  int64
		}{
			{"h100", "nvidia.com/gpu", 1},
			{"mig", "nvidia.com/mig-1g.10gb", 56},
			{"scarce", "nvidia.com/gpu", 1},
		}
		for _, tt := range tests {
			resp, err := f.client.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: tt.group})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetNodeBytes()) == 0 {
				t.Fatalf("%s: empty nodeBytes", tt.group)
			}
			var node corev1.Node
			if err := node.Unmarshal(resp.GetNodeBytes()); err != nil {
				t.Fatalf("%s: %v", tt.group, err)
			}
			for _, rl := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
				if q := rl[tt.res]; q.Value() != tt.want {
					t.Errorf("%s: %s = %s, want %d", tt.group, tt.res, q.String(), tt.want)
				}
			}
			alloc := node.Status.Allocatable
			if alloc.Cpu().Cmp(*node.Status.Capacity.Cpu()) >= 0 || alloc.Memory().Cmp(*node.Status.Capacity.Memory()) >= 0 {
				t.Errorf("%s: allocatable does not subtract reservations", tt.group)
			}
			if alloc.Pods().Value() != 110 || alloc.StorageEphemeral().Cmp(resource.MustParse("1Gi")) < 0 {
				t.Errorf("%s: pods or ephemeral storage missing: %v", tt.group, alloc)
			}
			for _, l := range []string{"kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/instance-type",
				"topology.kubernetes.io/zone", "topology.kubernetes.io/region", "gpuscaler.dev/node-group",
				"gpuscaler.dev/capacity-type", "gpuscaler.dev/accelerator", "nvidia.com/gpu.product", "nvidia.com/gpu.count"} {
				if node.Labels[l] == "" {
					t.Errorf("%s: template lacks label %s", tt.group, l)
				}
			}
			if !isReady(node) {
				t.Errorf("%s: template not Ready", tt.group)
			}
		}
		var node corev1.Node
		resp, _ := f.client.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "mig"})
		_ = node.Unmarshal(resp.GetNodeBytes())
		if node.Labels["nvidia.com/mig.config"] != "all-1g.10gb" {
			t.Errorf("MIG template labels %v", node.Labels)
		}
		resp, _ = f.client.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "h100"})
		_ = node.Unmarshal(resp.GetNodeBytes())
		wantCapacity := "spot" // prefer-spot
		if backend == "scaleway" {
			wantCapacity = "on-demand" // no spot there
		}
		if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "nvidia.com/gpu" || node.Labels["gpuscaler.dev/capacity-type"] != wantCapacity {
			t.Errorf("h100 template taints %v labels %v", node.Spec.Taints, node.Labels)
		}
		if _, err := f.client.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
			t.Errorf("unknown group template: %v", err)
		}
	})
}

func isReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestContractStockOut: a stock-out is an instance error of class
// out-of-resources, not an RPC error, and the failed slot can be deleted.
func TestContractStockOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		f := newFixture(t, contractConfig, backend)
		ctx := call(t)
		if _, err := f.client.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "scarce", Delta: 1}); err != nil {
			t.Fatalf("IncreaseSize must succeed and report the stock-out per instance: %v", err)
		}
		var failed *pb.Instance
		wait(t, "a failed instance", func() bool {
			insts := instancesOf(t, f, "scarce", 1)
			failed = insts[0]
			return failed.GetStatus().GetErrorInfo().GetErrorCode() != ""
		})
		st := failed.GetStatus()
		if st.GetInstanceState() != pb.InstanceStatus_instanceCreating || st.GetErrorInfo().GetInstanceErrorClass() != 1 {
			t.Fatalf("stock-out reported as %v", st)
		}
		if _, err := f.client.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "scarce", Nodes: []*pb.ExternalGrpcNode{{
			ProviderID: failed.GetId(), Name: failed.GetId(), Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": "create-error"},
		}}}); err != nil {
			t.Fatal(err)
		}
		ts, _ := f.client.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "scarce"})
		if ts.GetTargetSize() != 0 {
			t.Fatalf("target after deleting the failed instance = %d", ts.GetTargetSize())
		}
	})
}

func TestContractDeleteAndDecrease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		f := newFixture(t, contractConfig, backend)
		ctx := call(t)
		for _, g := range []string{"h100", "mig"} {
			if _, err := f.client.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: g, Delta: 1}); err != nil {
				t.Fatal(err)
			}
		}
		h100 := instancesOf(t, f, "h100", 1)
		mig := instancesOf(t, f, "mig", 1)
		inCloud := func() bool {
			for _, in := range f.engine.Instances(f.account) {
				if in.Group == "h100" {
					return true
				}
			}
			return false
		}
		// A cloud may take a while to make it (Kamatera's queue): the
		// delete must find it there, not just cancel an order.
		wait(t, "h100 at the cloud", inCloud)
		_, err := f.client.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "h100", Nodes: []*pb.ExternalGrpcNode{{ProviderID: mig[0].GetId()}}})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("deleting another group's node: %v", err)
		}
		if _, err := f.client.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "mig", Delta: 5}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("past maxSize: %v", err)
		}
		if _, err := f.client.NodeGroupDecreaseTargetSize(ctx, &pb.NodeGroupDecreaseTargetSizeRequest{Id: "h100", Delta: 1}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("positive decrease: %v", err)
		}
		if _, err := f.client.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "h100", Nodes: []*pb.ExternalGrpcNode{{ProviderID: h100[0].GetId()}}}); err != nil {
			t.Fatal(err)
		}
		wait(t, "h100 empty at the cloud", func() bool { return !inCloud() })
	})
}

func TestContractOptionsPricingAndGPUs(t *testing.T) {
	forEachGPUBackend(t, func(t *testing.T, backend string) {
		f := newFixture(t, contractConfig, backend)
		ctx := call(t)
		defaults := &pb.NodeGroupAutoscalingOptions{
			ScaleDownUtilizationThreshold:    0.5,
			ScaleDownGpuUtilizationThreshold: 0.5,
			IgnoreDaemonSetsUtilization:      true,
			ScaleDownUnneededDuration:        durationpb.New(10 * time.Minute),
			ScaleDownUnreadyDuration:         durationpb.New(20 * time.Minute),
			MaxNodeProvisionDuration:         durationpb.New(15 * time.Minute),
		}
		if _, err := f.client.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: "h100", Defaults: defaults}); status.Code(err) != codes.Unimplemented {
			t.Fatalf("group without overrides: %v", err)
		}
		resp, err := f.client.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: "mig", Defaults: defaults})
		if err != nil {
			t.Fatal(err)
		}
		o := resp.GetNodeGroupAutoscalingOptions()
		if o.GetScaleDownUnneededDuration().AsDuration() != 20*time.Minute || o.GetScaleDownGpuUtilizationThreshold() != 0.3 {
			t.Errorf("overrides not applied: %v", o)
		}
		if o.GetScaleDownUtilizationThreshold() != 0.5 || !o.GetIgnoreDaemonSetsUtilization() ||
			o.GetMaxNodeProvisionDuration().AsDuration() != 15*time.Minute || o.GetScaleDownUnreadyDuration().AsDuration() != 20*time.Minute {
			t.Errorf("defaults not carried over: %v", o)
		}

		label, err := f.client.GPULabel(ctx, &pb.GPULabelRequest{})
		if err != nil || label.GetLabel() != "gpuscaler.dev/accelerator" {
			t.Fatalf("GPULabel = %v, %v", label, err)
		}
		types, err := f.client.GetAvailableGPUTypes(ctx, &pb.GetAvailableGPUTypesRequest{})
		if err != nil || len(types.GetGpuTypes()) != 2 || types.GetGpuTypes()["h100"] == nil || types.GetGpuTypes()["a100-80gb"] == nil {
			t.Fatalf("GPU types = %v, %v", types, err)
		}

		// A template node is priced by its group label at the cheapest offering
		// (spot 0.8015/h for h100); a running node at its own offering.
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		price, err := f.client.PricingNodePrice(ctx, &pb.PricingNodePriceRequest{
			Node:           &pb.ExternalGrpcNode{Name: "template-node-for-h100-1", Labels: map[string]string{"gpuscaler.dev/node-group": "h100"}},
			StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(start.Add(2 * time.Hour)),
		})
		if err != nil || price.GetPrice() < 1.6029 || price.GetPrice() > 1.6031 {
			t.Fatalf("template price = %v, %v", price.GetPrice(), err)
		}
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2")},
		}}}}}
		b, _ := pod.Marshal()
		pp, err := f.client.PricingPodPrice(ctx, &pb.PricingPodPriceRequest{PodBytes: b, StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(start.Add(time.Hour))})
		if err != nil || pp.GetPrice() < 0.8 || pp.GetPrice() > 0.81 {
			t.Fatalf("pod price = %v, %v (want one whole 1-GPU spot node, 0.8015)", pp.GetPrice(), err)
		}
		if _, err := f.client.Refresh(ctx, &pb.RefreshRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.Cleanup(ctx, &pb.CleanupRequest{}); err != nil {
			t.Fatal(err)
		}
	})
}
