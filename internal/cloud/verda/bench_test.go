package verda_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

// benchListLag is the fake's list lag, none: the benchmarks measure the
// backend, not the start-up hold of a core whose cloud's list may lag.
const benchListLag = 300 * time.Millisecond

// benchManager runs the core over the Verda backend and its fake API.
func benchManager(b *testing.B, doc string, latency time.Duration) (*verdatest.Server, *nodegroup.Manager, *config.Config) {
	b.Helper()
	capacity := 1000
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Millisecond), DeleteDelay: sim.Duration(0),
		DefaultCapacity: &capacity}, sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "secret", InstanceLimit: 100000})
	b.Cleanup(fake.Close)
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	api, err := verda.NewClient(verda.ClientOptions{BaseURL: fake.URL + "/v1", ClientID: "id", ClientSecret: "secret",
		RequestsPerSecond: cfg.Sync.RequestsPerSecond, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{"verda": verda.New(api, verda.Options{ClusterName: cfg.ClusterName, Logger: log})},
		nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), ResolveAfter: benchListLag})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); mgr.Wait() })
	if err := mgr.Start(ctx); err != nil {
		b.Fatal(err)
	}
	fake.SetLatency(latency)
	return fake, mgr, cfg
}

func groupsDoc(groups, maxSize int, period string, rps float64) string {
	var sb strings.Builder
	if rps > 0 {
		fmt.Fprintf(&sb, "clusterName: bench\nsync: {period: %s, requestsPerSecond: %g}\nclouds:\n  verda: {}\nnodeGroups:\n", period, rps)
	} else { // the default rate
		fmt.Fprintf(&sb, "clusterName: bench\nsync: {period: %s}\nclouds:\n  verda: {}\nnodeGroups:\n", period)
	}
	types := []string{"1V100.6V", "8V100.48V", "1A100.22V", "1L40S.20V", "1H100.80S.30V", "1A6000.10V", "1RTX6000ADA.10V", "CPU.4V.16G", "1H200.141S.44V", "2H100.80S.80V"}
	for i := range groups {
		fmt.Fprintf(&sb, "  - {name: g%d, cloud: verda, instanceType: %s, locations: [FIN-01, FIN-02, FIN-03, ICE-01], maxSize: %d}\n",
			i, types[i%len(types)], maxSize)
	}
	return sb.String()
}

// BenchmarkSteadyStateAPICalls measures the Verda API calls per minute of a
// settled cluster while cluster-autoscaler runs its loop every 10 s. Time is
// scaled 100x (sync period 300 ms stands for 30 s; one iteration is one
// scaled minute). The count must not grow with the number of nodes.
func BenchmarkSteadyStateAPICalls(b *testing.B) {
	for _, nodes := range []int{100, 400} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			fake, mgr, _ := benchManager(b, groupsDoc(10, nodes, "300ms", 1000), 0)
			ctx := context.Background()
			for i := range 10 {
				if err := mgr.IncreaseSize(ctx, fmt.Sprintf("g%d", i), nodes/10); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for fake.Engine().Count("verda-account") < nodes || time.Now().Before(deadline) && coretest.Pending(mgr) {
				if time.Now().After(deadline) {
					b.Fatalf("only %d of %d instances", fake.Engine().Count("verda-account"), nodes)
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(400 * time.Millisecond)
			coretest.MeasureCallsPerMinute(b, mgr, fake.Calls)
		})
	}
}

// BenchmarkScaleUp50 measures the time from IncreaseSize(50) until the
// Verda API has accepted all 50 orders, with 300 ms of latency on every
// call, under the default rate limit and create concurrency, and how long
// the IncreaseSize call itself (cluster-autoscaler's RPC) takes.
func BenchmarkScaleUp50(b *testing.B) {
	fake, mgr, _ := benchManager(b, groupsDoc(1, 50, "30s", 0), 300*time.Millisecond)
	ctx := context.Background()
	for range b.N {
		start := time.Now()
		if err := mgr.IncreaseSize(ctx, "g0", 50); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-increase-call")
		for fake.Engine().Count("verda-account") < 50 {
			time.Sleep(5 * time.Millisecond)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s-to-50-accepted")
		b.StopTimer()
		insts, _ := mgr.Instances("g0")
		var ids []string
		for _, in := range insts {
			ids = append(ids, in.ProviderID)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for len(ids) < 50 || mgr.DeleteNodes(ctx, "g0", ids) != nil {
			if time.Now().After(deadline) {
				b.Fatal("could not clean up")
			}
			time.Sleep(50 * time.Millisecond)
			insts, _ = mgr.Instances("g0")
			ids = ids[:0]
			for _, in := range insts {
				ids = append(ids, in.ProviderID)
			}
		}
		for fake.Engine().Count("verda-account") > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		// The clean-up spent the request budget; a scale-up meets a quiet
		// cluster's full one.
		time.Sleep(time.Second)
		b.StartTimer()
	}
}
