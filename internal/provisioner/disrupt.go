package provisioner

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// AnnotationDrain marks a node the controller drains and deletes on its
// passes, whatever the plan says; the value is why: "rotation" or
// "defragmentation".
const AnnotationDrain = "gpuscaler.dev/drain"

// AnnotationRotation marks a node past the pool's maxNodeLifetime whose
// successor is ordered: "<unix time>/<Ready nodes of the pool then>". The
// node is drained once the pool has one Ready node more than then.
const AnnotationRotation = "gpuscaler.dev/rotation"

// Drain reasons.
const (
	drainRotation        = "rotation"
	drainDefragmentation = "defragmentation"
)

// criticalPriority is where system-cluster-critical starts; pods at or
// above it are never moved by defragmentation.
const criticalPriority = 2000000000

// disrupt carries out the pool's voluntary disruptions: it drains the
// nodes marked for it, replaces nodes past their lifetime (successor
// first), and, when the plan adds nothing and no drain is under way,
// empties one thinly used node by defragmentation. It reports whether it
// changed anything.
func (r *Reconciler) disrupt(ctx context.Context, np *v1alpha1.NodeProvisioner, pool plan.Pool, snapshot []plan.Node, nodes []corev1.Node, pods []corev1.Pod, groupOf func(*corev1.Node) string, adding bool) bool {
	var members []*corev1.Node
	for i := range nodes {
		if groupOf(&nodes[i]) != "" {
			members = append(members, &nodes[i])
		}
	}
	changed, draining, defragmenting := false, false, false
	for _, n := range members {
		reason := n.Annotations[AnnotationDrain]
		if reason == "" {
			continue
		}
		draining = true
		defragmenting = defragmenting || reason == drainDefragmentation
		if r.drainAndDelete(ctx, np, n, groupOf(n)) {
			changed = true
		}
		if reason == drainDefragmentation && !hasTaint(n, TaintDeleting) {
			// An eviction was refused (a PodDisruptionBudget): leave the
			// node be; a later pass may pick another.
			_ = r.annotate(ctx, n, AnnotationDrain, "")
		}
	}
	if r.markSpares(ctx, snapshot, members, defragmenting) {
		changed = true
	}
	if np.Spec.MaxNodeLifetime != nil && r.rotate(ctx, np, pool, snapshot, members, groupOf) {
		changed = true
	}
	if d := np.Spec.Defragmentation; d != nil && d.Enabled && !adding && !draining {
		if r.defragment(ctx, np, snapshot, members, pods) {
			changed = true
		}
	}
	return changed
}

// rotate replaces nodes older than the pool's maxNodeLifetime one at a
// time: the oldest gets a successor ordered (in its own group, else the
// pool's first group with room) and is marked; once the pool has one Ready
// node more than when it was marked, it is drained. A marked node with no
// successor on the way (the order failed, or the process restarted in
// between) orders again.
func (r *Reconciler) rotate(ctx context.Context, np *v1alpha1.NodeProvisioner, pool plan.Pool, snapshot []plan.Node, members []*corev1.Node, groupOf func(*corev1.Node) string) bool {
	// Ready as the planner counts it: Ready, no start-up taint, GPUs
	// advertised, schedulable.
	usable := map[string]bool{}
	coming := 0
	for _, n := range snapshot {
		if n.Coming {
			coming++
		} else if n.Object != nil {
			usable[n.Name] = true
		}
	}
	readyNow := 0
	for _, n := range members {
		if usable[n.Name] && n.Annotations[AnnotationDrain] == "" {
			readyNow++
		}
	}
	for _, n := range members {
		if n.Annotations[AnnotationDrain] == drainRotation {
			return false // one rotation at a time: the last one still drains
		}
	}
	for _, n := range members {
		mark, ok := n.Annotations[AnnotationRotation]
		if !ok || n.Annotations[AnnotationDrain] != "" {
			continue
		}
		_, before, _ := strings.Cut(mark, "/")
		readyThen, err := strconv.Atoi(before)
		switch {
		case err == nil && readyNow > readyThen:
			if r.annotate(ctx, n, AnnotationDrain, drainRotation) == nil {
				r.Recorder.Eventf(np, n, corev1.EventTypeNormal, "Rotating", "Rotate", "node %s: its successor is Ready; draining it", n.Name)
				return true
			}
		case coming == 0:
			// No successor on its way: order it (again).
			return r.orderSuccessor(ctx, np, pool, n, groupOf(n), mark) == nil
		}
		return false // one rotation at a time
	}
	lifetime := np.Spec.MaxNodeLifetime.Duration
	var expired []*corev1.Node
	for _, n := range members {
		if usable[n.Name] && n.Annotations[AnnotationDrain] == "" && time.Since(n.CreationTimestamp.Time) > lifetime {
			expired = append(expired, n)
		}
	}
	if len(expired) == 0 {
		return false
	}
	sort.Slice(expired, func(i, j int) bool { return expired[i].CreationTimestamp.Before(&expired[j].CreationTimestamp) })
	n := expired[0]
	mark := fmt.Sprintf("%d/%d", time.Now().Unix(), readyNow)
	if err := r.annotate(ctx, n, AnnotationRotation, mark); err != nil {
		return false
	}
	return r.orderSuccessor(ctx, np, pool, n, groupOf(n), mark) == nil
}

