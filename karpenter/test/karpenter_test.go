package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/karpenter/pkg/apis"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

// TestKarpenterScalesGPUNodes runs the whole loop on the simulated cloud:
// a pending GPU pod becomes a NodeClaim, a machine, a Node that registers
// and initializes, and a Running pod; spot being stocked out, it lands on
// on-demand; a changed image drifts the node and Karpenter replaces it; a
// MIG pod gets a node of a MIG class; with no pods left, consolidation
// removes every node and machine.
func TestKarpenterScalesGPUNodes(t *testing.T) {
	t.Parallel()
	env, kube, metricsAddr := chartOperator(t, `
clusterName: karpenter-e2e
kubeconfig: %[3]q
metrics: {address: %[2]q}
sync: {period: 2s}
clouds:
  sim:
    locations: [FIN-01, FIN-02]
    capacity:
      - {capacityType: spot, count: 0}
    bootDelay: 2s
    deleteDelay: 1s
    kubeconfig: %[1]q
nodeGroups:
  - {name: tpl, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 0, maxSize: 1, managedBy: karpenter}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	apply(t, ctx, kube, &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "h100"},
		Spec: v1alpha1.GPUNodeClassSpec{Cloud: "sim", Template: "tpl", Image: "ubuntu-22.04-cuda-12"}})
	apply(t, ctx, kube, &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "h100-mig"},
		Spec: v1alpha1.GPUNodeClassSpec{Cloud: "sim", MIG: &v1alpha1.MIG{Profile: "all-1g.10gb", Strategy: "mixed"}}})
	waitFor(t, ctx, "both GPUNodeClasses Ready", func() bool {
		for _, name := range []string{"h100", "h100-mig"} {
			c := &v1alpha1.GPUNodeClass{}
			if kube.Get(ctx, client.ObjectKey{Name: name}, c) != nil || !c.StatusConditions().Root().IsTrue() || c.Status.InstanceTypes == 0 {
				return false
			}
		}
		return true
	})
	apply(t, ctx, kube, nodePool("gpu", "h100",
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUName, Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUCount, Operator: corev1.NodeSelectorOpIn, Values: []string{"1"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot", "on-demand"}}))

	// One GPU pod, kept by a Deployment so that drift can move it.
	created := time.Now()
	apply(t, ctx, kube, deployment("trainer", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}))
	first := waitNodeClaim(t, ctx, kube, "gpu", "")
	t.Logf("pending GPU pod to an initialized node: %s; NodeClaim created to the order at the cloud: %s",
		time.Since(created).Round(time.Millisecond), orderLatency(t, env, first.Name))
	if ct := first.Labels[karpv1.CapacityTypeLabelKey]; ct != karpv1.CapacityTypeOnDemand {
		t.Fatalf("spot is stocked out, yet the NodeClaim is %q", ct)
	}
	if !strings.HasPrefix(first.Status.ProviderID, "sim://") {
		t.Fatalf("provider ID %q", first.Status.ProviderID)
	}
	waitRunning(t, ctx, kube, "app=trainer", first.Status.NodeName)

	// Drift: a new image replaces the node; the pod moves to the new one.
	class := &v1alpha1.GPUNodeClass{}
	if err := kube.Get(ctx, client.ObjectKey{Name: "h100"}, class); err != nil {
		t.Fatal(err)
	}
	class.Spec.Image = "ubuntu-24.04-cuda-13"
	if err := kube.Update(ctx, class); err != nil {
		t.Fatal(err)
	}
	second := waitNodeClaim(t, ctx, kube, "gpu", first.Name)
	waitRunning(t, ctx, kube, "app=trainer", second.Status.NodeName)
	waitFor(t, ctx, "the drifted NodeClaim and its node gone", func() bool {
		return !exists(ctx, kube, &karpv1.NodeClaim{}, first.Name) && !exists(ctx, kube, &corev1.Node{}, first.Status.NodeName)
	})

	// MIG: a pod asking for a 1g.10gb slice gets a node of the MIG class.
	apply(t, ctx, kube, nodePool("mig", "h100-mig",
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelMIGConfig, Operator: corev1.NodeSelectorOpIn, Values: []string{"all-1g.10gb"}}))
	apply(t, ctx, kube, deployment("slice", corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}))
	mig := waitNodeClaim(t, ctx, kube, "mig", "")
	if mig.Labels[v1alpha1.LabelMIGConfig] != "all-1g.10gb" {
		t.Fatalf("MIG NodeClaim labels %v", mig.Labels)
	}
	waitRunning(t, ctx, kube, "app=slice", mig.Status.NodeName)

	// No pods: consolidation deletes the nodes, and a NodeClaim is only
	// gone once Delete reported its machine gone from the cloud's list.
	for _, name := range []string{"trainer", "slice"} {
		if err := kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "every NodeClaim and GPU node gone", func() bool {
		var claims karpv1.NodeClaimList
		var nodes corev1.NodeList
		if kube.List(ctx, &claims) != nil || kube.List(ctx, &nodes) != nil {
			return false
		}
		gpuNodes := 0
		for _, n := range nodes.Items {
			if strings.HasPrefix(n.Spec.ProviderID, "sim://") {
				gpuNodes++
			}
		}
		return len(claims.Items) == 0 && gpuNodes == 0
	})
	// The core's metrics: every machine was ordered and deleted through it.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`gpuscaler_cloud_api_calls_total{cloud="sim",operation="create"`, `gpuscaler_cloud_api_calls_total{cloud="sim",operation="delete"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("gpuscaler's metrics lack %s", want)
		}
	}
}

// chartOperator starts a real cluster and the operator on it as the
// chart's ServiceAccount, with the configuration config renders from the
// cluster's kubeconfig, a free metrics address, the ServiceAccount's
// kubeconfig (%[1]q, %[2]q, %[3]q) and args after them. The operator has
// only what the chart grants: a missing permission shows as "forbidden"
// in its log, which is checked at the end.
func chartOperator(t *testing.T, config string, args ...any) (env *testenv.Env, kube client.Client, metricsAddr string) {
	t.Helper()
	env, kube = startCluster(t)
	asSA := chartServiceAccount(t, env, "karpenter")
	cfgPath := filepath.Join(env.Dir, "gpuscaler.yaml")
	metricsAddr = "127.0.0.1:" + freePort(t)
	write(t, cfgPath, fmt.Sprintf(config, append([]any{env.Kubeconfig, metricsAddr, asSA}, args...)...))
	startNamedOperator(t, env, "gpuscaler-karpenter", cfgPath, "KUBECONFIG="+asSA, "LEADER_ELECTION_NAMESPACE="+chartNamespace)
	t.Cleanup(func() { noForbidden(t, env, "gpuscaler-karpenter") })
	return env, kube, metricsAddr
}

// startCluster starts a real cluster with Karpenter's and gpuscaler's
// CRDs, and returns it with a client that knows them.
func startCluster(t *testing.T) (*testenv.Env, client.Client) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{karpenterCRDs(t), "../apis/crds"}})
	kube, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, kube
}

