package nodegroup

import (
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Labels gpuscaler puts on every node it creates and on every template.
const (
	LabelNodeGroup    = "gpuscaler.dev/node-group"
	LabelCapacityType = "gpuscaler.dev/capacity-type"
	LabelCloud        = "gpuscaler.dev/cloud"
)

// templateCache holds a group's built template and the label sets of its
// offerings; it is reset when the catalog changes.
type templateCache struct {
	node *corev1.Node
	// labels are shared by every order on one offering: read-only.
	labels map[cloud.OfferingKey]map[string]string
}

// templater builds what a group's nodes look like: the scale-from-zero
// template, and the labels, taints and settings of each order.
type templater struct {
	store *store
	// topology maps a location to its region and zone labels, for the
	// clouds whose locations nest (cloud.Topology); by cloud name.
	topology map[string]cloud.Topology
	// gpuLabel is an extra label key that carries the accelerator (the
	// cluster-autoscaler's --gpu-label); empty for none.
	gpuLabel string
}

// template returns the Node a new instance of the group will register as,
// for scale-from-zero: capacity, allocatable, labels and taints. The caller
// owns the returned copy.
func (t *templater) template(name string) (*corev1.Node, error) {
	s := t.store
	s.mu.RLock()
	g, ok := s.groups[name]
	if ok && g.template.node != nil {
		defer s.mu.RUnlock()
		return g.template.node.DeepCopy(), nil
	}
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.template.node == nil {
		node, err := t.buildTemplate(g)
		if err != nil {
			return nil, err
		}
		g.template.node = node
	}
	return g.template.node.DeepCopy(), nil
}

// buildTemplate renders a group's template node.
func (t *templater) buildTemplate(g *group) (*corev1.Node, error) {
	if g.itype.Name == "" {
		return nil, fmt.Errorf("group %q: instance type %q not loaded from the catalog", g.cfg.Name, g.cfg.InstanceType)
	}
	capacity, err := t.capacity(g)
	if err != nil {
		return nil, err
	}
	cts := capacityTypes(g.cfg.CapacityPolicy)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "template-" + g.cfg.Name,
			Labels: t.nodeLabels(g, g.cfg.Locations[0], cts[0]),
		},
		Spec: corev1.NodeSpec{Taints: append([]corev1.Taint(nil), g.cfg.Taints...)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable(capacity),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse},
			},
		},
	}
	return node, nil
}

// capacity is what a node of the group advertises.
func (t *templater) capacity(g *group) (corev1.ResourceList, error) {
	it := g.itype
	if it.GPUCount > 0 && g.cfg.MIG == nil && g.cfg.OverrideNumGPUs != nil {
		it.GPUCount = *g.cfg.OverrideNumGPUs
	}
	rl, err := Capacity(it, g.cfg.DiskSizeGiB, g.cfg.MIG)
	if err != nil {
		return nil, fmt.Errorf("group %q: %w", g.cfg.Name, err)
	}
	return rl, nil
}

// Capacity is what a node of an instance type advertises: cpu, memory,
// ephemeral storage (diskGiB, else the type's disk), pods, and its GPUs as
// nvidia.com/gpu or, partitioned by mig, as the profile's MIG devices.
func Capacity(it cloud.InstanceType, diskGiB int, mig *config.MIG) (corev1.ResourceList, error) {
	rl := cloud.NodeResources(it, diskGiB)
	if it.GPUCount == 0 {
		return rl, nil
	}
	if mig == nil {
		rl[gpu.ResourceGPU] = *resource.NewQuantity(int64(it.GPUCount), resource.DecimalSI)
		return rl, nil
	}
	devices, err := gpu.MIGResources(it.GPUModel, mig.Profile, mig.Strategy, it.GPUCount)
	if err != nil {
		return nil, err
	}
	maps.Copy(rl, devices)
	return rl, nil
}

// allocatable subtracts Reserved from a capacity.
func allocatable(capacity corev1.ResourceList) corev1.ResourceList {
	out := capacity.DeepCopy()
	for name, r := range Reserved(capacity) {
		q := out[name]
		q.Sub(r)
		out[name] = q
	}
	return out
}

