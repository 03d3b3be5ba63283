package gpu

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestGPUFraction(t *testing.T) {
	tests := []struct {
		name corev1.ResourceName
		want float64
		ok   bool
	}{
		{ResourceGPU, 1, true},
		{"nvidia.com/mig-1g.10gb", 1.0 / 7, true},
		{"nvidia.com/mig-2g.35gb", 2.0 / 7, true},
		{"nvidia.com/mig-3g.40gb", 3.0 / 7, true},
		{"nvidia.com/mig-4g.20gb", 4.0 / 7, true},
		{"nvidia.com/mig-7g.80gb", 1, true},
		{"nvidia.com/mig-1g.10gb+me", 1.0 / 7, true},
		{"cpu", 0, false},
		{"amd.com/gpu", 0, false},
		{"nvidia.com/mig-xg.10gb", 0, false},
		{"nvidia.com/mig-8g.90gb", 0, false},
		{"nvidia.com/mig-0g.5gb", 0, false},
		{"nvidia.com/mig-", 0, false},
	}
	for _, tt := range tests {
		got, ok := GPUFraction(tt.name)
		if ok != tt.ok || got != tt.want {
			t.Errorf("GPUFraction(%s) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestMIGResourceName(t *testing.T) {
	for dev, want := range map[string]corev1.ResourceName{
		"1g.10gb":    "nvidia.com/mig-1g.10gb",
		"1g.18gb+me": "nvidia.com/mig-1g.18gb+me",
		"7g.141gb":   "nvidia.com/mig-7g.141gb",
	} {
		if got := MIGResourceName(dev); got != want {
			t.Errorf("MIGResourceName(%q) = %q, want %q", dev, got, want)
		}
	}
}

func TestHasGPUs(t *testing.T) {
	q := resource.MustParse
	for _, tt := range []struct {
		list corev1.ResourceList
		want bool
	}{
		{nil, false},
		{corev1.ResourceList{"cpu": q("8"), "memory": q("32Gi")}, false},
		{corev1.ResourceList{ResourceGPU: q("0")}, false},
		{corev1.ResourceList{ResourceGPU: q("1")}, true},
		{corev1.ResourceList{"nvidia.com/mig-1g.10gb": q("7")}, true},
		{corev1.ResourceList{"nvidia.com/mig-1g.10gb": q("0"), "amd.com/gpu": q("1")}, false},
	} {
		if got := HasGPUs(tt.list); got != tt.want {
			t.Errorf("HasGPUs(%v) = %v, want %v", tt.list, got, tt.want)
		}
	}
}