// orderSuccessor orders one node for an expired one: in its group when it
// has room and is not backing off, else in the pool's first group that
// has.
func (r *Reconciler) orderSuccessor(ctx context.Context, np *v1alpha1.NodeProvisioner, pool plan.Pool, n *corev1.Node, group, mark string) error {
	groups := []string{group}
	for _, g := range pool.Groups {
		if g.Name != group {
			groups = append(groups, g.Name)
		}
	}
	var err error
	for _, name := range groups {
		for _, g := range pool.Groups {
			if g.Name != name || g.Unavailable || g.Nodes >= g.MaxSize {
				continue
			}
			if err = r.Core.Write(ctx, func(c Core) error { return c.IncreaseSize(ctx, name, 1) }); err == nil {
				r.Recorder.Eventf(np, n, corev1.EventTypeNormal, "Rotating", "Rotate", "node %s is older than %s: successor ordered in group %s (mark %s)", n.Name, np.Spec.MaxNodeLifetime.Duration, name, mark)
				r.Logger.Info("rotation: successor ordered", "pool", np.Name, "node", n.Name, "group", name)
				return nil
			}
		}
	}
	if err == nil {
		err = fmt.Errorf("no group of the pool has room")
	}
	r.Recorder.Eventf(np, n, corev1.EventTypeWarning, "RotationBlocked", "Rotate", "node %s is older than %s, and no successor could be ordered: %v", n.Name, np.Spec.MaxNodeLifetime.Duration, err)
	return err
}

// defragment marks for draining the node plan.Consolidate picks, within
// the pool's eviction cap for the last hour, and records the evictions.
func (r *Reconciler) defragment(ctx context.Context, np *v1alpha1.NodeProvisioner, snapshot []plan.Node, members []*corev1.Node, pods []corev1.Pod) bool {
	d := np.Spec.Defragmentation
	limit, maxUtil := 10, 0.5
	if d.MaxEvictionsPerHour != nil {
		limit = int(*d.MaxEvictionsPerHour)
	}
	if d.MaxUtilizationPercent != nil {
		maxUtil = float64(*d.MaxUtilizationPercent) / 100
	}
	now := time.Now()
	recent := np.Status.DefragmentationEvictions[:0]
	for _, t := range np.Status.DefragmentationEvictions {
		if now.Sub(t.Time) < time.Hour {
			recent = append(recent, t)
		}
	}
	np.Status.DefragmentationEvictions = recent
	budget := limit - len(recent)
	if budget <= 0 {
		return false
	}
	inPool := map[string]bool{}
	for _, n := range members {
		inPool[n.Name] = true
	}
	podsOn := map[string][]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if inPool[p.Spec.NodeName] && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && !isDaemonSetPod(p) && !isMirrorPod(p) {
			podsOn[p.Spec.NodeName] = append(podsOn[p.Spec.NodeName], p)
		}
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.Client.List(ctx, &pdbs); err != nil {
		r.Logger.Warn("defragmentation skipped: PodDisruptionBudgets unreadable", "pool", np.Name, "error", err)
		return false
	}
	name := plan.Consolidate(snapshot, podsOn, maxUtil, budget, movable, func(node string) bool { return !budgetsAllow(pdbs.Items, podsOn[node]) })
	if name == "" {
		return false
	}
	for _, n := range members {
		if n.Name != name {
			continue
		}
		if err := r.annotate(ctx, n, AnnotationDrain, drainDefragmentation); err != nil {
			return false
		}
		r.Recorder.Eventf(np, n, corev1.EventTypeNormal, "Defragmenting", "Defragment", "node %s: its %d pods fit on the pool's other nodes; moving them so the node goes", name, len(podsOn[name]))
		r.Logger.Info("defragmentation", "pool", np.Name, "node", name, "pods", len(podsOn[name]))
		return true
	}
	return false
}

