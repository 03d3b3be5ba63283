package scaleway_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

// benchListLag is the fake's list lag, none: the benchmarks measure the
// backend, not the start-up hold of a core whose cloud's list may lag.
const benchListLag = 300 * time.Millisecond

// benchManager runs the core over the Scaleway backend and its fake API.
// availabilityTTL is the stock cache's lifetime (scaled with the period).
func benchManager(b *testing.B, doc string, latency, availabilityTTL time.Duration) (*scwtest.Server, *nodegroup.Manager) {
	b.Helper()
	capacity := 1000
	engine, err := scwtest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Millisecond), DeleteDelay: sim.Duration(0),
		DefaultCapacity: &capacity}, sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fake := scwtest.New(engine, scwtest.Options{SecretKey: secretKey})
	b.Cleanup(fake.Close)
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	client, err := scaleway.NewClient(scaleway.ClientOptions{AccessKey: accessKey, SecretKey: secretKey, ProjectID: projectID,
		APIURL: fake.URL, RequestsPerSecond: cfg.Sync.RequestsPerSecond})
	if err != nil {
		b.Fatal(err)
	}
	prov := scaleway.New(client, scaleway.Options{ClusterName: cfg.ClusterName, ProjectID: projectID,
		Zones: []string{"fr-par-1", "fr-par-2", "nl-ams-1"}, AvailabilityTTL: availabilityTTL, Logger: log})
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{scaleway.Name: prov}, nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), ResolveAfter: benchListLag})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); mgr.Wait() })
	if err := mgr.Start(ctx); err != nil {
		b.Fatal(err)
	}
	fake.SetLatency(latency)
	return fake, mgr
}

// groupsDoc is a config of groups L4 and L40S groups spread over three
// zones.
func groupsDoc(groups, maxSize int, period string, rps float64) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "clusterName: bench\nsync: {period: %s", period)
	if rps > 0 {
		fmt.Fprintf(&sb, ", requestsPerSecond: %g", rps)
	}
	sb.WriteString("}\nclouds:\n  scaleway: {}\nnodeGroups:\n")
	types := []string{"L4-1-24G", "L40S-1-48G", "H100-1-80G", "L4-2-24G", "PRO2-S"}
	zones := []string{"fr-par-1", "fr-par-2", "nl-ams-1"}
	for i := range groups {
		fmt.Fprintf(&sb, "  - {name: g%d, cloud: scaleway, instanceType: %s, locations: [%s], maxSize: %d}\n",
			i, types[i%len(types)], zones[i%len(zones)], maxSize)
	}
	return sb.String()
}

// BenchmarkSteadyStateAPICalls measures the Scaleway API calls per minute
// of a settled cluster (10 groups over 3 zones) while cluster-autoscaler
// runs its loop every 10 s. Time is scaled 100x: the 300 ms sync period
// stands for 30 s and the 1.2 s stock cache for 2 minutes; one iteration
// is one scaled minute. The count must not grow with the number of nodes.
func BenchmarkSteadyStateAPICalls(b *testing.B) {
	for _, nodes := range []int{100, 400} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			fake, mgr := benchManager(b, groupsDoc(10, nodes, "300ms", 1000), 0, 1200*time.Millisecond)
			ctx := context.Background()
			for i := range 10 {
				if err := mgr.IncreaseSize(ctx, fmt.Sprintf("g%d", i), nodes/10); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for fake.ServerCount() < nodes || coretest.Pending(mgr) {
				if time.Now().After(deadline) {
					b.Fatalf("only %d of %d servers", fake.ServerCount(), nodes)
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(400 * time.Millisecond)
			coretest.MeasureCallsPerMinute(b, mgr, fake.Calls)
		})
	}
}

// BenchmarkScaleUp50 measures the time from IncreaseSize(50) until all 50
// servers are powered on (each a create, a cloud-init upload and a
// power-on), with 300 ms of latency on every call, under the default rate
// limit and create concurrency.
func BenchmarkScaleUp50(b *testing.B) {
	fake, mgr := benchManager(b, "clusterName: bench\nsync: {period: 30s}\nclouds:\n  scaleway: {}\nnodeGroups:\n"+
		"  - {name: g0, cloud: scaleway, instanceType: L4-1-24G, locations: [fr-par-2], maxSize: 50}\n", 300*time.Millisecond, 0)
	ctx := context.Background()
	poweredOn := func() int {
		n := 0
		for _, sv := range fake.Servers() {
			if sv.State == "starting" || sv.State == "running" {
				n++
			}
		}
		return n
	}
	for range b.N {
		start := time.Now()
		if err := mgr.IncreaseSize(ctx, "g0", 50); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-increase-call")
		for poweredOn() < 50 {
			time.Sleep(5 * time.Millisecond)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s-to-50-powered-on")
		b.StopTimer()
		deadline := time.Now().Add(3 * time.Minute)
		for fake.ServerCount() > 0 || fake.VolumeCount() > 0 {
			insts, _ := mgr.Instances("g0")
			var ids []string
			for _, in := range insts {
				ids = append(ids, in.ProviderID)
			}
			if len(ids) > 0 {
				_ = mgr.DeleteNodes(ctx, "g0", ids)
			}
			if time.Now().After(deadline) {
				b.Fatal("could not clean up")
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second) // a scale-up meets a quiet cluster's full request budget
		b.StartTimer()
	}
}
