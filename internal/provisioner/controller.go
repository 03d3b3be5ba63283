// Package provisioner is the NodeProvisioner controller: it sizes GPU pools
// made of the config's node groups by pending GPU pods, a GPU utilization
// band and a warm buffer, through the node-group core. The decision itself
// is in plan; this package gathers the cluster's state, carries the plan
// out and reports it in the status and in Events.
package provisioner

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// Core is what the controller needs from the node-group core;
// *nodegroup.Manager implements it.
type Core interface {
	Group(name string) (nodegroup.Info, bool)
	TargetSize(group string) (int, error)
	IncreaseSize(ctx context.Context, group string, delta int) error
	// IncreaseSizeFresh orders anew, leaving the group's standby pool
	// for pods expected sooner; StandbyReady is how many instances the
	// pool could start now.
	IncreaseSizeFresh(ctx context.Context, group string, delta int) error
	StandbyReady(group string) int
	// DeleteNodes removes instances: scale-down, and orders that failed.
	DeleteNodes(ctx context.Context, group string, providerIDs []string) error
	Instances(group string) ([]nodegroup.Instance, error)
	// GroupForProviderID is the group whose instance has the provider ID:
	// what a node belongs to, whatever labels its kubelet gave it.
	GroupForProviderID(providerID string) (string, bool)
	Template(group string) (*corev1.Node, error)
	GroupPrice(group string) (float64, bool)
	GroupSpend(group string) float64
	// StandbyReturn is how many of a group's nodes a scale-down would send
	// back to its standby pool, and how long such a node stays unneeded
	// first (0: the pool's own scaleDownDelay).
	StandbyReturn(group string) (room int, after time.Duration)
	// Backoff tells whether a group gets no new orders now (stock-outs,
	// quota, configuration, nodes that never register): the one backoff
	// policy, kept in the core for every front end.
	Backoff(group string) (nodegroup.Backoff, bool)
}

// resync bounds how long the controller goes without looking, whatever
// the events; orderCheck, while the pool has orders in flight.
const (
	resync     = 15 * time.Second
	orderCheck = 2 * time.Second
)

// Reconciler reconciles NodeProvisioners.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server without a cache (the manager's
	// GetAPIReader); drains list a node's pods through it. Default Client.
	APIReader client.Reader
	// Core is the core in force: the groups, their sizes and prices, and
	// the writes (orders, scale-down's deletions).
	Core     inforce.Core[Core]
	Recorder events.EventRecorder
	Logger   *slog.Logger
	// Existing makes node groups of the managed instance groups pools
	// name in existingInstanceGroupNames; nil leaves such pools in error.
	Existing *ExistingGroups
	// DeleteDelayAfterTaint is how long a drain waits after tainting a
	// node before it reads the node's pods; default
	// DefaultDeleteDelayAfterTaint.
	DeleteDelayAfterTaint time.Duration
	// Forecaster learns each pool's demand and orders ahead of it
	// (spec.forecast); nil learns nothing.
	Forecaster *Forecaster
}

// SetupWithManager registers the controller: NodeProvisioners, and every
// Pod and Node change, which may change any pool's demand.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list v1alpha1.NodeProvisionerList
		if err := r.Client.List(ctx, &list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i, np := range list.Items {
			out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: np.Name}}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.NodeProvisioner{}).
		Watches(&corev1.Pod{}, all).
		Watches(&corev1.Node{}, all).
		Named("nodeprovisioner").
		Complete(r)
}

