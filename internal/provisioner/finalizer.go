package provisioner

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// Finalizer holds a NodeProvisioner until its groups are scaled back to
// their minimum size: deleting a pool must not leave its GPU nodes billing.
const Finalizer = "gpuscaler.dev/release-node-groups"

// ensureFinalizer adds the finalizer; it reports whether it changed the
// object (the update brings another reconcile).
func (r *Reconciler) ensureFinalizer(ctx context.Context, np *v1alpha1.NodeProvisioner) (bool, error) {
	if controllerutil.ContainsFinalizer(np, Finalizer) {
		return false, nil
	}
	patch := client.MergeFrom(np.DeepCopy())
	controllerutil.AddFinalizer(np, Finalizer)
	return true, r.Client.Patch(ctx, np, patch)
}

// ReleaseDrainTimeout bounds how long a deleted NodeProvisioner's nodes are
// drained: past it, what could not be drained (a PodDisruptionBudget that
// never allows an eviction) is kept, said in a Warning Event, and the
// finalizer goes.
const ReleaseDrainTimeout = 15 * time.Minute

// finalize releases a deleted NodeProvisioner's groups that no other
// NodeProvisioner uses: every instance beyond the group's minSize goes
// (orders not yet fulfilled first); one whose Node runs pods is drained
// first, through the Eviction API (PodDisruptionBudgets honoured), as a
// scale-down is. Then the finalizer goes.
func (r *Reconciler) finalize(ctx context.Context, np *v1alpha1.NodeProvisioner) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(np, Finalizer) {
		return reconcile.Result{}, nil
	}
	var list v1alpha1.NodeProvisionerList
	if err := r.Client.List(ctx, &list); err != nil {
		return reconcile.Result{}, err
	}
	shared := map[string]bool{}
	for _, other := range list.Items {
		if other.Name != np.Name && other.DeletionTimestamp == nil {
			for _, g := range other.Spec.NodeGroups {
				shared[g] = true
			}
		}
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return reconcile.Result{}, err
	}
	byPID := map[string]*corev1.Node{}
	for i := range nodes.Items {
		if pid := nodes.Items[i].Spec.ProviderID; pid != "" {
			byPID[pid] = &nodes.Items[i]
		}
	}
	overdue := np.DeletionTimestamp != nil && time.Since(np.DeletionTimestamp.Time) > ReleaseDrainTimeout
	pending := 0
	for _, g := range np.Spec.NodeGroups {
		if shared[g] {
			continue
		}
		n, err := r.release(ctx, np, g, byPID, overdue)
		if err != nil {
			r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, "ReleaseFailed", "Finalize", "group %s: %v", g, err)
			return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
		}
		pending += n
	}
	if pending > 0 {
		r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "Releasing", "Finalize", "deleting %d instances of the pool's groups", pending)
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	if err := r.releaseNodes(ctx, np); err != nil {
		return reconcile.Result{}, err
	}
	if r.Forecaster != nil {
		if err := r.Forecaster.Forget(ctx, np.Name); err != nil {
			r.Logger.Warn("could not drop the pool's forecast", "pool", np.Name, "error", err)
		}
	}
	patch := client.MergeFrom(np.DeepCopy())
	controllerutil.RemoveFinalizer(np, Finalizer)
	if err := r.Client.Patch(ctx, np, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.Logger.Info("node provisioner deleted; its groups are back at their minimum", "pool", np.Name)
	return reconcile.Result{}, nil
}

// release deletes a group's instances beyond its minSize, draining those
// whose Node may run pods, and returns how many are still on their way
// out. overdue keeps, rather than drains, what is left.
func (r *Reconciler) release(ctx context.Context, np *v1alpha1.NodeProvisioner, group string, byPID map[string]*corev1.Node, overdue bool) (int, error) {
	info, ok := r.Core.Read().Group(group)
	if !ok {
		return 0, nil // not this process's group (any more)
	}
	insts, err := r.Core.Read().Instances(group)
	if err != nil {
		return 0, err
	}
	var live []nodegroup.Instance
	going := 0
	for _, in := range insts {
		if in.State == nodegroup.StateDeleting {
			going++
		} else {
			live = append(live, in)
		}
	}
	// Orders not yet running go first, then the newest instances.
	sort.SliceStable(live, func(i, j int) bool {
		ri, rj := live[i].State == nodegroup.StateRunning, live[j].State == nodegroup.StateRunning
		if ri != rj {
			return !ri
		}
		return live[i].CreatedAt.After(live[j].CreatedAt)
	})
	excess := len(live) - info.MinSize
	if excess <= 0 {
		return going, nil
	}
	ids := make([]string, 0, excess)
	draining := 0
	for _, in := range live[:excess] {
		n := byPID[in.ProviderID]
		for _, a := range in.Aliases {
			if n == nil {
				n = byPID[a]
			}
		}
		if n == nil {
			ids = append(ids, in.ProviderID) // no Node: nothing runs there
			continue
		}
		if overdue {
			r.Recorder.Eventf(np, n, corev1.EventTypeWarning, "ReleaseKept", "Finalize",
				"node %s could not be drained within %s (its pods' PodDisruptionBudgets); it is kept, in group %s: delete it by hand", n.Name, ReleaseDrainTimeout, group)
			continue
		}
		r.drainAndDelete(ctx, np, n, group)
		draining++
	}
	if len(ids) > 0 {
		if err := r.Core.Write(ctx, func(c Core) error { return c.DeleteNodes(ctx, group, ids) }); err != nil {
			return 0, fmt.Errorf("delete %d instances: %w", len(ids), err)
		}
	}
	return going + len(ids) + draining, nil
}

// releaseNodes takes the controller's marks off the nodes of a deleted
// pool that stay (the MIGs of existingInstanceGroupNames are the user's,
// and a group's minimum stays): the unneeded and deleting taints, the
// cordon of a drain, and the drain and rotation annotations, so that no
// node stays cordoned with nobody to finish its drain.
func (r *Reconciler) releaseNodes(ctx context.Context, np *v1alpha1.NodeProvisioner) error {
	groups := map[string]bool{}
	for _, g := range r.groupsOf(np) {
		groups[g] = true
	}
	ids := map[string]bool{}
	for g := range groups {
		insts, _ := r.Core.Read().Instances(g)
		for _, in := range insts {
			ids[in.ProviderID] = true
		}
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		mine := ids[n.Spec.ProviderID] || n.Labels[LabelProvisionerName] == np.Name
		_, marked := unneededSince(n)
		if !mine || !(marked || hasTaint(n, TaintDeleting) || hasTaint(n, TaintSpare) || n.Annotations[AnnotationDrain] != "" || n.Annotations[AnnotationRotation] != "") {
			continue
		}
		patch := client.MergeFrom(n.DeepCopy())
		dropTaints(n, TaintUnneeded, TaintSpare, TaintDeleting)
		delete(n.Annotations, AnnotationDrain)
		delete(n.Annotations, AnnotationRotation)
		if err := r.Client.Patch(ctx, n, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("release node %s: %w", n.Name, err)
		}
	}
	return nil
}
