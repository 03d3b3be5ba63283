package test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
)

// TestKarpenterTakesFromTheStandbyPool: the template group of a
// GPUNodeClass keeps a standby pool (one machine that booted, joined and
// showed its GPUs, then stopped, its Node removed). A pending GPU pod's
// NodeClaim gets that machine, renamed for the NodeClaim at the cloud and
// started, not a new order: its Node registers with the NodeClaim's
// provider ID after the cloud's start delay, the standby taint is lifted,
// and the pod runs. The pool then refills. The operator runs as the
// chart's ServiceAccount: the hand-over needs no grant the chart lacks.
func TestKarpenterTakesFromTheStandbyPool(t *testing.T) {
	t.Parallel()
	ctx, kube, metric := standbyOperator(t, "")
	standby := `gpuscaler_nodegroup_instances{group="tpl",state="standby"}`
	creates := metric(`gpuscaler_cloud_api_calls_total{cloud="sim",operation="create",result="ok"}`)

	// The cold boot takes 20 s here, the start 2 s: a pod running well
	// within the boot was served from the pool.
	pending := time.Now()
	apply(t, ctx, kube, deployment("trainer", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}))
	claim := waitNodeClaim(t, ctx, kube, "gpu", "")
	if want := "sim://" + claim.Name; claim.Status.ProviderID != want {
		t.Fatalf("NodeClaim %s has provider ID %q, want %q: the standby machine renamed for it", claim.Name, claim.Status.ProviderID, want)
	}
	waitRunning(t, ctx, kube, "app=trainer", claim.Status.NodeName)
	took := time.Since(pending)
	t.Logf("pending GPU pod to Running from standby: %s (a cold boot alone takes 20 s here)", took.Round(time.Millisecond))
	if took >= 20*time.Second {
		t.Errorf("the pod took %s, a cold boot's time: not served from the pool", took)
	}
	node := &corev1.Node{}
	if err := kube.Get(ctx, client.ObjectKey{Name: claim.Status.NodeName}, node); err != nil {
		t.Fatal(err)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == "gpuscaler.dev/standby" {
			t.Errorf("the node serves with the standby taint: %v", node.Spec.Taints)
		}
	}
	if got := metric(`gpuscaler_standby_starts_total{group="tpl",result="ok"}`); got != 1 {
		t.Errorf("standby starts %v, want 1", got)
	}
	if got := metric(`gpuscaler_cloud_api_calls_total{cloud="sim",operation="transfer",result="ok"}`); got != 1 {
		t.Errorf("transfers %v, want 1", got)
	}
	// The NodeClaim's machine was not ordered; the pool orders its refill.
	waitFor(t, ctx, "the pool refilled", func() bool { return metric(standby) == 1 })
	if got := metric(`gpuscaler_cloud_api_calls_total{cloud="sim",operation="create",result="ok"}`); got != creates+1 {
		t.Errorf("%v creates after the NodeClaim, want %v: the pool's refill only", got, creates+1)
	}
	// One NodeClaim all along: the node, had it been registered with the
	// standby taint still on, would have looked unschedulable to
	// Karpenter's simulation, which then launches another
	// (controllers.StandbyHandover); consolidation takes minutes to remove
	// one.
	var claims karpv1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 1 {
		t.Errorf("%d NodeClaims for one pod, want 1", len(claims.Items))
	}
}

