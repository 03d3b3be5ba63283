package verda_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/conformance"
)

// TestConformance runs the backends' conformance suite over the fake
// Verda API.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) *conformance.Backend {
		capacity := 4
		engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(10 * time.Millisecond), DeleteDelay: sim.Duration(10 * time.Millisecond),
			DefaultCapacity: &capacity}, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: secret})
		t.Cleanup(fake.Close)
		return &conformance.Backend{
			Cloud: verda.Name, Clouds: "verda: {}",
			Group:    `{name: g, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01, FIN-02], maxSize: 8}`,
			Fake:     verdaFake{fake},
			Launches: true,
			Provider: func(log *slog.Logger) cloud.Provider {
				// A create's answer is lost when it outlasts the client's
				// timeout (verdaFake.Lose).
				api, err := verda.NewClient(verda.ClientOptions{BaseURL: fake.URL + "/v1", ClientID: "id", ClientSecret: secret,
					RequestsPerSecond: 2000, RetryBase: time.Millisecond, Logger: log, HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
				if err != nil {
					t.Fatal(err)
				}
				return verda.New(api, verda.Options{ClusterName: "prod", Logger: log, ScriptGrace: 2 * time.Second, OfflineGrace: 500 * time.Millisecond})
			},
			Bootstrap:   userData{},
			Secrets:     []string{secret, "join-token-for-"},
			Credentials: []string{secret},
		}
	})
}

// verdaFake drives the fake Verda API for the conformance suite, in the
// API's own words.
type verdaFake struct{ *verdatest.Server }

func (f verdaFake) Fail(op conformance.Op) {
	switch op {
	case conformance.Create:
		f.FailNext(http.MethodPost, "/instances", http.StatusInternalServerError, `{"code":"server_error","message":"boom"}`)
	case conformance.Delete:
		f.FailNext(http.MethodPut, "/instances", http.StatusBadGateway, `bad gateway`)
	case conformance.List:
		f.FailNext(http.MethodGet, "/instances", http.StatusTooManyRequests, `{"code":"rate_limited","message":"slow down"}`)
	}
}

// Lose carries the call out and answers after the client gave up.
func (f verdaFake) Lose(op conformance.Op) {
	methods := map[conformance.Op]string{conformance.Create: http.MethodPost, conformance.Delete: http.MethodPut, conformance.List: http.MethodGet}
	f.HangNext(methods[op], "/instances", time.Second)
}

func (f verdaFake) Creates() int { return f.Calls()["POST /instances"] }

// StockOut empties the group's offerings in location: the availability
// answers no, and a create answers 503 "Not enough resources".
func (f verdaFake) StockOut(location string) {
	for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
		f.Engine().SetCapacity(cloud.OfferingKey{InstanceType: "1V100.6V", Location: location, CapacityType: ct}, 0)
	}
}

// Quota answers creates past the limit 400 "Instance limit exceeded".
func (f verdaFake) Quota(instances int) { f.SetInstanceLimit(instances) }

func (f verdaFake) Left() string {
	if n, sc, v := len(f.Engine().Instances("verda-account")), f.ScriptCount(), f.Volumes(); n+sc+v > 0 {
		return fmt.Sprintf("%d instances, %d scripts, %d volumes", n, sc, v)
	}
	return ""
}

// FailListWith answers the next list a 400 in the API's error shape.
func (f verdaFake) FailListWith(text string) {
	body, _ := json.Marshal(map[string]string{"code": "invalid_request", "message": text})
	f.FailNext(http.MethodGet, "/instances", http.StatusBadRequest, string(body))
}
