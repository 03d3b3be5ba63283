package gpu

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Errors of the MIG functions; test them with errors.Is.
var (
	// ErrUnknownModel: the model is not in the table.
	ErrUnknownModel = errors.New("unknown GPU model")
	// ErrNotMIGCapable: the model cannot be partitioned.
	ErrNotMIGCapable = errors.New("GPU model does not support MIG")
	// ErrUnknownProfile: the model has no such mig-parted profile.
	ErrUnknownProfile = errors.New("unknown MIG profile")
	// ErrUnknownStrategy: the strategy is neither single nor mixed.
	ErrUnknownStrategy = errors.New("unknown MIG strategy")
	// ErrMixedProfile: the single strategy cannot advertise several device sizes.
	ErrMixedProfile = errors.New("MIG profile mixes device sizes, which the single strategy cannot advertise")
)

// Profiles every MIG-capable model accepts, as mig-parted names them.
const (
	// ProfileDisabled turns MIG off: the node advertises whole GPUs.
	ProfileDisabled = "all-disabled"
	// ProfileEnabled turns MIG on without creating any device.
	ProfileEnabled = "all-enabled"
)

// Strategies of the NVIDIA device plugin for advertising MIG devices.
const (
	// StrategySingle advertises every MIG device as nvidia.com/gpu.
	StrategySingle = "single"
	// StrategyMixed advertises nvidia.com/mig-<device> per device size.
	StrategyMixed = "mixed"
)

// migProfiles maps a MIG family to its mig-parted profiles and, for each,
// the devices one GPU is split into (from mig-parted's config-default.yaml).
var migProfiles = map[string]map[string]map[string]int{
	"40gb": {
		"all-1g.5gb":    {"1g.5gb": 7},
		"all-1g.5gb.me": {"1g.5gb+me": 1},
		"all-1g.10gb":   {"1g.10gb": 4},
		"all-2g.10gb":   {"2g.10gb": 3},
		"all-3g.20gb":   {"3g.20gb": 2},
		"all-4g.20gb":   {"4g.20gb": 1},
		"all-7g.40gb":   {"7g.40gb": 1},
		"all-balanced":  {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
	},
	"80gb": {
		"all-1g.10gb":    {"1g.10gb": 7},
		"all-1g.10gb.me": {"1g.10gb+me": 1},
		"all-1g.20gb":    {"1g.20gb": 4},
		"all-2g.20gb":    {"2g.20gb": 3},
		"all-3g.40gb":    {"3g.40gb": 2},
		"all-4g.40gb":    {"4g.40gb": 1},
		"all-7g.80gb":    {"7g.80gb": 1},
		"all-balanced":   {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
	},
	"h200": {
		"all-1g.18gb":    {"1g.18gb": 7},
		"all-1g.18gb.me": {"1g.18gb+me": 1},
		"all-1g.35gb":    {"1g.35gb": 4},
		"all-2g.35gb":    {"2g.35gb": 3},
		"all-3g.71gb":    {"3g.71gb": 2},
		"all-4g.71gb":    {"4g.71gb": 1},
		"all-7g.141gb":   {"7g.141gb": 1},
		"all-balanced":   {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
	},
}

// MIGDevices returns the MIG devices one GPU of the model is split into
// under a mig-parted profile, keyed by device name ("1g.10gb" -> 7).
// "all-disabled" and "all-enabled" yield no devices.
func MIGDevices(model, profile string) (map[string]int, error) {
	m, ok := LookupModel(model)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, model)
	}
	if !m.MIGCapable {
		return nil, fmt.Errorf("%w: %s", ErrNotMIGCapable, model)
	}
	if profile == ProfileDisabled || profile == ProfileEnabled {
		return map[string]int{}, nil
	}
	devs, ok := migProfiles[m.migFamily][profile]
	if !ok {
		return nil, fmt.Errorf("%w: %q for %s (known: %s)", ErrUnknownProfile, profile, model, strings.Join(MIGProfiles(model), ", "))
	}
	out := make(map[string]int, len(devs))
	for d, n := range devs {
		out[d] = n
	}
	return out, nil
}

// MIGProfiles lists the profile names a model accepts, sorted.
func MIGProfiles(model string) []string {
	m, ok := LookupModel(model)
	if !ok || !m.MIGCapable {
		return nil
	}
	out := []string{ProfileDisabled, ProfileEnabled}
	for p := range migProfiles[m.migFamily] {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// MIGResources returns the extended resources a node with gpus GPUs of the
// model advertises once partitioned with profile, under the device plugin's
// strategy: "single" advertises every MIG device as nvidia.com/gpu (and
// needs one device size); "mixed" advertises nvidia.com/mig-<device> per
// size. With MIG disabled the node advertises whole GPUs.
func MIGResources(model, profile, strategy string, gpus int) (corev1.ResourceList, error) {
	if strategy != StrategySingle && strategy != StrategyMixed {
		return nil, fmt.Errorf("%w: %q (want single or mixed)", ErrUnknownStrategy, strategy)
	}
	devs, err := MIGDevices(model, profile)
	if err != nil {
		return nil, err
	}
	out := corev1.ResourceList{}
	if profile == ProfileDisabled {
		out[ResourceGPU] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		return out, nil
	}
	if strategy == StrategySingle {
		if len(devs) > 1 {
			return nil, fmt.Errorf("%w: %q", ErrMixedProfile, profile)
		}
		total := 0
		for _, n := range devs {
			total += n * gpus
		}
		out[ResourceGPU] = *resource.NewQuantity(int64(total), resource.DecimalSI)
		return out, nil
	}
	for d, n := range devs {
		out[MIGResourceName(d)] = *resource.NewQuantity(int64(n*gpus), resource.DecimalSI)
	}
	return out, nil
}
