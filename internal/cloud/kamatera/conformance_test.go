package kamatera_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera/kamateratest"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/conformance"
)

// TestConformance runs the backends' conformance suite over the fake
// Kamatera API.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) *conformance.Backend {
		fake, _ := newFake(t, 4)
		return &conformance.Backend{
			Cloud: kamatera.Name, Clouds: "kamatera: {}",
			Group:    `{name: g, cloud: kamatera, instanceType: 2A-4096, locations: [EU, EU-FR], image: ubuntu, maxSize: 8}`,
			Fake:     kamateraFake{fake},
			Launches: true,
			Provider: func(log *slog.Logger) cloud.Provider {
				api, err := kamatera.NewClient(kamatera.ClientOptions{BaseURL: fake.URL, ClientID: clientID, Secret: secret,
					RequestsPerSecond: 2000, RetryBase: time.Millisecond, PollInterval: 5 * time.Millisecond, Logger: log})
				if err != nil {
					t.Fatal(err)
				}
				return kamatera.New(api, kamatera.Options{ClusterName: "prod", Datacenters: []string{"EU", "EU-FR"},
					LostCreateWindow: 5 * time.Second, Logger: log})
			},
			Bootstrap:   userData{},
			Secrets:     []string{secret, kamateratest.GeneratedPassword, "join-token-for-"},
			Credentials: []string{secret},
		}
	})
}

// kamateraFake drives the fake Kamatera API for the conformance suite, in
// the API's own words.
type kamateraFake struct{ *kamateratest.Server }

func (f kamateraFake) Fail(op conformance.Op) {
	switch op {
	case conformance.Create:
		f.FailNext(http.MethodPost, "/service/server", http.StatusInternalServerError, "Internal server error")
	case conformance.Delete:
		f.FailNext(http.MethodPost, "/service/server/terminate", http.StatusInternalServerError, "Failed to run command method (terminate)")
	case conformance.List:
		f.FailNext(http.MethodGet, "/service/servers", http.StatusServiceUnavailable, "Service Unavailable")
	}
}

func (f kamateraFake) Lose(op conformance.Op) {
	switch op {
	case conformance.Create:
		f.LoseNextAnswer(http.MethodPost, "/service/server")
	case conformance.Delete:
		f.LoseNextAnswer(http.MethodPost, "/service/server/terminate")
	case conformance.List:
		f.LoseNextAnswer(http.MethodGet, "/service/servers")
	}
}

func (f kamateraFake) Creates() int { return f.Calls()["POST /service/server"] }

// StockOut empties the group's offerings in location: the create's queued
// command ends in error.
func (f kamateraFake) StockOut(location string) {
	f.Engine().SetCapacity(cloud.OfferingKey{InstanceType: "2A-4096", Location: location, CapacityType: cloud.OnDemand}, 0)
}

func (f kamateraFake) Left() string {
	if n, m := len(f.Servers()), len(f.Instances()); n+m > 0 {
		return fmt.Sprintf("%d servers, %d engine instances", n, m)
	}
	return ""
}

// FailListWith answers the next list a 400 in the API's error shape.
func (f kamateraFake) FailListWith(text string) {
	f.FailNext(http.MethodGet, "/service/servers", http.StatusBadRequest, text)
}
