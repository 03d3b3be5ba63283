package provisioner

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// TaintUnneeded marks a node the controller plans to remove; its value is
// the Unix time the node became unneeded. PreferNoSchedule keeps new pods
// away without stranding pods that need it.
const TaintUnneeded = "gpuscaler.dev/unneeded"

// TaintDeleting marks a node the controller is draining to delete; its
// value is the Unix time in milliseconds it was put on. Its NoSchedule
// effect keeps the scheduler from binding new pods there while the
// controller waits DefaultDeleteDelayAfterTaint and then re-reads the
// node's pods from the API server, so a pod bound just before the taint,
// whose binding is written after a read, is seen, not deleted with the
// node.
const TaintDeleting = "gpuscaler.dev/deleting"

// DefaultDeleteDelayAfterTaint is how long after TaintDeleting a node's
// pods are read for its drain: cluster-autoscaler's
// --node-delete-delay-after-taint default.
const DefaultDeleteDelayAfterTaint = 5 * time.Second

// scaleDown marks the plan's removable nodes unneeded, unmarks the ones no
// longer in the plan, and drains and deletes those unneeded for longer than
// delay (ScaleDownDelay), or, as many as their group's standby pool would
// take back, for longer than its standby.scaleDownAfter (they come back in
// a start, not a boot). It returns whether it changed anything.
func (r *Reconciler) scaleDown(ctx context.Context, np *v1alpha1.NodeProvisioner, remove []string, delay time.Duration, nodes []corev1.Node, groupOf func(*corev1.Node) string) bool {
	returns := NewPoolReturns(r.Core.Read())
	doomed := map[string]bool{}
	for _, n := range remove {
		doomed[n] = true
	}
	changed := false
	now := time.Now()
	for _, i := range drainOrder(nodes) {
		n := &nodes[i]
		group := groupOf(n)
		if group == "" || n.Annotations[AnnotationDrain] != "" {
			continue // not the pool's, or drained by rotation or defragmentation
		}
		since, marked := unneededSince(n)
		switch {
		case !doomed[n.Name] && marked:
			// Demand came back first.
			if err := r.setUnneeded(ctx, n, nil); err == nil {
				r.Recorder.Eventf(np, n, corev1.EventTypeNormal, "ScaleDownCancelled", "ScaleDown", "node %s is needed again", n.Name)
				changed = true
			}
		case doomed[n.Name] && !marked:
			if err := r.setUnneeded(ctx, n, &now); err == nil {
				r.Recorder.Eventf(np, n, corev1.EventTypeNormal, "NodeUnneeded", "ScaleDown", "node %s is unneeded; it goes in %s unless demand returns", n.Name, delay)
				changed = true
			}
		case doomed[n.Name] && (returns.Take(group, now.Sub(since)) || now.Sub(since) >= delay):
			// Take first: a node past its delay that the pool takes back
			// uses the pool's room, which a node cordoned for an early
			// return must not count on.
			if r.drainAndDelete(ctx, np, n, group) {
				changed = true
			}
		}
	}
	return changed
}

// drainOrder is the order scale-down considers nodes in: those draining
// already first, then the longest unneeded, so that a pool's room for
// early returns goes to the same nodes pass after pass, not to whichever
// the cached list gives first (a node cordoned for an early return would
// otherwise wait out scaleDownDelay cordoned).
func drainOrder(nodes []corev1.Node) []int {
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		na, nb := &nodes[order[a]], &nodes[order[b]]
		if da, db := hasTaint(na, TaintDeleting), hasTaint(nb, TaintDeleting); da != db {
			return da
		}
		sa, oka := unneededSince(na)
		sb, okb := unneededSince(nb)
		if oka != okb {
			return oka
		}
		if !sa.Equal(sb) {
			return sa.Before(sb)
		}
		return na.Name < nb.Name
	})
	return order
}

// Returner is what PoolReturns reads from the core (Core has it).
type Returner interface {
	StandbyReturn(group string) (room int, after time.Duration)
}

// PoolReturns counts down, in one scale-down pass, the nodes that go back
// to their groups' standby pools after standby.scaleDownAfter rather than
// the pool's scaleDownDelay: each group's room and delay are read from the
// core once a pass. simulate plays the controller's scale-down with it.
type PoolReturns struct {
	core  Returner
	room  map[string]int
	after map[string]time.Duration
}

// NewPoolReturns starts a pass over the core in force.
func NewPoolReturns(core Returner) PoolReturns {
	return PoolReturns{core: core, room: map[string]int{}, after: map[string]time.Duration{}}
}

// Take reports whether a node of group unneeded for idle goes back to its
// pool now, and counts it against the pool's room.
func (p PoolReturns) Take(group string, idle time.Duration) bool {
	if _, read := p.after[group]; !read {
		p.room[group], p.after[group] = p.core.StandbyReturn(group)
	}
	if p.after[group] <= 0 || idle < p.after[group] || p.room[group] <= 0 {
		return false
	}
	p.room[group]--
	return true
}

// unneededSince reads the time a node was marked unneeded.
func unneededSince(n *corev1.Node) (time.Time, bool) {
	v, ok := taintValue(n, TaintUnneeded)
	sec, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil {
		return time.Time{}, ok
	}
	return time.Unix(sec, 0), true
}

// taintValue is the value of a node's taint of key; ok is false when the
// node has none.
func taintValue(n *corev1.Node, key string) (string, bool) {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return t.Value, true
		}
	}
	return "", false
}

