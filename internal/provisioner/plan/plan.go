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
	// MaxHourlyCost caps the pool's spend; 0 means no cap.
	MaxHourlyCost float64
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
	p := Plan{Add: map[string]int{}, GroupAllocatable: map[string]float64{}, GroupRequested: map[string]float64{}, Filled: map[string]int{}}
	index := map[string]int{}
	gpusOf := make([]float64, len(pool.Groups))
	for i, g := range pool.Groups {
		index[g.Name] = i
		if g.Template != nil {
			gpusOf[i] = GPUEquivalents(g.Template.Status.Allocatable)
		}
	}
	var bins []*bin
	idle := 0
	for _, n := range nodes {
		gi, ok := index[n.Group]
		alloc := n.GPUs
		if n.Coming && ok {
			alloc = gpusOf[gi]
			if tmpl := pool.Groups[gi].Template; tmpl != nil && n.Requested == 0 {
				bins = append(bins, &bin{group: gi, node: tmpl, free: tmpl.Status.Allocatable.DeepCopy(), empty: true})
			}
		} else if ok && n.Object != nil && n.freeGPUs() > minGPU {
			bins = append(bins, &bin{group: gi, node: n.Object, free: n.room(), existing: true, empty: n.Requested == 0})
		}
		p.Allocatable += alloc
		p.Requested += n.Requested
		p.GroupAllocatable[n.Group] += alloc
		p.GroupRequested[n.Group] += n.Requested
		if n.Requested == 0 {
			idle++
		}
	}
	total := len(nodes)
	spend := 0.0
	for _, g := range pool.Groups {
		spend += g.Spend
	}
	room := func(gi int) bool {
		g := pool.Groups[gi]
		return !g.Unavailable && g.Template != nil && g.Nodes+p.Add[g.Name] < g.MaxSize &&
			(pool.MaxNodes == 0 || total < pool.MaxNodes) &&
			(pool.MaxHourlyCost == 0 || spend+g.Price <= pool.MaxHourlyCost+1e-9)
	}
	add := func(gi int, reason string) *bin {
		g := pool.Groups[gi]
		p.Add[g.Name]++
		total++
		spend += g.Price
		if p.Reason == "" {
			p.Reason = reason
		}
		b := &bin{group: gi, node: g.Template, free: g.Template.Status.Allocatable.DeepCopy()}
		bins = append(bins, b)
		return b
	}

	// 1. Pending pods, largest GPU request first.
	sorted := append([]*corev1.Pod(nil), pending...)
	reqs := map[*corev1.Pod]corev1.ResourceList{}
	for _, pod := range sorted {
		reqs[pod] = requests(pod)
	}
	sort.SliceStable(sorted, func(i, j int) bool { return GPUEquivalents(reqs[sorted[i]]) > GPUEquivalents(reqs[sorted[j]]) })
	planned := 0.0
	for _, pod := range sorted {
		req := reqs[pod]
		placed := false
		for _, b := range bins {
			if FitsIn(req, b.free) && admits(pod, b.node) {
				Subtract(b.free, req)
				if b.empty && !b.used {
					p.Filled[pool.Groups[b.group].Name]++
				}
				b.used, placed = true, true
				break
			}
		}
		for gi := range pool.Groups {
			if placed || !room(gi) {
				continue
			}
			if tmpl := pool.Groups[gi].Template; FitsIn(req, tmpl.Status.Allocatable) && admits(pod, tmpl) {
				b := add(gi, "pending")
				Subtract(b.free, req)
				b.used, placed = true, true
			}
		}
		if !placed {
			p.Unplaced = append(p.Unplaced, pod.Namespace+"/"+pod.Name)
			continue
		}
		planned += GPUEquivalents(req)
	}
	// Pods planned onto ready nodes make them busy, not idle: they are
	// already in the utilization and buffer counts through Requested below.

	// 2. The utilization band: add capacity while above the maximum.
	alloc, requested := p.Allocatable, p.Requested+planned
	for gi := range pool.Groups {
		alloc += float64(p.Add[pool.Groups[gi].Name]) * gpusOf[gi]
	}
	firstRoom := func() int {
		for gi := range pool.Groups {
			if room(gi) && gpusOf[gi] > 0 {
				return gi
			}
		}
		return -1
	}
	for pool.MaxUtilization > 0 && requested > 0 && (alloc == 0 || requested/alloc > pool.MaxUtilization) {
		gi := firstRoom()
		if gi < 0 {
			break
		}
		add(gi, "utilization")
		alloc += gpusOf[gi]
	}

	// 3. The warm buffer: nodes with nothing requested, new empty ones included.
	for _, b := range bins {
		if !b.used && !b.existing {
			idle++
		}
	}
	idle -= countComingIdle(nodes, index) // coming idle nodes were counted once as nodes above and once as bins
	for idle < pool.Buffer {
		gi := firstRoom()
		if gi < 0 {
			break
		}
		add(gi, "buffer")
		idle++
	}
	for total < pool.MinNodes {
		gi := firstRoom()
		if gi < 0 {
			break
		}
		add(gi, "minNodes")
	}
	if total > len(nodes) {
		return p
	}

	// 4. Scale down: idle, removable, ready nodes beyond the buffer, last
	// fallback group first; never below minNodes, never above the band.
	var candidates []Node
	for _, n := range nodes {
		if n.Requested == 0 && !n.Coming && n.Removable {
			candidates = append(candidates, n)
		}
	}
	sort.SliceStable(candidates, func(i, j int) bool { return index[candidates[i].Group] > index[candidates[j].Group] })
	keep := pool.Buffer
	size := map[string]int{} // what the core counts against minSize: its target, or the nodes seen
	for _, n := range nodes {
		size[n.Group]++
	}
	for _, g := range pool.Groups {
		size[g.Name] = max(size[g.Name], g.Nodes)
	}
	for _, n := range candidates {
		if keep > 0 {
			keep--
			continue
		}
		if total-1 < pool.MinNodes {
			break
		}
		if gi, ok := index[n.Group]; ok && size[n.Group]-1 < pool.Groups[gi].MinSize {
			continue // the group is at its minSize: the core keeps the node
		}
		if pool.MinUtilization > 0 && alloc > 0 && requested/alloc >= pool.MinUtilization {
			break
		}
		if pool.MaxUtilization > 0 && requested > 0 && (alloc-n.GPUs <= 0 || requested/(alloc-n.GPUs) > pool.MaxUtilization) {
			break
		}
		p.Remove = append(p.Remove, n.Name)
		alloc -= n.GPUs
		total--
		size[n.Group]--
	}
	return p
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
