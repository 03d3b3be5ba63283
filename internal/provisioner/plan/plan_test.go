package plan

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
)

func template(res corev1.ResourceList, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("30"), corev1.ResourceMemory: resource.MustParse("120Gi"), corev1.ResourcePods: resource.MustParse("110")}
	for k, v := range res {
		alloc[k] = v
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}, Status: corev1.NodeStatus{Allocatable: alloc}}
}

func gpus(n string) corev1.ResourceList {
	return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}
}

func pod(name string, req corev1.ResourceList, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}}}
	for _, m := range mut {
		m(p)
	}
	return p
}

func pods(n int, req corev1.ResourceList, mut ...func(*corev1.Pod)) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, pod(fmt.Sprintf("p%d", i), req, mut...))
	}
	return out
}

var gpuTaint = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}

func tolerateGPU(p *corev1.Pod) {
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists})
}

func TestCompute(t *testing.T) {
	one := Group{Name: "h100", Template: template(gpus("1"), nil), MaxSize: 10}
	eight := Group{Name: "h100x8", Template: template(gpus("8"), nil), MaxSize: 10}
	mig := Group{Name: "a100-mig", Template: template(corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("7")}, nil), MaxSize: 10}
	tainted := Group{Name: "tainted", Template: template(gpus("1"), map[string]string{"zone": "a"}, gpuTaint), MaxSize: 10}
	zoneB := Group{Name: "zone-b", Template: template(gpus("1"), map[string]string{"zone": "b"}), MaxSize: 10}

	tests := []struct {
		name     string
		pool     Pool
		nodes    []Node
		pending  []*corev1.Pod
		add      map[string]int
		remove   []string
		unplaced int
		reason   string
	}{
		{name: "scale from zero", pool: Pool{Groups: []Group{one}}, pending: pods(5, gpus("1")), add: map[string]int{"h100": 5}, reason: "pending"},
		{
			name: "coming nodes absorb pending pods", pool: Pool{Groups: []Group{one}},
			nodes:   []Node{{Name: "n1", Group: "h100", Coming: true}, {Name: "n2", Group: "h100", Coming: true}},
			pending: pods(3, gpus("1")), add: map[string]int{"h100": 1}, reason: "pending",
		},
		{
			name: "pods bin-pack onto 8-GPU nodes", pool: Pool{Groups: []Group{eight}},
			pending: pods(10, gpus("1")), add: map[string]int{"h100x8": 2}, reason: "pending",
		},
		{
			name: "MIG devices count per node", pool: Pool{Groups: []Group{one, mig}},
			pending: pods(10, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}), add: map[string]int{"a100-mig": 2}, reason: "pending",
		},
		{
			name: "utilization above the band adds a node", pool: Pool{Groups: []Group{eight}, MaxUtilization: 0.8},
			nodes: []Node{{Name: "n1", Group: "h100x8", GPUs: 8, Requested: 7}}, add: map[string]int{"h100x8": 1}, reason: "utilization",
		},
		{
			name: "utilization inside the band adds nothing", pool: Pool{Groups: []Group{eight}, MaxUtilization: 0.8},
			nodes: []Node{{Name: "n1", Group: "h100x8", GPUs: 8, Requested: 6}}, add: map[string]int{},
		},
		{name: "warm buffer from zero", pool: Pool{Groups: []Group{one}, Buffer: 1}, add: map[string]int{"h100": 1}, reason: "buffer"},
		{
			name: "idle nodes beyond the buffer go", pool: Pool{Groups: []Group{one}, Buffer: 1},
			nodes: []Node{{Name: "n1", Group: "h100", GPUs: 1, Removable: true}, {Name: "n2", Group: "h100", GPUs: 1, Removable: true},
				{Name: "n3", Group: "h100", GPUs: 1, Requested: 1}},
			add: map[string]int{}, remove: []string{"n1"},
		},
		{
			name: "unremovable and coming nodes stay", pool: Pool{Groups: []Group{one}},
			nodes: []Node{{Name: "n1", Group: "h100", GPUs: 1}, {Name: "n2", Group: "h100", Coming: true}},
			add:   map[string]int{},
		},
		{
			name: "minNodes keeps idle nodes", pool: Pool{Groups: []Group{one}, MinNodes: 2},
			nodes: []Node{{Name: "n1", Group: "h100", GPUs: 1, Removable: true}, {Name: "n2", Group: "h100", GPUs: 1, Removable: true}},
			add:   map[string]int{},
		},
		{
			name: "stocked-out group falls back to the next", pool: Pool{Groups: []Group{{Name: "h100", Template: one.Template, MaxSize: 10, Unavailable: true}, eight}},
			pending: pods(2, gpus("1")), add: map[string]int{"h100x8": 1}, reason: "pending",
		},
		{
			name: "maxSize moves demand on", pool: Pool{Groups: []Group{{Name: "h100", Template: one.Template, Nodes: 9, MaxSize: 10}, eight}},
			pending: pods(3, gpus("1")), add: map[string]int{"h100": 1, "h100x8": 1}, reason: "pending",
		},
		{name: "maxNodes caps the pool", pool: Pool{Groups: []Group{one}, MaxNodes: 2}, pending: pods(3, gpus("1")), add: map[string]int{"h100": 2}, unplaced: 1, reason: "pending"},
		{name: "taints need tolerations", pool: Pool{Groups: []Group{tainted}}, pending: pods(1, gpus("1")), add: map[string]int{}, unplaced: 1},
		{name: "tolerating pods fit", pool: Pool{Groups: []Group{tainted}}, pending: pods(1, gpus("1"), tolerateGPU), add: map[string]int{"tainted": 1}, reason: "pending"},
		{
			name: "node selector picks the group", pool: Pool{Groups: []Group{tainted, zoneB}},
			pending: pods(1, gpus("1"), tolerateGPU, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} }),
			add:     map[string]int{"zone-b": 1}, reason: "pending",
		},
		{
			name: "required affinity picks the group", pool: Pool{Groups: []Group{zoneB, tainted}},
			pending: pods(1, gpus("1"), tolerateGPU, func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
				}}}
			}),
			add: map[string]int{"tainted": 1}, reason: "pending",
		},
		{
			name: "a pending pod that fits a ready node buys nothing", pool: Pool{Groups: []Group{eight}},
			nodes:   []Node{{Name: "n1", Group: "h100x8", GPUs: 8, Requested: 6, Object: eight.Template, Free: gpus("2")}},
			pending: pods(2, gpus("1")), add: map[string]int{},
		},
		{
			name: "the pool's cost cap stops additions", pool: Pool{Groups: []Group{{Name: "h100", Template: one.Template, MaxSize: 10, Price: 2.29, Spend: 2.29}}, MaxHourlyCost: ptr.To(7.0)},
			pending: pods(4, gpus("1")), add: map[string]int{"h100": 2}, unplaced: 2, reason: "pending",
		},
		{
			name: "a cost cap of 0 adds nothing", pool: Pool{Groups: []Group{{Name: "h100", Template: one.Template, MaxSize: 10, Price: 2.29}}, MaxHourlyCost: ptr.To(0.0)},
			pending: pods(1, gpus("1")), add: map[string]int{}, unplaced: 1,
		},
		{name: "too big for any node", pool: Pool{Groups: []Group{one}}, pending: pods(1, gpus("2")), add: map[string]int{}, unplaced: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Compute(tt.pool, tt.nodes, tt.pending)
			if !reflect.DeepEqual(p.Add, tt.add) {
				t.Errorf("add = %v, want %v", p.Add, tt.add)
			}
			if fmt.Sprint(p.Remove) != fmt.Sprint(tt.remove) {
				t.Errorf("remove = %v, want %v", p.Remove, tt.remove)
			}
			if len(p.Unplaced) != tt.unplaced {
				t.Errorf("unplaced = %v, want %d", p.Unplaced, tt.unplaced)
			}
			if p.Reason != tt.reason {
				t.Errorf("reason = %q, want %q", p.Reason, tt.reason)
			}
		})
	}
}

