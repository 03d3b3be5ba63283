package verdatest

import (
	"encoding/json"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/catalogs"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// instanceTypesJSON is a real GET /v1/instance-types answer (55 types,
// recorded 2026-02; see shared/reference/verda), kept in the catalogs
// package. The fake serves it as it is, and its engine's catalog is read
// from it.
var instanceTypesJSON = catalogs.VerdaJSON()

// InstanceTypesJSON returns the recorded listing the fake serves.
func InstanceTypesJSON() []byte { return append([]byte(nil), instanceTypesJSON...) }

// supportedOS returns the images the recorded listing says a type
// accepts; empty for types whose listing says nothing.
func supportedOS(instanceType string) []string {
	var recs []struct {
		InstanceType string   `json:"instance_type"`
		SupportedOS  []string `json:"supported_os"`
	}
	_ = json.Unmarshal(instanceTypesJSON, &recs)
	for _, r := range recs {
		if r.InstanceType == instanceType {
			return r.SupportedOS
		}
	}
	return nil
}

// Catalog returns the recorded listing as a simulated engine's catalog,
// so that what the fake serves and what its engine can create agree.
func Catalog() []cloud.InstanceType { return catalogs.VerdaTypes() }

// NewEngine returns a simulated engine whose catalog is the recorded
// listing: the engine a Server needs.
func NewEngine(cfg sim.Config, opts sim.Options) (*sim.Engine, error) {
	opts.Catalog = Catalog()
	return sim.NewEngine(cfg, opts)
}
