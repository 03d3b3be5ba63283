// Package controllers holds the Karpenter operator's own controllers,
// beside Karpenter core's: the GPUNodeClass status, the collector of
// machines no NodeClaim owns, and the registration hook of machines taken
// from a standby pool.
package controllers

import (
	"context"
	"errors"
	"time"

	"github.com/awslabs/operatorpkg/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
	"github.com/gpuscaler/gpuscaler/karpenter/cloudprovider"
)

// Checker is what the NodeClass controller asks of the provider.
type Checker interface {
	Check(class *v1alpha1.GPUNodeClass) (cloudprovider.Check, error)
	Forget(class string)
}

// NodeClass keeps each GPUNodeClass's conditions and instance-type count
// true: Ready only when its cloud, template and settings are usable.
type NodeClass struct {
	Client  client.Client
	Checker Checker
	// Resync is how often a class is looked at again (catalogs change);
	// default one minute.
	Resync time.Duration
}

// Register adds the controller to the manager.
func (n *NodeClass) Register(_ context.Context, mgr manager.Manager) error {
	if n.Resync <= 0 {
		n.Resync = time.Minute
	}
	return ctrl.NewControllerManagedBy(mgr).Named("gpunodeclass.status").For(&v1alpha1.GPUNodeClass{}).Complete(n)
}

// Reconcile updates one class's status.
func (n *NodeClass) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	class := &v1alpha1.GPUNodeClass{}
	if err := n.Client.Get(ctx, req.NamespacedName, class); err != nil {
		if apierrors.IsNotFound(err) {
			n.Checker.Forget(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	check, err := n.Checker.Check(class)
	if errors.Is(err, cloudprovider.ErrNotStarted) {
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	stored := class.DeepCopy()
	conds := class.StatusConditions()
	set(conds, v1alpha1.ConditionCloudReady, "CloudNotReady", check.Cloud)
	set(conds, v1alpha1.ConditionTemplateReady, "TemplateNotUsable", check.Template)
	set(conds, v1alpha1.ConditionValidationSucceeded, "ValidationFailed", check.Validation)
	class.Status.InstanceTypes = check.InstanceTypes
	if err := n.Client.Status().Patch(ctx, class, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{RequeueAfter: n.Resync}, nil
}

// set sets a condition true, or false with the error as its message.
func set(conds status.ConditionSet, t, reason string, err error) {
	if err == nil {
		conds.SetTrue(t)
		return
	}
	conds.SetFalse(t, reason, err.Error())
}
