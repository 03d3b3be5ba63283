package plan

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Group is one node group of a pool, in the pool's fallback order.
type Group struct {
	Name string
	// Template is the node a new instance registers as.
	Template *corev1.Node
	// Nodes is the group's current size; MinSize and MaxSize its limits:
	// the core refuses to delete a node below MinSize, so the plan never
	// removes one there (it would be cordoned and drained for nothing).
	Nodes   int
	MinSize int
	MaxSize int
	// Unavailable marks a group whose offerings are all stocked out now;
	// new demand goes to the next group.
	Unavailable bool
	// Price is the hourly price of the group's next node; Spend what its
	// nodes cost per hour now. Both matter only with Pool.MaxHourlyCost.
	Price float64
	Spend float64
}

// Pool is a NodeProvisioner's targets over its groups.
type Pool struct {
	Groups []Group
	// MinUtilization and MaxUtilization are fractions (0..1); 0 means unset.
	MinUtilization float64
	MaxUtilization float64
	// Buffer is how many GPU nodes to keep with nothing requested.
	Buffer int
	// MinNodes and MaxNodes bound the pool; MaxNodes 0 means no bound.
	MinNodes int
	MaxNodes int
	// MaxHourlyCost caps the pool's spend; nil means no cap, and 0 a cap
	// of nothing (as a forecast's maxExtraHourlyCost of 0 orders nothing).
	MaxHourlyCost *float64
}

// Node is one existing node of the pool as the controller saw it.
type Node struct {
	Name  string
	Group string
	// GPUs is the node's allocatable GPU-equivalents; Coming marks a node
	// whose GPUs have not appeared yet (not Ready, or the device plugin is
	// still starting): it counts with its template's GPUs, as capacity on
	// the way, and is neither free for the scheduler nor empty.
	GPUs   float64
	Coming bool
	// Requested is what the pods on it request, in GPU-equivalents;
	// Removable is false when a pod on it must not be evicted
	// (safe-to-evict: "false"), or it runs other non-DaemonSet pods.
	Requested float64
	Removable bool
	// Unneeded marks a node an earlier pass picked to go (the controller's
	// unneeded taint): while it stays idle it stays the one that goes, so
	// that its clock runs on rather than passing to another node.
	Unneeded bool
	// Object, when set, lets pending pods be placed on the node's free
	// resources: a pod the scheduler found no room for a moment ago may fit
	// a node that became Ready since, and must not buy another. They are
	// Free when it is set, else Object's allocatable less Used, the
	// requests of the pods on the node; GPUs and Requested are then the
	// GPU-equivalents of those two. Snapshot gives Used and leaves Free to
	// be made where a pass needs it: most passes need it for few nodes.
	Object *corev1.Node
	Free   corev1.ResourceList
	Used   []corev1.ResourceList
}

// minGPU is less than any GPU-equivalent a device can be (a MIG slice is
// 1/7) and more than sums of them are off by in floating point: a node
// with less free has none.
const minGPU = 1e-9

// freeGPUs is the GPU-equivalents free on a node with an Object.
func (n *Node) freeGPUs() float64 {
	if n.Free != nil {
		return GPUEquivalents(n.Free)
	}
	return n.GPUs - n.Requested
}

// room is a copy of a node's free resources (see Node.Object), for the
// caller to change.
func (n *Node) room() corev1.ResourceList {
	if n.Free != nil {
		return n.Free.DeepCopy()
	}
	free := n.Object.Status.Allocatable.DeepCopy()
	for _, req := range n.Used {
		Subtract(free, req)
	}
	return free
}

// Plan is the outcome.
type Plan struct {
	// Add is how many nodes to add per group.
	Add map[string]int
	// Remove are the idle nodes that may go, in removal order.
	Remove []string
	// Unplaced are pending pods no group can take (name only).
	Unplaced []string
	// Allocatable and Requested are in GPU-equivalents, before the plan,
	// for the pool and per group.
	Allocatable      float64
	Requested        float64
	GroupAllocatable map[string]float64
	GroupRequested   map[string]float64
	// Reason says what drove the additions: "pending", "utilization",
	// "buffer", "minNodes", or "" when nothing is added.
	Reason string
	// Filled counts, per group, the nodes with nothing on them (ready,
	// or coming) that pending pods were planned onto: with Add, the
	// nodes the pending pods take that nothing else uses.
	Filled map[string]int
}

// Utilization is Requested / Allocatable, 0 for an empty pool.
func (p Plan) Utilization() float64 {
	if p.Allocatable == 0 {
		return 0
	}
	return p.Requested / p.Allocatable
}

// bin is a node pods can be planned onto: a ready node with room, a coming
// node, or a new one.
type bin struct {
	group int
	node  *corev1.Node // what admission is checked against
	free  corev1.ResourceList
	used  bool
	// existing: a ready node; it does not count as new or as buffer.
	existing bool
	// empty: a ready or coming node with nothing on it.
	empty bool
}