// Reserved is what the kubelet and the system keep of a node's capacity,
// with the tiered reservations managed Kubernetes services use (cpu,
// memory with a 100 MiB eviction threshold, a tenth of the disk), so a pod
// planned on a template also fits on the real node.
func Reserved(capacity corev1.ResourceList) corev1.ResourceList {
	cpu := capacity.Cpu().MilliValue()
	mem := capacity.Memory().Value()
	disk := capacity.StorageEphemeral().Value()
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(reservedCPU(cpu), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(reservedMemory(mem), resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(disk/10, resource.BinarySI),
	}
}

// reservedCPU: 6% of the first core, 1% of the second, 0.5% of the next two,
// 0.25% of the rest (in millicores).
func reservedCPU(milli int64) int64 {
	tiers := []struct{ upTo, permille int64 }{{1000, 60}, {2000, 10}, {4000, 5}, {1 << 62, 2}}
	return tiered(milli, tiers)
}

// reservedMemory: 25% of the first 4 GiB, 20% of the next 4, 10% of the next
// 8, 6% of the next 112, 2% of the rest, plus a 100 MiB eviction threshold.
func reservedMemory(b int64) int64 {
	const gi = int64(1) << 30
	tiers := []struct{ upTo, permille int64 }{{4 * gi, 250}, {8 * gi, 200}, {16 * gi, 100}, {128 * gi, 60}, {1 << 62, 20}}
	return tiered(b, tiers) + 100<<20
}

func tiered(v int64, tiers []struct{ upTo, permille int64 }) int64 {
	var out, prev int64
	for _, t := range tiers {
		if v <= prev {
			break
		}
		part := min(v, t.upTo) - prev
		out += part * t.permille / 1000
		prev = t.upTo
	}
	return out
}

// nodeLabels are the labels a node of the group registers with in one
// location and capacity type; the template uses the first of each.
func (t *templater) nodeLabels(g *group, location string, ct cloud.CapacityType) map[string]string {
	it := g.itype
	arch := it.Arch
	if arch == "" {
		arch = "amd64"
	}
	typeLabel := it.Name
	if it.NodeLabel != "" {
		typeLabel = it.NodeLabel
	}
	region, zone := location, location
	if tp, ok := t.topology[g.cfg.Cloud]; ok {
		region, zone = tp.Topology(location)
	}
	l := map[string]string{
		corev1.LabelArchStable:         arch,
		corev1.LabelOSStable:           "linux",
		corev1.LabelInstanceTypeStable: typeLabel,
		corev1.LabelTopologyRegion:     region,
		corev1.LabelTopologyZone:       zone,
		LabelNodeGroup:                 g.cfg.Name,
		LabelCapacityType:              string(ct),
		LabelCloud:                     g.cfg.Cloud,
	}
	if it.GPUCount > 0 && g.gpuModel.Name != "" {
		maps.Copy(l, GPULabels(g.gpuModel, it.GPUCount, g.cfg.MIG))
		if key := t.gpuLabel; key != "" {
			l[key] = g.gpuModel.Accelerator
		}
	}
	if zone == "" {
		delete(l, corev1.LabelTopologyZone) // the cloud places the instance
	}
	maps.Copy(l, g.cfg.Labels)
	return l
}

// GPULabels are the labels of a node with count GPUs of a model, and the
// MIG partitioning when there is one: what NVIDIA's GPU feature discovery
// and mig-manager read and write.
func GPULabels(model gpu.Model, count int, mig *config.MIG) map[string]string {
	l := map[string]string{
		gpu.LabelAccelerator:         model.Accelerator,
		gpu.LabelSkyPilotAccelerator: model.Accelerator,
		gpu.LabelProduct:             model.Product,
		gpu.LabelCount:               strconv.Itoa(count),
		gpu.LabelMemory:              strconv.Itoa(model.MemoryMiB),
	}
	if mig != nil {
		l[gpu.LabelMIGConfig] = mig.Profile
		l[gpu.LabelMIGStrategy] = mig.Strategy
	}
	return l
}

// sharedLabels returns the labels of an offering's nodes, one map for all
// of its orders (10,000 instances need not hold 10,000 copies). Nobody
// changes it: see cloud.CreateSpec. Callers hold the store's write lock.
func (t *templater) sharedLabels(g *group, k cloud.OfferingKey) map[string]string {
	if l, ok := g.template.labels[k]; ok {
		return l
	}
	if g.template.labels == nil {
		g.template.labels = map[cloud.OfferingKey]map[string]string{}
	}
	l := t.nodeLabels(g, k.Location, k.CapacityType)
	g.template.labels[k] = l
	return l
}

// spec builds the order for one member of g on one offering, without its
// startup script; its Labels and Taints are shared, read-only. Callers
// hold the store's write lock.
func (t *templater) spec(g *group, name string, k cloud.OfferingKey) cloud.CreateSpec {
	return cloud.CreateSpec{
		Name:         name,
		Group:        g.cfg.Name,
		InstanceType: k.InstanceType,
		Location:     k.Location,
		CapacityType: k.CapacityType,
		Image:        g.cfg.Image,
		DiskGiB:      g.cfg.DiskSizeGiB,
		Labels:       t.sharedLabels(g, k),
		Taints:       g.cfg.Taints,
		Options:      maps.Clone(g.cfg.CloudOptions),
	}
}
