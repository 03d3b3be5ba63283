package plan

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestConsolidate: the least used node whose pods fit elsewhere is chosen;
// a node whose pods fit nowhere, that runs a pod that may not move, that
// is above the utilization bar, that is blocked, or whose pods exceed the
// budget is not; idle nodes are neither candidates nor targets.
func TestConsolidate(t *testing.T) {
	node := func(name string, total, used string) Node {
		tmpl := template(gpus(total), nil)
		tmpl.Name = name
		free := tmpl.Status.Allocatable.DeepCopy()
		Subtract(free, gpus(used))
		g, u := GPUEquivalents(gpus(total)), GPUEquivalents(gpus(used))
		return Node{Name: name, Group: "g", GPUs: g, Requested: u, Removable: true, Object: tmpl, Free: free}
	}
	on := func(name, used string) []*corev1.Pod { return []*corev1.Pod{pod(name+"-pod", gpus(used))} }
	yes := func(*corev1.Pod) bool { return true }
	none := func(string) bool { return false }
	nodes := []Node{node("a", "4", "1"), node("b", "4", "2"), node("c", "4", "3"), node("idle", "4", "0")}
	podsOn := map[string][]*corev1.Pod{"a": on("a", "1"), "b": on("b", "2"), "c": on("c", "3")}
	for _, c := range []struct {
		name      string
		maxUtil   float64
		budget    int
		movable   func(*corev1.Pod) bool
		blocked   func(string) bool
		nodes     []Node
		want      string
		wantEmpty bool
	}{
		{name: "least used first", maxUtil: 0.5, budget: 10, movable: yes, blocked: none, nodes: nodes, want: "a"},
		{name: "a blocked: b", maxUtil: 0.5, budget: 10, movable: yes, blocked: func(n string) bool { return n == "a" }, nodes: nodes, want: "b"},
		{name: "bar below b", maxUtil: 0.25, budget: 10, movable: yes, blocked: func(n string) bool { return n == "a" }, nodes: nodes, wantEmpty: true},
		{name: "no budget", maxUtil: 0.5, budget: 0, movable: yes, blocked: none, nodes: nodes, wantEmpty: true},
		{name: "nothing movable", maxUtil: 0.5, budget: 10, movable: func(*corev1.Pod) bool { return false }, blocked: none, nodes: nodes, wantEmpty: true},
		// The idle node is no target: a's GPU fits only there once b and c are full.
		{name: "only idle room", maxUtil: 0.5, budget: 10, movable: yes, blocked: none, nodes: []Node{node("a", "4", "1"), node("c", "4", "4"), node("idle", "4", "0")}, wantEmpty: true},
	} {
		got := Consolidate(c.nodes, podsOn, c.maxUtil, c.budget, c.movable, c.blocked)
		if c.wantEmpty && got != "" || !c.wantEmpty && got != c.want {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
}