// budgetsAllow reports whether the PodDisruptionBudgets allow evicting all
// these pods now (each budget's disruptionsAllowed covers the pods it
// selects), as the Eviction API will judge them one by one.
func budgetsAllow(pdbs []policyv1.PodDisruptionBudget, pods []*corev1.Pod) bool {
	for i := range pdbs {
		b := &pdbs[i]
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			return false
		}
		n := 0
		for _, p := range pods {
			if p.Namespace == b.Namespace && sel.Matches(labels.Set(p.Labels)) {
				n++
			}
		}
		if n > 0 && n > int(b.Status.DisruptionsAllowed) {
			return false
		}
	}
	return true
}

// TaintSpare is put on the pool's idle nodes while defragmentation moves
// pods: PreferNoSchedule steers the moved pods to the busy nodes with room
// (the scheduler's default scoring prefers the emptiest node, which would
// use up the warm buffer and have it replaced), without keeping them off
// the idle nodes when nothing else fits.
const TaintSpare = "gpuscaler.dev/spare"

// markSpares taints the pool's idle nodes TaintSpare while defragmentation
// drains a node, and takes the taint off again when it does not. It
// reports whether it changed a node.
func (r *Reconciler) markSpares(ctx context.Context, snapshot []plan.Node, members []*corev1.Node, defragmenting bool) bool {
	idle := map[string]bool{}
	for _, n := range snapshot {
		if !n.Coming && n.Requested == 0 {
			idle[n.Name] = true
		}
	}
	changed := false
	for _, n := range members {
		want := defragmenting && idle[n.Name] && n.Annotations[AnnotationDrain] == ""
		if want == hasTaint(n, TaintSpare) {
			continue
		}
		patch := client.MergeFrom(n.DeepCopy())
		dropTaints(n, TaintSpare)
		if want {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintSpare, Effect: corev1.TaintEffectPreferNoSchedule})
		}
		if err := r.Client.Patch(ctx, n, patch); err == nil {
			changed = true
		}
	}
	return changed
}

// movable reports whether defragmentation may evict a pod: a controller
// recreates it, it does not opt out (safe-to-evict "false"), and it is not
// system-critical.
func movable(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Annotations[plan.SafeToEvictAnnotation] == "false" {
		return false
	}
	if p.Spec.Priority != nil && *p.Spec.Priority >= criticalPriority {
		return false
	}
	return metav1.GetControllerOf(p) != nil
}

// annotate sets (or, with "", removes) one annotation of a node.
func (r *Reconciler) annotate(ctx context.Context, n *corev1.Node, key, value string) error {
	patch := client.MergeFrom(n.DeepCopy())
	if value == "" {
		delete(n.Annotations, key)
	} else {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[key] = value
	}
	return r.Client.Patch(ctx, n, patch)
}

// recordEviction adds an eviction's time to the pool's status, on the
// object as the API server has it now (retried on conflicts), and to np,
// so that the cap holds across passes, status write conflicts and
// restarts.
func (r *Reconciler) recordEviction(ctx context.Context, np *v1alpha1.NodeProvisioner, at metav1.Time) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fresh v1alpha1.NodeProvisioner
		if err := r.reader().Get(ctx, client.ObjectKeyFromObject(np), &fresh); err != nil {
			return err
		}
		fresh.Status.DefragmentationEvictions = append(fresh.Status.DefragmentationEvictions, at)
		if err := r.Client.Status().Update(ctx, &fresh); err != nil {
			return err
		}
		// The pass's own status write goes on from the object as it is now.
		np.ResourceVersion = fresh.ResourceVersion
		np.Status.DefragmentationEvictions = fresh.Status.DefragmentationEvictions
		return nil
	})
	if err != nil {
		np.Status.DefragmentationEvictions = append(np.Status.DefragmentationEvictions, at)
		r.Logger.Warn("defragmentation eviction not recorded in the status", "pool", np.Name, "error", err)
	}
}
