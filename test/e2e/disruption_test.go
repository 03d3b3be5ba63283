package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
)

// poolNodes returns the pool's Ready nodes that take pods (not cordoned).
func poolNodes(ctx context.Context, c *controllerEnv, group string) []corev1.Node {
	return usable(readyGPUNodes(ctx, c.env.Client), group)
}

// usable keeps the Ready GPU nodes of a group that take pods.
func usable(nodes []corev1.Node, group string) []corev1.Node {
	var out []corev1.Node
	for _, n := range gpuReady(nodes) {
		if n.Labels["gpuscaler.dev/node-group"] == group && !n.Spec.Unschedulable {
			out = append(out, n)
		}
	}
	return out
}

// TestRotation: nodes past the pool's maxNodeLifetime are replaced one at
// a time, each successor Ready before its predecessor is cordoned, so the
// pool never has fewer Ready, schedulable nodes than its two.
func TestRotation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 5}\n")
	two := int32(2)
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "rotated"}, Spec: v1alpha1.NodeProvisionerSpec{
		NodeGroups: []string{"h100"}, MinNodes: &two, ScaleDownDelay: &metav1.Duration{Duration: 10 * time.Minute},
		MaxNodeLifetime: &metav1.Duration{Duration: 15 * time.Second}}})
	waitFor(t, ctx, "two Ready nodes", func() bool { return len(poolNodes(ctx, c, "h100")) == 2 })
	original := map[string]bool{}
	for _, n := range poolNodes(ctx, c, "h100") {
		original[n.Name] = true
	}
	fewest := 2
	// A node counts from its first Ready on, while it takes pods: under a
	// loaded test machine kwok's heartbeats can lapse and turn a node
	// NotReady for a moment, which says nothing of the rotation's order
	// (a successor Ready before its predecessor is cordoned).
	wasReady := map[string]bool{}
	deadline := time.Now().Add(100 * time.Second)
	for {
		all, err := c.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue // no sample: the API server was slow to answer
		}
		for _, n := range usable(all.Items, "h100") {
			wasReady[n.Name] = true
		}
		var nodes []corev1.Node
		for _, n := range all.Items {
			if wasReady[n.Name] && !n.Spec.Unschedulable && n.DeletionTimestamp == nil {
				nodes = append(nodes, n)
			}
		}
		fewest = min(fewest, len(nodes))
		left := 0
		for _, n := range all.Items {
			if original[n.Name] {
				left++
			}
		}
		if left == 0 && len(nodes) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 100 s, %d of the original nodes are still there", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fewest < 2 {
		t.Fatalf("during rotation the pool had %d Ready, schedulable nodes; want never fewer than 2", fewest)
	}
}

