package gcp_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

// benchListLag is the fake's list lag, none: the benchmarks measure the
// backend, not the start-up hold of a core whose cloud's list may lag.
const benchListLag = 300 * time.Millisecond

// BenchmarkSteadyStateAPICalls measures the Compute API calls per minute
// of a settled cluster of 10 groups, one MIG each, while
// cluster-autoscaler runs its loop every 10 s. Time is scaled 100x (a
// 300 ms sync period stands for 30 s); one iteration is one scaled
// minute. The count must not grow with the number of instances.
func BenchmarkSteadyStateAPICalls(b *testing.B) {
	for _, nodes := range []int{200, 400} {
		b.Run(fmt.Sprintf("instances=%d", nodes), func(b *testing.B) {
			capacity := 1000
			engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Millisecond), DeleteDelay: sim.Duration(0), DefaultCapacity: &capacity}, sim.Options{})
			if err != nil {
				b.Fatal(err)
			}
			fake := gcptest.New(engine, gcptest.Options{Project: project, OperationDelay: time.Millisecond})
			b.Cleanup(fake.Close)
			var doc strings.Builder
			doc.WriteString("clusterName: bench\nsync: {period: 300ms, requestsPerSecond: 1000, maxConcurrentCreates: 20}\nclouds:\n  gcp: {project: " + project + "}\nnodeGroups:\n")
			groups := map[string]gcp.Group{}
			zones := []string{"us-central1-a", "us-central1-b", "europe-west4-a"}
			for i := range 10 {
				name, zone := fmt.Sprintf("g%d", i), zones[i%len(zones)]
				fmt.Fprintf(&doc, "  - {name: %s, cloud: gcp, instanceType: g2-standard-8, locations: [%s], maxSize: %d}\n", name, zone, nodes)
				fake.AddGroup(zone, name, "g2-standard-8")
				groups[name] = gcp.Group{InstanceType: "g2-standard-8", MIGs: []gcp.MIG{{Location: zone, Name: name}}}
			}
			cfg, err := config.Parse([]byte(doc.String()))
			if err != nil {
				b.Fatal(err)
			}
			clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
			if err != nil {
				b.Fatal(err)
			}
			prov := gcp.New(clients, gcp.Options{Project: project, Groups: groups, PollInterval: 2 * time.Millisecond, CreateWatch: time.Second,
				Logger: slog.New(slog.DiscardHandler)})
			mgr, stop := coretest.Start(b, cfg, gcp.Name, prov, nodegroup.Options{Logger: slog.New(slog.DiscardHandler), ResolveAfter: benchListLag})
			b.Cleanup(stop)
			ctx := context.Background()
			for i := range 10 {
				if err := mgr.IncreaseSize(ctx, fmt.Sprintf("g%d", i), nodes/10); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(2 * time.Minute)
			for {
				running := 0
				for i := range 10 {
					running += len(coretest.Running(b, mgr, fmt.Sprintf("g%d", i)))
				}
				if running == nodes {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("only %d of %d running", running, nodes)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(400 * time.Millisecond)
			coretest.MeasureCallsPerMinute(b, mgr, fake.Calls)
		})
	}
}

// orderBench starts a core over one zonal MIG on the fake, whose
// operations take opDelay in each of PENDING and RUNNING.
func orderBench(b *testing.B, opDelay time.Duration) (*gcptest.Server, *nodegroup.Manager) {
	capacity := 100000
	engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Millisecond), DefaultCapacity: &capacity}, sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fake := gcptest.New(engine, gcptest.Options{Project: project, OperationDelay: opDelay})
	b.Cleanup(fake.Close)
	fake.AddGroup("us-central1-a", "l4", "g2-standard-8")
	cfg, err := config.Parse([]byte("clusterName: bench\nsync: {period: 200ms}\nclouds:\n  gcp: {project: " + project + "}\nnodeGroups:\n" +
		"  - {name: l4, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1-a], maxSize: 5000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
	if err != nil {
		b.Fatal(err)
	}
	prov := gcp.New(clients, gcp.Options{Project: project, Groups: map[string]gcp.Group{
		"l4": {InstanceType: "g2-standard-8", MIGs: []gcp.MIG{{Location: "us-central1-a", Name: "l4"}}}}, Logger: slog.New(slog.DiscardHandler)})
	mgr, stop := coretest.Start(b, cfg, gcp.Name, prov, nodegroup.Options{Logger: slog.New(slog.DiscardHandler), ResolveAfter: benchListLag})
	b.Cleanup(stop)
	return fake, mgr
}

// orders times IncreaseSize(n) until the n-th createInstances reaches the
// API; between rounds, untimed, the MIG settles.
func orders(b *testing.B, fake *gcptest.Server, mgr *nodegroup.Manager, n int) {
	ctx := context.Background()
	total := 0
	for b.Loop() {
		before := fake.Calls()["POST createInstances"]
		if err := mgr.IncreaseSize(ctx, "l4", n); err != nil {
			b.Fatal(err)
		}
		for fake.Calls()["POST createInstances"] < before+n {
			time.Sleep(50 * time.Microsecond)
		}
		// The next round comes to a MIG with no operation running.
		b.StopTimer()
		total += n
		for len(coretest.Running(b, mgr, "l4")) < total {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
	}
}

// BenchmarkIncreaseSizeToCreate measures the time from the core's
// IncreaseSize (what the NodeProvisioner and cluster-autoscaler call for a
// pending pod) to the createInstances request reaching the API, over the
// real client and the fake, with the defaults' request budget. The
// planner's own time is BenchmarkPlan (internal/provisioner/plan).
func BenchmarkIncreaseSizeToCreate(b *testing.B) {
	fake, mgr := orderBench(b, time.Millisecond)
	orders(b, fake, mgr, 1)
}

// BenchmarkScaleUpTenInOneZone measures the time from one IncreaseSize of
// 10 to the 10th createInstances reaching the API: orders into one MIG
// run one at a time (GCP refuses a second operation while one runs), so
// this is ten operations' round trips.
func BenchmarkScaleUpTenInOneZone(b *testing.B) {
	fake, mgr := orderBench(b, 50*time.Millisecond)
	orders(b, fake, mgr, 10)
}