func TestGPUEquivalents(t *testing.T) {
	rl := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), "nvidia.com/mig-3g.40gb": resource.MustParse("7"), corev1.ResourceCPU: resource.MustParse("4")}
	if got := GPUEquivalents(rl); got < 4.999 || got > 5.001 {
		t.Fatalf("GPUEquivalents = %v, want 5", got)
	}
}

func TestSnapshot(t *testing.T) {
	readyCond := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	nodes := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "ready"}, Status: corev1.NodeStatus{Allocatable: gpus("8"), Conditions: readyCond}},
		{ObjectMeta: metav1.ObjectMeta{Name: "driver-starting"}, Status: corev1.NodeStatus{Allocatable: gpus("0"), Conditions: readyCond}},
		{ObjectMeta: metav1.ObjectMeta{Name: "not-ready"}, Status: corev1.NodeStatus{Allocatable: gpus("8")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pinned"}, Status: corev1.NodeStatus{Allocatable: gpus("8"), Conditions: readyCond}},
		{ObjectMeta: metav1.ObjectMeta{Name: "control-plane"}},
	}
	yes := true
	ds := pod("ds", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}, func(p *corev1.Pod) {
		p.Spec.NodeName = "ready"
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "dcgm", Controller: &yes}}
	})
	done := pod("done", gpus("1"), func(p *corev1.Pod) { p.Spec.NodeName = "ready"; p.Status.Phase = corev1.PodSucceeded })
	pinned := pod("pinned", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, func(p *corev1.Pod) {
		p.Spec.NodeName = "pinned"
		p.Annotations = map[string]string{SafeToEvictAnnotation: "false"}
	})
	work := pod("work", gpus("3"), func(p *corev1.Pod) { p.Spec.NodeName = "not-ready" })
	got := Snapshot(nodes, []*corev1.Pod{ds, done, pinned, work}, func(n *corev1.Node) string {
		if n.Name == "control-plane" {
			return ""
		}
		return "g"
	})
	if got[0].Object == nil || GPUEquivalents(got[0].room()) != 8 || got[0].freeGPUs() != 8 || got[1].Object != nil {
		t.Fatalf("free room: ready %v %v, starting %v", got[0].Object != nil, got[0].room(), got[1].Object != nil)
	}
	if free := got[3].room(); free.Cpu().Cmp(resource.MustParse("-1")) != 0 || GPUEquivalents(free) != 8 {
		t.Fatalf("pinned node's room %v: want its pod's CPU taken, its 8 GPUs free", free)
	}
	for i := range got {
		got[i].Object, got[i].Used = nil, nil
	}
	want := []Node{
		{Name: "ready", Group: "g", GPUs: 8, Removable: true},
		{Name: "driver-starting", Group: "g", GPUs: 0, Coming: true, Removable: true},
		{Name: "not-ready", Group: "g", GPUs: 8, Coming: true, Requested: 3, Removable: true},
		{Name: "pinned", Group: "g", GPUs: 8},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot\n got %+v\nwant %+v", got, want)
	}
}

