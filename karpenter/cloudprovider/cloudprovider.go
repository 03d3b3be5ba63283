// Package cloudprovider is gpuscaler's implementation of Karpenter's
// cloudprovider.CloudProvider: instance types from the clouds' catalogs as
// the node-group core knows them, and one machine per NodeClaim through the
// core's launch API (its cost cap, stock-out backoff and lost-answer
// handling included).
package cloudprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcp "sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
)

// Owner is the owner the core records on the machines Karpenter launches.
const Owner = config.ManagedByKarpenter

// Core is the part of gpuscaler's node-group core the provider uses;
// *nodegroup.Manager implements it. The provider holds it through an
// inforce.Core handle, which follows config reloads.
type Core interface {
	Offers(cloud string, locations []string) (nodegroup.Offers, bool)
	Launch(ctx context.Context, req nodegroup.LaunchRequest) (nodegroup.Instance, error)
	Terminate(ctx context.Context, providerID string) error
	Launched(owner string) []nodegroup.Instance
	LaunchedInstance(providerID string) (nodegroup.Instance, bool)
	LaunchedNamed(name string) (nodegroup.Instance, bool)
	CheckOptions(cloudName string, opts map[string]string) []*cloud.OptionError
}

// Templates finds a node group of the config in force by name.
type Templates func(name string) (config.NodeGroup, bool)

// Options are a CloudProvider's collaborators.
type Options struct {
	// Kube reads GPUNodeClasses.
	Kube client.Reader
	// Core is the core in force.
	Core inforce.Core[Core]
	// Templates resolves GPUNodeClass templates.
	Templates Templates
	// Started is closed once the core has listed every cloud (the leader
	// runs it); until then Create waits and the reads answer nothing.
	Started <-chan struct{}
	// MaxAttempts bounds the offerings one Create tries before it reports
	// insufficient capacity; default 3.
	MaxAttempts int
	Clock       clock.Clock
}

// CloudProvider is gpuscaler as a Karpenter cloud provider.
type CloudProvider struct {
	opts    Options
	catalog catalog
}

// New returns a CloudProvider.
func New(opts Options) *CloudProvider {
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &CloudProvider{opts: opts}
}

var _ karpcp.CloudProvider = (*CloudProvider)(nil)

// Name is the provider's name.
func (p *CloudProvider) Name() string { return "gpuscaler" }

// GetSupportedNodeClasses returns the GPUNodeClass.
func (p *CloudProvider) GetSupportedNodeClasses() []status.Object {
	return []status.Object{&v1alpha1.GPUNodeClass{}}
}

// started reports whether the core has started.
func (p *CloudProvider) started() bool {
	select {
	case <-p.opts.Started:
		return true
	default:
		return false
	}
}

// GetInstanceTypes returns the instance types of the NodePool's class,
// from memory.
func (p *CloudProvider) GetInstanceTypes(ctx context.Context, pool *karpv1.NodePool) ([]*karpcp.InstanceType, error) {
	if pool.Spec.Template.Spec.NodeClassRef == nil {
		return nil, nil
	}
	class, err := p.class(ctx, pool.Spec.Template.Spec.NodeClassRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ct, err := p.classTypes(class)
	if err != nil {
		return nil, err
	}
	return ct.types, nil
}

// classTypes returns one class's instance types.
func (p *CloudProvider) classTypes(class *v1alpha1.GPUNodeClass) (*classTypes, error) {
	if !p.started() {
		return nil, ErrNotStarted
	}
	in := classInput{class: class}
	if class.Spec.Template != "" {
		if g, ok := p.opts.Templates(class.Spec.Template); ok {
			in.template = &g
		}
	}
	locations := class.Spec.Locations
	if len(locations) == 0 && in.template != nil {
		locations = in.template.Locations
	}
	offers, ok := p.opts.Core.Read().Offers(class.Spec.Cloud, locations)
	if !ok {
		return nil, fmt.Errorf("GPUNodeClass %s: cloud %q is not configured", class.Name, class.Spec.Cloud)
	}
	in.offers = offers
	return p.catalog.get(in, p.opts.Clock.Now())
}

func (p *CloudProvider) class(ctx context.Context, name string) (*v1alpha1.GPUNodeClass, error) {
	class := &v1alpha1.GPUNodeClass{}
	if err := p.opts.Kube.Get(ctx, types.NamespacedName{Name: name}, class); err != nil {
		return nil, err
	}
	return class, nil
}

// Get returns the NodeClaim of a machine Karpenter launched.
func (p *CloudProvider) Get(_ context.Context, providerID string) (*karpv1.NodeClaim, error) {
	if in, ok := p.opts.Core.Read().LaunchedInstance(providerID); ok && in.Owner == Owner {
		return p.nodeClaim(in), nil
	}
	return nil, karpcp.NewNodeClaimNotFoundError(fmt.Errorf("no machine %s", providerID))
}

// List returns the NodeClaims of every machine Karpenter launched.
func (p *CloudProvider) List(context.Context) ([]*karpv1.NodeClaim, error) {
	if !p.started() {
		// An empty answer would read as "every machine is gone".
		return nil, ErrNotStarted
	}
	launched := p.opts.Core.Read().Launched(Owner)
	out := make([]*karpv1.NodeClaim, 0, len(launched))
	for _, in := range launched {
		out = append(out, p.nodeClaim(in))
	}
	return out, nil
}

// nodeClaim describes a launched machine.
func (p *CloudProvider) nodeClaim(in nodegroup.Instance) *karpv1.NodeClaim {
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: in.Name,
			Labels: map[string]string{
				corev1.LabelInstanceTypeStable: in.InstanceType,
				corev1.LabelTopologyZone:       in.Location,
				karpv1.CapacityTypeLabelKey:    in.CapacityType,
			},
			CreationTimestamp: metav1.NewTime(in.CreatedAt),
		},
		Status: karpv1.NodeClaimStatus{ProviderID: in.ProviderID},
	}
	if in.State == nodegroup.StateDeleting {
		now := metav1.NewTime(p.opts.Clock.Now())
		nc.DeletionTimestamp = &now
	}
	return nc
}

