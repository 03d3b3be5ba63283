package cloudprovider

import (
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcp "sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
)

// catalog builds Karpenter instance types from the core's offers, one set
// per GPUNodeClass, and keeps them until the class, the core's answer or
// a stock-out backoff in it changes. Karpenter asks on every provisioning
// and disruption pass; a repeated question is a map lookup.
type catalog struct {
	mu      sync.Mutex
	byClass map[string]*classTypes
}

// classTypes are one class's instance types and what they were built from.
type classTypes struct {
	generation int64
	spec       string // the class spec's hash
	template   string // the template group's hash
	version    nodegroup.Version
	validUntil time.Time
	types      []*karpcp.InstanceType
	byName     map[string]*karpcp.InstanceType
	// labels are, per type, the GPU labels a machine registers with
	// beyond the well-known ones (the MIG strategy, SkyPilot's key), which
	// the bootstrap and the device plugin read.
	labels map[string]map[string]string
}

// classInput is what one class's instance types are built from.
type classInput struct {
	class    *v1alpha1.GPUNodeClass
	template *config.NodeGroup
	offers   nodegroup.Offers
}

// get returns the class's instance types, building them when what they
// come from changed.
func (c *catalog) get(in classInput, now time.Time) (*classTypes, error) {
	specHash, err := specHash(in.class)
	if err != nil {
		return nil, err
	}
	tplHash := templateHash(in.template)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ct, ok := c.byClass[in.class.Name]; ok && ct.generation == in.class.Generation && ct.spec == specHash &&
		ct.template == tplHash && ct.version == in.offers.Version && (ct.validUntil.IsZero() || now.Before(ct.validUntil)) {
		return ct, nil
	}
	types, labels, err := build(in)
	if err != nil {
		return nil, err
	}
	ct := &classTypes{generation: in.class.Generation, spec: specHash, template: tplHash, version: in.offers.Version,
		validUntil: in.offers.ValidUntil, types: types, byName: make(map[string]*karpcp.InstanceType, len(types)), labels: labels}
	for _, it := range types {
		ct.byName[it.Name] = it
	}
	if c.byClass == nil {
		c.byClass = map[string]*classTypes{}
	}
	c.byClass[in.class.Name] = ct
	return ct, nil
}

// forget drops a deleted class's instance types.
func (c *catalog) forget(class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byClass, class)
}

// build turns a cloud's offers into the class's instance types: every type
// of the catalog (GPU types with their GPUs or MIG devices in capacity),
// offered in the class's locations under each capacity type the cloud
// lists, with the core's prices and availability.
func build(in classInput) ([]*karpcp.InstanceType, map[string]map[string]string, error) {
	spec := in.class.Spec
	mig := classMIG(spec.MIG)
	disk := spec.DiskSizeGiB
	if disk == 0 && in.template != nil {
		disk = in.template.DiskSizeGiB
	}
	if mig == nil && in.template != nil {
		mig = in.template.MIG
	}
	offerings := map[string][]cloud.Offering{}
	for _, of := range in.offers.Offerings {
		if len(spec.Locations) > 0 && !slices.Contains(spec.Locations, of.Location) {
			continue
		}
		offerings[of.InstanceType] = append(offerings[of.InstanceType], of)
	}
	out := make([]*karpcp.InstanceType, 0, len(in.offers.Types))
	labels := map[string]map[string]string{}
	for _, t := range in.offers.Types {
		if mig != nil {
			if _, err := gpu.MIGResources(t.GPUModel, mig.Profile, mig.Strategy, t.GPUCount); t.GPUCount == 0 || err != nil {
				continue // the profile does not fit this type's GPUs
			}
		}
		capacity, err := nodegroup.Capacity(t, disk, mig)
		if err != nil {
			return nil, nil, fmt.Errorf("instance type %s: %w", t.Name, err)
		}
		it := &karpcp.InstanceType{
			Name:     t.Name,
			Capacity: capacity,
			Overhead: &karpcp.InstanceTypeOverhead{KubeReserved: nodegroup.Reserved(capacity)},
		}
		var zones, regions, capacityTypes []string
		for _, of := range offerings[t.Name] {
			it.Offerings = append(it.Offerings, &karpcp.Offering{
				Requirements: scheduling.NewRequirements(
					scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, of.Location),
					scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, string(of.CapacityType)),
				),
				Price:     of.Price,
				Available: of.Available && of.Price > 0,
			})
			zones = appendNew(zones, of.Location)
			regions = appendNew(regions, in.offers.Regions[of.Location])
			capacityTypes = appendNew(capacityTypes, string(of.CapacityType))
		}
		var gpuLabels map[string]string
		if model, known := gpu.LookupModel(t.GPUModel); t.GPUCount > 0 && known {
			gpuLabels = nodegroup.GPULabels(model, t.GPUCount, mig)
			labels[t.Name] = gpuLabels
		}
		it.Requirements = requirements(t.Name, t.Arch, in.offers.Cloud, gpuLabels, zones, regions, capacityTypes)
		out = append(out, it)
	}
	return out, labels, nil
}

// requirements are the labels an instance type defines. GPU labels are
// DoesNotExist on types without GPUs, so that a NodePool asking for GPUs
// never gets a CPU type.
func requirements(name, arch, cloudName string, gpuLabels map[string]string, zones, regions, capacityTypes []string) scheduling.Requirements {
	if arch == "" {
		arch = "amd64"
	}
	reqs := scheduling.NewRequirements(
		scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, name),
		scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, arch),
		scheduling.NewRequirement(corev1.LabelOSStable, corev1.NodeSelectorOpIn, string(corev1.Linux)),
		scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, zones...),
		scheduling.NewRequirement(corev1.LabelTopologyRegion, corev1.NodeSelectorOpIn, regions...),
		scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, capacityTypes...),
		scheduling.NewRequirement(v1alpha1.LabelCloud, corev1.NodeSelectorOpIn, cloudName),
	)
	// Only well-known keys: Karpenter refuses a type with a key the
	// NodeClaim does not know.
	for _, k := range v1alpha1.GPULabelKeys {
		if v, ok := gpuLabels[k]; ok {
			reqs.Add(scheduling.NewRequirement(k, corev1.NodeSelectorOpIn, v))
		} else {
			reqs.Add(scheduling.NewRequirement(k, corev1.NodeSelectorOpDoesNotExist))
		}
	}
	return reqs
}

// classMIG is the class's MIG partitioning in the config's terms.
func classMIG(m *v1alpha1.MIG) *config.MIG {
	if m == nil {
		return nil
	}
	strategy := m.Strategy
	if strategy == "" {
		strategy = config.MIGStrategyMixed
	}
	return &config.MIG{Profile: m.Profile, Strategy: strategy}
}

func appendNew(s []string, v string) []string {
	if v == "" || slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}