// The one-container shortcut of Requests answers what the scheduler's
// helper does, and with a copy.
func TestRequestsShortcut(t *testing.T) {
	req := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), corev1.ResourceCPU: resource.MustParse("500m")}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: req}}}}}
	got := Requests(pod)
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("Requests = %v, want %v", got, want)
	}
	got["nvidia.com/gpu"] = resource.MustParse("9")
	if q := req["nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("Requests returned the pod's own map")
	}
}

// The plan never removes a node the core would refuse to delete: a group
// at its minSize keeps its idle nodes, and the pool's other groups still
// shrink.
func TestScaleDownKeepsGroupsAtMinSize(t *testing.T) {
	kept := Group{Name: "kept", Template: template(gpus("1"), nil), Nodes: 3, MinSize: 2, MaxSize: 10}
	free := Group{Name: "free", Template: template(gpus("1"), nil), Nodes: 2, MaxSize: 10}
	var nodes []Node
	for i := range 3 {
		nodes = append(nodes, Node{Name: fmt.Sprintf("kept-%d", i), Group: "kept", GPUs: 1, Removable: true})
	}
	for i := range 2 {
		nodes = append(nodes, Node{Name: fmt.Sprintf("free-%d", i), Group: "free", GPUs: 1, Removable: true})
	}
	p := Compute(Pool{Groups: []Group{kept, free}}, nodes, nil)
	removed := map[string]int{}
	for _, n := range p.Remove {
		removed[n[:4]]++
	}
	if removed["kept"] != 1 || removed["free"] != 2 {
		t.Errorf("removed %v (%v); want 1 of kept (minSize 2 of 3) and both of free", removed, p.Remove)
	}
}

// Which idle nodes go is a function of the nodes, not of the order they
// come in (a cache's order changes from pass to pass): fed in every order,
// the plan removes the same nodes, and a node picked before stays picked
// while it stays idle. Before, the buffer or minSize kept whichever came
// first, so the surplus node was unmarked and marked again pass after
// pass, and never went.
func TestScaleDownIsAFunctionOfTheNodes(t *testing.T) {
	a := Group{Name: "a", MaxSize: 10}
	b := Group{Name: "b", MaxSize: 10, MinSize: 1}
	idle := func(name, group string, unneeded bool) Node {
		return Node{Name: name, Group: group, GPUs: 1, Removable: true, Unneeded: unneeded}
	}
	for _, tc := range []struct {
		name   string
		pool   Pool
		nodes  []Node
		remove []string
	}{
		{"a buffer of one keeps one", Pool{Groups: []Group{a}, Buffer: 1},
			[]Node{idle("n1", "a", false), idle("n2", "a", false), idle("n3", "a", false)}, []string{"n1", "n2"}},
		{"the one picked before stays picked", Pool{Groups: []Group{a}, Buffer: 1},
			[]Node{idle("n1", "a", false), idle("n2", "a", true)}, []string{"n2"}},
		{"minSize keeps the one not picked", Pool{Groups: []Group{b}},
			[]Node{idle("n1", "b", false), idle("n2", "b", true)}, []string{"n2"}},
		{"the last fallback group goes first", Pool{Groups: []Group{a, {Name: "c", MaxSize: 10}}, Buffer: 1},
			[]Node{idle("c1", "c", false), idle("a1", "a", false)}, []string{"c1"}},
		{"minNodes", Pool{Groups: []Group{a}, MinNodes: 2},
			[]Node{idle("n3", "a", false), idle("n1", "a", true), idle("n2", "a", false), idle("n4", "a", true)}, []string{"n1", "n4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			for range 50 {
				nodes := slices.Clone(tc.nodes)
				rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
				got := Compute(tc.pool, nodes, nil).Remove
				if !slices.Equal(got, tc.remove) {
					t.Fatalf("nodes %v: remove %v, want %v", names(nodes), got, tc.remove)
				}
			}
		})
	}
}

func names(nodes []Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}
