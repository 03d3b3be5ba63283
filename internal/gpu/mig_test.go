package gpu

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// wantProfiles is mig-parted's config-default.yaml, written out per model
// independently of the package table: profile -> devices per GPU.
var wantProfiles = func() map[string]map[string]map[string]int {
	a100x40 := map[string]map[string]int{
		"all-1g.5gb":    {"1g.5gb": 7},
		"all-1g.5gb.me": {"1g.5gb+me": 1},
		"all-1g.10gb":   {"1g.10gb": 4},
		"all-2g.10gb":   {"2g.10gb": 3},
		"all-3g.20gb":   {"3g.20gb": 2},
		"all-4g.20gb":   {"4g.20gb": 1},
		"all-7g.40gb":   {"7g.40gb": 1},
		"all-balanced":  {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
	}
	x80 := map[string]map[string]int{
		"all-1g.10gb":    {"1g.10gb": 7},
		"all-1g.10gb.me": {"1g.10gb+me": 1},
		"all-1g.20gb":    {"1g.20gb": 4},
		"all-2g.20gb":    {"2g.20gb": 3},
		"all-3g.40gb":    {"3g.40gb": 2},
		"all-4g.40gb":    {"4g.40gb": 1},
		"all-7g.80gb":    {"7g.80gb": 1},
		"all-balanced":   {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
	}
	h200 := map[string]map[string]int{
		"all-1g.18gb":    {"1g.18gb": 7},
		"all-1g.18gb.me": {"1g.18gb+me": 1},
		"all-1g.35gb":    {"1g.35gb": 4},
		"all-2g.35gb":    {"2g.35gb": 3},
		"all-3g.71gb":    {"3g.71gb": 2},
		"all-4g.71gb":    {"4g.71gb": 1},
		"all-7g.141gb":   {"7g.141gb": 1},
		"all-balanced":   {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
	}
	out := map[string]map[string]map[string]int{
		"A100-40GB": a100x40, "A100-80GB": x80, "H100-80GB": x80, "H200-141GB": h200,
	}
	for _, m := range out {
		m[ProfileDisabled] = map[string]int{}
		m[ProfileEnabled] = map[string]int{}
	}
	return out
}()

func TestMIGProfilesAreComplete(t *testing.T) {
	for _, m := range Models() {
		want := make([]string, 0, len(wantProfiles[m.Name]))
		for p := range wantProfiles[m.Name] {
			want = append(want, p)
		}
		sort.Strings(want)
		got := MIGProfiles(m.Name)
		if len(want) == 0 {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("MIGProfiles(%s) = %v, want %v", m.Name, got, want)
		}
		if m.MIGCapable != (want != nil) {
			t.Errorf("%s: MIGCapable = %v with profiles %v", m.Name, m.MIGCapable, want)
		}
	}
}

func TestMIGDevicesEveryProfile(t *testing.T) {
	for model, profiles := range wantProfiles {
		for profile, want := range profiles {
			t.Run(model+"/"+profile, func(t *testing.T) {
				got, err := MIGDevices(model, profile)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("got %v, want %v", got, want)
				}
				// The caller owns the result.
				for d := range got {
					got[d] = 99
				}
				again, _ := MIGDevices(model, profile)
				if fmt.Sprint(again) != fmt.Sprint(want) {
					t.Fatalf("mutating the result changed the table: %v", again)
				}
			})
		}
	}
}

// TestMIGResourcesEveryProfile checks both strategies for every model and
// profile on an 8-GPU node, deriving the expectation from wantProfiles.
func TestMIGResourcesEveryProfile(t *testing.T) {
	const gpus = 8
	for model, profiles := range wantProfiles {
		for profile, devs := range profiles {
			for _, strategy := range []string{StrategySingle, StrategyMixed} {
				t.Run(model+"/"+profile+"/"+strategy, func(t *testing.T) {
					want := map[corev1.ResourceName]int64{}
					var wantErr error
					switch {
					case profile == ProfileDisabled:
						want[ResourceGPU] = gpus
					case strategy == StrategyMixed:
						for d, n := range devs {
							want[MIGResourceName(d)] = int64(n * gpus)
						}
					case len(devs) > 1:
						wantErr = ErrMixedProfile
					default:
						want[ResourceGPU] = 0
						for _, n := range devs {
							want[ResourceGPU] = int64(n * gpus)
						}
					}
					got, err := MIGResources(model, profile, strategy, gpus)
					if !errors.Is(err, wantErr) {
						t.Fatalf("error = %v, want %v", err, wantErr)
					}
					if wantErr == nil {
						checkResources(t, got, want)
					}
				})
			}
		}
	}
}

func TestMIGResourcesExamples(t *testing.T) {
	type rl = map[corev1.ResourceName]int64
	tests := []struct {
		model, profile, strategy string
		gpus                     int
		want                     rl
		err                      error
	}{
		{"H100-80GB", "all-1g.10gb", StrategyMixed, 8, rl{"nvidia.com/mig-1g.10gb": 56}, nil},
		{"H100-80GB", "all-1g.10gb", StrategySingle, 8, rl{ResourceGPU: 56}, nil},
		{"A100-40GB", "all-1g.10gb", StrategyMixed, 2, rl{"nvidia.com/mig-1g.10gb": 8}, nil},
		{"H200-141GB", "all-2g.35gb", StrategySingle, 1, rl{ResourceGPU: 3}, nil},
		{"H100-80GB", "all-balanced", StrategyMixed, 1, rl{"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1}, nil},
		{"A100-80GB", "all-disabled", StrategySingle, 4, rl{ResourceGPU: 4}, nil},
		{"H100-80GB", "all-enabled", StrategyMixed, 8, rl{}, nil},
		{"H100-80GB", "all-balanced", StrategySingle, 8, nil, ErrMixedProfile},
		{"H100-80GB", "all-1g.5gb", StrategyMixed, 8, nil, ErrUnknownProfile},
		{"H200-141GB", "all-1g.10gb", StrategyMixed, 8, nil, ErrUnknownProfile},
		{"L40S", "all-1g.10gb", StrategyMixed, 1, nil, ErrNotMIGCapable},
		{"B200", "all-disabled", StrategyMixed, 1, nil, ErrNotMIGCapable},
		{"X999", "all-1g.10gb", StrategyMixed, 1, nil, ErrUnknownModel},
		{"H100-80GB", "all-1g.10gb", "none", 1, nil, ErrUnknownStrategy},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.profile+"/"+tt.strategy, func(t *testing.T) {
			got, err := MIGResources(tt.model, tt.profile, tt.strategy, tt.gpus)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error = %v, want %v", err, tt.err)
			}
			if tt.err == nil {
				checkResources(t, got, tt.want)
			}
		})
	}
}

func checkResources(t *testing.T, got corev1.ResourceList, want map[corev1.ResourceName]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for name, n := range want {
		q, ok := got[name]
		if !ok || q.Value() != n {
			t.Errorf("%s = %v, want %d", name, got[name], n)
		}
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