// Reconcile plans one pool and orders what the plan adds.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var np v1alpha1.NodeProvisioner
	if err := r.Client.Get(ctx, req.NamespacedName, &np); err != nil {
		if apierrors.IsNotFound(err) {
			return r.forget(ctx)
		}
		return reconcile.Result{}, err
	}
	if np.DeletionTimestamp != nil {
		return r.finalize(ctx, &np)
	}
	if added, err := r.ensureFinalizer(ctx, &np); err != nil || added {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var all v1alpha1.NodeProvisionerList
	if err := r.Client.List(ctx, &all); err != nil {
		return reconcile.Result{}, err
	}
	existingErr := r.syncExisting(ctx, &np, all.Items)
	pool, err := r.pool(ctx, &np)
	if err == nil {
		err = existingErr
	}
	if err != nil {
		r.Recorder.Eventf(&np, nil, corev1.EventTypeWarning, "InvalidGroups", "Plan", "%v", err)
		return r.setStatus(ctx, &np, nil, plan.Plan{}, err)
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return reconcile.Result{}, err
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods); err != nil {
		return reconcile.Result{}, err
	}
	groupOf, owned := r.membership(&np, pool)
	nodePtrs := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		nodePtrs[i] = &nodes.Items[i]
	}
	podPtrs := make([]*corev1.Pod, 0, len(pods.Items))
	earlier := r.earlierPools(&np, all.Items)
	var pending []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		podPtrs = append(podPtrs, p)
		if unschedulable(p) && gpu.PodRequestsGPUs(p) && !claimed(p, earlier) {
			pending = append(pending, p)
		}
	}
	snapshot, ordering := Snapshot(pool, nodePtrs, podPtrs, groupOf, r.Core.Read().Instances)
	outlook := r.observe(ctx, &np, nodePtrs, podPtrs, pending, groupOf)
	maxExtra, _ := MaxExtraHourlyCost(np.Spec.Forecast)
	p, ahead := PlanAhead(pool, snapshot, pending, outlook.Ahead, maxExtra)
	r.Logger.Debug("plan", "pool", np.Name, "nodes", len(snapshot), "pending", len(pending), "add", p.Add, "reason", p.Reason, "unplaced", len(p.Unplaced), "ahead", ahead)
	if r.Forecaster != nil {
		if err := r.Forecaster.Report(ctx, np.Name, outlook, ahead); err != nil {
			r.Logger.Warn("could not save the forecasts", "error", err)
		}
		setForecastStatus(&np, outlook, ahead)
	}
	r.scaleUp(ctx, &np, pool, p.Reason, OrdersAhead(pool, snapshot, pending, outlook.Soon, maxExtra, p, r.Core.Read().StandbyReady))
	if r.disrupt(ctx, &np, pool, snapshot, nodes.Items, pods.Items, owned, len(p.Add) > 0) {
		now := metav1.Now()
		np.Status.LastScaleTime = &now
	}
	delay := ScaleDownDelay(np.Spec, outlook.Whole && ahead == len(outlook.Ahead))
	scalingDown := false
	if len(p.Add) == 0 || p.Reason == ReasonForecast {
		// Only a plan that orders for pods that wait now holds back
		// scale-down: what is ordered ahead never keeps a node the
		// forecast did not take (PlanAhead).
		scalingDown = r.scaleDown(ctx, &np, p.Remove, delay, nodes.Items, owned)
		if scalingDown {
			now := metav1.Now()
			np.Status.LastScaleTime = &now
		}
	}
	apimeta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionScalingDown, Status: conditionStatus(len(p.Remove) > 0), Reason: "IdleNodes",
		Message: fmt.Sprintf("%d idle nodes beyond the buffer", len(p.Remove)), ObservedGeneration: np.Generation,
	})
	res, err := r.setStatus(ctx, &np, &pool, p, nil)
	if ordering && res.RequeueAfter > orderCheck {
		// An order in flight may fail (a stock-out shows only on the new
		// instance): look again soon, so the pool falls back to its next
		// group without waiting for an event.
		res.RequeueAfter = orderCheck
	}
	if len(p.Remove) > 0 && delay < res.RequeueAfter {
		// Come back when the first unneeded node is due; a drain waits
		// DefaultDeleteDelayAfterTaint in any case.
		res.RequeueAfter = max(delay, DefaultDeleteDelayAfterTaint)
	}
	return res, err
}