// TestKarpenterFallsBackWhenAStandbyStartFails: the pool's machine will
// not start (the cloud has no room for it any more). The NodeClaim that
// took it is answered InsufficientCapacity, the machine deleted and its
// offering skipped; Karpenter's next NodeClaim is ordered in the other
// zone, and the pod runs there after a cold boot.
func TestKarpenterFallsBackWhenAStandbyStartFails(t *testing.T) {
	t.Parallel()
	ctx, kube, metric := standbyOperator(t, "    startFailureRate: 1\n")
	apply(t, ctx, kube, deployment("trainer", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}))
	claim := waitNodeClaim(t, ctx, kube, "gpu", "")
	waitRunning(t, ctx, kube, "app=trainer", claim.Status.NodeName)
	if zone := claim.Labels[corev1.LabelTopologyZone]; zone != "FIN-02" {
		t.Errorf("the pod's NodeClaim is in %q, want FIN-02: the zone whose start was refused is skipped", zone)
	}
	if got := metric(`gpuscaler_standby_starts_total{group="tpl",result="failed"}`); got != 1 {
		t.Errorf("failed standby starts %v, want 1", got)
	}
	if got := metric(`gpuscaler_cloud_api_calls_total{cloud="sim",operation="transfer",result="ok"}`); got != 1 {
		t.Errorf("transfers %v, want 1", got)
	}
}

// coreLog shows, for a failed test, what the operator's node-group core
// logged above debug: the tail of the whole log, which env shows, is
// mostly Karpenter's.
func coreLog(t *testing.T, env *testenv.Env) {
	if !t.Failed() {
		return
	}
	f, err := os.Open(filepath.Join(env.Dir, "gpuscaler-karpenter.log"))
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	var out strings.Builder
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		if line := lines.Text(); strings.Contains(line, `"component":"gpuscaler"`) && !strings.Contains(line, `"level":"DEBUG"`) {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	t.Logf("---- the node-group core's log ----\n%s", out.String())
}

// standbyOperator starts a real cluster and the operator, as the chart's
// ServiceAccount, over a template group of FIN-01 that keeps a standby
// pool of one (a cold boot takes 20 s, a start 2 s); sim is added to the
// simulated cloud's settings. It returns once the pool holds its stopped
// machine and a NodePool of on-demand H100s in FIN-01 and FIN-02 is in
// place, with a reader of the operator's metrics. The operator's log is
// checked for a refused request at the end.
func standbyOperator(t *testing.T, sim string) (context.Context, client.Client, func(series string) float64) {
	t.Helper()
	env, kube, metricsAddr := chartOperator(t, `
clusterName: karpenter-standby
kubeconfig: %[3]q
metrics: {address: %[2]q}
sync: {period: 2s}
clouds:
  sim:
    locations: [FIN-01, FIN-02]
    bootDelay: 20s
    startDelay: 2s
    deleteDelay: 1s
    kubeconfig: %[1]q
%[4]snodeGroups:
  - name: tpl
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01]
    capacityPolicy: on-demand-only
    minSize: 0
    maxSize: 2
    managedBy: karpenter
    standby: {size: 1, warmFor: 1s}
`, sim)
	t.Cleanup(func() { coreLog(t, env) })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	metric := func(series string) float64 {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		return seriesValue(resp.Body, series)
	}
	waitFor(t, ctx, "a stopped standby machine", func() bool {
		return metric(`gpuscaler_nodegroup_instances{group="tpl",state="standby"}`) == 1 &&
			metric(`gpuscaler_cloud_api_calls_total{cloud="sim",operation="stop",result="ok"}`) >= 1
	})
	apply(t, ctx, kube, &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "h100"}, Spec: v1alpha1.GPUNodeClassSpec{Cloud: "sim", Template: "tpl"}})
	waitFor(t, ctx, "the GPUNodeClass Ready", func() bool {
		c := &v1alpha1.GPUNodeClass{}
		return kube.Get(ctx, client.ObjectKey{Name: "h100"}, c) == nil && c.StatusConditions().Root().IsTrue() && c.Status.InstanceTypes > 0
	})
	apply(t, ctx, kube, nodePool("gpu", "h100",
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUName, Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUCount, Operator: corev1.NodeSelectorOpIn, Values: []string{"1"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}}))
	return ctx, kube, metric
}

// seriesValue reads one series' value from a Prometheus text exposition
// (0 when absent).
func seriesValue(r io.Reader, series string) float64 {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
