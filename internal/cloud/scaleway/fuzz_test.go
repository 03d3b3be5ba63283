package scaleway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// FuzzAnswers answers one of the backend's calls with an arbitrary status
// and body, as a broken proxy or a changed API would, over the official
// SDK. The backend must never panic nor hang, and an answer to the server
// list that is not a page of servers is an error: the project holds one
// server of the cluster, and a list that comes back without an error
// either shows it or was given a page that does not (an empty list taken
// from "{}" would make it look gone, its Node deleted and a replacement
// ordered while it runs on).
func FuzzAnswers(f *testing.F) {
	for _, s := range []struct {
		which  uint8
		status uint16
		body   string
	}{
		{0, 200, `{"servers":[]}`}, {0, 200, `{}`}, {0, 200, `{"servers":null}`}, {0, 200, `null`}, {0, 200, ``},
		{0, 200, `{"servers":[null]}`}, {0, 200, `{"servers":[{"id":"x","state":"running","zone":"fr-par-2","tags":["gpuscaler-cluster=prod"],"public_ips":[null]}]}`},
		{0, 200, `{"servers":{"a":1}}`}, {0, 503, `{"type":"service_unavailable","message":"x"}`},
		{1, 200, `{"servers":{"L4-1-24G":{"gpu":null,"ncpus":-1}}}`}, {1, 200, `{"servers":[1]}`},
		{2, 200, `{"servers":{"L4-1-24G":{"availability":7}}}`},
		{3, 200, `{"server":null}`}, {3, 201, `{}`}, {3, 201, `{"server":{"id":"","zone":"fr-par-2"}}`},
		{3, 400, `{"type":"out_of_stock","message":"x"}`}, {3, 500, `<html>`},
		{4, 200, `{"task":null}`}, {4, 400, `{"type":"invalid_arguments"}`},
	} {
		f.Add(s.which, s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, which uint8, status uint16, body []byte) {
		engine, err := scwtest.NewEngine(sim.Config{DefaultCapacity: ptr(4)}, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fake := scwtest.New(engine, scwtest.Options{SecretKey: secretKey})
		defer fake.Close()
		if _, err := fake.AddServer(projectID, "fr-par-2", "l4-kept", "L4-1-24G", []string{"gpuscaler-cluster=prod", "gpuscaler-group=l4"}); err != nil {
			t.Fatal(err)
		}
		client, err := scaleway.NewClient(scaleway.ClientOptions{AccessKey: accessKey, SecretKey: secretKey, ProjectID: projectID,
			APIURL: fake.URL, RequestsPerSecond: 100000, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		prov := scaleway.New(client, scaleway.Options{ClusterName: "prod", ProjectID: projectID, Zones: []string{"fr-par-2"},
			RetryBase: time.Millisecond, Secrets: []string{secretKey}, Logger: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		code := faults.Status(status)
		const zone = "/zones/fr-par-2"
		order := cloud.CreateSpec{Name: "l4-fuzz", Group: "l4", InstanceType: "L4-1-24G", Location: "fr-par-2", CapacityType: cloud.OnDemand}
		switch which % 5 {
		case 0:
			fake.AnswerNext(http.MethodGet, zone+"/servers", code, body)
			if insts, err := prov.List(ctx); err == nil && len(insts) != 1 && !serverPage(body) {
				t.Fatalf("a %d answer %q, not a page of servers, was taken for a list of %d servers; the project has 1", code, body, len(insts))
			}
		case 1:
			fake.AnswerNext(http.MethodGet, zone+"/products/servers", code, body)
			_, _ = prov.InstanceTypes(ctx)
		case 2:
			fake.AnswerNext(http.MethodGet, zone+"/products/servers/availability", code, body)
			_, _ = prov.Offerings(ctx)
		case 3:
			fake.AnswerNext(http.MethodPost, zone+"/servers", code, body)
			_, _ = prov.Create(ctx, order)
		case 4:
			fake.AnswerNext(http.MethodPost, "/action", code, body)
			_, _ = prov.Create(ctx, order)
		}
		if ctx.Err() != nil {
			t.Fatalf("a %d answer %q kept the backend busy for 10 s", code, body)
		}
	})
}

// serverPage reports whether body is a page of the server list: a JSON
// object whose "servers" is an array.
func serverPage(body []byte) bool {
	var page struct {
		Servers json.RawMessage `json:"servers"`
	}
	return json.Unmarshal(body, &page) == nil && bytes.HasPrefix(bytes.TrimSpace(page.Servers), []byte("["))
}

func ptr[T any](v T) *T { return &v }
