package catalogs

import "github.com/gpuscaler/gpuscaler/internal/cloud"

// ScalewayType is one of Scaleway's commercial types, in the shape of an
// entry of GET …/products/servers.
type ScalewayType struct {
	Name      string
	NCPUs     int
	RAMGiB    int
	GPUs      int
	GPUName   string // gpu_info.gpu_name
	GPUMemGiB int
	Hourly    float64 // hourly_price, EUR
}

// ScalewayTypes returns Scaleway's commercial types. Shapes (GPU counts,
// GPU names and memory, vCPUs, RAM) follow shared/reference/cloud-apis.md
// §3 (the recorded products/servers answer and Scaleway's GPU type table):
// L4-1-24G's entry is the recorded real one (8 vCPU, 48 GiB, 0.75/h); the
// other prices are estimates in proportion to it and to the GPUs' public
// list prices, not recorded answers.
func ScalewayTypes() []ScalewayType {
	return []ScalewayType{
		{Name: "L4-1-24G", NCPUs: 8, RAMGiB: 48, GPUs: 1, GPUName: "L4", GPUMemGiB: 24, Hourly: 0.75},
		{Name: "L4-2-24G", NCPUs: 16, RAMGiB: 96, GPUs: 2, GPUName: "L4", GPUMemGiB: 24, Hourly: 1.5},
		{Name: "L4-4-24G", NCPUs: 32, RAMGiB: 192, GPUs: 4, GPUName: "L4", GPUMemGiB: 24, Hourly: 3},
		{Name: "L4-8-24G", NCPUs: 64, RAMGiB: 384, GPUs: 8, GPUName: "L4", GPUMemGiB: 24, Hourly: 6},
		{Name: "L40S-1-48G", NCPUs: 8, RAMGiB: 96, GPUs: 1, GPUName: "L40S", GPUMemGiB: 48, Hourly: 1.4},
		{Name: "L40S-2-48G", NCPUs: 16, RAMGiB: 192, GPUs: 2, GPUName: "L40S", GPUMemGiB: 48, Hourly: 2.8},
		{Name: "L40S-4-48G", NCPUs: 32, RAMGiB: 384, GPUs: 4, GPUName: "L40S", GPUMemGiB: 48, Hourly: 5.6},
		{Name: "L40S-8-48G", NCPUs: 64, RAMGiB: 768, GPUs: 8, GPUName: "L40S", GPUMemGiB: 48, Hourly: 11.2},
		{Name: "H100-1-80G", NCPUs: 24, RAMGiB: 240, GPUs: 1, GPUName: "H100", GPUMemGiB: 80, Hourly: 2.73},
		{Name: "H100-2-80G", NCPUs: 48, RAMGiB: 480, GPUs: 2, GPUName: "H100", GPUMemGiB: 80, Hourly: 5.46},
		{Name: "H100-SXM-2-80G", NCPUs: 32, RAMGiB: 240, GPUs: 2, GPUName: "H100-SXM", GPUMemGiB: 80, Hourly: 6.02},
		{Name: "H100-SXM-4-80G", NCPUs: 64, RAMGiB: 480, GPUs: 4, GPUName: "H100-SXM", GPUMemGiB: 80, Hourly: 11.61},
		{Name: "H100-SXM-8-80G", NCPUs: 128, RAMGiB: 960, GPUs: 8, GPUName: "H100-SXM", GPUMemGiB: 80, Hourly: 23.03},
		{Name: "GPU-3070-S", NCPUs: 8, RAMGiB: 16, GPUs: 1, GPUName: "RTX 3070", GPUMemGiB: 8, Hourly: 0.98},
		{Name: "RENDER-S", NCPUs: 10, RAMGiB: 42, GPUs: 1, GPUName: "P100", GPUMemGiB: 16, Hourly: 1.24},
		{Name: "POP2-4C-16G", NCPUs: 4, RAMGiB: 16, Hourly: 0.15},
		{Name: "PRO2-S", NCPUs: 8, RAMGiB: 32, Hourly: 0.3},
	}
}

// scalewayModels name Scaleway's GPUs in the GPU model table.
var scalewayModels = map[string]string{"L4": "L4", "L40S": "L40S", "H100": "H100-80GB", "H100-SXM": "H100-80GB", "RTX 3070": "RTX3070", "P100": "P100"}

// ScalewayInstanceTypes returns the commercial types as instance types.
// Scaleway sells no spot instances.
func ScalewayInstanceTypes() []cloud.InstanceType {
	types := ScalewayTypes()
	out := make([]cloud.InstanceType, 0, len(types))
	for _, t := range types {
		out = append(out, cloud.InstanceType{Name: t.Name, VCPUs: t.NCPUs, MemoryGiB: t.RAMGiB, GPUCount: t.GPUs,
			GPUModel: scalewayModels[t.GPUName], GPUMemoryGiB: t.GPUMemGiB, Arch: "amd64", OnDemandPrice: t.Hourly, Currency: "EUR"})
	}
	return out
}

// scaleway is the catalog: its GPU types are sold in fr-par-2 and
// pl-waw-2 (Scaleway's product availability table; RENDER-S in fr-par-1).
func scaleway() Catalog {
	return Catalog{Name: Scaleway, Types: ScalewayInstanceTypes(), Locations: []string{"fr-par-2", "pl-waw-2", "fr-par-1"},
		Source: "Scaleway's commercial types (shared/reference/cloud-apis.md §3): L4-1-24G's price recorded, the others estimates; no spot"}
}
