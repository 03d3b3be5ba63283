// Package perf holds the benchmarks of gpuscaler at fleet scale: the core
// filling groups on the simulated cloud, and what each instance costs in
// memory (docs/benchmarks.md).
package perf

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

// groups is how many node groups a fleet is spread over.
const groups = 100

// BenchmarkFill fills 100 groups to 1,000, 10,000 and 100,000 instances
// through the core's IncreaseSize, as cluster-autoscaler's scale-ups do,
// on the simulated cloud (no boot delay, 200 concurrent creates), until
// the core has recorded every instance the cloud made. It reports the
// time per instance (ns/instance: constant when bookkeeping is O(1) per
// create) and the heap the core and the simulated cloud hold per instance
// once filled (heap-B/instance, after a GC, over the empty core's).
func BenchmarkFill(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			var perInstance, heap float64
			for range b.N {
				d, h := fill(b, n)
				perInstance += float64(d.Nanoseconds()) / float64(n)
				heap += float64(h) / float64(n)
			}
			b.ReportMetric(perInstance/float64(b.N), "ns/instance")
			b.ReportMetric(heap/float64(b.N), "heap-B/instance")
		})
	}
}

// fleet is a started, empty core over 100 groups on the simulated cloud,
// each group allowed n/100 instances.
type fleet struct {
	mgr    *nodegroup.Manager
	engine *sim.Engine
	cfg    *config.Config
	ctx    context.Context
	// stop stops the core; it runs at the latest when the benchmark ends.
	stop func()
}

// newFleet starts a fleet; it stops when the benchmark ends.
func newFleet(b *testing.B, n int) *fleet {
	b.Helper()
	var doc strings.Builder
	fmt.Fprintf(&doc, "clusterName: perf\nsync: {period: 1h, requestsPerSecond: 1000000, maxConcurrentCreates: 200}\n")
	fmt.Fprintf(&doc, "clouds:\n  sim: {bootDelay: 0s, defaultCapacity: 1000000}\nnodeGroups:\n")
	for i := range groups {
		fmt.Fprintf(&doc, "  - {name: g%03d, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: %d}\n", i, n/groups)
	}
	cfg, err := config.Parse([]byte(doc.String()))
	if err != nil {
		b.Fatal(err)
	}
	engine, err := sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	mgr, stopCore := coretest.Start(b, cfg, sim.Name, engine.Account("perf"), nodegroup.Options{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	stop := sync.OnceFunc(func() { cancel(); stopCore() })
	b.Cleanup(stop)
	return &fleet{mgr: mgr, engine: engine, cfg: cfg, ctx: ctx, stop: stop}
}

// grow asks every group for n/100 instances and waits until the cloud
// holds n.
func (f *fleet) grow(b *testing.B, n int) {
	b.Helper()
	for i := range groups {
		if err := f.mgr.IncreaseSize(f.ctx, fmt.Sprintf("g%03d", i), n/groups); err != nil {
			b.Fatal(err)
		}
	}
	waitCreated(b, f.engine, n)
}

// fill builds an empty core, fills it to n instances and returns how long
// that took and how much the heap grew.
func fill(b *testing.B, n int) (time.Duration, uint64) {
	b.Helper()
	b.StopTimer()
	f := newFleet(b, n)
	defer f.stop()
	before := heapInUse()
	b.StartTimer()
	start := time.Now()
	f.grow(b, n)
	took := time.Since(start)
	b.StopTimer()
	waitRecorded(b, f.mgr, n)
	return took, heapInUse() - before
}

// waitCreated waits until the cloud holds n instances.
func waitCreated(b *testing.B, engine *sim.Engine, n int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for engine.Count("perf") < n {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d instances created", engine.Count("perf"), n)
		}
		time.Sleep(time.Duration(n/1000+1) * time.Millisecond) // Count scans every instance
	}
}

// waitRecorded waits until the core has recorded the answer of each of
// n creates (an instance's address comes with it).
func waitRecorded(b *testing.B, mgr *nodegroup.Manager, n int) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	recorded := 0
	for i := range groups {
		insts, err := mgr.Instances(fmt.Sprintf("g%03d", i))
		if err != nil {
			b.Fatal(err)
		}
		for _, in := range insts {
			for {
				if _, ok := mgr.InstanceIP(in.Name); ok {
					recorded++
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("the create of %s was never recorded", in.Name)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	if recorded != n {
		b.Fatalf("%d of %d creates recorded", recorded, n)
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
