package verda

import (
	"context"
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