// chartNamespace is the namespace of the chart's release in the tests.
const chartNamespace = "gpuscaler"

// chartServiceAccount applies the chart's ServiceAccount and RBAC for a
// mode and returns a kubeconfig that is that ServiceAccount.
func chartServiceAccount(t *testing.T, env *testenv.Env, mode string) string {
	t.Helper()
	path, err := chartenv.AsServiceAccount(context.Background(), env, "../../deploy/charts/gpuscaler", "gs", chartNamespace, map[string]any{"mode": mode})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// noForbidden fails the test for every "forbidden" in a process's log.
func noForbidden(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	lines, err := testenv.Forbidden(filepath.Join(env.Dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range lines {
		t.Errorf("the chart's ServiceAccount lacks a permission: %.600s", line)
	}
}

func nodePool(name, class string, reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodePool {
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.GroupVersion.Group, Kind: "GPUNodeClass", Name: class},
				Requirements: reqs,
			}},
			Disruption: karpv1.Disruption{
				ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
				ConsolidateAfter:    karpv1.MustParseNillableDuration("2s"),
				Budgets:             []karpv1.Budget{{Nodes: "100%"}},
			},
		},
	}
}

func deployment(name string, gpus corev1.ResourceList) *appsv1.Deployment {
	one := int32(1)
	labels := map[string]string{"app": name}
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	for k, v := range gpus {
		requests[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: new(int64),
					Containers:                    []corev1.Container{{Name: "main", Image: "cuda:12", Resources: corev1.ResourceRequirements{Requests: requests, Limits: gpus}}},
				},
			},
		},
	}
}

