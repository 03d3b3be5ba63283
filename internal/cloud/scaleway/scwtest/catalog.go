package scwtest

import (
	"slices"
	"strings"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/catalogs"
)

const gib = 1 << 30

// serverTypes are the fake's commercial types: Scaleway's catalog as the
// catalogs package keeps it (shared/reference/cloud-apis.md §3; the one
// recorded real entry is L4-1-24G's).
var serverTypes = catalogs.ScalewayTypes()

// Zones are the fake's zones (the engine's locations).
var Zones = []string{"fr-par-1", "fr-par-2", "nl-ams-1", "pl-waw-2"}

// Catalog returns the commercial types as an engine catalog (the engine
// only counts capacity; the API serves the shapes of serverTypes).
func Catalog() []cloud.InstanceType { return catalogs.ScalewayInstanceTypes() }

func typeNamed(name string) (catalogs.ScalewayType, bool) {
	i := slices.IndexFunc(serverTypes, func(t catalogs.ScalewayType) bool { return t.Name == name })
	if i < 0 {
		return catalogs.ScalewayType{}, false
	}
	return serverTypes[i], true
}

// typeJSON renders a type as the API does.
func typeJSON(t catalogs.ScalewayType) map[string]any {
	m := map[string]any{
		"ncpus": t.NCPUs, "ram": int64(t.RAMGiB) * gib, "hourly_price": t.Hourly, "monthly_price": t.Hourly * 730,
		"arch": "x86_64", "alt_names": []string{}, "end_of_service": false,
		"volumes_constraint":    map[string]any{"min_size": 0, "max_size": 0},
		"per_volume_constraint": map[string]any{"l_ssd": map[string]any{"min_size": 0, "max_size": 0}},
		"network":               map[string]any{"sum_internal_bandwidth": 10000000000},
		"capabilities":          map[string]any{"boot_types": []string{"local"}, "block_storage": true},
	}
	if t.GPUs > 0 {
		m["gpu"] = t.GPUs
		m["gpu_info"] = map[string]any{"gpu_manufacturer": "NVIDIA", "gpu_name": t.GPUName, "gpu_memory": int64(t.GPUMemGiB) * gib}
	} else {
		m["gpu"] = 0
	}
	return m
}

// isGPU reports whether a type boots only from block storage (sbs_volume),
// as GPU types do.
func isGPU(name string) bool {
	t, ok := typeNamed(name)
	return ok && (t.GPUs > 0 || strings.HasPrefix(name, "H100"))
}
