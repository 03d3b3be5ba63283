package plan

import (
	corev1 "k8s.io/api/core/v1"
)

// SafeToEvictAnnotation is cluster-autoscaler's per-pod opt-out of scale-down.
const SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"

// Snapshot builds the pool's Nodes from cluster objects. groupOf names a
// node's group, "" for nodes outside the pool. A node is coming while it is
// not Ready, still carries a start-up taint, or advertises no GPU yet. It
// is removable unless a pod on it says safe-to-evict "false"; its other
// pods would be drained through the Eviction API, which honours
// PodDisruptionBudgets.
func Snapshot(nodes []*corev1.Node, pods []*corev1.Pod, groupOf func(*corev1.Node) string) []Node {
	byName := make(map[string]int, len(nodes))
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		g := groupOf(n)
		if g == "" {
			continue
		}
		gpus := GPUEquivalents(n.Status.Allocatable)
		byName[n.Name] = len(out)
		coming := !ready(n) || gpus == 0 || starting(n)
		node := Node{Name: n.Name, Group: g, GPUs: gpus, Coming: coming, Removable: true}
		if !coming && !n.Spec.Unschedulable {
			node.Object = n
		}
		out = append(out, node)
	}
	for _, p := range pods {
		i, ok := byName[p.Spec.NodeName]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req := requests(p)
		out[i].Requested += GPUEquivalents(req)
		if out[i].Object != nil {
			out[i].Used = append(out[i].Used, req)
		}
		if p.Annotations[SafeToEvictAnnotation] == "false" {
			out[i].Removable = false
		}
	}
	return out
}

// startupTaints are put on nodes until the control plane has seen them
// ready; a node carrying one is still coming.
var startupTaints = []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, "node.cloudprovider.kubernetes.io/uninitialized"}

func starting(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		for _, k := range startupTaints {
			if t.Key == k {
				return true
			}
		}
	}
	return false
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