// setUnneeded adds (at) or removes (nil) the unneeded taint; removing it
// also ends a drain the controller started (its taint and cordon).
func (r *Reconciler) setUnneeded(ctx context.Context, n *corev1.Node, at *time.Time) error {
	patch := client.MergeFrom(n.DeepCopy())
	if at != nil {
		dropTaints(n, TaintUnneeded)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintUnneeded, Value: strconv.FormatInt(at.Unix(), 10), Effect: corev1.TaintEffectPreferNoSchedule})
	} else {
		dropTaints(n, TaintUnneeded, TaintDeleting)
	}
	return r.Client.Patch(ctx, n, patch)
}

// dropTaints removes the controller's taints of these keys from a node;
// taking TaintDeleting off also ends the cordon its drain put on.
func dropTaints(n *corev1.Node, keys ...string) {
	var taints []corev1.Taint
	for _, t := range n.Spec.Taints {
		switch {
		case !slices.Contains(keys, t.Key):
			taints = append(taints, t)
		case t.Key == TaintDeleting:
			n.Spec.Unschedulable = false
		}
	}
	n.Spec.Taints = taints
}

// drainAndDelete takes a node out in passes. The first taints it
// NoSchedule and cordons it, and goes no further: a pod the scheduler bound
// a moment ago may not be in any cache yet. Later passes read the node's
// pods from the API server itself, evict them through the Eviction API (so
// PodDisruptionBudgets hold), and once none is left delete the instance
// and the Node. A refused eviction ends the drain and leaves the node for a
// later try.
func (r *Reconciler) drainAndDelete(ctx context.Context, np *v1alpha1.NodeProvisioner, n *corev1.Node, group string) bool {
	if !hasTaint(n, TaintDeleting) {
		patch := client.MergeFrom(n.DeepCopy())
		n.Spec.Unschedulable = true
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintDeleting, Value: strconv.FormatInt(time.Now().UnixMilli(), 10), Effect: corev1.TaintEffectNoSchedule})
		if err := r.Client.Patch(ctx, n, patch); err != nil {
			return false
		}
		r.Recorder.Eventf(np, n, corev1.EventTypeNormal, "Draining", "ScaleDown", "node %s is tainted %s and drained on the next pass", n.Name, TaintDeleting)
		return true
	}
	if at, ok := deletingSince(n); ok && time.Since(at) < r.deleteDelay() {
		return false // a binding written just before the taint may not be readable yet
	}
	var pods corev1.PodList
	if err := r.reader().List(ctx, &pods, client.MatchingFields{"spec.nodeName": n.Name}); err != nil {
		r.Logger.Warn("could not read the pods of a node being drained", "node", n.Name, "error", err)
		return false
	}
	left := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != n.Name || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || isDaemonSetPod(p) || isMirrorPod(p) {
			continue
		}
		left++
		if p.DeletionTimestamp != nil {
			continue // evicted already; waiting for it to end
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		err := r.Client.SubResource("eviction").Create(ctx, p, ev)
		if err == nil && n.Annotations[AnnotationDrain] == drainDefragmentation {
			// Defragmentation's cap counts the evictions it caused, kept
			// at once in the status: a later status write may conflict.
			r.recordEviction(ctx, np, metav1.Now())
		}
		if err == nil || apierrors.IsNotFound(err) {
			continue
		}
		r.Recorder.Eventf(np, n, corev1.EventTypeWarning, "ScaleDownBlocked", "ScaleDown", "eviction of %s/%s refused: %v", p.Namespace, p.Name, err)
		_ = r.setUnneeded(ctx, n, nil)
		return true
	}
	if left > 0 {
		return true // evictions under way; delete on a later pass
	}
	dctx := ctx
	if n.Annotations[AnnotationDrain] != "" {
		dctx = nodegroup.ForReplacement(ctx) // rotated or defragmented: never back to a pool
	}
	if err := r.Core.Write(ctx, func(c Core) error { return c.DeleteNodes(dctx, group, []string{n.Spec.ProviderID}) }); err != nil {
		// The node stays: it takes work again (its taint and cordon go)
		// rather than sit paid for and unschedulable.
		r.Recorder.Eventf(np, n, corev1.EventTypeWarning, "ScaleDownFailed", "ScaleDown", "delete %s: %v; the node takes work again", n.Name, err)
		_ = r.setUnneeded(ctx, n, nil)
		return true
	}
	if err := r.Client.Delete(ctx, n); err != nil && !apierrors.IsNotFound(err) {
		r.Logger.Warn("node object not deleted; its instance is gone", "node", n.Name, "error", err)
	}
	r.Recorder.Eventf(np, n, corev1.EventTypeNormal, "ScaledDown", "ScaleDown", "node %s of group %s removed", n.Name, group)
	r.Logger.Info("scale down", "pool", np.Name, "group", group, "node", n.Name)
	return true
}

// deletingSince reads when TaintDeleting was put on a node; ok is false
// for a taint with no time (put on by an older version: long enough ago).
func deletingSince(n *corev1.Node) (time.Time, bool) {
	v, ok := taintValue(n, TaintDeleting)
	ms, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// deleteDelay is Reconciler.DeleteDelayAfterTaint or its default.
func (r *Reconciler) deleteDelay() time.Duration {
	if r.DeleteDelayAfterTaint > 0 {
		return r.DeleteDelayAfterTaint
	}
	return DefaultDeleteDelayAfterTaint
}

// reader reads from the API server itself where it is set, else through
// the client.
func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

func hasTaint(n *corev1.Node, key string) bool {
	_, ok := taintValue(n, key)
	return ok
}

func isDaemonSetPod(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

func isMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}
