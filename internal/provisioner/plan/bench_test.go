package plan

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkReconcilePlan measures the decision of one reconcile at scale:
// 2,000 nodes in 50 groups, 20,000 pods (19,000 bound, 1,000 pending).
func BenchmarkReconcilePlan(b *testing.B) {
	for _, size := range []struct{ nodes, pods, pending int }{{2_000, 20_000, 1_000}, {10_000, 100_000, 5_000}} {
		b.Run(fmt.Sprintf("nodes=%d/pods=%d", size.nodes, size.pods), func(b *testing.B) {
			benchmarkPlan(b, 50, size.nodes, size.pods, size.pending)
		})
	}
}

// benchmarkPlan plans for nodesN nodes in groups, podsN pods of which
// pendingN are pending with node selectors and the rest bound.
func benchmarkPlan(b *testing.B, groups, nodesN, podsN, pendingN int) {
	pool := Pool{MaxUtilization: 0.8, Buffer: 2}
	for i := range groups {
		pool.Groups = append(pool.Groups, Group{
			Name: fmt.Sprintf("g%02d", i), Template: template(gpus("8"), map[string]string{"group": fmt.Sprint(i)}), Nodes: nodesN / groups, MaxSize: 1000,
		})
	}
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	var nodes []*corev1.Node
	group := map[string]string{}
	for i := range nodesN {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%05d", i)},
			Status: corev1.NodeStatus{Allocatable: gpus("8"), Conditions: ready}}
		nodes = append(nodes, n)
		group[n.Name] = fmt.Sprintf("g%02d", i%groups)
	}
	var bound, pending []*corev1.Pod
	for i := range podsN {
		p := pod(fmt.Sprintf("p%06d", i), corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("1")})
		if i < podsN-pendingN {
			p.Spec.NodeName = nodes[i%nodesN].Name
			bound = append(bound, p)
		} else {
			p.Spec.NodeSelector = map[string]string{"group": fmt.Sprint(i % groups)}
			pending = append(pending, p)
		}
	}
	all := append(bound, pending...)
	groupOf := func(n *corev1.Node) string { return group[n.Name] }
	b.ReportAllocs()
	b.ResetTimer()
	var p Plan
	for range b.N {
		p = Compute(pool, Snapshot(nodes, all, groupOf), pending)
	}
	b.StopTimer()
	added := 0
	for _, n := range p.Add {
		added += n
	}
	if added == 0 || len(p.Unplaced) != 0 {
		b.Fatalf("implausible plan: %d added, %d unplaced", added, len(p.Unplaced))
	}
}
