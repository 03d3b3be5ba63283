package simulate

import (
	"cmp"
	"maps"
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
	// booting are the nodes not Ready yet. ready (the Ready nodes in the
	// order they became Ready) and names (every node's, sorted) are made
	// again when nil: a run reads them on every event and changes them
	// far less often.
	booting []*node
	ready   []*node
	names   []string
	// pullRate is how fast a node pulls an image, in MB/s (0: at once).
	pullRate float64
	// disks are the images on the disks of instances whose Node left
	// (stopped back to a standby pool), by instance name: a start finds
	// them again.
	disks map[string]map[string]time.Duration
}

// node is one instance's Node.
type node struct {
	name, group, providerID string
	// obj is the Node as the planner sees it (template labels, taints and
	// allocatable, the instance's name and provider ID).
	obj  *corev1.Node
	gpus float64
	// orderedAt is when its instance was ordered, or started from a
	// standby pool; registeredAt when it ran and its Node registered;
	// readyAt when its GPUs showed, Ready for GPU pods.
	orderedAt, registeredAt, readyAt time.Duration
	ready                            bool
	// images are the images on its disk, each with when its pull ends
	// (pulled already when that is past).
	images map[string]time.Duration
	free   corev1.ResourceList
	// freeGPUs is free's GPU-equivalents: a pod asking more cannot fit.
	freeGPUs float64
	pods     []*pod
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
	// when it was last bound to a node; start when its containers started
	// there, its image pulled; done when it finishes; requeued counts its
	// evictions.
	since, placed, start, done time.Duration
	started                    bool
	requeued                   int
	node                       *node
}

func newCluster(pullRate float64) *cluster {
	return &cluster{nodes: map[string]*node{}, pullRate: pullRate, disks: map[string]map[string]time.Duration{}}
}

// podObject renders a trace pod as the Pod the planner reads: its GPU
// request, and its tolerations (of every taint unless the trace names
// them).
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
			Tolerations: tolerations(p.Tolerates),
			Priority:    ptr(int32(p.Priority)),
		},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		}}},
	}
}

func ptr[T any](v T) *T { return &v }

// tolerations are a pod's for the taint keys it tolerates: every taint
// for nil.
func tolerations(keys []string) []corev1.Toleration {
	if keys == nil {
		return []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	out := make([]corev1.Toleration, 0, len(keys))
	for _, k := range keys {
		out = append(out, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists})
	}
	return out
}

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
		n.freeGPUs -= p.gpu
		n.pods = append(n.pods, p)
		n.emptySince, n.unneededSince = -1, -1
		p.node, p.placed, p.started = n, now, true
		p.start = c.pull(n, p, now)
		p.done = p.start + p.Duration
		p.obj.Spec.NodeName = n.obj.Name
		c.used += p.gpu
		placed(p)
	}
	clear(c.pending[len(kept):])
	c.pending = kept
}

// pull is when the pod's containers start on n, placed there at now: once
// its image is on the node, pulled now unless the node holds it or pulls
// it already. A node pulls each image at the full rate.
func (c *cluster) pull(n *node, p *pod, now time.Duration) time.Duration {
	if p.Image == "" {
		return now
	}
	if done, ok := n.images[p.Image]; ok {
		return max(now, done)
	}
	took := pullTime(p.ImageGB, c.pullRate)
	if n.images == nil {
		n.images = map[string]time.Duration{}
	}
	n.images[p.Image] = now + took
	return now + took
}

// pullTime is how long a pull of gb takes at rate MB/s (0: at once).
func pullTime(gb, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(gb * 1000 / rate * float64(time.Second)).Round(time.Second)
}

// join adds a node for a new instance; it is Ready at n.readyAt. A node
// started again finds on its disk what it held when it stopped.
func (c *cluster) join(n *node) {
	if disk, ok := c.disks[n.name]; ok {
		if n.images == nil {
			n.images = map[string]time.Duration{}
		}
		for img, done := range disk {
			n.images[img] = done
		}
		delete(c.disks, n.name)
	}
	n.freeGPUs = n.gpus
	n.obj.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	c.nodes[n.name] = n
	c.booting = append(c.booting, n)
	c.names = nil
}

// remove takes a node out of the cluster at now (its pods are the
// caller's), keeping the images its disk holds by then for a start.
func (c *cluster) remove(n *node, now time.Duration) {
	delete(c.nodes, n.name)
	maps.DeleteFunc(n.images, func(_ string, done time.Duration) bool { return done > now })
	if len(n.images) > 0 {
		c.disks[n.name] = n.images
	}
	c.booting = slices.DeleteFunc(c.booting, func(b *node) bool { return b == n })
	if n.ready {
		c.ready = nil
	}
	c.names = nil
}

// nextReady is when the next booting node becomes Ready; ok is false when
// none boots.
func (c *cluster) nextReady() (at time.Duration, ok bool) {
	for i, n := range c.booting {
		if i == 0 || n.readyAt < at {
			at = n.readyAt
		}
	}
	return at, len(c.booting) > 0
}

// becomeReady makes the booting nodes whose time has come Ready; it
// reports whether any did.
func (c *cluster) becomeReady(now time.Duration) bool {
	n0 := len(c.booting)
	c.booting = slices.DeleteFunc(c.booting, func(n *node) bool {
		if n.readyAt > now {
			return false
		}
		n.ready, n.emptySince = true, now
		n.obj.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		return true
	})
	if len(c.booting) == n0 {
		return false
	}
	c.ready = nil
	return true
}

// readyNodes are the Ready nodes in the order they became Ready.
func (c *cluster) readyNodes() []*node {
	if c.ready != nil {
		return c.ready
	}
	c.ready = []*node{}
	for _, n := range c.nodes {
		if n.ready {
			c.ready = append(c.ready, n)
		}
	}
	slices.SortFunc(c.ready, func(a, b *node) int {
		if a.readyAt != b.readyAt {
			return cmp.Compare(a.readyAt, b.readyAt)
		}
		return cmp.Compare(a.name, b.name)
	})
	return c.ready
}

// firstFit is the first node with room for the pod that admits it. The
// GPU-equivalents are compared first: most nodes of a busy pool have none
// to spare, and that test is a subtraction.
func firstFit(nodes []*node, p *pod) *node {
	for _, n := range nodes {
		if n.freeGPUs+1e-9 >= p.gpu && plan.FitsIn(p.req, n.free) && plan.Fits(p.obj, n.obj) {
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
	n.freeGPUs += p.gpu
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
	c.remove(n, now)
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
	if c.names == nil {
		c.names = make([]string, 0, len(c.nodes))
		for name := range c.nodes {
			c.names = append(c.names, name)
		}
		slices.Sort(c.names)
	}
	nodes = make([]*corev1.Node, 0, len(c.names))
	for _, name := range c.names {
		n := c.nodes[name]
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
