package plan

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Consolidate picks the node whose pods defragmentation moves, so that
// the node frees up whole: a Ready, schedulable node of the pool whose GPUs
// are requested up to maxUtilization (but not idle: scale-down handles
// those), whose pods can all be evicted (evictable) and all fit, as the
// nodes are now, on the pool's other Ready, schedulable nodes that already
// run GPU pods (moving onto an idle node frees nothing). The least used
// candidate that fits goes first; "" when none does. podsOn are each
// node's running pods (DaemonSet and mirror pods left out); budget caps
// the pods it may move; blocked rules out a node as a candidate (its
// PodDisruptionBudgets allow no eviction now).
func Consolidate(nodes []Node, podsOn map[string][]*corev1.Pod, maxUtilization float64, budget int, evictable func(*corev1.Pod) bool, blocked func(node string) bool) string {
	var candidates, targets []Node
	for _, n := range nodes {
		if n.Coming || n.Object == nil || n.Requested == 0 || n.GPUs == 0 {
			continue
		}
		targets = append(targets, n)
		if n.Removable && n.Requested/n.GPUs <= maxUtilization+1e-9 && len(podsOn[n.Name]) <= budget && all(podsOn[n.Name], evictable) && !blocked(n.Name) {
			candidates = append(candidates, n)
		}
	}
	sort.SliceStable(candidates, func(i, j int) bool {
		if candidates[i].Requested != candidates[j].Requested {
			return candidates[i].Requested < candidates[j].Requested
		}
		return candidates[i].Name < candidates[j].Name
	})
	for _, c := range candidates {
		if placeAll(c, podsOn[c.Name], targets) {
			return c.Name
		}
	}
	return ""
}

// placeAll reports whether a node's pods fit on the other targets' free
// resources, largest GPU request first, each on the fullest target that
// admits it.
func placeAll(c Node, pods []*corev1.Pod, targets []Node) bool {
	type room struct {
		node *corev1.Node
		free corev1.ResourceList
		used float64
	}
	var rooms []*room
	for _, t := range targets {
		if t.Name != c.Name {
			rooms = append(rooms, &room{node: t.Object, free: t.room(), used: t.Requested})
		}
	}
	sorted := append([]*corev1.Pod(nil), pods...)
	sort.SliceStable(sorted, func(i, j int) bool {
		return GPUEquivalents(requests(sorted[i])) > GPUEquivalents(requests(sorted[j]))
	})
	for _, p := range sorted {
		req := requests(p)
		var best *room
		for _, r := range rooms {
			if FitsIn(req, r.free) && admits(p, r.node) && (best == nil || r.used > best.used) {
				best = r
			}
		}
		if best == nil {
			return false
		}
		Subtract(best.free, req)
		best.used += GPUEquivalents(req)
	}
	return true
}

func all(pods []*corev1.Pod, ok func(*corev1.Pod) bool) bool {
	for _, p := range pods {
		if !ok(p) {
			return false
		}
	}
	return true
}
