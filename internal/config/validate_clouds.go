package config

import (
	"slices"

	"github.com/gpuscaler/gpuscaler/internal/cloud"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Cloud names, as node groups' cloud field takes them.
const (
	CloudSim   = "sim"
	CloudVerda = "verda"
)

// simCapacityTypes are the values clouds.sim.capacity[*].capacityType takes.
func simCapacityTypes() []string { return []string{"spot", "on-demand"} }

// configuredClouds lists the clouds with a section in the file.
func configuredClouds(c Clouds) []string {
	var names []string
	if c.Sim != nil {
		names = append(names, CloudSim)
	}
	if c.Verda != nil {
		names = append(names, CloudVerda)
	}
	return names
}

func validateClouds(p *field.Path, c Clouds) field.ErrorList {
	if len(configuredClouds(c)) == 0 {
		return field.ErrorList{field.Required(p, "configure at least one cloud (sim, verda)")}
	}
	var errs field.ErrorList
	if c.Sim != nil {
		errs = append(errs, validateSim(p.Child(CloudSim), c.Sim)...)
	}
	if c.Verda != nil {
		errs = append(errs, validateVerda(p.Child(CloudVerda), c.Verda)...)
	}
	return errs
}

func validateVerda(p *field.Path, v *VerdaConfig) field.ErrorList {
	var errs field.ErrorList
	if v.BaseURL != "" {
		if err := cloud.CheckEndpoint(v.BaseURL); err != nil {
			errs = append(errs, field.Invalid(p.Child("baseURL"), v.BaseURL, err.Error()))
		}
	}
	if v.StartupScriptFetchURL != "" && !isHTTPURL(v.StartupScriptFetchURL) {
		errs = append(errs, field.Invalid(p.Child("startupScriptFetchURL"), v.StartupScriptFetchURL, "must be an http(s) URL"))
	}
	return errs
}

func validateSim(p *field.Path, s *SimConfig) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, uniqueStrings(p.Child("locations"), s.Locations)...)
	if s.DefaultCapacity != nil && *s.DefaultCapacity < 0 {
		errs = append(errs, field.Invalid(p.Child("defaultCapacity"), *s.DefaultCapacity, "must be >= 0"))
	}
	for i, c := range s.Capacity {
		cp := p.Child("capacity").Index(i)
		if c.Location != "" && !slices.Contains(s.Locations, c.Location) {
			errs = append(errs, field.NotSupported(cp.Child("location"), c.Location, s.Locations))
		}
		if c.CapacityType != "" && !slices.Contains(simCapacityTypes(), c.CapacityType) {
			errs = append(errs, field.NotSupported(cp.Child("capacityType"), c.CapacityType, simCapacityTypes()))
		}
		if c.Count < 0 {
			errs = append(errs, field.Invalid(cp.Child("count"), c.Count, "must be >= 0"))
		}
	}
	errs = append(errs, nonNegative(p.Child("bootDelay"), s.BootDelay)...)
	errs = append(errs, nonNegative(p.Child("deleteDelay"), s.DeleteDelay)...)
	errs = append(errs, nonNegative(p.Child("apiLatency"), s.APILatency)...)
	errs = append(errs, fraction(p.Child("faultRate"), s.FaultRate, true)...)
	errs = append(errs, fraction(p.Child("spotReclaimRate"), s.SpotReclaimRate, true)...)
	return errs
}
