package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcp "sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/utils/resources"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
)

// choice is one instance type on one offering.
type choice struct {
	it *karpcp.InstanceType
	of *karpcp.Offering
}

// Create launches the NodeClaim's machine: the cheapest offering its
// requirements allow, spot before on-demand when both are allowed, named
// after the NodeClaim so that a Create repeated after a crash adopts the
// machine instead of ordering a second. An offering that stocks out (or
// hits a quota) is skipped by every later call for the core's backoff and
// the next is tried; when none is left the error is InsufficientCapacity,
// and Karpenter deletes the NodeClaim and schedules again without them.
func (p *CloudProvider) Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	if nc.Spec.NodeClassRef == nil {
		return nil, karpcp.NewInsufficientCapacityError(fmt.Errorf("NodeClaim %s names no node class", nc.Name))
	}
	class, err := p.class(ctx, nc.Spec.NodeClassRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, karpcp.NewInsufficientCapacityError(fmt.Errorf("GPUNodeClass %s: %w", nc.Spec.NodeClassRef.Name, err))
	}
	if err != nil {
		return nil, fmt.Errorf("GPUNodeClass %s: %w", nc.Spec.NodeClassRef.Name, err)
	}
	if err := ready(class); err != nil {
		return nil, err
	}
	select {
	case <-p.opts.Started:
	case <-ctx.Done():
		return nil, karpcp.NewCreateError(ctx.Err(), "CoreNotStarted", "the node-group core has not listed the clouds yet")
	}
	ct, err := p.classTypes(class)
	if err != nil {
		return nil, err
	}
	hash, err := p.launchHash(class)
	if err != nil {
		return nil, err
	}
	if in, ok := p.launched(nc.Name); ok {
		if in.Unresolved {
			// Karpenter retries a Create that timed out while the first is
			// still in flight or its answer was lost: the machine's
			// provider ID is not known yet (a cloud that assigns IDs at
			// create), and a NodeClaim with a made-up one would never match
			// its Node. Retry once a list has resolved it.
			return nil, karpcp.NewCreateError(fmt.Errorf("machine %s of NodeClaim %s: its order is not resolved yet", in.Name, nc.Name),
				"LaunchUnresolved", "the machine's order is in flight or its answer was lost; retrying once the cloud lists it")
		}
		if in.Failed() {
			// The cloud failed the order after taking it (a queued create
			// that stocked out): the machine will never register. It is
			// deleted, and Karpenter deletes the NodeClaim and schedules
			// again, away from the offering the core now skips.
			if err := p.opts.Core.Write(ctx, func(c Core) error { return c.Terminate(ctx, in.ProviderID) }); err != nil && !errors.Is(err, nodegroup.ErrNotLaunched) {
				return nil, fmt.Errorf("terminate the failed machine %s of NodeClaim %s: %w", in.Name, nc.Name, err)
			}
			return nil, karpcp.NewInsufficientCapacityError(fmt.Errorf("machine %s of NodeClaim %s: the cloud failed its order: %s: %s", in.Name, nc.Name, in.ErrorCode, in.ErrorMessage))
		}
		// A Create repeated after a restart, or after a status update that
		// failed: the machine exists.
		if it, ok := ct.byName[in.InstanceType]; ok {
			return p.hydrate(nc, class, it, in, hash), nil
		}
		return nil, fmt.Errorf("machine %s of NodeClaim %s has type %q, which GPUNodeClass %s does not offer", in.Name, nc.Name, in.InstanceType, class.Name)
	}
	choices := candidates(nc, ct.types)
	if len(choices) == 0 {
		return nil, karpcp.NewInsufficientCapacityError(fmt.Errorf("no available offering of GPUNodeClass %s fits NodeClaim %s", class.Name, nc.Name))
	}
	var tpl *config.NodeGroup
	if class.Spec.Template != "" {
		if g, ok := p.opts.Templates(class.Spec.Template); ok {
			tpl = &g
		}
	}
	// A standby machine goes before a cheaper order (seconds against
	// minutes of a pending pod): every choice from the template's pool
	// first, then the first MaxAttempts ordered.
	if tpl != nil && tpl.StandbyMaxSize() > 0 {
		if claim, done, err := p.tryChoices(ctx, nc, class, tpl, ct, hash, choices, true); done {
			return claim, err
		}
	}
	claim, _, err := p.tryChoices(ctx, nc, class, tpl, ct, hash, choices[:min(len(choices), p.opts.MaxAttempts)], false)
	return claim, err
}

