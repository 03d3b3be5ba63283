package simulate

import (
	"context"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// plan is the planner's decision for a spec over the cluster as it is,
// made as the controller makes it; extra are pods taken as pending too
// (the foresight policy's pods to come).
func (r *run) plan(spec v1alpha1.NodeProvisionerSpec, extra ...*corev1.Pod) (plan.Pool, plan.Plan, error) {
	pool, snapshot, pending, err := r.view(spec)
	if err != nil {
		return pool, plan.Plan{}, err
	}
	return pool, plan.Compute(pool, snapshot, append(slices.Clip(pending), extra...)), nil
}

// view is the planner's input for a spec: the pool, its nodes and the
// pods that wait.
func (r *run) view(spec v1alpha1.NodeProvisionerSpec) (plan.Pool, []plan.Node, []*corev1.Pod, error) {
	pool, err := r.pool(spec)
	if err != nil {
		return pool, nil, nil, err
	}
	nodes, pods, pending := r.cl.objects()
	groupOf := func(n *corev1.Node) string { return r.cl.nodes[n.Name].group }
	snapshot, _ := provisioner.Snapshot(pool, nodes, pods, groupOf, r.instancesOf)
	return pool, snapshot, pending, nil
}

// pool is the planner's input for a spec over the run's groups, built from
// the core as the controller builds it.
func (r *run) pool(spec v1alpha1.NodeProvisionerSpec) (plan.Pool, error) {
	var groups []plan.Group
	for _, name := range r.groups {
		info, _ := r.core.Group(name)
		tmpl, err := r.core.Template(name)
		if err != nil {
			return plan.Pool{}, err
		}
		target, _ := r.core.TargetSize(name)
		price, ok := r.core.GroupPrice(name)
		_, backingOff := r.core.Backoff(name)
		groups = append(groups, plan.Group{Name: name, Template: tmpl, Nodes: target, MinSize: info.MinSize, MaxSize: info.MaxSize,
			Unavailable: backingOff || !ok, Price: price, Spend: r.core.GroupSpend(name)})
	}
	return provisioner.Pool(spec, groups)
}

// scaleUp asks the core for what the plan adds; it reports whether it
// added any.
func (r *run) scaleUp(ctx context.Context, pool plan.Pool, p plan.Plan) bool {
	return r.order(ctx, pool, provisioner.Orders{Take: p.Add})
}

// order asks the core for the orders, as the controller does
// (IncreaseSize for those taken, IncreaseSizeFresh for fresh ones); it
// reports whether it added any.
func (r *run) order(ctx context.Context, pool plan.Pool, o provisioner.Orders) bool {
	added := false
	for _, g := range pool.Groups {
		for _, step := range o.Steps(g.Name) {
			increase := r.core.IncreaseSize
			if step.Fresh {
				increase = r.core.IncreaseSizeFresh
			}
			if err := increase(ctx, g.Name, step.N); err != nil {
				r.opts.Logger.Debug("scale-up refused", "group", g.Name, "delta", step.N, "fresh", step.Fresh, "error", err)
				break
			}
			r.res.ScaleUps++
			r.res.NodesAdded += step.N
			added = true
		}
	}
	if added {
		r.lastAdd = r.now
	}
	return added
}

// scaleDown times the nodes that are unneeded (a node stops being unneeded
// when it no longer is) and, if it may, deletes those unneeded for at
// least delay, or those early (non-nil) lets go sooner. It reports whether
// it deleted any.
func (r *run) scaleDown(ctx context.Context, unneeded func(*node) bool, delay time.Duration, may bool, early func(group string, idle time.Duration) bool) (bool, error) {
	byGroup := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(r.cl.nodes)) { // early spends a pool's room: the same nodes from run to run
		n := r.cl.nodes[name]
		switch {
		case !unneeded(n):
			n.unneededSince = -1
		case n.unneededSince < 0:
			n.unneededSince = r.now
		case may && len(n.pods) == 0 && (r.now-n.unneededSince >= delay || early != nil && early(n.group, r.now-n.unneededSince)):
			byGroup[n.group] = append(byGroup[n.group], n.providerID)
		}
	}
	deleted := false
	for _, g := range r.groups {
		pids := byGroup[g]
		if len(pids) == 0 {
			continue
		}
		slices.Sort(pids)
		if err := r.core.DeleteNodes(ctx, g, pids); err != nil {
			r.opts.Logger.Debug("scale-down refused", "group", g, "error", err)
			continue
		}
		gone := map[string]bool{}
		for _, pid := range pids {
			gone[pid] = true
		}
		for _, n := range r.cl.nodes {
			if gone[n.providerID] {
				r.cl.remove(n, r.now)
			}
		}
		r.res.NodesRemoved += len(pids)
		deleted = true
	}
	return deleted, nil
}
