package v1alpha1

import (
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Labels every offered instance type defines, so that NodePools select GPUs
// by them ("In", "Gt", "Gte", ...). The GPU keys are the ones gpuscaler's
// other front ends and NVIDIA's GPU feature discovery put on nodes.
const (
	// LabelGPUName is the accelerator, e.g. nvidia-h100-80gb.
	LabelGPUName = gpu.LabelAccelerator
	// LabelGPUProduct is the product name, e.g. NVIDIA-H100-80GB-HBM3.
	LabelGPUProduct = gpu.LabelProduct
	// LabelGPUCount is the number of whole GPUs.
	LabelGPUCount = gpu.LabelCount
	// LabelGPUMemory is one GPU's memory in MiB.
	LabelGPUMemory = gpu.LabelMemory
	// LabelMIGConfig is the MIG profile of a class with mig; absent
	// otherwise.
	LabelMIGConfig = gpu.LabelMIGConfig
	// LabelCloud is the cloud the machine runs on.
	LabelCloud = "gpuscaler.dev/cloud"
	// AnnotationNodeClassHash is the hash of the class's spec a NodeClaim
	// was launched with; a different hash is drift.
	AnnotationNodeClassHash = "gpuscaler.dev/nodeclass-hash"
)

// GPULabelKeys are the GPU labels every instance type defines, with
// DoesNotExist on types without GPUs (or without MIG), so that a NodePool
// asking for GPUs never gets a CPU type.
var GPULabelKeys = []string{LabelGPUName, LabelGPUProduct, LabelGPUCount, LabelGPUMemory, LabelMIGConfig}

// Karpenter only schedules on label keys it knows instance types define.
func init() {
	karpv1.WellKnownLabels = karpv1.WellKnownLabels.Insert(LabelCloud)
	karpv1.WellKnownLabels = karpv1.WellKnownLabels.Insert(GPULabelKeys...)
}
