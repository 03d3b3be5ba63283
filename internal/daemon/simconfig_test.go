package daemon

import (
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud/catalogs"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// The simulated cloud playing GCP's catalog refuses standby starts as
// GCP does: its MIGs go on trying a refused start, so the core deletes
// the instance (RefusedStaysStopped false); on every other catalog a
// refused instance stays stopped.
func TestSimConfigPlaysGCPsRefusedStarts(t *testing.T) {
	for _, name := range catalogs.Names() {
		engine, err := sim.NewEngine(SimConfig(config.SimConfig{Catalog: name}), sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := engine.RefusedStaysStopped(), name != catalogs.GCP; got != want {
			t.Errorf("catalog %s: RefusedStaysStopped %v, want %v", name, got, want)
		}
	}
}
