package catalogs

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// verdaJSON is a real GET /v1/instance-types answer of Verda's (55 types,
// recorded 2026-02; see shared/reference/verda).
//
//go:embed verda-instance-types.json
var verdaJSON []byte

// VerdaJSON returns the recorded listing, as Verda's API answered it.
func VerdaJSON() []byte { return append([]byte(nil), verdaJSON...) }

// verdaType is the part of a recorded instance type a catalog needs.
type verdaType struct {
	InstanceType string `json:"instance_type"`
	Model        string `json:"model"`
	CPU          struct {
		Cores int `json:"number_of_cores"`
	} `json:"cpu"`
	GPU struct {
		Count int `json:"number_of_gpus"`
	} `json:"gpu"`
	GPUMemory struct {
		GB int `json:"size_in_gigabytes"`
	} `json:"gpu_memory"`
	Memory struct {
		GB int `json:"size_in_gigabytes"`
	} `json:"memory"`
	PricePerHour string `json:"price_per_hour"`
	SpotPrice    string `json:"spot_price"`
}

// verdaModels maps the listing's model names to the GPU model table's.
var verdaModels = map[string]string{
	"GB300": "GB300", "B300": "B300", "B200": "B200", "H200": "H200-141GB", "H100": "H100-80GB",
	"A100 80GB": "A100-80GB", "A100 40GB": "A100-40GB", "Tesla V100": "V100-16GB", "RTX PRO 6000": "RTXPRO6000",
	"L40S": "L40S", "RTX 6000 Ada": "RTX6000ADA", "RTX A6000": "A6000",
}

// VerdaTypes returns the recorded listing as instance types, with its
// on-demand and spot prices.
func VerdaTypes() []cloud.InstanceType {
	var recs []verdaType
	if err := json.Unmarshal(verdaJSON, &recs); err != nil {
		panic(fmt.Sprintf("catalogs: the embedded Verda listing does not decode: %v", err))
	}
	out := make([]cloud.InstanceType, 0, len(recs))
	for _, r := range recs {
		t := cloud.InstanceType{
			Name: r.InstanceType, GPUCount: r.GPU.Count, VCPUs: r.CPU.Cores, MemoryGiB: r.Memory.GB,
			Arch: "amd64", OnDemandPrice: verdaPrice(r.PricePerHour), SpotPrice: verdaPrice(r.SpotPrice),
		}
		if r.GPU.Count > 0 {
			t.GPUModel, t.GPUMemoryGiB = verdaModels[r.Model], r.GPUMemory.GB/r.GPU.Count
		}
		if r.Model == "GB300" {
			t.Arch = "arm64" // Grace CPUs
		}
		out = append(out, t)
	}
	return out
}

func verdaPrice(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(fmt.Sprintf("catalogs: recorded Verda price %q: %v", s, err))
	}
	return f
}

func verda() Catalog {
	return Catalog{Name: Verda, Types: VerdaTypes(), Locations: []string{"FIN-01", "FIN-02", "FIN-03", "ICE-01"},
		Source: "Verda's GET /v1/instance-types, recorded 2026-02 (shared/reference/verda): on-demand and spot prices"}
}
