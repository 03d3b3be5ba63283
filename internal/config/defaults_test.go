package config

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// minimalDoc sets only what has no default.
const minimalDoc = `
clusterName: test
clouds: {sim: {}}
nodeGroups:
  - name: a
    cloud: sim
    instanceType: 1A100.22V
    locations: [FIN-01]
    maxSize: 1
    mig: {profile: all-1g.10gb}
    bootstrap: {method: custom, templateFile: join.tmpl}
`

func TestSetDefaultsFillsEveryDefault(t *testing.T) {
	cfg, err := Parse([]byte(minimalDoc))
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.NodeGroups[0]
	s := cfg.Clouds.Sim
	tests := []struct {
		field     string
		got, want any
	}{
		{"provider.listenAddress", cfg.Provider.ListenAddress, "127.0.0.1:8086"},
		{"provider.gpuLabel", cfg.Provider.GPULabel, "gpuscaler.dev/accelerator"},
		{"metrics.address", cfg.Metrics.Address, "127.0.0.1:9090"},
		{"sync.period", cfg.Sync.Period.Duration, 30 * time.Second},
		{"sync.maxConcurrentCreates", cfg.Sync.MaxConcurrentCreates, 10},
		{"sync.requestsPerSecond", cfg.Sync.RequestsPerSecond, 25.0},
		{"sync.offeringBackoff", cfg.Sync.OfferingBackoff.Duration, 5 * time.Minute},
		{"sync.listLag", cfg.Sync.ListLag.Duration, time.Minute},
		{"sync.createRetries", *cfg.Sync.CreateRetries, 5},
		{"leakedInstances.gracePeriod", cfg.LeakedInstances.GracePeriod.Duration, 30 * time.Minute},
		{"leakedInstances.action", cfg.LeakedInstances.Action, "delete"},
		{"nodeGroups[0].capacityPolicy", g.CapacityPolicy, "on-demand-only"},
		{"nodeGroups[0].managedBy", g.ManagedBy, "cluster-autoscaler"},
		{"nodeGroups[0].mig.strategy", g.MIG.Strategy, "mixed"},
		{"nodeGroups[0].bootstrap.delivery", g.Bootstrap.Delivery, "inline"},
		{"nodeGroups[0].bootstrap.tokenTTL", g.Bootstrap.TokenTTL.Duration, time.Hour},
		{"clouds.sim.seed", s.Seed, int64(1)},
		{"clouds.sim.locations", s.Locations, []string{"FIN-01", "FIN-02", "FIN-03", "ICE-01"}},
		{"clouds.sim.defaultCapacity", *s.DefaultCapacity, 10},
		{"clouds.sim.bootDelay", s.BootDelay.Duration, 20 * time.Second},
		{"clouds.sim.deleteDelay", s.DeleteDelay.Duration, 5 * time.Second},
		{"clouds.sim.apiLatency", s.APILatency.Duration, time.Duration(0)},
		{"clouds.sim.kwok", *s.Kwok, true},
	}
	for _, tt := range tests {
		if !equality.Semantic.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.field, tt.got, tt.want)
		}
	}
}

func TestSetDefaultsKeepsSetValues(t *testing.T) {
	off := false
	zero := 0
	cfg := &Config{
		Provider:        ProviderConfig{ListenAddress: ":1", GPULabel: "example.com/gpu"},
		Metrics:         MetricsConfig{Address: "0"},
		Sync:            SyncConfig{Period: &metav1.Duration{Duration: time.Second}, MaxConcurrentCreates: 2, RequestsPerSecond: 0.5, CreateRetries: &zero},
		LeakedInstances: LeakedInstancesConfig{Action: LeakActionReport},
		Clouds:          Clouds{Sim: &SimConfig{Seed: 7, Locations: []string{"X"}, DefaultCapacity: &zero, Kwok: &off}},
		NodeGroups:      []NodeGroup{{CapacityPolicy: PolicySpotOnly, ManagedBy: ManagedByNodeProvisioner, MIG: &MIG{Strategy: MIGStrategySingle}}},
	}
	SetDefaults(cfg)
	s := cfg.Clouds.Sim
	g := cfg.NodeGroups[0]
	if cfg.Provider.ListenAddress != ":1" || cfg.Provider.GPULabel != "example.com/gpu" || cfg.Metrics.Address != "0" ||
		cfg.Sync.Period.Duration != time.Second || cfg.Sync.MaxConcurrentCreates != 2 || cfg.Sync.RequestsPerSecond != 0.5 ||
		*cfg.Sync.CreateRetries != 0 || cfg.LeakedInstances.Action != LeakActionReport ||
		s.Seed != 7 || !slices.Equal(s.Locations, []string{"X"}) || *s.DefaultCapacity != 0 || *s.Kwok ||
		g.CapacityPolicy != PolicySpotOnly || g.ManagedBy != ManagedByNodeProvisioner || g.MIG.Strategy != MIGStrategySingle {
		t.Fatalf("SetDefaults overwrote a set value: %+v", cfg)
	}
}

func TestSetDefaultsIsIdempotent(t *testing.T) {
	once, err := Parse([]byte(minimalDoc))
	if err != nil {
		t.Fatal(err)
	}
	twice, _ := Parse([]byte(minimalDoc))
	SetDefaults(twice)
	if !equality.Semantic.DeepEqual(once, twice) {
		t.Fatal("a second SetDefaults changed the config")
	}
}

func TestSetDefaultsSharesNoPointers(t *testing.T) {
	a, b := &Config{Clouds: Clouds{Sim: &SimConfig{}}}, &Config{Clouds: Clouds{Sim: &SimConfig{}}}
	SetDefaults(a)
	SetDefaults(b)
	*a.Sync.CreateRetries = 99
	a.Clouds.Sim.Locations[0] = "CHANGED"
	*a.Clouds.Sim.Kwok = false
	if *b.Sync.CreateRetries != DefaultCreateRetries || b.Clouds.Sim.Locations[0] != "FIN-01" || !*b.Clouds.Sim.Kwok {
		t.Fatal("two configs share a defaulted value")
	}
}
