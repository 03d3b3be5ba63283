package gpu

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Resource and label names.
const (
	// ResourceGPU is the whole-GPU extended resource of the NVIDIA device plugin.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// LabelAccelerator names the GPU model in short form ("h100"); it is also
	// the default GPU label cluster-autoscaler is told about.
	LabelAccelerator = "gpuscaler.dev/accelerator"
	// LabelProduct is GPU Feature Discovery's product label (Model.Product).
	LabelProduct = "nvidia.com/gpu.product"
	// LabelCount is GPU Feature Discovery's count of GPUs on the node.
	LabelCount = "nvidia.com/gpu.count"
	// LabelMemory is GPU Feature Discovery's memory of one GPU, in MiB.
	LabelMemory = "nvidia.com/gpu.memory"
	// LabelMIGConfig selects a mig-parted configuration for mig-manager.
	LabelMIGConfig = "nvidia.com/mig.config"
	// LabelMIGStrategy is the device plugin's MIG strategy on the node.
	LabelMIGStrategy = "nvidia.com/mig.strategy"
	// LabelSkyPilotAccelerator lets SkyPilot's generic Kubernetes mode find GPUs.
	LabelSkyPilotAccelerator = "skypilot.co/accelerator"
	// MIGResourcePrefix prefixes the per-profile resources of the mixed strategy.
	MIGResourcePrefix = "nvidia.com/mig-"
)

// MIGResourceName returns the mixed-strategy resource of a MIG device:
// "1g.10gb" -> "nvidia.com/mig-1g.10gb".
func MIGResourceName(device string) corev1.ResourceName {
	return corev1.ResourceName(MIGResourcePrefix + device)
}

// GPUFraction returns how much of one whole GPU one unit of a resource is:
// 1 for nvidia.com/gpu, compute slices / 7 for a MIG device
// (nvidia.com/mig-3g.40gb is 3/7). ok is false for resources that are not GPUs.
func GPUFraction(name corev1.ResourceName) (float64, bool) {
	if name == ResourceGPU {
		return 1, true
	}
	dev, ok := strings.CutPrefix(string(name), MIGResourcePrefix)
	if !ok {
		return 0, false
	}
	slices, _, ok := strings.Cut(dev, "g.")
	n, err := strconv.Atoi(slices)
	if !ok || err != nil || n < 1 || n > 7 {
		return 0, false
	}
	return float64(n) / 7, true
}

// HasGPUs reports whether a resource list (a Node's allocatable, a
// container's requests) holds a positive amount of whole GPUs or MIG
// devices.
func HasGPUs(list corev1.ResourceList) bool {
	for name, q := range list {
		if _, ok := GPUFraction(name); ok && q.Sign() > 0 {
			return true
		}
	}
	return false
}

// PodRequestsGPUs reports whether a pod requests whole GPUs or MIG devices,
// by its effective requests as the scheduler counts them (app containers
// summed, init containers at their peak).
func PodRequestsGPUs(pod *corev1.Pod) bool {
	return HasGPUs(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
}