// Delete terminates a NodeClaim's machine. It returns NodeClaimNotFound
// once the machine is gone, and nil while its deletion runs.
func (p *CloudProvider) Delete(ctx context.Context, nc *karpv1.NodeClaim) error {
	pid := nc.Status.ProviderID
	if pid == "" {
		// Never launched, or launched and the answer not recorded: the
		// machine, if any, carries the NodeClaim's name.
		if in, ok := p.opts.Core.Read().LaunchedNamed(nc.Name); ok && in.Owner == Owner {
			pid = in.ProviderID
		}
		if pid == "" {
			return karpcp.NewNodeClaimNotFoundError(fmt.Errorf("NodeClaim %s has no machine", nc.Name))
		}
	}
	err := p.opts.Core.Write(ctx, func(c Core) error { return c.Terminate(ctx, pid) })
	if errors.Is(err, nodegroup.ErrNotLaunched) {
		return karpcp.NewNodeClaimNotFoundError(err)
	}
	if err != nil {
		return fmt.Errorf("terminate %s: %w", pid, err)
	}
	return nil
}

// IsDrifted reports a NodeClaim launched from another spec of its class
// (an image, a disk, a template change).
func (p *CloudProvider) IsDrifted(ctx context.Context, nc *karpv1.NodeClaim) (karpcp.DriftReason, error) {
	if nc.Spec.NodeClassRef == nil {
		return "", nil
	}
	class, err := p.class(ctx, nc.Spec.NodeClassRef.Name)
	if err != nil {
		return "", client.IgnoreNotFound(err)
	}
	launched, ok := nc.Annotations[v1alpha1.AnnotationNodeClassHash]
	if !ok {
		return "", nil
	}
	want, err := p.launchHash(class)
	if err != nil {
		return "", err
	}
	if launched != want {
		return "NodeClassDrift", nil
	}
	return "", nil
}

// Reboot is not offered: the core restarts no machine in place.
func (p *CloudProvider) Reboot(context.Context, *karpv1.NodeClaim, string) error {
	return karpcp.NewNodeRebootNotImplementedError()
}

// Conditions that report an unhealthy GPU: AcceleratedHardwareReady is what
// node-monitoring agents set (Xid errors, a GPU fallen off the bus).
const ConditionAcceleratedHardwareReady corev1.NodeConditionType = "AcceleratedHardwareReady"

// RepairPolicies replace nodes whose kubelet stopped reporting, and nodes
// whose GPUs are reported broken.
func (p *CloudProvider) RepairPolicies() []karpcp.RepairPolicy {
	return []karpcp.RepairPolicy{
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionFalse, TolerationDuration: 10 * time.Minute, Action: karpcp.ReplaceNode},
		{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionUnknown, ReasonRegex: ".*", TolerationDuration: 10 * time.Minute, Action: karpcp.ReplaceNode},
		{ConditionType: ConditionAcceleratedHardwareReady, ConditionStatus: corev1.ConditionFalse, ReasonRegex: ".*", TolerationDuration: 10 * time.Minute, Action: karpcp.ReplaceNode, Priority: 50},
	}
}

// launchHash hashes what a machine of the class is launched from (its
// spec and its template's), but the locations: a machine outside them is
// the scheduler's drift, not the class's.
func (p *CloudProvider) launchHash(class *v1alpha1.GPUNodeClass) (string, error) {
	spec, err := specHash(class)
	if err != nil {
		return "", err
	}
	var tpl *config.NodeGroup
	if class.Spec.Template != "" {
		if g, ok := p.opts.Templates(class.Spec.Template); ok {
			tpl = &g
		}
	}
	return spec + "-" + templateHash(tpl), nil
}

// specHash hashes the class spec but its locations.
func specHash(class *v1alpha1.GPUNodeClass) (string, error) {
	spec := class.Spec
	spec.Locations = nil
	return hash(spec)
}

// templateHash hashes what a template gives a machine; "" for none.
func templateHash(g *config.NodeGroup) string {
	if g == nil {
		return ""
	}
	h, err := hash(struct {
		Image     string
		Disk      int
		Labels    map[string]string
		Taints    []corev1.Taint
		Options   map[string]string
		MIG       *config.MIG
		Bootstrap *config.Bootstrap
	}{g.Image, g.DiskSizeGiB, g.Labels, g.Taints, g.CloudOptions, g.MIG, g.Bootstrap})
	if err != nil {
		return "unhashable"
	}
	return h
}

func hash(v any) (string, error) {
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}
