package nodeindex

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

var _ nodegroup.UnreadyNodes = (*Index)(nil)

// Unready returns the provider IDs of the Nodes labelled as cloudName's
// (nodegroup.LabelCloud, which every node gpuscaler makes carries) whose
// Ready condition is False or Unknown; a Node with no Ready condition yet
// is left out, as a cloud controller manager's node lifecycle controller
// leaves it.
func (x *Index) Unready(cloudName string) []string {
	var out []string
	for _, obj := range x.informer.GetStore().List() {
		n, ok := obj.(*corev1.Node)
		if ok && n.Spec.ProviderID != "" && n.Labels[nodegroup.LabelCloud] == cloudName && notReady(n) {
			out = append(out, n.Spec.ProviderID)
		}
	}
	return out
}

// notReady reports whether n's Ready condition is there and not True.
func notReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue
		}
	}
	return false
}

// DeleteUnready deletes the Node that carries the provider ID if the API
// server's copy is still not Ready, with that copy's UID and
// resourceVersion as preconditions: a kubelet that reported Ready since
// makes the delete a conflict, and the Node stays. It records an Event on
// the Node first, so that `kubectl get events` tells why it went.
func (x *Index) DeleteUnready(ctx context.Context, providerID string) (bool, error) {
	n, err := x.get(ctx, providerID)
	if n == nil || err != nil || n.Spec.ProviderID != providerID || !notReady(n) {
		return false, err
	}
	x.recorder.Eventf(n, nil, corev1.EventTypeNormal, "InstanceGone", "Autoscaling",
		"Deleting the NotReady Node: its cloud no longer has the instance %s", providerID)
	uid, rv := n.UID, n.ResourceVersion
	err = x.kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}
