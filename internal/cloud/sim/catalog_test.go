package sim

import (
	"regexp"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

func TestDefaultCatalog(t *testing.T) {
	// Names the example configs and docs rely on.
	required := []string{"1H100.80S.30V", "2H100.80S.80V", "4H100.80S.176V", "8H100.80S.176V", "1A100.22V",
		"8A100.176V", "1A100.40S.22V", "1H200.141S.44V", "8H200.141S.176V", "1L40S.20V", "1V100.6V", "CPU.4V.16G"}
	verdaName := regexp.MustCompile(`^(\d+[A-Z0-9]+(\.\d+S)?\.\d+V|CPU\.\d+V\.\d+G)$`)
	seen := map[string]bool{}
	for _, it := range DefaultCatalog() {
		if seen[it.Name] {
			t.Errorf("%s listed twice", it.Name)
		}
		seen[it.Name] = true
		if !verdaName.MatchString(it.Name) {
			t.Errorf("%s is not a Verda-style name", it.Name)
		}
		if it.VCPUs <= 0 || it.MemoryGiB <= 0 || it.SpotPrice <= 0 || it.SpotPrice >= it.OnDemandPrice {
			t.Errorf("%s: implausible shape or prices %+v", it.Name, it)
		}
		if it.GPUCount == 0 {
			if it.GPUModel != "" {
				t.Errorf("%s: GPU model without GPUs", it.Name)
			}
			continue
		}
		m, ok := gpu.LookupModel(it.GPUModel)
		if !ok {
			t.Errorf("%s: GPU model %q is not a key of internal/gpu", it.Name, it.GPUModel)
			continue
		}
		// Clouds quote nameplate memory; the driver reports a little less.
		if usable := float64(m.MemoryMiB) / 1024; usable < 0.9*float64(it.GPUMemoryGiB) || usable > 1.1*float64(it.GPUMemoryGiB) {
			t.Errorf("%s: %d GiB per GPU, the model has %.0f", it.Name, it.GPUMemoryGiB, usable)
		}
	}
	for _, name := range required {
		if !seen[name] {
			t.Errorf("catalog lacks %s", name)
		}
	}
}
