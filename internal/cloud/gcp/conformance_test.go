package gcp_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/conformance"
)

// TestConformance runs the backends' conformance suite over the fake
// Compute API: the group's instances are members of a MIG per zone.
//
// Every call the backend makes on the way is a row of
// docs/permissions.md's GCP table, with the IAM permission it needs.
func TestConformance(t *testing.T) {
	var rec conformance.Calls
	t.Cleanup(func() { // after every subtest, parallel ones too
		rec.CheckListed(t, "../../../docs/permissions.md", "GCP", func(call string) []string { return methods[call] })
	})
	conformance.Run(t, func(t *testing.T) *conformance.Backend {
		capacity := 4
		engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(30 * time.Millisecond), DeleteDelay: sim.Duration(30 * time.Millisecond),
			DefaultCapacity: &capacity}, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fake := gcptest.New(engine, gcptest.Options{Project: project})
		t.Cleanup(fake.Close)
		t.Cleanup(func() { rec.Add(fake.Calls()) })
		zones := []string{"us-central1-a", "us-central1-b"}
		for _, z := range zones {
			fake.AddGroup(z, "gpu-g", "g2-standard-8")
		}
		return &conformance.Backend{
			Cloud: gcp.Name, Scheme: "gce", Clouds: "gcp: {project: " + project + "}",
			Group: `{name: g, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1-a, us-central1-b], maxSize: 8,
     cloudOptions: {instanceGroup: gpu-g}}`,
			Fake:          gcpFake{fake, zones},
			StockOutWords: "ZONE_RESOURCE_POOL_EXHAUSTED",
			Provider: func(log *slog.Logger) cloud.Provider {
				clients, err := gcp.NewClients(t.Context(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
				if err != nil {
					t.Fatal(err)
				}
				groups := map[string]gcp.Group{"g": gcp.NewGroup("g", "g2-standard-8", zones, map[string]string{"instanceGroup": "gpu-g"})}
				return gcp.New(clients, gcp.Options{Project: project, Groups: groups, PollInterval: 10 * time.Millisecond,
					CreateWatch: 2 * time.Second, Logger: log})
			},
		}
	})
}

// gcpFake drives the fake Compute API for the conformance suite, in the
// API's own words.
type gcpFake struct {
	*gcptest.Server
	zones []string
}

func (f gcpFake) Fail(op conformance.Op) {
	switch op {
	case conformance.Create:
		f.FailNext(http.MethodPost, "/createInstances", http.StatusServiceUnavailable, "backendError", "Backend Error")
	case conformance.Delete:
		f.FailNext(http.MethodPost, "/deleteInstances", http.StatusBadRequest, "resourceNotReady", "The resource is not ready")
	case conformance.List:
		f.FailNext(http.MethodPost, "/listManagedInstances", http.StatusServiceUnavailable, "backendError", "Backend Error")
	}
}

func (f gcpFake) Lose(op conformance.Op) {
	paths := map[conformance.Op]string{conformance.Create: "/createInstances", conformance.Delete: "/deleteInstances", conformance.List: "/listManagedInstances"}
	f.LoseNextAnswer(http.MethodPost, paths[op])
}

func (f gcpFake) Creates() int { return f.Calls()["POST createInstances"] }

func (f gcpFake) Instances() []cloud.Instance { return f.Project() }

// StockOut empties the group's zone: the MIG's member records
// ZONE_RESOURCE_POOL_EXHAUSTED in its lastAttempt and retries.
func (f gcpFake) StockOut(zone string) {
	f.Engine().SetCapacity(cloud.OfferingKey{InstanceType: "g2-standard-8", Location: zone, CapacityType: cloud.OnDemand}, 0)
}

// Quota caps the project's GPUs (g2-standard-8 has one): a member past it
// records QUOTA_EXCEEDED.
func (f gcpFake) Quota(instances int) { f.SetGPUQuota(instances) }

func (f gcpFake) Left() string {
	members, size := 0, 0
	for _, z := range f.zones {
		members += len(f.Server.Instances(z, "gpu-g"))
		size += f.TargetSize(z, "gpu-g")
	}
	if e := len(f.Engine().Instances("gcp-account")); members+size+e > 0 {
		return fmt.Sprintf("%d MIG members, target sizes adding to %d, %d engine instances", members, size, e)
	}
	return ""
}

// FailListWith answers the next list a 400 in the API's error shape.
func (f gcpFake) FailListWith(text string) {
	f.FailNext(http.MethodPost, "/listManagedInstances", http.StatusBadRequest, "invalid", text)
}
