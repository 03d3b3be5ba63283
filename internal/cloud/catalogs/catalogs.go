// Package catalogs holds the clouds' catalogs as the simulated cloud plays
// them: the instance types each cloud sells, with their hourly prices, and
// the locations that sell its GPUs. A simulation on one of them runs on
// that cloud's shapes and prices (clouds.sim.catalog, simulate --pool).
package catalogs

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// The catalogs by name: each is its cloud's name, but Sim, the simulated
// cloud's own.
const (
	Sim      = "sim"
	Verda    = "verda"
	GCP      = "gcp"
	Scaleway = "scaleway"
)

// ErrUnknown is the error of a name no catalog has.
var ErrUnknown = errors.New("no such catalog")

// Catalog is one cloud's instance types and locations.
type Catalog struct {
	// Name is the catalog's name (Names).
	Name string
	// Types are the instance types with their prices; a zero spot price
	// is a type not sold as spot, or whose spot price is not recorded.
	Types []cloud.InstanceType
	// Locations are where the catalog's GPU types are sold.
	Locations []string
	// Source says where the types and prices come from.
	Source string
}

// Names returns the catalogs' names.
func Names() []string { return []string{Sim, Verda, GCP, Scaleway} }

// Named returns a catalog by its name; empty is Sim.
func Named(name string) (Catalog, error) {
	switch name {
	case "", Sim:
		return Catalog{Name: Sim, Types: sim.DefaultCatalog(), Locations: sim.DefaultLocations(),
			Source: "the simulated cloud's own, modelled on Verda's catalog"}, nil
	case Verda:
		return verda(), nil
	case GCP:
		return Catalog{Name: GCP, Types: gcp.MachineTypes(), Locations: gcpZones(),
			Source: "gpuscaler's GCP machine-type table: us-central1 on-demand list prices (docs/clouds/gcp.md); no spot prices"}, nil
	case Scaleway:
		return scaleway(), nil
	}
	return Catalog{}, fmt.Errorf("%w %q: want one of %v", ErrUnknown, name, Names())
}

// Type returns the catalog's instance type of that name.
func (c Catalog) Type(name string) (cloud.InstanceType, bool) {
	i := slices.IndexFunc(c.Types, func(t cloud.InstanceType) bool { return t.Name == name })
	if i < 0 {
		return cloud.InstanceType{}, false
	}
	return c.Types[i], true
}

// gcpZones are us-central1's zones, where GCP sells the A2, A3 and G2
// families (cloud.google.com/compute/docs/gpus/gpu-regions-zones), and one
// of europe-west4's.
func gcpZones() []string {
	return []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-a"}
}
