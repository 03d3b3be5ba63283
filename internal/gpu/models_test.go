package gpu

import (
	"sort"
	"testing"
)

func TestModelsTable(t *testing.T) {
	required := []string{"H100-80GB", "H200-141GB", "A100-40GB", "A100-80GB", "B200", "B300", "GB300", "L40S",
		"RTX6000ADA", "A6000", "RTXPRO6000", "V100-16GB", "L4", "T4"}
	for _, name := range required {
		m, ok := LookupModel(name)
		if !ok {
			t.Errorf("model %s missing", name)
			continue
		}
		if m.Name != name || m.Product == "" || m.Accelerator == "" || m.MemoryMiB <= 0 || m.Family == "" {
			t.Errorf("model %s incomplete: %+v", name, m)
		}
	}
	all := Models()
	if !sort.SliceIsSorted(all, func(i, j int) bool { return all[i].Name < all[j].Name }) {
		t.Error("Models() not sorted by name")
	}
	accel := map[string]string{}
	for _, m := range all {
		if other, dup := accel[m.Accelerator]; dup {
			t.Errorf("accelerator %q used by %s and %s", m.Accelerator, other, m.Name)
		}
		accel[m.Accelerator] = m.Name
	}
	// The result is the caller's to change.
	all[0].Name = "changed"
	if Models()[0].Name == "changed" {
		t.Error("Models() shares its backing array")
	}
	if _, ok := LookupModel("nope"); ok {
		t.Error("unknown model found")
	}
}

func TestModelFacts(t *testing.T) {
	tests := []struct {
		name, product, accel string
		mig                  bool
	}{
		{"H100-80GB", "NVIDIA-H100-80GB-HBM3", "h100", true},
		{"A100-80GB", "NVIDIA-A100-SXM4-80GB", "a100-80gb", true},
		{"H200-141GB", "NVIDIA-H200", "h200", true},
		{"L40S", "NVIDIA-L40S", "l40s", false},
		{"V100-16GB", "Tesla-V100-SXM2-16GB", "v100", false},
	}
	for _, tt := range tests {
		m, _ := LookupModel(tt.name)
		if m.Product != tt.product || m.Accelerator != tt.accel || m.MIGCapable != tt.mig {
			t.Errorf("%s = %+v", tt.name, m)
		}
	}
}
