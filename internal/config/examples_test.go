package config_test

import (
	"path/filepath"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/config/seedconfig"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
)

// examples are the ready-to-run configs operators start from.
func examples(t testing.TB) []string {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	return files
}

// TestExamplesLoad loads every example and, for those on the simulated
// cloud, builds the simulated cloud from it and checks that every group
// names an instance type of its catalog.
func TestExamplesLoad(t *testing.T) {
	for _, f := range examples(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := config.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if seedconfig.IsNodeProvisionerManifest(data) {
				// A Baseten manifest, there to be converted.
				if _, _, err := seedconfig.ConvertNodeProvisioners(data); err != nil {
					t.Fatal(err)
				}
				return
			}
			cfg, err := config.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Clouds.Sim == nil {
				return
			}
			catalog, err := daemon.SimCatalog(*cfg.Clouds.Sim)
			if err != nil {
				t.Fatal(err)
			}
			engine, err := sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{Catalog: catalog})
			if err != nil {
				t.Fatalf("the simulated cloud refuses clouds.sim: %v", err)
			}
			types := map[string]bool{}
			for _, it := range engine.Catalog() {
				types[it.Name] = true
			}
			for i, g := range cfg.NodeGroups {
				if g.Cloud == config.CloudSim && !types[g.InstanceType] {
					t.Errorf("nodeGroups[%d].instanceType %q is not in the simulated catalog", i, g.InstanceType)
				}
			}
		})
	}
}
