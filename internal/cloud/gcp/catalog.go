package gcp

import "github.com/gpuscaler/gpuscaler/internal/cloud"

// machineTypes is the documented table of machine types gpuscaler orders
// on GCP: every accelerator-optimized family sold today, whose GPUs come
// with the machine type (G2: L4; A2: A100 40 GB, highgpu and megagpu, or
// 80 GB, ultragpu; A3: H100 80 GB, or H200 141 GB for ultragpu; A4:
// B200), and general-purpose types for CPU groups and for N1 templates
// with attached GPUs (accelerators). Prices are on-demand us-central1
// list prices per hour (the Cloud Billing catalog, 2026-07; other regions
// differ; 0 where no public list price was found, which a cost cap
// refuses); they drive cost caps and cluster-autoscaler's price expander,
// not billing. docs/clouds/gcp.md names the sources.
var machineTypes = []cloud.InstanceType{
	// G2: L4 (24 GB each).
	{Name: "g2-standard-4", VCPUs: 4, MemoryGiB: 16, GPUModel: "L4", GPUCount: 1, GPUMemoryGiB: 24, OnDemandPrice: 0.71},
	{Name: "g2-standard-8", VCPUs: 8, MemoryGiB: 32, GPUModel: "L4", GPUCount: 1, GPUMemoryGiB: 24, OnDemandPrice: 0.85},
	{Name: "g2-standard-12", VCPUs: 12, MemoryGiB: 48, GPUModel: "L4", GPUCount: 1, GPUMemoryGiB: 24, OnDemandPrice: 1.00},
	{Name: "g2-standard-16", VCPUs: 16, MemoryGiB: 64, GPUModel: "L4", GPUCount: 1, GPUMemoryGiB: 24, OnDemandPrice: 1.15},
	{Name: "g2-standard-24", VCPUs: 24, MemoryGiB: 96, GPUModel: "L4", GPUCount: 2, GPUMemoryGiB: 24, OnDemandPrice: 2.00},
	{Name: "g2-standard-32", VCPUs: 32, MemoryGiB: 128, GPUModel: "L4", GPUCount: 1, GPUMemoryGiB: 24, OnDemandPrice: 1.73},
	{Name: "g2-standard-48", VCPUs: 48, MemoryGiB: 192, GPUModel: "L4", GPUCount: 4, GPUMemoryGiB: 24, OnDemandPrice: 4.00},
	{Name: "g2-standard-96", VCPUs: 96, MemoryGiB: 384, GPUModel: "L4", GPUCount: 8, GPUMemoryGiB: 24, OnDemandPrice: 8.00},
	// A2 standard (highgpu, megagpu): A100 40 GB; A2 ultra: A100 80 GB.
	{Name: "a2-highgpu-1g", VCPUs: 12, MemoryGiB: 85, GPUModel: "A100-40GB", GPUCount: 1, GPUMemoryGiB: 40, OnDemandPrice: 3.67},
	{Name: "a2-highgpu-2g", VCPUs: 24, MemoryGiB: 170, GPUModel: "A100-40GB", GPUCount: 2, GPUMemoryGiB: 40, OnDemandPrice: 7.35},
	{Name: "a2-highgpu-4g", VCPUs: 48, MemoryGiB: 340, GPUModel: "A100-40GB", GPUCount: 4, GPUMemoryGiB: 40, OnDemandPrice: 14.69},
	{Name: "a2-highgpu-8g", VCPUs: 96, MemoryGiB: 680, GPUModel: "A100-40GB", GPUCount: 8, GPUMemoryGiB: 40, OnDemandPrice: 29.39},
	{Name: "a2-megagpu-16g", VCPUs: 96, MemoryGiB: 1360, GPUModel: "A100-40GB", GPUCount: 16, GPUMemoryGiB: 40, OnDemandPrice: 55.74},
	{Name: "a2-ultragpu-1g", VCPUs: 12, MemoryGiB: 170, GPUModel: "A100-80GB", GPUCount: 1, GPUMemoryGiB: 80, OnDemandPrice: 5.07},
	{Name: "a2-ultragpu-2g", VCPUs: 24, MemoryGiB: 340, GPUModel: "A100-80GB", GPUCount: 2, GPUMemoryGiB: 80, OnDemandPrice: 10.14},
	{Name: "a2-ultragpu-4g", VCPUs: 48, MemoryGiB: 680, GPUModel: "A100-80GB", GPUCount: 4, GPUMemoryGiB: 80, OnDemandPrice: 20.28},
	{Name: "a2-ultragpu-8g", VCPUs: 96, MemoryGiB: 1360, GPUModel: "A100-80GB", GPUCount: 8, GPUMemoryGiB: 80, OnDemandPrice: 40.55},
	// A3 high, mega and edge: H100 80 GB; A3 ultra: H200 141 GB. Mega is
	// priced in us-east4 (not sold in us-central1); edge and ultra have no
	// public list price found: 0, unpriced (a cost cap refuses them).
	{Name: "a3-highgpu-1g", VCPUs: 26, MemoryGiB: 234, GPUModel: "H100-80GB", GPUCount: 1, GPUMemoryGiB: 80, OnDemandPrice: 11.06},
	{Name: "a3-highgpu-2g", VCPUs: 52, MemoryGiB: 468, GPUModel: "H100-80GB", GPUCount: 2, GPUMemoryGiB: 80, OnDemandPrice: 22.12},
	{Name: "a3-highgpu-4g", VCPUs: 104, MemoryGiB: 936, GPUModel: "H100-80GB", GPUCount: 4, GPUMemoryGiB: 80, OnDemandPrice: 44.25},
	{Name: "a3-highgpu-8g", VCPUs: 208, MemoryGiB: 1872, GPUModel: "H100-80GB", GPUCount: 8, GPUMemoryGiB: 80, OnDemandPrice: 88.49},
	{Name: "a3-megagpu-8g", VCPUs: 208, MemoryGiB: 1872, GPUModel: "H100-80GB", GPUCount: 8, GPUMemoryGiB: 80, OnDemandPrice: 92.94},
	{Name: "a3-edgegpu-8g", VCPUs: 208, MemoryGiB: 1872, GPUModel: "H100-80GB", GPUCount: 8, GPUMemoryGiB: 80},
	{Name: "a3-ultragpu-8g", VCPUs: 224, MemoryGiB: 2952, GPUModel: "H200-141GB", GPUCount: 8, GPUMemoryGiB: 141},
	// A4: B200 (no public list price found: unpriced).
	{Name: "a4-highgpu-8g", VCPUs: 224, MemoryGiB: 3968, GPUModel: "B200", GPUCount: 8, GPUMemoryGiB: 180},
	// General purpose, for CPU groups and N1 templates with attached GPUs.
	{Name: "n1-standard-4", VCPUs: 4, MemoryGiB: 15, OnDemandPrice: 0.19},
	{Name: "n1-standard-8", VCPUs: 8, MemoryGiB: 30, OnDemandPrice: 0.38},
	{Name: "n1-standard-16", VCPUs: 16, MemoryGiB: 60, OnDemandPrice: 0.76},
	{Name: "n1-standard-32", VCPUs: 32, MemoryGiB: 120, OnDemandPrice: 1.52},
	{Name: "n1-highmem-8", VCPUs: 8, MemoryGiB: 52, OnDemandPrice: 0.47},
	{Name: "n1-highmem-16", VCPUs: 16, MemoryGiB: 104, OnDemandPrice: 0.95},
	{Name: "n2-standard-8", VCPUs: 8, MemoryGiB: 32, OnDemandPrice: 0.39},
	{Name: "n2-standard-16", VCPUs: 16, MemoryGiB: 64, OnDemandPrice: 0.78},
}