// tryChoices launches the NodeClaim's machine on the first of choices that
// has one: from the template group's standby pool (renamed for the
// NodeClaim and started, in the cloud's start delay instead of a cold
// boot) when standby is set, else as an order. A choice the pool holds
// nothing for, or whose offering is stocked out, is skipped; done is false
// when every choice was, and the error then says why the orders failed.
func (p *CloudProvider) tryChoices(ctx context.Context, nc *karpv1.NodeClaim, class *v1alpha1.GPUNodeClass, tpl *config.NodeGroup,
	ct *classTypes, hash string, choices []choice, standby bool) (claim *karpv1.NodeClaim, done bool, err error) {
	var capacityErrs []error
	for _, c := range choices {
		req := p.launchRequest(nc, class, tpl, c, ct.labels[c.it.Name])
		req.Standby = standby
		var in nodegroup.Instance
		err := p.opts.Core.Write(ctx, func(core Core) (err error) {
			in, err = core.Launch(ctx, req)
			return err
		})
		switch {
		case err == nil:
			return p.hydrate(nc, class, c.it, in, hash), true, nil
		case errors.Is(err, nodegroup.ErrNoStandby):
			continue
		case errors.Is(err, cloud.ErrCapacity) || errors.Is(err, cloud.ErrQuota):
			capacityErrs = append(capacityErrs, err)
			if _, held := p.opts.Core.Read().LaunchedNamed(nc.Name); held {
				// The cloud took the order and failed it, or refused a
				// standby machine's start; the machine, being deleted,
				// holds the NodeClaim's name. Karpenter makes a new
				// NodeClaim, which tries the next offering.
				return nil, true, karpcp.NewInsufficientCapacityError(errors.Join(capacityErrs...))
			}
		case errors.Is(err, nodegroup.ErrCostLimit):
			return nil, true, karpcp.NewInsufficientCapacityError(err)
		default:
			return nil, true, fmt.Errorf("launch %s on %s: %w", nc.Name, req.Offering, err)
		}
	}
	return nil, false, karpcp.NewInsufficientCapacityError(errors.Join(capacityErrs...))
}

// ready checks that the class's status allows launches.
func ready(class *v1alpha1.GPUNodeClass) error {
	cond := class.StatusConditions().Get(status.ConditionReady)
	switch {
	case cond == nil || cond.IsUnknown():
		return karpcp.NewCreateError(fmt.Errorf("GPUNodeClass %s is not reconciled yet", class.Name), "NodeClassReadinessUnknown", "the GPUNodeClass's status is not known yet")
	case cond.IsFalse():
		return karpcp.NewNodeClassNotReadyError(fmt.Errorf("GPUNodeClass %s: %s", class.Name, cond.Message))
	case cond.ObservedGeneration != class.Generation:
		return karpcp.NewCreateError(fmt.Errorf("GPUNodeClass %s: status not reconciled against the latest spec", class.Name), "NodeClassReadinessUnknown", "the GPUNodeClass's status is older than its spec")
	}
	return nil
}