// Compute plans one pool: place the pending pods (on coming nodes first,
// then on new nodes of the first group that fits), then add nodes while
// utilization is above the band or the buffer is short, then pick idle
// nodes that may go when nothing is added.
func Compute(pool Pool, nodes []Node, pending []*corev1.Pod) Plan {
	c := newPlanner(pool, nodes)
	planned := c.placePending(pending)
	// Pods planned onto ready nodes make them busy, not idle: they are
	// already in the utilization and buffer counts through Requested below.
	c.requested = c.p.Requested + planned
	c.alloc = c.p.Allocatable
	for gi, g := range pool.Groups {
		c.alloc += float64(c.p.Add[g.Name]) * c.gpusOf[gi]
	}
	c.band()
	c.fillBuffer()
	if c.total > len(nodes) {
		return c.p
	}
	c.scaleDown()
	return c.p
}

// planner is one Compute's state: the plan so far, the bins pods are
// planned onto, and the pool's size, spend and GPUs as the plan grows.
type planner struct {
	pool  Pool
	nodes []Node
	p     Plan
	// index finds a group's position by name; gpusOf is each group's
	// GPU-equivalents per node.
	index  map[string]int
	gpusOf []float64
	bins   []*bin
	// idle counts the nodes with nothing requested; total the nodes,
	// spend the hourly spend, both with the plan's additions.
	idle, total int
	spend       float64
	// alloc and requested are the pool's GPU-equivalents with the plan.
	alloc, requested float64
}

func newPlanner(pool Pool, nodes []Node) *planner {
	c := &planner{
		pool: pool, nodes: nodes, total: len(nodes),
		p:      Plan{Add: map[string]int{}, GroupAllocatable: map[string]float64{}, GroupRequested: map[string]float64{}, Filled: map[string]int{}},
		index:  map[string]int{},
		gpusOf: make([]float64, len(pool.Groups)),
	}
	for i, g := range pool.Groups {
		c.index[g.Name] = i
		if g.Template != nil {
			c.gpusOf[i] = GPUEquivalents(g.Template.Status.Allocatable)
		}
		c.spend += g.Spend
	}
	for _, n := range nodes {
		gi, ok := c.index[n.Group]
		alloc := n.GPUs
		if n.Coming && ok {
			alloc = c.gpusOf[gi]
			if tmpl := pool.Groups[gi].Template; tmpl != nil && n.Requested == 0 {
				c.bins = append(c.bins, &bin{group: gi, node: tmpl, free: tmpl.Status.Allocatable.DeepCopy(), empty: true})
			}
		} else if ok && n.Object != nil && n.freeGPUs() > minGPU {
			c.bins = append(c.bins, &bin{group: gi, node: n.Object, free: n.room(), existing: true, empty: n.Requested == 0})
		}
		c.p.Allocatable += alloc
		c.p.Requested += n.Requested
		c.p.GroupAllocatable[n.Group] += alloc
		c.p.GroupRequested[n.Group] += n.Requested
		if n.Requested == 0 {
			c.idle++
		}
	}
	return c
}

// room reports whether group gi may take one more node: available, under
// its maxSize, the pool's maxNodes and its cost cap.
func (c *planner) room(gi int) bool {
	g := c.pool.Groups[gi]
	return !g.Unavailable && g.Template != nil && g.Nodes+c.p.Add[g.Name] < g.MaxSize &&
		(c.pool.MaxNodes == 0 || c.total < c.pool.MaxNodes) &&
		(c.pool.MaxHourlyCost == nil || *c.pool.MaxHourlyCost > 0 && c.spend+g.Price <= *c.pool.MaxHourlyCost+1e-9)
}

// firstRoom is the first group, in the pool's order, with room and GPUs;
// -1 when none has.
func (c *planner) firstRoom() int {
	for gi := range c.pool.Groups {
		if c.room(gi) && c.gpusOf[gi] > 0 {
			return gi
		}
	}
	return -1
}

// add plans a new node of group gi, for reason, and returns its bin.
func (c *planner) add(gi int, reason string) *bin {
	g := c.pool.Groups[gi]
	c.p.Add[g.Name]++
	c.total++
	c.spend += g.Price
	if c.p.Reason == "" {
		c.p.Reason = reason
	}
	b := &bin{group: gi, node: g.Template, free: g.Template.Status.Allocatable.DeepCopy()}
	c.bins = append(c.bins, b)
	return b
}

// placePending plans the pending pods, largest GPU request first, onto
// the bins, then onto new nodes of the first group that takes them. It
// returns the GPU-equivalents planned.
func (c *planner) placePending(pending []*corev1.Pod) float64 {
	sorted := append([]*corev1.Pod(nil), pending...)
	reqs := map[*corev1.Pod]corev1.ResourceList{}
	for _, pod := range sorted {
		reqs[pod] = requests(pod)
	}
	sort.SliceStable(sorted, func(i, j int) bool { return GPUEquivalents(reqs[sorted[i]]) > GPUEquivalents(reqs[sorted[j]]) })
	planned := 0.0
	for _, pod := range sorted {
		req := reqs[pod]
		if !c.placeOnBin(pod, req) && !c.placeOnNew(pod, req) {
			c.p.Unplaced = append(c.p.Unplaced, pod.Namespace+"/"+pod.Name)
			continue
		}
		planned += GPUEquivalents(req)
	}
	return planned
}