// accelerator is a GPU GCP attaches to a general-purpose (N1) machine
// type through an instance template's guestAccelerators.
type accelerator struct {
	model     string // key of the internal/gpu table
	memoryGiB int
	price     float64 // per GPU per hour, on demand, us-central1 (2026)
}

// accelerators are GCP's accelerator types by name.
var accelerators = map[string]accelerator{
	"nvidia-tesla-t4":   {model: "T4", memoryGiB: 16, price: 0.35},
	"nvidia-tesla-p4":   {model: "P4", memoryGiB: 8, price: 0.60},
	"nvidia-tesla-v100": {model: "V100-16GB", memoryGiB: 16, price: 2.48},
	"nvidia-tesla-p100": {model: "P100", memoryGiB: 16, price: 1.46},
}

// tableType returns the table's entry for a machine type.
func tableType(name string) (cloud.InstanceType, bool) {
	for _, t := range MachineTypes() {
		if t.Name == name {
			return t, true
		}
	}
	return cloud.InstanceType{}, false
}

// MachineTypes returns the table, every type amd64.
func MachineTypes() []cloud.InstanceType {
	out := make([]cloud.InstanceType, len(machineTypes))
	for i, t := range machineTypes {
		t.Arch = "amd64"
		out[i] = t
	}
	return out
}
