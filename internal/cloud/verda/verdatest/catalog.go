package verdatest

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// instanceTypesJSON is a real GET /v1/instance-types answer (55 types,
// recorded 2026-02; see shared/reference/verda). The fake serves it as it
// is, and its engine's catalog is read from it.
//
//go:embed instance-types.json
var instanceTypesJSON []byte

// InstanceTypesJSON returns the recorded listing the fake serves.
func InstanceTypesJSON() []byte { return append([]byte(nil), instanceTypesJSON...) }

// recordedType is the part of a recorded instance type the engine needs.
type recordedType struct {
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
	PricePerHour string   `json:"price_per_hour"`
	SpotPrice    string   `json:"spot_price"`
	SupportedOS  []string `json:"supported_os"`
}

// supportedOS returns the images the recorded listing says a type
// accepts; empty for types whose listing says nothing.
func supportedOS(instanceType string) []string {
	var recs []recordedType
	_ = json.Unmarshal(instanceTypesJSON, &recs)
	for _, r := range recs {
		if r.InstanceType == instanceType {
			return r.SupportedOS
		}
	}
	return nil
}

// engineModels maps the listing's model names to the GPU models the
// simulated engine (and its kubelets) know.
var engineModels = map[string]string{
	"GB300": "GB300", "B300": "B300", "B200": "B200", "H200": "H200-141GB", "H100": "H100-80GB",
	"A100 80GB": "A100-80GB", "A100 40GB": "A100-40GB", "Tesla V100": "V100-16GB", "RTX PRO 6000": "RTXPRO6000",
	"L40S": "L40S", "RTX 6000 Ada": "RTX6000ADA", "RTX A6000": "A6000",
}

// Catalog returns the recorded listing as a simulated engine's catalog,
// so that what the fake serves and what its engine can create agree.
func Catalog() []cloud.InstanceType {
	var recs []recordedType
	if err := json.Unmarshal(instanceTypesJSON, &recs); err != nil {
		panic(fmt.Sprintf("verdatest: the embedded listing does not decode: %v", err))
	}
	out := make([]cloud.InstanceType, 0, len(recs))
	for _, r := range recs {
		t := cloud.InstanceType{
			Name: r.InstanceType, GPUCount: r.GPU.Count, VCPUs: r.CPU.Cores, MemoryGiB: r.Memory.GB,
			Arch: "amd64", OnDemandPrice: price(r.PricePerHour), SpotPrice: price(r.SpotPrice),
		}
		if r.GPU.Count > 0 {
			t.GPUModel, t.GPUMemoryGiB = engineModels[r.Model], r.GPUMemory.GB/r.GPU.Count
		}
		if r.Model == "GB300" {
			t.Arch = "arm64" // Grace CPUs
		}
		out = append(out, t)
	}
	return out
}

func price(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(fmt.Sprintf("verdatest: recorded price %q: %v", s, err))
	}
	return f
}

// NewEngine returns a simulated engine whose catalog is the recorded
// listing: the engine a Server needs.
func NewEngine(cfg sim.Config, opts sim.Options) (*sim.Engine, error) {
	opts.Catalog = Catalog()
	return sim.NewEngine(cfg, opts)
}