// placeOnBin plans a pod onto the first bin it fits and is admitted on.
func (c *planner) placeOnBin(pod *corev1.Pod, req corev1.ResourceList) bool {
	for _, b := range c.bins {
		if FitsIn(req, b.free) && admits(pod, b.node) {
			Subtract(b.free, req)
			if b.empty && !b.used {
				c.p.Filled[c.pool.Groups[b.group].Name]++
			}
			b.used = true
			return true
		}
	}
	return false
}

// placeOnNew plans a pod onto a new node of the first group with room
// whose template takes it.
func (c *planner) placeOnNew(pod *corev1.Pod, req corev1.ResourceList) bool {
	for gi := range c.pool.Groups {
		if !c.room(gi) {
			continue
		}
		if tmpl := c.pool.Groups[gi].Template; FitsIn(req, tmpl.Status.Allocatable) && admits(pod, tmpl) {
			b := c.add(gi, "pending")
			Subtract(b.free, req)
			b.used = true
			return true
		}
	}
	return false
}

// band adds capacity while utilization is above the band's maximum.
func (c *planner) band() {
	for c.pool.MaxUtilization > 0 && c.requested > 0 && (c.alloc == 0 || c.requested/c.alloc > c.pool.MaxUtilization) {
		gi := c.firstRoom()
		if gi < 0 {
			return
		}
		c.add(gi, "utilization")
		c.alloc += c.gpusOf[gi]
	}
}

// fillBuffer adds nodes until the warm buffer (nodes with nothing
// requested, new empty ones included) is full, then up to minNodes.
func (c *planner) fillBuffer() {
	for _, b := range c.bins {
		if !b.used && !b.existing {
			c.idle++
		}
	}
	c.idle -= countComingIdle(c.nodes, c.index) // coming idle nodes were counted once as nodes and once as bins
	for c.idle < c.pool.Buffer {
		gi := c.firstRoom()
		if gi < 0 {
			break
		}
		c.add(gi, "buffer")
		c.idle++
	}
	for c.total < c.pool.MinNodes {
		gi := c.firstRoom()
		if gi < 0 {
			break
		}
		c.add(gi, "minNodes")
	}
}

// scaleDown picks idle, removable, ready nodes beyond the buffer; never
// below minNodes or a group's minSize, never above the band. Which ones go
// is a function of the nodes, whatever order they come in (a cache's order
// changes from one pass to the next): those picked before first, then the
// last fallback group's, then by name; the buffer keeps the last of that
// order.
func (c *planner) scaleDown() {
	var candidates []Node
	for _, n := range c.nodes {
		if n.Requested == 0 && !n.Coming && n.Removable {
			candidates = append(candidates, n)
		}
	}
	sort.Slice(candidates, func(i, j int) bool {
		a, b := &candidates[i], &candidates[j]
		if a.Unneeded != b.Unneeded {
			return a.Unneeded
		}
		if ga, gb := c.index[a.Group], c.index[b.Group]; ga != gb {
			return ga > gb
		}
		return a.Name < b.Name
	})
	candidates = candidates[:len(candidates)-min(c.pool.Buffer, len(candidates))]
	size := map[string]int{} // what the core counts against minSize: its target, or the nodes seen
	for _, n := range c.nodes {
		size[n.Group]++
	}
	for _, g := range c.pool.Groups {
		size[g.Name] = max(size[g.Name], g.Nodes)
	}
	for _, n := range candidates {
		if c.total-1 < c.pool.MinNodes {
			break
		}
		if gi, ok := c.index[n.Group]; ok && size[n.Group]-1 < c.pool.Groups[gi].MinSize {
			continue // the group is at its minSize: the core keeps the node
		}
		if c.pool.MinUtilization > 0 && c.alloc > 0 && c.requested/c.alloc >= c.pool.MinUtilization {
			break
		}
		if c.pool.MaxUtilization > 0 && c.requested > 0 && (c.alloc-n.GPUs <= 0 || c.requested/(c.alloc-n.GPUs) > c.pool.MaxUtilization) {
			break
		}
		c.p.Remove = append(c.p.Remove, n.Name)
		c.alloc -= n.GPUs
		c.total--
		size[n.Group]--
	}
}

// countComingIdle counts coming nodes with nothing requested.
func countComingIdle(nodes []Node, index map[string]int) int {
	n := 0
	for _, node := range nodes {
		if _, ok := index[node.Group]; ok && node.Coming && node.Requested == 0 {
			n++
		}
	}
	return n
}
