package gcp_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// FuzzAnswers answers one of the backend's calls with an arbitrary status
// and body, as a broken proxy or a changed API would, over the Compute
// client library. The backend must never panic nor hang. (An empty list
// cannot be refused here as it is on Scaleway: GCP leaves an empty array
// out of its JSON, so "{}" is how an empty group answers.)
func FuzzAnswers(f *testing.F) {
	for _, s := range []struct {
		which  uint8
		status uint16
		body   string
	}{
		{0, 200, `{}`}, {0, 200, `{"managedInstances":[null]}`}, {0, 200, `null`}, {0, 200, ``},
		{0, 200, `{"managedInstances":[{"name":"x","lastAttempt":{"errors":null},"instance":"zones/"}]}`},
		{0, 200, `{"managedInstances":[{"lastAttempt":{"errors":{"errors":[null]}}}]}`},
		{0, 200, `{"managedInstances":[{"name":"l4-fuzz"}],"nextPageToken":"again"}`},
		{1, 200, `{"items":[null]}`}, {1, 200, `{"items":[{"name":"l4-kept","networkInterfaces":[null]}]}`},
		{2, 200, `{"status":"DONE","error":{"errors":[null]}}`}, {2, 200, `{}`}, {2, 409, `{"error":{"code":409}}`},
		{3, 200, `{"status":"RUNNING"}`}, {3, 200, `{"status":"DONE","error":null}`}, {3, 503, `<html>`},
		{4, 200, `{"status":"DONE","error":{"errors":[{"code":"RESOURCE_NOT_FOUND"}]}}`}, {4, 500, `{"error":{"errors":[]}}`},
	} {
		f.Add(s.which, s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, which uint8, status uint16, body []byte) {
		capacity := 4
		engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Millisecond), DeleteDelay: sim.Duration(time.Millisecond), DefaultCapacity: &capacity}, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fake := gcptest.New(engine, gcptest.Options{Project: project, OperationDelay: time.Millisecond})
		defer fake.Close()
		fake.AddGroup("us-central1-a", "l4", "g2-standard-8")
		clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
		if err != nil {
			t.Fatal(err)
		}
		prov := gcp.New(clients, gcp.Options{Project: project, ClusterName: "prod", PollInterval: time.Millisecond, CreateWatch: 200 * time.Millisecond,
			OperationTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
			Groups: map[string]gcp.Group{"l4": gcp.NewGroup("l4", "g2-standard-8", []string{"us-central1-a"}, nil)}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		order := func(name string) cloud.CreateSpec {
			return cloud.CreateSpec{Name: name, Group: "l4", InstanceType: "g2-standard-8", Location: "us-central1-a", CapacityType: cloud.OnDemand}
		}
		kept, err := prov.Create(ctx, order("l4-kept"))
		if err != nil {
			t.Fatal(err)
		}
		code := faults.Status(status)
		switch which % 5 {
		case 0:
			fake.AnswerNext(http.MethodPost, "/listManagedInstances", code, body)
			_, _ = prov.List(ctx)
		case 1:
			fake.AnswerNext(http.MethodGet, "/instances", code, body)
			_, _ = prov.List(ctx)
		case 2:
			fake.AnswerNext(http.MethodPost, "/createInstances", code, body)
			_, _ = prov.Create(ctx, order("l4-fuzz"))
		case 3:
			fake.AnswerNext(http.MethodGet, "/operations/", code, body)
			_, _ = prov.Create(ctx, order("l4-fuzz"))
		case 4:
			fake.AnswerNext(http.MethodPost, "/deleteInstances", code, body)
			_ = prov.Delete(ctx, kept)
		}
		if ctx.Err() != nil {
			t.Fatalf("a %d answer %q kept the backend busy for 10 s", code, body)
		}
	})
}