// forget takes the existing instance groups of a pool that is gone out of
// the core.
func (r *Reconciler) forget(ctx context.Context) (reconcile.Result, error) {
	if r.Existing == nil {
		return reconcile.Result{}, nil
	}
	var all v1alpha1.NodeProvisionerList
	if err := r.Client.List(ctx, &all); err != nil {
		return reconcile.Result{}, err
	}
	if _, errs := r.Existing.Sync(ctx, all.Items); len(errs) > 0 {
		// The other pools' errors are theirs to report; the groups of
		// the pool gone must still leave the core.
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}

// syncExisting puts every pool's existing instance groups in force and
// returns this pool's error, if any.
func (r *Reconciler) syncExisting(ctx context.Context, np *v1alpha1.NodeProvisioner, all []v1alpha1.NodeProvisioner) error {
	if r.Existing == nil {
		if len(np.Spec.ExistingInstanceGroupNames) > 0 {
			return fmt.Errorf("existingInstanceGroupNames are not served by this controller")
		}
		return nil
	}
	_, errs := r.Existing.Sync(ctx, all)
	return errs[np.Name]
}

// scaleUp asks the core for the plan's orders, for reason, group by
// group.
func (r *Reconciler) scaleUp(ctx context.Context, np *v1alpha1.NodeProvisioner, pool plan.Pool, reason string, o Orders) {
	for _, g := range pool.Groups {
		for _, step := range o.Steps(g.Name) {
			err := r.Core.Write(ctx, func(c Core) error {
				if step.Fresh {
					return c.IncreaseSizeFresh(ctx, g.Name, step.N)
				}
				return c.IncreaseSize(ctx, g.Name, step.N)
			})
			if err != nil {
				r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, "ScaleUpFailed", "ScaleUp", "group %s: %v", g.Name, err)
				break
			}
			how := ""
			if step.Fresh {
				how = ", fresh: the standby pool kept for pods expected sooner"
			}
			r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "ScaledUp", "ScaleUp", "group %s +%d (%s%s)", g.Name, step.N, reason, how)
			r.Logger.Info("scale up", "pool", np.Name, "group", g.Name, "delta", step.N, "reason", reason, "fresh", step.Fresh)
			now := metav1.Now()
			np.Status.LastScaleTime = &now
		}
	}
}

func conditionStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// pool turns the spec and the core's groups into the planner's input.
func (r *Reconciler) pool(ctx context.Context, np *v1alpha1.NodeProvisioner) (plan.Pool, error) {
	var groups []plan.Group
	for _, name := range r.groupsOf(np) {
		info, ok := r.Core.Read().Group(name)
		if !ok {
			return plan.Pool{}, fmt.Errorf("node group %q is not in gpuscaler's config with managedBy: node-provisioner", name)
		}
		tmpl, err := r.Core.Read().Template(name)
		if err != nil {
			return plan.Pool{}, err
		}
		target, _ := r.Core.Read().TargetSize(name)
		price, ok := r.Core.Read().GroupPrice(name)
		groups = append(groups, plan.Group{
			Name: name, Template: tmpl, Nodes: target, MinSize: info.MinSize, MaxSize: info.MaxSize,
			Unavailable: r.unavailable(ctx, name) || !ok, Price: price, Spend: r.Core.Read().GroupSpend(name),
		})
	}
	return Pool(np.Spec, groups)
}

// Pool applies a NodeProvisioner's spec (utilization band, warm buffer,
// bounds, cost cap, group order) to its groups, in the spec's order.
func Pool(s v1alpha1.NodeProvisionerSpec, groups []plan.Group) (plan.Pool, error) {
	pool := plan.Pool{Groups: groups}
	if s.MinGPUUtilizationPercent != nil {
		pool.MinUtilization = float64(*s.MinGPUUtilizationPercent) / 100
	}
	if s.MaxGPUUtilizationPercent != nil {
		pool.MaxUtilization = float64(*s.MaxGPUUtilizationPercent) / 100
	}
	if s.MinUnutilizedGPUNodes != nil {
		pool.Buffer = int(*s.MinUnutilizedGPUNodes)
	}
	if s.MinNodes != nil {
		pool.MinNodes = int(*s.MinNodes)
	}
	if s.MaxNodes != nil {
		pool.MaxNodes = int(*s.MaxNodes)
	}
	if s.MaxHourlyCost != "" {
		cost, err := strconv.ParseFloat(s.MaxHourlyCost, 64)
		if err != nil {
			return pool, fmt.Errorf("maxHourlyCost %q: %w", s.MaxHourlyCost, err)
		}
		pool.MaxHourlyCost = &cost
	}
	if s.GroupOrder == v1alpha1.GroupOrderCheapestFirst {
		// Cheapest offering available now first; ties keep the listed order.
		sort.SliceStable(pool.Groups, func(i, j int) bool { return pool.Groups[i].Price < pool.Groups[j].Price })
	}
	return pool, nil
}

