package cloud

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Node defaults the catalog does not say.
const (
	// NodePods is the kubelet's default pod limit.
	NodePods = 110
	// DefaultDiskGiB sizes ephemeral storage when neither the group nor the
	// instance type gives a disk size.
	DefaultDiskGiB = 100
)

// NodeResources returns what a node of the type advertises apart from
// GPUs: cpu, memory, ephemeral storage (diskGiB, else the type's disk, else
// DefaultDiskGiB) and pods.
func NodeResources(t InstanceType, diskGiB int) corev1.ResourceList {
	if diskGiB == 0 {
		diskGiB = t.DiskGiB
	}
	if diskGiB == 0 {
		diskGiB = DefaultDiskGiB
	}
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(t.VCPUs), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(t.MemoryGiB)<<30, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(diskGiB)<<30, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(NodePods, resource.DecimalSI),
	}
}