// candidates are the offerings a NodeClaim allows, in the order they are
// tried: spot before on-demand, then by price, then by name and zone.
func candidates(nc *karpv1.NodeClaim, types []*karpcp.InstanceType) []choice {
	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(nc.Spec.Requirements...)
	var out []choice
	for _, it := range types {
		if reqs.Compatible(it.Requirements, scheduling.AllowUndefinedWellKnownLabels) != nil {
			continue
		}
		if !resources.Fits(nc.Spec.Resources.Requests, it.Allocatable()) {
			continue
		}
		for _, of := range it.Offerings.Available().Compatible(reqs) {
			out = append(out, choice{it: it, of: of})
		}
	}
	rank := func(c choice) int {
		if c.of.CapacityType() == karpv1.CapacityTypeSpot {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(out, func(a, b choice) int {
		switch {
		case rank(a) != rank(b):
			return rank(a) - rank(b)
		case a.of.Price < b.of.Price:
			return -1
		case a.of.Price > b.of.Price:
			return 1
		case a.it.Name != b.it.Name:
			return strings.Compare(a.it.Name, b.it.Name)
		}
		return strings.Compare(a.of.Zone(), b.of.Zone())
	})
	return out
}

// launchRequest is the core's order for one NodeClaim on one offering: the
// node registers with the NodeClaim's labels and the resolved ones, its
// taints, and Karpenter's unregistered taint.
func (p *CloudProvider) launchRequest(nc *karpv1.NodeClaim, class *v1alpha1.GPUNodeClass, tpl *config.NodeGroup, c choice, gpuLabels map[string]string) nodegroup.LaunchRequest {
	labels := maps.Clone(gpuLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, resolvedLabels(nc, c))
	maps.Copy(labels, nc.Labels)
	taints := []corev1.Taint{karpv1.UnregisteredNoExecuteTaint}
	taints = append(taints, nc.Spec.Taints...)
	taints = append(taints, nc.Spec.StartupTaints...)
	opts := maps.Clone(class.Spec.CloudOptions)
	if len(class.Spec.SSHKeyIDs) > 0 {
		if opts == nil {
			opts = map[string]string{}
		}
		opts[verda.OptionSSHKeyIDs] = strings.Join(class.Spec.SSHKeyIDs, ",")
	}
	req := nodegroup.LaunchRequest{
		Owner: Owner, Cloud: class.Spec.Cloud, Name: nc.Name, Labels: labels, Taints: taints,
		Offering: cloud.OfferingKey{InstanceType: c.it.Name, Location: c.of.Zone(), CapacityType: cloud.CapacityType(c.of.CapacityType())},
		Image:    class.Spec.Image, DiskGiB: class.Spec.DiskSizeGiB, Options: opts,
	}
	if tpl != nil {
		req.Template = tpl.Name
	}
	return req
}

// resolvedLabels are the labels with one value for the machine: the
// NodeClaim's single-valued requirements, the instance type's and the
// offering's.
func resolvedLabels(nc *karpv1.NodeClaim, c choice) map[string]string {
	out := map[string]string{}
	for _, r := range nc.Spec.Requirements {
		if r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
			out[r.Key] = r.Values[0]
		}
	}
	for _, reqs := range []scheduling.Requirements{c.it.Requirements, c.of.Requirements} {
		for _, r := range reqs {
			if r.Operator() == corev1.NodeSelectorOpIn && r.Len() == 1 {
				out[r.Key] = r.Values()[0]
			}
		}
	}
	return out
}

// hydrate is what Create returns: the resolved labels, the class hash, the
// provider ID and the instance type's resources.
func (p *CloudProvider) hydrate(nc *karpv1.NodeClaim, class *v1alpha1.GPUNodeClass, it *karpcp.InstanceType, in nodegroup.Instance, hash string) *karpv1.NodeClaim {
	out := nc.DeepCopy()
	var of *karpcp.Offering
	for _, o := range it.Offerings {
		if o.Zone() == in.Location && o.CapacityType() == in.CapacityType {
			of = o
		}
	}
	if of == nil {
		of = &karpcp.Offering{Requirements: scheduling.NewRequirements(
			scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, in.Location),
			scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, in.CapacityType))}
	}
	labels := resolvedLabels(nc, choice{it: it, of: of})
	maps.Copy(labels, nc.Labels)
	out.Labels = labels
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[v1alpha1.AnnotationNodeClassHash] = hash
	out.Status.ProviderID = in.ProviderID
	out.Status.ImageID = class.Spec.Image
	out.Status.Capacity = it.Capacity.DeepCopy()
	out.Status.Allocatable = it.Allocatable().DeepCopy()
	return out
}

// launched finds a machine Karpenter launched by name.
func (p *CloudProvider) launched(name string) (nodegroup.Instance, bool) {
	in, ok := p.opts.Core.Read().LaunchedNamed(name)
	if !ok || in.Owner != Owner || in.State == nodegroup.StateDeleting {
		return nodegroup.Instance{}, false
	}
	return in, true
}