// waitNodeClaim waits for an initialized NodeClaim of the pool other than
// skip, with its Node.
func waitNodeClaim(t *testing.T, ctx context.Context, kube client.Client, pool, skip string) *karpv1.NodeClaim {
	t.Helper()
	var found *karpv1.NodeClaim
	waitFor(t, ctx, "an initialized NodeClaim of NodePool "+pool, func() bool {
		var claims karpv1.NodeClaimList
		if kube.List(ctx, &claims, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}) != nil {
			return false
		}
		for i := range claims.Items {
			nc := &claims.Items[i]
			if nc.Name != skip && nc.DeletionTimestamp == nil && nc.StatusConditions().Get(karpv1.ConditionTypeInitialized).IsTrue() {
				found = nc
				return true
			}
		}
		return false
	})
	return found
}

func waitRunning(t *testing.T, ctx context.Context, kube client.Client, selector, node string) {
	t.Helper()
	waitFor(t, ctx, "pod "+selector+" Running on "+node, func() bool {
		var pods corev1.PodList
		sel, _ := metav1.ParseToLabelSelector(selector)
		ls, _ := metav1.LabelSelectorAsSelector(sel)
		if kube.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabelsSelector{Selector: ls}) != nil {
			return false
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				return true
			}
		}
		return false
	})
}

func exists(ctx context.Context, kube client.Client, obj client.Object, name string) bool {
	return kube.Get(ctx, client.ObjectKey{Name: name}, obj) == nil
}

func apply(t *testing.T, ctx context.Context, kube client.Client, obj client.Object) {
	t.Helper()
	if err := kube.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	testenv.Poll(t, ctx, 250*time.Millisecond, what, cond)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort is a loopback port no other test of this process is given.
func freePort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(testenv.LoopbackAddress(t))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// startNamedOperator runs one operator process, logging to <name>.log, and
// returns a function that kills it at once (a crash).
func startNamedOperator(t *testing.T, env *testenv.Env, name, cfgPath string, extraEnv ...string) (kill func()) {
	t.Helper()
	logPath := filepath.Join(env.Dir, name+".log")
	env.AddLog(name, logPath)
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(operatorBin)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+env.Kubeconfig, "GPUSCALER_CONFIG="+cfgPath, "GPUSCALER_LOG_LEVEL=debug",
		"LEADER_ELECTION_NAMESPACE=default", "METRICS_PORT="+freePort(t), "HEALTH_PROBE_PORT="+freePort(t),
		"BATCH_IDLE_DURATION=1s", "BATCH_MAX_DURATION=3s", "GPUSCALER_LEAKED_MACHINE_PERIOD=10s")
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	return func() {
		_ = cmd.Process.Kill()
		<-done
	}
}

// karpenterCRDs writes Karpenter core's CRDs, as its module embeds them,
// to a folder for the test cluster.
func karpenterCRDs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{"nodepools.yaml": apis.NodePoolCRD, "nodeclaims.yaml": apis.NodeClaimCRD, "nodeoverlays.yaml": apis.NodeOverlayCRD} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// splitYAML splits a stream of YAML documents.
func splitYAML(data []byte) [][]byte {
	var out [][]byte
	for _, d := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(d) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

// orderLatency reads, from the operator's log, the time from Karpenter's
// "created nodeclaim" to the core's "instance created" for one NodeClaim.
func orderLatency(t *testing.T, env *testenv.Env, claim string) time.Duration {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.Dir, "gpuscaler-karpenter.log"))
	if err != nil {
		t.Fatal(err)
	}
	var created, ordered time.Time
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, `"`+claim+`"`) {
			continue
		}
		var rec struct {
			Time    time.Time `json:"time"`
			Message string    `json:"message"`
			Msg     string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch {
		case rec.Message == "created nodeclaim" && created.IsZero():
			created = rec.Time
		case rec.Msg == "instance created" && ordered.IsZero():
			ordered = rec.Time
		}
	}
	if created.IsZero() || ordered.IsZero() {
		t.Fatalf("no created/ordered log lines for %s", claim)
	}
	return ordered.Sub(created)
}
