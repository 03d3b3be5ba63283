package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcp "sigs.k8s.io/karpenter/pkg/cloudprovider"
	nodeclaimutils "sigs.k8s.io/karpenter/pkg/utils/nodeclaim"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// StandbyHandover holds Karpenter's registration of a NodeClaim whose
// machine came from a standby pool until the machine's Node is tainted as
// a machine launched for Karpenter would be.
//
// Such a Node registers again, when the machine starts, with the taints the
// pool ordered it with: nodegroup.TaintStandby, not Karpenter's
// unregistered taint. Once Karpenter has registered a Node, its scheduling
// simulation takes the Node's taints as they are, and a standby taint
// still there (the core lifts it a sync later) makes the NodeClaim's
// pending pods look unschedulable on it: Karpenter then launches a second
// NodeClaim, a GPU machine nobody needs. The hook swaps the standby taint
// for karpenter.sh/unregistered (NoExecute: nothing lands before
// Karpenter has synced the NodeClaim's taints) in one write, and lets the
// registration go on only once the Node carries no standby taint.
type StandbyHandover struct {
	// Client reads Nodes by provider ID (the "spec.providerID" field index
	// Karpenter's operator registers) and patches them.
	Client client.Client
}

// Name names the hook in the NodeClaim's Registered condition while it
// holds the registration.
func (StandbyHandover) Name() string { return "gpuscaler.dev/standby-handover" }

// Registered answers at once for a NodeClaim whose Node carries no standby
// taint (every machine not taken from a pool); otherwise it swaps the
// taint and asks Karpenter to try again.
func (h StandbyHandover) Registered(ctx context.Context, nc *karpv1.NodeClaim) (karpcp.NodeLifecycleHookResult, error) {
	node, err := nodeclaimutils.NodeForNodeClaim(ctx, h.Client, nc)
	if err != nil {
		if nodeclaimutils.IsNodeNotFoundError(err) || nodeclaimutils.IsDuplicateNodeError(err) {
			return karpcp.NodeLifecycleHookResult{}, nil // Karpenter's registration reports these
		}
		return karpcp.NodeLifecycleHookResult{}, err
	}
	if !slices.ContainsFunc(node.Spec.Taints, isStandby) {
		return karpcp.NodeLifecycleHookResult{}, nil
	}
	stored := node.DeepCopy()
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, isStandby)
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&karpv1.UnregisteredNoExecuteTaint) }) {
		node.Spec.Taints = append(node.Spec.Taints, karpv1.UnregisteredNoExecuteTaint)
	}
	// The taints are a list a merge patch replaces whole: with the
	// resourceVersion read, so that nothing written meanwhile is lost.
	if err := h.Client.Patch(ctx, node, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsConflict(err) {
		return karpcp.NodeLifecycleHookResult{}, fmt.Errorf("swap the standby taint of node %s: %w", node.Name, err)
	}
	return karpcp.NodeLifecycleHookResult{Requeue: true}, nil
}

func isStandby(t corev1.Taint) bool { return t.Key == nodegroup.TaintStandby }
