package simulate

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// BenchmarkDiurnalDay plays a day of the diurnal inference trace at five
// times its rate (about 500 nodes at the afternoon peak) through the
// NodeProvisioner policy, with the collector set as the simulate command
// sets it, and reports simulated hours per wall-clock second and the most
// GPUs the pool held.
func BenchmarkDiurnalDay(b *testing.B) {
	cfg, err := configFor(`clusterName: bench
clouds:
  sim: {bootDelay: 90s, defaultCapacity: 2000, locations: [FIN-01]}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 1000}
  - {name: a100-mig, cloud: sim, instanceType: 1A100.22V, locations: [FIN-01], maxSize: 200, mig: {profile: all-1g.10gb, strategy: mixed}}
`)
	if err != nil {
		b.Fatal(err)
	}
	trace, err := Builtin("diurnal-inference", 5, 1)
	if err != nil {
		b.Fatal(err)
	}
	// As `gpuscaler simulate` runs it (cmd/gpuscaler: simulateGCPercent).
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	var simulated time.Duration
	peak := 0.0
	b.ResetTimer()
	for range b.N {
		res, err := Run(context.Background(), trace, Options{Config: cfg, Policy: NodeProvisioner})
		if err != nil {
			b.Fatal(err)
		}
		simulated += res.Simulated
		for _, s := range res.Timeline {
			total := 0.0
			for _, c := range s.Capacity {
				total += c
			}
			peak = max(peak, total)
		}
	}
	b.ReportMetric(simulated.Hours()/b.Elapsed().Seconds(), "sim-hours/s")
	b.ReportMetric(peak, "peak-GPUs")
	b.ReportMetric(float64(len(trace.Pods)), "pods")
}

func configFor(doc string) (*config.Config, error) { return config.Parse([]byte(doc)) }