// TestDefragmentation: four 2-GPU nodes each half used become two full
// ones. Three of the pods belong to ReplicaSets, the fourth to no
// controller: it is never evicted. While a PodDisruptionBudget allows no
// disruption, nothing moves; once it goes, the pool consolidates.
func TestDefragmentation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: h100x2, cloud: sim, instanceType: 2H100.80S.80V, locations: [FIN-01], maxSize: 6}\n")
	four, one := int32(4), int32(1)
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "dense"}, Spec: v1alpha1.NodeProvisionerSpec{
		NodeGroups: []string{"h100x2"}, MinNodes: &four, MinUnutilizedGPUNodes: &one, ScaleDownDelay: &metav1.Duration{Duration: time.Second}}})
	waitFor(t, ctx, "four Ready nodes", func() bool { return len(poolNodes(ctx, c, "h100x2")) == 4 })

	// One pod per node, placed so: three ReplicaSets of one pod, each
	// preferring its own node (a preference: once that node is cordoned,
	// its pod may go anywhere), and a bare pod bound to the fourth.
	nodes := poolNodes(ctx, c, "h100x2")
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	pod := func(node string) corev1.PodSpec {
		spec := gpuPod("x").Spec
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
		return spec
	}
	labels := map[string]string{"app": "infer"}
	for i := range 3 {
		l := map[string]string{"app": "infer", "replica": fmt.Sprint(i)}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("infer-%d", i), Namespace: "default"}, Spec: appsv1.ReplicaSetSpec{
			Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: pod(nodes[i].Labels[corev1.LabelHostname])}}}
		if err := c.kube.Create(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	soloSpec := gpuPod("solo").Spec
	soloSpec.NodeName = nodes[3].Name
	solo := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: "default"}, Spec: soloSpec}
	if err := c.kube.Create(ctx, solo); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: new(intstr.FromInt32(3)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if err := c.kube.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	spread := func() map[string]int {
		var list corev1.PodList
		_ = c.kube.List(ctx, &list, client.InNamespace("default"))
		on := map[string]int{}
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				on[p.Spec.NodeName]++
			}
		}
		return on
	}
	waitFor(t, ctx, "four pods Running, one per node, and an idle buffer node", func() bool {
		on := spread()
		return len(on) == 4 && on[""] == 0 && len(poolNodes(ctx, c, "h100x2")) == 5
	})
	var before corev1.Pod
	if err := c.kube.Get(ctx, types.NamespacedName{Namespace: "default", Name: "solo"}, &before); err != nil {
		t.Fatal(err)
	}

	// Defragmentation on, minimum off: the budget holds every pod.
	var np v1alpha1.NodeProvisioner
	if err := c.kube.Get(ctx, types.NamespacedName{Name: "dense"}, &np); err != nil {
		t.Fatal(err)
	}
	np.Spec.MinNodes = nil
	np.Spec.Defragmentation = &v1alpha1.Defragmentation{Enabled: true}
	if err := c.kube.Update(ctx, &np); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	if on := spread(); len(on) != 4 || len(poolNodes(ctx, c, "h100x2")) != 5 {
		t.Fatalf("with a PodDisruptionBudget allowing nothing: pods per node %v, %d nodes; want 4 and 5", on, len(poolNodes(ctx, c, "h100x2")))
	}
	creates := c.engine.Calls()["create"]
	if err := c.kube.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "two full nodes and the buffer", func() bool {
		on := spread()
		if len(on) != 2 || len(poolNodes(ctx, c, "h100x2")) != 3 {
			return false
		}
		for _, n := range on {
			if n != 2 {
				return false
			}
		}
		return true
	})
	if n := c.engine.Calls()["create"]; n != creates {
		t.Errorf("%d nodes ordered while defragmenting; want none (the moved pods belong on the busy nodes, not the buffer, which the pool would then replace)", n-creates)
	}
	// The pass after the last drain takes the spare taint off.
	waitFor(t, ctx, "no node left with the spare taint after defragmentation", func() bool {
		for _, n := range poolNodes(ctx, c, "h100x2") {
			if hasTaint(n, provisioner.TaintSpare) {
				return false
			}
		}
		return true
	})
	var after corev1.Pod
	if err := c.kube.Get(ctx, types.NamespacedName{Namespace: "default", Name: "solo"}, &after); err != nil || after.UID != before.UID || after.Spec.NodeName != before.Spec.NodeName {
		t.Fatalf("the pod without a controller was moved or lost: %v (node %s, was %s)", err, after.Spec.NodeName, before.Spec.NodeName)
	}
	if err := c.kube.Get(ctx, types.NamespacedName{Name: "dense"}, &np); err != nil {
		t.Fatal(err)
	}
	if n := len(np.Status.DefragmentationEvictions); n < 2 || n > 3 {
		t.Errorf("%d evictions recorded; want the 2 or 3 moves", n)
	}
	for _, n := range poolNodes(ctx, c, "h100x2") {
		if n.Annotations[provisioner.AnnotationDrain] != "" {
			t.Errorf("node %s still marked %s", n.Name, n.Annotations[provisioner.AnnotationDrain])
		}
	}
}
