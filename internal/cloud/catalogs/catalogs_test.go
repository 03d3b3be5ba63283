package catalogs

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Every catalog holds priced GPU types the GPU model table knows, sold in
// the locations the config defaults clouds.sim.locations to for it.
func TestEveryCatalogIsPricedAndKnown(t *testing.T) {
	if !slices.Equal(Names(), config.SimCatalogs()) {
		t.Fatalf("catalogs %v, the config accepts %v", Names(), config.SimCatalogs())
	}
	for _, name := range Names() {
		c, err := Named(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Locations, config.SimCatalogLocations(name)) {
			t.Errorf("%s: locations %v, the config's default %v", name, c.Locations, config.SimCatalogLocations(name))
		}
		gpus := 0
		for _, it := range c.Types {
			if it.GPUCount == 0 {
				continue
			}
			gpus++
			if _, ok := gpu.LookupModel(it.GPUModel); !ok {
				t.Errorf("%s: %s's GPU %q is not in the GPU model table", name, it.Name, it.GPUModel)
			}
		}
		if gpus == 0 || c.Source == "" {
			t.Errorf("%s: %d GPU types, source %q", name, gpus, c.Source)
		}
	}
	if _, err := Named("kamatera"); !errors.Is(err, ErrUnknown) {
		t.Errorf("kamatera: %v, want ErrUnknown (its catalog has no GPU types)", err)
	}
}

// The recorded catalogs carry what was recorded: Verda's H100 at its
// listed on-demand and spot prices, Scaleway's L4 at its recorded 0.75 EUR
// and no spot, GCP's A3 at its documented list price.
func TestRecordedPrices(t *testing.T) {
	for _, c := range []struct {
		catalog, typ string
		od, spot     float64
		currency     string
	}{
		{Verda, "1H100.80S.30V", 2.29, 0.8015, "USD"},
		{Scaleway, "L4-1-24G", 0.75, 0, "EUR"},
		{GCP, "a3-highgpu-8g", 88.49, 0, "USD"},
	} {
		cat, err := Named(c.catalog)
		if err != nil {
			t.Fatal(err)
		}
		it, ok := cat.Type(c.typ)
		if !ok || it.OnDemandPrice != c.od || it.SpotPrice != c.spot || it.PriceCurrency() != c.currency {
			t.Errorf("%s %s: %+v (found %v), want %v / %v %s", c.catalog, c.typ, it, ok, c.od, c.spot, c.currency)
		}
	}
}
