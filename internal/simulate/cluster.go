package simulate

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// cluster is the simulated Kubernetes side: a Node per instance the core
// reports, Ready once its GPUs are up, and a scheduler that places pending
// pods, highest priority first, then oldest, on the first Ready node with
// room (nodes in the order they became Ready).
type cluster struct {
	nodes   map[string]*node // by instance name
	pending []*pod
	// used is the GPU-equivalents the running pods hold now.
	used float64
}

// node is one instance's Node.
type node struct {
	name, group, providerID string
	// obj is the Node as the planner sees it (template labels, taints and
	// allocatable, the instance's name and provider ID).
	obj     *corev1.Node
	gpus    float64
	readyAt time.Duration
	ready   bool
	free    corev1.ResourceList
	pods    []*pod
	// emptySince is when its last pod left (or it became Ready); -1 while
	// pods run.
	emptySince time.Duration
	// unneededSince is when the policy first found it unneeded; -1 for not.
	unneededSince time.Duration
}

// pod is a trace pod in the simulated cluster.
type pod struct {
	Pod
	obj *corev1.Pod
	req corev1.ResourceList
	gpu float64
	// since is when it last became pending (arrival or eviction); placed
	// when it last started; done when it finishes; requeued counts its
	// evictions.
	since, placed, done time.Duration
	started             bool
	requeued            int
	node                *node
}

func newCluster() *cluster { return &cluster{nodes: map[string]*node{}} }

// podObject renders a trace pod as the Pod the planner reads: its GPU
// request, and a toleration of every taint (GPU workloads tolerate the GPU
// nodes' taints).
func podObject(p Pod) *corev1.Pod {
	res := corev1.ResourceList{}
	if p.MIG != "" {
		res[corev1.ResourceName("nvidia.com/mig-"+p.MIG)] = resource.MustParse("1")
	} else {
		res[gpu.ResourceGPU] = *resource.NewQuantity(int64(p.GPUs), resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "trace"},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Priority:    ptr(int32(p.Priority)),
		},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		}}},
	}
}

func ptr[T any](v T) *T { return &v }

// arrive makes a pod pending.
func (c *cluster) arrive(p *pod, now time.Duration) {
	p.since = now
	c.pending = append(c.pending, p)
}

// schedule places what pending pods fit; it returns the pods placed.
func (c *cluster) schedule(now time.Duration, placed func(*pod)) {
	if len(c.pending) == 0 {
		return
	}
	slices.SortStableFunc(c.pending, func(a, b *pod) int {
		if a.Priority != b.Priority {
			return cmp.Compare(b.Priority, a.Priority)
		}
		if a.since != b.since {
			return cmp.Compare(a.since, b.since)
		}
		return cmp.Compare(a.Name, b.Name)
	})
	ready := c.readyNodes()
	kept := c.pending[:0]
	for _, p := range c.pending {
		n := firstFit(ready, p)
		if n == nil {
			kept = append(kept, p)
			continue
		}
		plan.Subtract(n.free, p.req)
		n.pods = append(n.pods, p)
		n.emptySince, n.unneededSince = -1, -1
		p.node, p.placed, p.started = n, now, true
		p.done = now + p.Duration
		p.obj.Spec.NodeName = n.obj.Name
		c.used += p.gpu
		placed(p)
	}
	clear(c.pending[len(kept):])
	c.pending = kept
}

// readyNodes are the Ready nodes in the order they became Ready.
func (c *cluster) readyNodes() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.ready {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *node) int {
		if a.readyAt != b.readyAt {
			return cmp.Compare(a.readyAt, b.readyAt)
		}
		return cmp.Compare(a.name, b.name)
	})
	return out
}

func firstFit(nodes []*node, p *pod) *node {
	for _, n := range nodes {
		if plan.FitsIn(p.req, n.free) && plan.Fits(p.obj, n.obj) {
			return n
		}
	}
	return nil
}

// add gives req back to free in place.
func add(free, req corev1.ResourceList) {
	for name, q := range req {
		f := free[name]
		f.Add(q)
		free[name] = f
	}
}

// finish ends a pod that ran its course.
func (c *cluster) finish(p *pod, now time.Duration) {
	n := p.node
	add(n.free, p.req)
	n.pods = slices.DeleteFunc(n.pods, func(q *pod) bool { return q == p })
	if len(n.pods) == 0 {
		n.emptySince = now
	}
	c.used -= p.gpu
	p.node = nil
}

// lose removes a node whose instance is gone; its pods go back to pending
// and it returns how many.
func (c *cluster) lose(n *node, now time.Duration) int {
	delete(c.nodes, n.name)
	for _, p := range n.pods {
		c.used -= p.gpu
		p.node, p.started = nil, false
		p.obj.Spec.NodeName = ""
		p.requeued++
		c.arrive(p, now)
	}
	return len(n.pods)
}

// objects renders the cluster as the planner reads it: every Node, every
// pod that runs or waits, and the pending ones.
func (c *cluster) objects() (nodes []*corev1.Node, pods, pending []*corev1.Pod) {
	names := make([]string, 0, len(c.nodes))
	for name := range c.nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		n := c.nodes[name]
		status := corev1.ConditionFalse
		if n.ready {
			status = corev1.ConditionTrue
		}
		n.obj.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
		nodes = append(nodes, n.obj)
		for _, p := range n.pods {
			pods = append(pods, p.obj)
		}
	}
	for _, p := range c.pending {
		pods = append(pods, p.obj)
		pending = append(pending, p.obj)
	}
	return nodes, pods, pending
}
