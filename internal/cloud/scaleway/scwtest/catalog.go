package scwtest

import (
	"strings"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

const gib = 1 << 30

// serverType is one commercial type of the fake, in the shape of an entry
// of GET …/products/servers.
type serverType struct {
	name      string
	ncpus     int
	ramGiB    int
	gpus      int
	gpuName   string
	gpuMemGiB int
	hourly    float64
}

// serverTypes are the fake's commercial types. Shapes (GPU counts, GPU
// names and memory, vCPUs, RAM) follow shared/reference/cloud-apis.md §3:
// L4-1-24G's entry is the recorded real one (8 vCPU, 48 GiB, 0.75/h); the
// other prices are the fake's own, in proportion.
var serverTypes = []serverType{
	{name: "L4-1-24G", ncpus: 8, ramGiB: 48, gpus: 1, gpuName: "L4", gpuMemGiB: 24, hourly: 0.75},
	{name: "L4-2-24G", ncpus: 16, ramGiB: 96, gpus: 2, gpuName: "L4", gpuMemGiB: 24, hourly: 1.5},
	{name: "L4-4-24G", ncpus: 32, ramGiB: 192, gpus: 4, gpuName: "L4", gpuMemGiB: 24, hourly: 3},
	{name: "L4-8-24G", ncpus: 64, ramGiB: 384, gpus: 8, gpuName: "L4", gpuMemGiB: 24, hourly: 6},
	{name: "L40S-1-48G", ncpus: 8, ramGiB: 96, gpus: 1, gpuName: "L40S", gpuMemGiB: 48, hourly: 1.4},
	{name: "L40S-2-48G", ncpus: 16, ramGiB: 192, gpus: 2, gpuName: "L40S", gpuMemGiB: 48, hourly: 2.8},
	{name: "L40S-4-48G", ncpus: 32, ramGiB: 384, gpus: 4, gpuName: "L40S", gpuMemGiB: 48, hourly: 5.6},
	{name: "L40S-8-48G", ncpus: 64, ramGiB: 768, gpus: 8, gpuName: "L40S", gpuMemGiB: 48, hourly: 11.2},
	{name: "H100-1-80G", ncpus: 24, ramGiB: 240, gpus: 1, gpuName: "H100", gpuMemGiB: 80, hourly: 2.73},
	{name: "H100-2-80G", ncpus: 48, ramGiB: 480, gpus: 2, gpuName: "H100", gpuMemGiB: 80, hourly: 5.46},
	{name: "H100-SXM-2-80G", ncpus: 32, ramGiB: 240, gpus: 2, gpuName: "H100-SXM", gpuMemGiB: 80, hourly: 6.02},
	{name: "H100-SXM-4-80G", ncpus: 64, ramGiB: 480, gpus: 4, gpuName: "H100-SXM", gpuMemGiB: 80, hourly: 11.61},
	{name: "H100-SXM-8-80G", ncpus: 128, ramGiB: 960, gpus: 8, gpuName: "H100-SXM", gpuMemGiB: 80, hourly: 23.03},
	{name: "GPU-3070-S", ncpus: 8, ramGiB: 16, gpus: 1, gpuName: "RTX 3070", gpuMemGiB: 8, hourly: 0.98},
	{name: "RENDER-S", ncpus: 10, ramGiB: 42, gpus: 1, gpuName: "P100", gpuMemGiB: 16, hourly: 1.24},
	{name: "POP2-4C-16G", ncpus: 4, ramGiB: 16, hourly: 0.15},
	{name: "PRO2-S", ncpus: 8, ramGiB: 32, hourly: 0.3},
}

// Zones are the fake's zones (the engine's locations).
var Zones = []string{"fr-par-1", "fr-par-2", "nl-ams-1", "pl-waw-2"}

// Catalog returns the commercial types as an engine catalog (the engine
// only counts capacity; the API serves the shapes above).
func Catalog() []cloud.InstanceType {
	out := make([]cloud.InstanceType, 0, len(serverTypes))
	for _, t := range serverTypes {
		out = append(out, cloud.InstanceType{Name: t.name, VCPUs: t.ncpus, MemoryGiB: t.ramGiB, GPUCount: t.gpus,
			GPUModel: engineModels[t.gpuName], GPUMemoryGiB: t.gpuMemGiB, Arch: "amd64", OnDemandPrice: t.hourly})
	}
	return out
}

// engineModels name the fake's GPUs in the GPU model table, for the
// capacity its kubelets advertise (MIG devices included).
var engineModels = map[string]string{"L4": "L4", "L40S": "L40S", "H100": "H100-80GB", "H100-SXM": "H100-80GB", "RTX 3070": "RTX3070", "P100": "P100"}

func typeNamed(name string) (serverType, bool) {
	for _, t := range serverTypes {
		if t.name == name {
			return t, true
		}
	}
	return serverType{}, false
}

// json renders a type as the API does.
func (t serverType) json() map[string]any {
	m := map[string]any{
		"ncpus": t.ncpus, "ram": int64(t.ramGiB) * gib, "hourly_price": t.hourly, "monthly_price": t.hourly * 730,
		"arch": "x86_64", "alt_names": []string{}, "end_of_service": false,
		"volumes_constraint":    map[string]any{"min_size": 0, "max_size": 0},
		"per_volume_constraint": map[string]any{"l_ssd": map[string]any{"min_size": 0, "max_size": 0}},
		"network":               map[string]any{"sum_internal_bandwidth": 10000000000},
		"capabilities":          map[string]any{"boot_types": []string{"local"}, "block_storage": true},
	}
	if t.gpus > 0 {
		m["gpu"] = t.gpus
		m["gpu_info"] = map[string]any{"gpu_manufacturer": "NVIDIA", "gpu_name": t.gpuName, "gpu_memory": int64(t.gpuMemGiB) * gib}
	} else {
		m["gpu"] = 0
	}
	return m
}

// isGPU reports whether a type boots only from block storage (sbs_volume),
// as GPU types do.
func isGPU(name string) bool {
	t, ok := typeNamed(name)
	return ok && (t.gpus > 0 || strings.HasPrefix(name, "H100"))
}