// Snapshot is the pool as the planner sees it: its Nodes (plan.Snapshot)
// and, as capacity on the way, the instances ordered for its groups that
// no Node carries yet. A Node is matched to its instance by provider ID
// (or an alias), never by name: node names need not be hostnames.
// ordering is true while one of those instances does not run yet.
func Snapshot(pool plan.Pool, nodes []*corev1.Node, pods []*corev1.Pod, groupOf func(*corev1.Node) string,
	instances func(group string) ([]nodegroup.Instance, error)) (snapshot []plan.Node, ordering bool) {
	snapshot = plan.Snapshot(nodes, pods, groupOf)
	registered := make(map[string]bool, len(nodes))
	unneeded := map[string]bool{}
	for _, n := range nodes {
		if pid := n.Spec.ProviderID; pid != "" {
			registered[pid] = true
		}
		if _, ok := unneededSince(n); ok {
			unneeded[n.Name] = true
		}
	}
	for i := range snapshot {
		snapshot[i].Unneeded = unneeded[snapshot[i].Name]
	}
	for _, g := range pool.Groups {
		insts, _ := instances(g.Name)
		for _, in := range insts {
			if !registeredAs(registered, in) && in.ErrorCode == "" && in.State != nodegroup.StateDeleting {
				snapshot = append(snapshot, plan.Node{Name: in.Name, Group: g.Name, Coming: true})
				ordering = ordering || in.State != nodegroup.StateRunning
			}
		}
	}
	return snapshot, ordering
}

// unavailable reports whether the group gets no new demand now: the core
// backs it off. Orders that failed are withdrawn from the core (their slots
// deleted), so a group's target holds only live orders.
func (r *Reconciler) unavailable(ctx context.Context, group string) bool {
	insts, err := r.Core.Read().Instances(group)
	if err != nil {
		return false
	}
	var failed []string
	for _, in := range insts {
		if in.ErrorCode != "" {
			failed = append(failed, in.ProviderID)
		}
	}
	if len(failed) > 0 {
		if err := r.Core.Write(ctx, func(c Core) error { return c.DeleteNodes(ctx, group, failed) }); err != nil {
			r.Logger.Warn("could not withdraw failed orders", "group", group, "error", err)
		}
	}
	_, backingOff := r.Core.Read().Backoff(group)
	return backingOff
}

// registeredAs reports whether a Node carries one of the instance's
// provider IDs.
func registeredAs(registered map[string]bool, in nodegroup.Instance) bool {
	if registered[in.ProviderID] {
		return true
	}
	for _, a := range in.Aliases {
		if registered[a] {
			return true
		}
	}
	return false
}

// unschedulable reports whether the scheduler gave up on the pod for now.
func unschedulable(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// setStatus writes what the reconcile saw and did.
func (r *Reconciler) setStatus(ctx context.Context, np *v1alpha1.NodeProvisioner, pool *plan.Pool, p plan.Plan, planErr error) (reconcile.Result, error) {
	st := &np.Status
	st.ObservedGeneration = np.Generation
	alloc, req := gpuQuantity(p.Allocatable), gpuQuantity(p.Requested)
	st.GPUsAllocatable, st.GPUsRequested = &alloc, &req
	st.GPUUtilizationPercent = int32(p.Utilization()*100 + 0.5)
	added := 0
	st.Groups = st.Groups[:0]
	unavailable := []string{}
	if pool != nil {
		st.Nodes = 0
		for _, g := range pool.Groups {
			added += p.Add[g.Name]
			target, _ := r.Core.Read().TargetSize(g.Name)
			ga, gr := gpuQuantity(p.GroupAllocatable[g.Name]), gpuQuantity(p.GroupRequested[g.Name])
			st.Groups = append(st.Groups, v1alpha1.GroupStatus{Name: g.Name, CurrentSize: int32(g.Nodes), TargetSize: int32(target),
				GPUsAllocatable: &ga, GPUsRequested: &gr, CapacityUnavailable: g.Unavailable})
			st.Nodes += int32(g.Nodes)
			if g.Unavailable {
				unavailable = append(unavailable, g.Name)
			}
		}
	}
	cond := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: np.Generation})
	}
	if planErr != nil {
		cond(v1alpha1.ConditionReady, false, "InvalidGroups", planErr.Error())
	} else {
		cond(v1alpha1.ConditionReady, true, "Reconciled", "")
	}
	cond(v1alpha1.ConditionScalingUp, added > 0, scaleUpReasons[p.Reason], fmt.Sprintf("%d nodes ordered", added))
	cond(v1alpha1.ConditionCapacityUnavailable, len(unavailable) > 0, "StockOut", fmt.Sprintf("stocked out: %v", unavailable))
	if err := r.Client.Status().Update(ctx, np); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{RequeueAfter: resync}, nil
}

