package gpu

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestMIGResources(t *testing.T) {
	tests := []struct {
		model, profile, strategy string
		gpus                     int
		want                     map[corev1.ResourceName]int64
		err                      error
	}{
		{"H100-80GB", "all-1g.10gb", "mixed", 8, map[corev1.ResourceName]int64{"nvidia.com/mig-1g.10gb": 56}, nil},
		{"H100-80GB", "all-1g.10gb", "single", 8, map[corev1.ResourceName]int64{ResourceGPU: 56}, nil},
		{"A100-80GB", "all-1g.10gb", "mixed", 1, map[corev1.ResourceName]int64{"nvidia.com/mig-1g.10gb": 7}, nil},
		{"A100-40GB", "all-1g.5gb", "single", 8, map[corev1.ResourceName]int64{ResourceGPU: 56}, nil},
		{"A100-40GB", "all-1g.10gb", "mixed", 2, map[corev1.ResourceName]int64{"nvidia.com/mig-1g.10gb": 8}, nil},
		{"A100-40GB", "all-2g.10gb", "mixed", 1, map[corev1.ResourceName]int64{"nvidia.com/mig-2g.10gb": 3}, nil},
		{"A100-40GB", "all-3g.20gb", "mixed", 1, map[corev1.ResourceName]int64{"nvidia.com/mig-3g.20gb": 2}, nil},
		{"A100-40GB", "all-7g.40gb", "single", 4, map[corev1.ResourceName]int64{ResourceGPU: 4}, nil},
		{"A100-40GB", "all-balanced", "mixed", 1, map[corev1.ResourceName]int64{"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-2g.10gb": 1, "nvidia.com/mig-3g.20gb": 1}, nil},
		{"H100-80GB", "all-balanced", "mixed", 8, map[corev1.ResourceName]int64{"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}, nil},
		{"H100-80GB", "all-3g.40gb", "mixed", 2, map[corev1.ResourceName]int64{"nvidia.com/mig-3g.40gb": 4}, nil},
		{"H100-80GB", "all-4g.40gb", "single", 2, map[corev1.ResourceName]int64{ResourceGPU: 2}, nil},
		{"H100-80GB", "all-1g.20gb", "mixed", 1, map[corev1.ResourceName]int64{"nvidia.com/mig-1g.20gb": 4}, nil},
		{"H200-141GB", "all-1g.18gb", "mixed", 8, map[corev1.ResourceName]int64{"nvidia.com/mig-1g.18gb": 56}, nil},
		{"H200-141GB", "all-2g.35gb", "single", 1, map[corev1.ResourceName]int64{ResourceGPU: 3}, nil},
		{"H200-141GB", "all-7g.141gb", "mixed", 1, map[corev1.ResourceName]int64{"nvidia.com/mig-7g.141gb": 1}, nil},
		{"H100-80GB", "all-disabled", "mixed", 8, map[corev1.ResourceName]int64{ResourceGPU: 8}, nil},
		{"H100-80GB", "all-enabled", "mixed", 8, map[corev1.ResourceName]int64{}, nil},
		{"H100-80GB", "all-balanced", "single", 8, nil, ErrMixedProfile},
		{"H100-80GB", "all-1g.5gb", "mixed", 8, nil, ErrUnknownProfile},
		{"L40S", "all-1g.10gb", "mixed", 1, nil, ErrNotMIGCapable},
		{"X999", "all-1g.10gb", "mixed", 1, nil, ErrUnknownModel},
		{"H100-80GB", "all-1g.10gb", "none", 1, nil, ErrUnknownStrategy},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.profile+"/"+tt.strategy, func(t *testing.T) {
			got, err := MIGResources(tt.model, tt.profile, tt.strategy, tt.gpus)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error = %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for name, n := range tt.want {
				q, ok := got[name]
				if !ok || q.Value() != n {
					t.Errorf("%s = %v, want %d", name, got[name], n)
				}
			}
		})
	}
}

func TestEveryProfileFitsAGPU(t *testing.T) {
	// A GPU has 7 compute slices; no profile may hand out more.
	for _, m := range Models() {
		for _, p := range MIGProfiles(m.Name) {
			devs, err := MIGDevices(m.Name, p)
			if err != nil {
				t.Fatalf("%s %s: %v", m.Name, p, err)
			}
			slices := 0.0
			for d, n := range devs {
				f, ok := GPUFraction(MIGResourceName(d))
				if !ok {
					t.Fatalf("%s %s: device %q has no fraction", m.Name, p, d)
				}
				slices += f * 7 * float64(n)
			}
			if slices > 7.0001 {
				t.Errorf("%s %s uses %.1f compute slices", m.Name, p, slices)
			}
		}
	}
}

func TestGPUFraction(t *testing.T) {
	tests := []struct {
		name corev1.ResourceName
		want float64
		ok   bool
	}{
		{ResourceGPU, 1, true},
		{"nvidia.com/mig-1g.10gb", 1.0 / 7, true},
		{"nvidia.com/mig-3g.40gb", 3.0 / 7, true},
		{"nvidia.com/mig-7g.80gb", 1, true},
		{"nvidia.com/mig-1g.10gb+me", 1.0 / 7, true},
		{"cpu", 0, false},
		{"nvidia.com/mig-xg.10gb", 0, false},
	}
	for _, tt := range tests {
		got, ok := GPUFraction(tt.name)
		if ok != tt.ok || got != tt.want {
			t.Errorf("GPUFraction(%s) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestLookupModel(t *testing.T) {
	for _, m := range Models() {
		got, ok := LookupModel(m.Name)
		if !ok || got.Product == "" || got.Accelerator == "" || got.MemoryMiB == 0 {
			t.Errorf("model %s incomplete: %+v", m.Name, got)
		}
	}
	if _, ok := LookupModel("nope"); ok {
		t.Error("unknown model found")
	}
}
