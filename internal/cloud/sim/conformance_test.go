package sim_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/conformance"
)

// TestConformance runs the backends' conformance suite on the simulated
// cloud, which is its own API (the one simulate, the quick start and the
// chaos campaigns use).
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) *conformance.Backend {
		capacity := 4
		engine, err := sim.NewEngine(sim.Config{BootDelay: sim.Duration(20 * time.Millisecond), DeleteDelay: sim.Duration(20 * time.Millisecond),
			DefaultCapacity: &capacity}, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return &conformance.Backend{
			Cloud: sim.Name, Clouds: "sim: {}",
			Group:    `{name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01, FIN-02], maxSize: 8}`,
			Fake:     simFake{engine},
			Launches: true,
			Provider: func(*slog.Logger) cloud.Provider { return engine.Account("prod") },
		}
	})
}

// simFake drives the simulated cloud for the conformance suite.
type simFake struct{ e *sim.Engine }

var ops = map[conformance.Op]string{conformance.Create: "create", conformance.Delete: "delete", conformance.List: "list"}

func (f simFake) Fail(op conformance.Op) { f.e.FailNext(ops[op]) }
func (f simFake) Lose(op conformance.Op) { f.e.LoseNext(ops[op]) }
func (f simFake) Creates() int           { return f.e.Calls()["create"] }

// StockOut empties the group's offerings in location.
func (f simFake) StockOut(location string) {
	for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
		f.e.SetCapacity(cloud.OfferingKey{InstanceType: "1V100.6V", Location: location, CapacityType: ct}, 0)
	}
}
func (f simFake) Instances() []cloud.Instance { return f.e.Instances("prod") }
func (f simFake) Left() string {
	if n := len(f.e.Instances("prod")); n > 0 {
		return fmt.Sprintf("%d instances", n)
	}
	return ""
}
