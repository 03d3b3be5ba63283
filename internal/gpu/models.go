// Package gpu holds facts about GPUs in Kubernetes: the models gpuscaler
// knows, their MIG profiles, and the NVIDIA resource and label names nodes
// and templates carry.
package gpu

import "sort"

// Model is one GPU model.
type Model struct {
	// Name is the table key, e.g. "H100-80GB".
	Name string
	// Product is GPU Feature Discovery's product label value.
	Product string
	// Accelerator is the short lower-case name used in labels, e.g. "h100".
	Accelerator string
	// MemoryMiB is the memory of one GPU.
	MemoryMiB int
	// Family is the architecture, as GPU Feature Discovery names it.
	Family string
	// MIGCapable reports whether the model can be partitioned with MIG.
	MIGCapable bool
	// migFamily keys the MIG profile table; empty when not MIG-capable.
	migFamily string
}

var models = []Model{
	{Name: "B300", Product: "NVIDIA-B300-SXM6-AC", Accelerator: "b300", MemoryMiB: 275040, Family: "blackwell"},
	{Name: "GB300", Product: "NVIDIA-GB300", Accelerator: "gb300", MemoryMiB: 284208, Family: "blackwell"},
	{Name: "B200", Product: "NVIDIA-B200", Accelerator: "b200", MemoryMiB: 183359, Family: "blackwell"},
	{Name: "H200-141GB", Product: "NVIDIA-H200", Accelerator: "h200", MemoryMiB: 143771, Family: "hopper", MIGCapable: true, migFamily: "h200"},
	{Name: "H100-80GB", Product: "NVIDIA-H100-80GB-HBM3", Accelerator: "h100", MemoryMiB: 81559, Family: "hopper", MIGCapable: true, migFamily: "80gb"},
	{Name: "A100-80GB", Product: "NVIDIA-A100-SXM4-80GB", Accelerator: "a100-80gb", MemoryMiB: 81920, Family: "ampere", MIGCapable: true, migFamily: "80gb"},
	{Name: "A100-40GB", Product: "NVIDIA-A100-SXM4-40GB", Accelerator: "a100", MemoryMiB: 40960, Family: "ampere", MIGCapable: true, migFamily: "40gb"},
	{Name: "RTXPRO6000", Product: "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", Accelerator: "rtxpro6000", MemoryMiB: 97887, Family: "blackwell"},
	{Name: "L40S", Product: "NVIDIA-L40S", Accelerator: "l40s", MemoryMiB: 46068, Family: "ada-lovelace"},
	{Name: "RTX6000ADA", Product: "NVIDIA-RTX-6000-Ada-Generation", Accelerator: "rtx6000ada", MemoryMiB: 49140, Family: "ada-lovelace"},
	{Name: "A6000", Product: "NVIDIA-RTX-A6000", Accelerator: "a6000", MemoryMiB: 49140, Family: "ampere"},
	{Name: "L4", Product: "NVIDIA-L4", Accelerator: "l4", MemoryMiB: 23034, Family: "ada-lovelace"},
	{Name: "V100-16GB", Product: "Tesla-V100-SXM2-16GB", Accelerator: "v100", MemoryMiB: 16384, Family: "volta"},
	{Name: "T4", Product: "Tesla-T4", Accelerator: "t4", MemoryMiB: 15360, Family: "turing"},
	{Name: "RTX3070", Product: "NVIDIA-GeForce-RTX-3070", Accelerator: "rtx3070", MemoryMiB: 8192, Family: "ampere"},
	{Name: "P100", Product: "Tesla-P100-PCIE-16GB", Accelerator: "p100", MemoryMiB: 16280, Family: "pascal"},
	{Name: "P4", Product: "Tesla-P4", Accelerator: "p4", MemoryMiB: 7611, Family: "pascal"},
}

// LookupModel returns the model with the given table key.
func LookupModel(name string) (Model, bool) {
	for _, m := range models {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}

// Models returns every known model, sorted by name.
func Models() []Model {
	out := append([]Model(nil), models...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
