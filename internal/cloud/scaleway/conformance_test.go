package scaleway_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/conformance"
)

// TestConformance runs the backends' conformance suite over the fake
// Scaleway API.
//
// Every call the backend makes on the way is a row of
// docs/permissions.md's Scaleway table, with the permission set it needs.
func TestConformance(t *testing.T) {
	var rec conformance.Calls
	t.Cleanup(func() { rec.CheckListed(t, "../../../docs/permissions.md", "Scaleway", nil) }) // after every subtest, parallel ones too
	conformance.Run(t, func(t *testing.T) *conformance.Backend {
		capacity := 4
		engine, err := scwtest.NewEngine(sim.Config{BootDelay: sim.Duration(20 * time.Millisecond), DeleteDelay: sim.Duration(20 * time.Millisecond),
			DefaultCapacity: &capacity}, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fake := scwtest.New(engine, scwtest.Options{SecretKey: secretKey})
		t.Cleanup(fake.Close)
		t.Cleanup(func() { rec.Add(fake.Calls()) })
		return &conformance.Backend{
			Cloud: scaleway.Name, Clouds: "scaleway: {}",
			Group:    `{name: g, cloud: scaleway, instanceType: L4-1-24G, locations: [fr-par-2, nl-ams-1], maxSize: 8}`,
			Fake:     scalewayFake{fake},
			Launches: true,
			Provider: func(log *slog.Logger) cloud.Provider {
				client, err := scaleway.NewClient(scaleway.ClientOptions{AccessKey: accessKey, SecretKey: secretKey, ProjectID: projectID,
					APIURL: fake.URL, RequestsPerSecond: 2000})
				if err != nil {
					t.Fatal(err)
				}
				return scaleway.New(client, scaleway.Options{ClusterName: "prod", ProjectID: projectID, Zones: []string{"fr-par-1", "fr-par-2", "nl-ams-1"},
					StartGrace: 2 * time.Second, RetryBase: time.Millisecond, Secrets: []string{secretKey}, Logger: log})
			},
			Bootstrap:   cloudInit{},
			Secrets:     []string{secretKey, "join-token-for-"},
			Credentials: []string{secretKey},
		}
	})
}

// scalewayFake drives the fake Scaleway API for the conformance suite, in
// the API's own words.
type scalewayFake struct{ *scwtest.Server }

func (f scalewayFake) Fail(op conformance.Op) {
	switch op {
	case conformance.Create:
		f.FailNext(http.MethodPost, "/servers", http.StatusServiceUnavailable, "service_unavailable", "try again")
	case conformance.Delete:
		f.FailNext(http.MethodDelete, "", http.StatusConflict, "transient_state", "resource in transient state")
	case conformance.List:
		f.FailNext(http.MethodGet, "/servers", http.StatusBadGateway, "bad_gateway", "bad gateway")
	}
}

func (f scalewayFake) Lose(op conformance.Op) {
	switch op {
	case conformance.Create:
		f.LoseNextAnswer(http.MethodPost, "/servers")
	case conformance.Delete:
		f.LoseNextAnswer(http.MethodPost, "/action")
	case conformance.List:
		f.LoseNextAnswer(http.MethodGet, "/servers")
	}
}

func (f scalewayFake) Creates() int { return f.Calls()["POST /instance/v1/zones/{zone}/servers"] }

// StockOut empties the group's offering in location: the availability
// says shortage, and a create answers out_of_stock.
func (f scalewayFake) StockOut(location string) {
	f.Engine().SetCapacity(cloud.OfferingKey{InstanceType: "L4-1-24G", Location: location, CapacityType: cloud.OnDemand}, 0)
}

// Quota answers creates past the quota 403 quotas_exceeded.
func (f scalewayFake) Quota(instances int) { f.SetServerQuota(instances) }

func (f scalewayFake) Left() string {
	if s, v, e := f.ServerCount(), f.VolumeCount(), len(f.Instances()); s+v+e > 0 {
		return fmt.Sprintf("%d servers, %d volumes, %d engine instances", s, v, e)
	}
	return ""
}

// FailListWith answers the next list a 400 in the API's error shape.
func (f scalewayFake) FailListWith(text string) {
	f.FailNext(http.MethodGet, "/servers", http.StatusBadRequest, "invalid_arguments", text)
}
