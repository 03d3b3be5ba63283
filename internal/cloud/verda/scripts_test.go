package verda

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
)

// TestScriptKeptUntilTheInstanceHasIt: a list that started before an order
// landed does not show the instance; its script must survive that list,
// and go once the instance leaves the pending state.
func TestScriptKeptUntilTheInstanceHasIt(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	c := New(f.client, Options{ClusterName: "prod"})
	ctx := context.Background()
	id, err := f.client.CreateScript(ctx, c.scriptName("node-1"), "#!/bin/bash\n")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	c.trackScript("node-1", id)
	c.lastSweep = time.Now()
	c.cleanScripts(ctx, before, map[string]cloud.InstanceState{})
	if f.fake.ScriptCount() != 1 {
		t.Fatal("the script went before its instance could have been listed")
	}
	c.cleanScripts(ctx, time.Now(), map[string]cloud.InstanceState{"node-1": cloud.StatePending})
	if f.fake.ScriptCount() != 1 {
		t.Fatal("the script went while its instance was pending")
	}
	c.cleanScripts(ctx, time.Now(), map[string]cloud.InstanceState{"node-1": cloud.StateRunning})
	if f.fake.ScriptCount() != 0 {
		t.Fatal("the script outlived the boot")
	}
}

// TestScriptListEndsWhenPagingIsIgnored: a full script store behind a
// service that answers every page with the first (no X-Total-Count) must
// not make the listing endless, and the backend's first list, which sweeps
// the store, returns.
func TestScriptListEndsWhenPagingIsIgnored(t *testing.T) {
	f := newFixture(t, verdatest.Options{IgnoreScriptPaging: true}, ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 100 {
		if _, err := f.client.CreateScript(ctx, fmt.Sprintf("someone-else-%03d", i), "#!/bin/bash\n"); err != nil {
			t.Fatal(err)
		}
	}
	scripts, err := f.client.ListScripts(ctx)
	if err != nil || len(scripts) != 100 {
		t.Fatalf("%d scripts, %v", len(scripts), err)
	}
	if n := f.fake.Calls()["GET /scripts"]; n > 2 {
		t.Fatalf("%d pages asked for 100 scripts", n)
	}
	c := New(f.client, Options{ClusterName: "prod"})
	if _, err := c.List(ctx); err != nil {
		t.Fatalf("first list with a full store: %v", err)
	}
}

// TestLostScriptUploadIsSweptAtTheNextList: a script upload whose answer
// is lost may have stored the script, join token and all; the next list
// sweeps it out rather than one a sweep period later. Found by the chaos
// campaign (test/chaos).
func TestLostScriptUploadIsSweptAtTheNextList(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
	c := New(f.client, Options{ClusterName: "prod"})
	ctx := context.Background()
	if _, err := c.List(ctx); err != nil { // it sweeps; the next sweep is a period away
		t.Fatal(err)
	}
	f.fake.HangNext(http.MethodPost, "/scripts", time.Second)
	_, err := c.Create(ctx, cloud.CreateSpec{Name: "node-1", Group: "g", InstanceType: "1V100.6V", Location: "FIN-01",
		CapacityType: cloud.OnDemand, UserData: "#!/bin/bash\nJOIN_TOKEN=secret\n"})
	if !errors.Is(err, cloud.ErrOutcomeUnknown) {
		t.Fatalf("create = %v, want its outcome unknown", err)
	}
	if n := f.fake.ScriptCount(); n != 1 {
		t.Fatalf("%d scripts stored: the upload should have landed", n)
	}
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.fake.ScriptCount(); n != 0 {
		t.Fatalf("%d scripts left after the next list", n)
	}
}

// TestUntrackedScriptOfABootingInstanceGoesOnceItRuns: a process that
// restarts while an instance it ordered still boots does not track the
// instance's script; its sweep leaves the script while the instance
// boots, then deletes it at the first list that shows it running, not a
// sweep period later.
func TestUntrackedScriptOfABootingInstanceGoesOnceItRuns(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	c := New(f.client, Options{ClusterName: "prod"}) // the new process: it tracks nothing
	ctx := context.Background()
	if _, err := f.client.CreateScript(ctx, c.scriptName("node-1"), "#!/bin/bash\n"); err != nil {
		t.Fatal(err)
	}
	c.cleanScripts(ctx, time.Now(), map[string]cloud.InstanceState{"node-1": cloud.StatePending})
	if f.fake.ScriptCount() != 1 {
		t.Fatal("the script went while its instance booted")
	}
	c.cleanScripts(ctx, time.Now(), map[string]cloud.InstanceState{"node-1": cloud.StateRunning})
	if n := f.fake.ScriptCount(); n != 0 {
		t.Fatalf("%d scripts left once the instance ran", n)
	}
}