// earlierPools returns the templates of the groups of the pools that come
// before this one (by name): a pending pod one of them can take is theirs,
// so two pools never scale up for the same pod.
func (r *Reconciler) earlierPools(np *v1alpha1.NodeProvisioner, all []v1alpha1.NodeProvisioner) []*corev1.Node {
	var out []*corev1.Node
	for i := range all {
		if all[i].Name >= np.Name {
			continue
		}
		for _, g := range r.groupsOf(&all[i]) {
			if tmpl, err := r.Core.Read().Template(g); err == nil {
				out = append(out, tmpl)
			}
		}
	}
	return out
}

// groupsOf returns a pool's node groups in order: those of the config it
// names, then those made of its existing instance groups.
func (r *Reconciler) groupsOf(np *v1alpha1.NodeProvisioner) []string {
	return append(slices.Clone(np.Spec.NodeGroups), r.Existing.Names(np.Name)...)
}

// PoolOf is the NodeProvisioner whose pool holds a node group, as an
// Event's reference, read from the cache (nil when none does, or the
// cache cannot say yet): the Events of the group's instances that no Node
// carries (an order every offering refused, a cost cap) go there, where
// `kubectl describe nodeprovisioner` shows them (nodeindex.SetGroupObject).
func (r *Reconciler) PoolOf(group string) *corev1.ObjectReference {
	var all v1alpha1.NodeProvisionerList
	if err := r.Client.List(context.Background(), &all); err != nil {
		return nil
	}
	for i := range all.Items {
		np := &all.Items[i]
		if np.DeletionTimestamp == nil && slices.Contains(r.groupsOf(np), group) {
			return &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeProvisioner", Name: np.Name, UID: np.UID}
		}
	}
	return nil
}

// membership returns the pool's group of a node, "" for a node outside the
// pool: the group whose instance has its provider ID, else, for a node
// carrying Baseten's provisioner-name label of this pool whose provider ID
// no group of the core has (its instance not listed yet), the pool's
// first group of an existing instance group in its zone: it counts as the
// pool's capacity. owned is the same without that last rule: only a node
// a group's instance has is drained or deleted, through that group.
// Labels a kubelet sets itself (gpuscaler's node-group label among them;
// NodeRestriction does not guard it) never move a node into a pool.
func (r *Reconciler) membership(np *v1alpha1.NodeProvisioner, pool plan.Pool) (groupOf, owned func(*corev1.Node) string) {
	inPool := map[string]bool{}
	for _, g := range pool.Groups {
		inPool[g.Name] = true
	}
	existing := r.Existing.Names(np.Name)
	owned = func(n *corev1.Node) string {
		if g, ok := r.Core.Read().GroupForProviderID(n.Spec.ProviderID); ok && inPool[g] {
			return g
		}
		return ""
	}
	return func(n *corev1.Node) string {
		if g := owned(n); g != "" {
			return g
		}
		if n.Labels[LabelProvisionerName] != np.Name || len(existing) == 0 {
			return ""
		}
		if _, known := r.Core.Read().GroupForProviderID(n.Spec.ProviderID); known {
			return "" // another group's instance, relabelled
		}
		for _, g := range existing {
			if tmpl, err := r.Core.Read().Template(g); err == nil && tmpl.Labels[corev1.LabelTopologyZone] == n.Labels[corev1.LabelTopologyZone] {
				return g
			}
		}
		return existing[0]
	}, owned
}

// claimed reports whether a template of an earlier pool fits the pod.
func claimed(p *corev1.Pod, earlier []*corev1.Node) bool {
	for _, tmpl := range earlier {
		if plan.Fits(p, tmpl) {
			return true
		}
	}
	return false
}

// gpuQuantity renders GPU-equivalents as a quantity (3 decimals).
func gpuQuantity(v float64) resource.Quantity {
	return resource.MustParse(strconv.FormatFloat(v, 'f', 3, 64))
}

// scaleUpReasons are the ScalingUp condition's reasons by plan reason.
var scaleUpReasons = map[string]string{
	"":             "Steady",
	"pending":      "PendingPods",
	"utilization":  "AboveUtilizationBand",
	"buffer":       "WarmBuffer",
	"minNodes":     "MinNodes",
	ReasonForecast: "Forecast",
}
