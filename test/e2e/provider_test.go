// Package e2e runs gpuscaler against a real cluster: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok from internal/testenv.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	pb "github.com/gpuscaler/gpuscaler/proto"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

// TestProviderScalesGPUNodes drives the provider the way cluster-autoscaler
// does and checks the result in the cluster: a GPU group goes from 0 to 3
// nodes, three pending GPU pods run on them, and back to 0 with nothing left
// at the cloud.
func TestProviderScalesGPUNodes(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The provider reaches the cluster with only what the chart grants its
	// ServiceAccount in provider mode.
	asSA, err := chartenv.AsServiceAccount(ctx, env, "../../deploy/charts/gpuscaler", "gs", "gpuscaler", map[string]any{"mode": "provider"})
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, metricsAddr := loopback(t), loopback(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: e2e
kubeconfig: %q
provider: {listenAddress: %q}
metrics: {address: %q}
sync: {period: 2s}
maxHourlyCost: 100
clouds:
  sim: {bootDelay: 2s, deleteDelay: 1s, kubeconfig: %q}
nodeGroups:
  - name: h100
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01]
    maxSize: 5
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
`, asSA, grpcAddr, metricsAddr, env.Kubeconfig))
	startProvider(t, env, cfgPath, metricsAddr)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ca := pb.NewCloudProviderClient(conn)

	// Three pending pods that each want one GPU.
	pods := env.Client.CoreV1().Pods("default")
	for i := range 3 {
		if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("train-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Every metric the chart's dashboard and alerts select is served (the
	// counters of what has not happened yet included, at zero), and the
	// pending GPU pods are counted.
	// (The pending-pod gauges appear once their watch has listed the pods.)
	missing := missingMetrics(t, scrape(t, metricsAddr))
	for deadline := time.Now().Add(30 * time.Second); len(missing) > 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		missing = missingMetrics(t, scrape(t, metricsAddr))
	}
	if len(missing) > 0 {
		t.Errorf("metrics the chart's dashboard or alerts select are not on /metrics:\n%s", strings.Join(missing, "\n"))
	}
	waitFor(t, ctx, "3 pending GPU pods on /metrics", func() bool {
		return value(scrape(t, metricsAddr), "gpuscaler_pending_gpu_pods", nil) == 3
	})

	// One cluster-autoscaler loop: refresh, list groups, read the template
	// (scale from zero), and scale up.
	rpc(t, func(c context.Context) error { _, err := ca.Refresh(c, &pb.RefreshRequest{}); return err })
	groups, err := ca.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	if err != nil || len(groups.GetNodeGroups()) != 1 || groups.GetNodeGroups()[0].GetId() != "h100" {
		t.Fatalf("NodeGroups = %v, %v", groups, err)
	}
	tmpl, err := ca.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	if err := node.Unmarshal(tmpl.GetNodeBytes()); err != nil {
		t.Fatal(err)
	}
	if q := node.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 1 {
		t.Fatalf("template nvidia.com/gpu = %s", q.String())
	}
	rpc(t, func(c context.Context) error {
		_, err := ca.NodeGroupIncreaseSize(c, &pb.NodeGroupIncreaseSizeRequest{Id: "h100", Delta: 3})
		return err
	})

	waitFor(t, ctx, "3 Ready GPU nodes without the not-ready taint", func() bool { return len(readyGPUNodes(ctx, env.Client)) == 3 })
	waitFor(t, ctx, "3 pods Running on the new nodes", func() bool {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				running++
			}
		}
		return running == 3
	})

	// The wait is over, and each node's start-up was timed once per step.
	waitFor(t, ctx, "no pending GPU pod and 3 node start-ups on /metrics", func() bool {
		mfs := scrape(t, metricsAddr)
		return value(mfs, "gpuscaler_pending_gpu_pods", nil) == 0 &&
			value(mfs, "gpuscaler_node_startup_duration_seconds", map[string]string{"group": "h100", "step": "gpus"}) == 3
	})
	mfs := scrape(t, metricsAddr)
	for _, step := range []string{"registered", "ready"} {
		if n := value(mfs, "gpuscaler_node_startup_duration_seconds", map[string]string{"group": "h100", "step": step}); n != 3 {
			t.Errorf("%v start-ups timed to %s, want 3", n, step)
		}
	}
	// Each pod's wait, by its node's group and how the node came: all
	// three on nodes ordered for them.
	waitFor(t, ctx, "3 waits of pods on created h100 nodes on /metrics", func() bool {
		return value(scrape(t, metricsAddr), "gpuscaler_gpu_pod_wait_seconds", map[string]string{"group": "h100", "came": "created"}) == 3
	})

	// The label the provider names as cluster-autoscaler's GPU label is on
	// every Node from its registration (so an autoscaler knows a GPU node
	// whose GPUs have not appeared yet).
	gl, err := ca.GPULabel(ctx, &pb.GPULabelRequest{})
	if err != nil || gl.GetLabel() == "" {
		t.Fatalf("GPULabel = %v, %v", gl, err)
	}
	all, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range all.Items {
		if n.Labels[gl.GetLabel()] == "" {
			t.Errorf("node %s lacks the GPU label %s: %v", n.Name, gl.GetLabel(), n.Labels)
		}
	}

	// Instance ids are the Nodes' provider IDs, and every node resolves to its group.
	nodes := readyGPUNodes(ctx, env.Client)
	insts, err := ca.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range insts.GetInstances() {
		ids = append(ids, in.GetId())
	}
	var toDelete []*pb.ExternalGrpcNode
	for _, n := range nodes {
		if !slices.Contains(ids, n.Spec.ProviderID) {
			t.Errorf("node %s (%s) is not among the group's instances %v", n.Name, n.Spec.ProviderID, ids)
		}
		g, err := ca.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: n.Spec.ProviderID, Name: n.Name}})
		if err != nil || g.GetNodeGroup().GetId() != "h100" {
			t.Errorf("NodeGroupForNode(%s) = %v, %v", n.Name, g, err)
		}
		toDelete = append(toDelete, &pb.ExternalGrpcNode{ProviderID: n.Spec.ProviderID, Name: n.Name})
	}

	// Scale down: the work ends, cluster-autoscaler deletes the nodes.
	for i := range 3 {
		if err := pods.Delete(ctx, fmt.Sprintf("train-%d", i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	rpc(t, func(c context.Context) error {
		_, err := ca.NodeGroupDeleteNodes(c, &pb.NodeGroupDeleteNodesRequest{Id: "h100", Nodes: toDelete})
		return err
	})
	waitFor(t, ctx, "the nodes to disappear", func() bool {
		list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
	waitFor(t, ctx, "no instance left at the cloud", func() bool {
		insts, err := ca.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "h100"})
		return err == nil && len(insts.GetInstances()) == 0
	})
	ts, err := ca.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "h100"})
	if err != nil || ts.GetTargetSize() != 0 {
		t.Fatalf("target = %v, %v", ts.GetTargetSize(), err)
	}
	forbidden, err := testenv.Forbidden(filepath.Join(env.Dir, "gpuscaler.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range forbidden {
		t.Errorf("the chart's ServiceAccount lacks a permission: %s", line)
	}
}

func gpuPod(name string) *corev1.Pod {
	one := resource.MustParse("1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "cuda", Image: "cuda", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": one}, Limits: corev1.ResourceList{"nvidia.com/gpu": one},
			}}},
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

// readyGPUNodes returns the Ready nodes with a GPU and no not-ready taint.
func readyGPUNodes(ctx context.Context, kube kubernetes.Interface) []corev1.Node {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	return gpuReady(list.Items)
}

// gpuReady keeps the Ready nodes that advertise a GPU and carry no
// not-ready taint.
func gpuReady(nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for _, n := range nodes {
		q := n.Status.Allocatable["nvidia.com/gpu"]
		if q.Value() < 1 || hasTaint(n, corev1.TaintNodeNotReady) || !ready(n) {
			continue
		}
		out = append(out, n)
	}
	return out
}

func hasTaint(n corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func ready(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// startProvider runs `gpuscaler provider` as its own process, with its log
// in the cluster's failure dump, and waits until it is ready.
func startProvider(t *testing.T, env *testenv.Env, cfgPath, metricsAddr string) {
	t.Helper()
	startGPUScaler(t, env, metricsAddr, "provider", "--config", cfgPath)
}

// startGPUScaler runs a gpuscaler subcommand as its own process and waits
// until its /readyz answers.
func startGPUScaler(t *testing.T, env *testenv.Env, metricsAddr string, args ...string) {
	t.Helper()
	startGPUScalerLogged(t, env, "gpuscaler", metricsAddr, nil, args...)
}

// startGPUScalerLogged is startGPUScaler with the process's log named
// name (for several processes in one test) and environ added to its
// environment (tests run in parallel, so none sets its own).
func startGPUScalerLogged(t *testing.T, env *testenv.Env, name, metricsAddr string, environ []string, args ...string) *gsProcess {
	t.Helper()
	logPath := filepath.Join(env.Dir, name+".log")
	env.AddLog(name, logPath)
	return startProcess(t, logPath, metricsAddr, environ, append(args, "--log-format", "text", "--log-level", "debug")...)
}

// gsProcess is a gpuscaler process a test started.
type gsProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited
	err  error         // how it exited: read once done is closed
}

// pid is the process's ID.
func (p *gsProcess) pid() int { return p.cmd.Process.Pid }

// kill ends the process at once, as a crash would.
func (p *gsProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// startProcess runs the gpuscaler binary TestMain found, logging to
// logPath (appended to: a restart keeps the earlier run's lines), with
// environ added to its environment, and waits until its /readyz on
// metricsAddr answers. The process is interrupted at the end of the test.
func startProcess(t testing.TB, logPath, metricsAddr string, environ []string, args ...string) *gsProcess {
	t.Helper()
	if gpuscalerBin == "" {
		t.Fatal("the gpuscaler binary was not built (TestMain)")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gpuscalerBin, args...)
	cmd.Env = append(os.Environ(), environ...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gsProcess{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.kill()
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("gpuscaler exited: %v", p.err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("gpuscaler not ready after 30s")
		}
	}
}

// rpc makes one call with cluster-autoscaler's default 5 s timeout.
func rpc(t *testing.T, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	testenv.Poll(t, ctx, 250*time.Millisecond, what, cond)
}

func loopback(t testing.TB) string {
	t.Helper()
	return testenv.LoopbackAddress(t)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
