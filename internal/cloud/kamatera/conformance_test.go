package kamatera_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/cloudtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera/kamateratest"
)

// TestConformance runs the backends' conformance suite over the fake
// Kamatera API.
func TestConformance(t *testing.T) {
	cloudtest.Run(t, func(t *testing.T) *cloudtest.Backend {
		fake, _ := newFake(t, 4)
		return &cloudtest.Backend{
			Cloud: kamatera.Name, Clouds: "kamatera: {}",
			Group: `{name: g, cloud: kamatera, instanceType: 2A-4096, locations: [EU, EU-FR], image: ubuntu, maxSize: 8}`,
			Fake:  kamateraFake{fake},
			Provider: func(log *slog.Logger) cloud.Provider {
				api, err := kamatera.NewClient(kamatera.ClientOptions{BaseURL: fake.URL, ClientID: clientID, Secret: secret,
					RequestsPerSecond: 2000, RetryBase: time.Millisecond, PollInterval: 5 * time.Millisecond, Logger: log})
				if err != nil {
					t.Fatal(err)
				}
				return kamatera.New(api, kamatera.Options{ClusterName: "prod", Datacenters: []string{"EU", "EU-FR"},
					LostCreateWindow: 5 * time.Second, Logger: log})
			},
			Bootstrap: userData{},
			Secrets:   []string{secret, kamateratest.GeneratedPassword, "join-token-for-"},
		}
	})
}

// kamateraFake drives the fake Kamatera API for the conformance suite, in
// the API's own words.
type kamateraFake struct{ *kamateratest.Server }

func (f kamateraFake) Fail(op cloudtest.Op) {
	switch op {
	case cloudtest.Create:
		f.FailNext(http.MethodPost, "/service/server", http.StatusInternalServerError, "Internal server error")
	case cloudtest.Delete:
		f.FailNext(http.MethodPost, "/service/server/terminate", http.StatusInternalServerError, "Failed to run command method (terminate)")
	case cloudtest.List:
		f.FailNext(http.MethodGet, "/service/servers", http.StatusServiceUnavailable, "Service Unavailable")
	}
}

func (f kamateraFake) Lose(op cloudtest.Op) {
	switch op {
	case cloudtest.Create:
		f.LoseNextAnswer(http.MethodPost, "/service/server")
	case cloudtest.Delete:
		f.LoseNextAnswer(http.MethodPost, "/service/server/terminate")
	case cloudtest.List:
		f.LoseNextAnswer(http.MethodGet, "/service/servers")
	}
}

func (f kamateraFake) Creates() int { return f.Calls()["POST /service/server"] }

func (f kamateraFake) Left() string {
	if n, m := len(f.Servers()), len(f.Instances()); n+m > 0 {
		return fmt.Sprintf("%d servers, %d engine instances", n, m)
	}
	return ""
}
