package kamatera_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera/kamateratest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// BenchmarkSteadyStateList100 lists an account of 100 servers of the
// cluster (and 20 of others) again and again, as the core's sync does
// once a period. The Kamatera autoscaler fetched every server's tags on
// every loop (101 calls); gpuscaler reads each server's tags and details
// once, so a steady-state list is one call whatever the count.
// calls/list is measured at the fake; calls/min is at the default 30 s
// sync period.
func BenchmarkSteadyStateList100(b *testing.B) {
	capacity := 200
	engine, err := kamateratest.NewEngine(sim.Config{BootDelay: sim.Duration(0), DefaultCapacity: &capacity}, sim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	fake := kamateratest.New(engine, kamateratest.Options{ClientID: "id", Secret: "secret"})
	defer fake.Close()
	for i := range 100 {
		if err := fake.AddServer(fmt.Sprintf("ng1-%011d", i), "EU", "2A", 4096, []string{"k8sca-prod", "k8scang-ng1"}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 20 {
		if err := fake.AddServer(fmt.Sprintf("other-%d", i), "EU", "2A", 4096, []string{"k8sca-staging", "k8scang-ng1"}); err != nil {
			b.Fatal(err)
		}
	}
	api, err := kamatera.NewClient(kamatera.ClientOptions{BaseURL: fake.URL, ClientID: "id", Secret: "secret", RequestsPerSecond: 1e6, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	prov := kamatera.New(api, kamatera.Options{ClusterName: "prod", Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	if insts, err := prov.List(ctx); err != nil || len(insts) != 100 {
		b.Fatalf("first list: %d, %v", len(insts), err)
	}
	total := func() int {
		n := 0
		for _, c := range fake.Calls() {
			n += c
		}
		return n
	}
	before := total()
	b.ResetTimer()
	for range b.N {
		if _, err := prov.List(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perList := float64(total()-before) / float64(b.N)
	b.ReportMetric(perList, "calls/list")
	b.ReportMetric(perList*float64(time.Minute/(30*time.Second)), "calls/min")
}
