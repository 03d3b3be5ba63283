package simulate

import (
	"bytes"
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
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

// BenchmarkMonthOfCSV plays a user's trace file of 30 days, the diurnal
// trace's 57,000-odd pods written out as CSV and read back as
// `simulate --trace` reads one, through the NodeProvisioner on the built-in
// pool: a file has no --days bound, and this is what a month costs. It
// reports simulated hours per wall-clock second and the pods played.
func BenchmarkMonthOfCSV(b *testing.B) {
	month, err := BuiltinDays("diurnal-inference", 1, 1, 30)
	if err != nil {
		b.Fatal(err)
	}
	var file bytes.Buffer
	fmt.Fprintln(&file, strings.Join(csvColumns, ","))
	for _, p := range month.Pods {
		gpus := strconv.Itoa(p.GPUs)
		if p.MIG != "" {
			gpus = "" // a slice, not whole GPUs
		}
		fmt.Fprintf(&file, "%d,%d,%s,%s,%d,%s,%s,%g\n", int(p.At.Seconds()), int(p.Duration.Seconds()), gpus, p.MIG, p.Priority, p.Name, p.Image, p.ImageGB)
	}
	trace, err := Read(&file, "month.csv", "csv")
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := configFor(BuiltinPool)
	if err != nil {
		b.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	b.ReportAllocs()
	var simulated time.Duration
	b.ResetTimer()
	for range b.N {
		res, err := Run(context.Background(), trace, Options{Config: cfg, Policy: NodeProvisioner, Standby: 2})
		if err != nil {
			b.Fatal(err)
		}
		simulated += res.Simulated
	}
	b.ReportMetric(simulated.Hours()/b.Elapsed().Seconds(), "sim-hours/s")
	b.ReportMetric(float64(len(trace.Pods)), "pods")
}

func configFor(doc string) (*config.Config, error) { return config.Parse([]byte(doc)) }
