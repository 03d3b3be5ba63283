package nodegroup

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// euroCatalog is the simulated catalog with 1V100.6V priced in euros, as
// a Scaleway type is, beside the others in dollars.
func euroCatalog() []cloud.InstanceType {
	cat := sim.DefaultCatalog()
	for i := range cat {
		if cat[i].Name == "1V100.6V" {
			cat[i].Currency = "EUR"
		}
	}
	return cat
}

// Spend and caps say the currency of the prices they add up.
func TestSpendSaysItsCurrency(t *testing.T) {
	doc := baseConfig + `
nodeGroups:
  - {name: eu, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5, maxHourlyCost: 3}
  - {name: us, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 5}
`
	h := newHarness(t, doc, sim.Options{Catalog: euroCatalog()}, Options{})
	if err := h.mgr.IncreaseSize(context.Background(), "eu", 1); err != nil {
		t.Fatal(err)
	}
	h.eventually("the euro group's spend published", func() bool {
		return h.metric("gpuscaler_hourly_spend", map[string]string{"group": "eu", "currency": "EUR"}) > 0
	})
	if len(h.series("gpuscaler_hourly_spend", map[string]string{"group": "us", "currency": "USD"})) != 1 {
		t.Error("no gpuscaler_hourly_spend{group=us,currency=USD}")
	}
	if v := h.metric("gpuscaler_hourly_cost_limit", map[string]string{"group": "eu", "currency": "EUR"}); v != 3 {
		t.Errorf("gpuscaler_hourly_cost_limit{group=eu,currency=EUR} = %v, want 3", v)
	}
}

// A cluster-wide cap over groups priced in euros and in dollars is
// refused at start: it would add one to the other.
func TestClusterCapOverTwoCurrenciesIsRefused(t *testing.T) {
	cfg, err := config.Parse([]byte(baseConfig + `
maxHourlyCost: 10
nodeGroups:
  - {name: eu, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5}
  - {name: us, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sim.NewEngine(simConfig(*cfg.Clouds.Sim), sim.Options{Catalog: euroCatalog()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, map[string]cloud.Provider{"sim": engine.Account(cfg.ClusterName)}, Options{Logger: testLogger(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); m.Wait() }()
	err = m.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "EUR (eu) and USD (us)") {
		t.Fatalf("start with one cap over euros and dollars: %v", err)
	}
}
