package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestTwoControllerReplicas runs two `gpuscaler controller` processes on one
// cloud account (the Verda API's fake, served from this test) with leader
// election: only the leader's core orders, so a group with minSize 5 gets 5
// instances, not 5 per replica; when the leader dies the standby takes the
// lease, adopts the 5 and orders nothing; a host lost then (its first
// delete failing) is deleted and replaced once.
func TestTwoControllerReplicas(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{CRDDirs: []string{"../../deploy/crds"}})
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Second)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "secret", CreateAnswersJSON: true, IgnoreScriptPaging: true})
	t.Cleanup(fake.Close)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: two
kubeconfig: %q
sync: {period: 1s, listLag: 2s} # the fake lists every server it made at once
leakedInstances: {gracePeriod: 1h}
clouds:
  verda: {endpoint: %q}
nodeGroups:
  - {name: h100, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 5, maxSize: 8, managedBy: node-provisioner}
`, env.Kubeconfig, fake.URL+"/v1"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lease := []string{"--leader-election-namespace=default", "--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
	live := func() int {
		n := 0
		for _, in := range engine.Instances("verda-account") {
			if in.State != cloud.StateDeleting {
				n++
			}
		}
		return n
	}
	metrics := map[string]string{}
	replica := func(name string) func() {
		addr := loopback(t)
		metrics[name] = addr
		return startGPUScalerLogged(t, env, name, addr, []string{"VERDA_CLIENT_ID=id", "VERDA_CLIENT_SECRET=secret"}, append([]string{"controller", "--config", cfgPath, "--metrics-address", addr}, lease...)...).kill
	}
	// Both start at once, before any instance exists: each would order the
	// minimum if both ran a core.
	killA := replica("replica-a")
	killB := replica("replica-b")
	waitFor(t, ctx, "a leader", func() bool { return holder(ctx, env) != "" })
	waitFor(t, ctx, "5 instances", func() bool { return live() == 5 })
	time.Sleep(5 * time.Second) // the standby would have ordered by now
	if n, calls := live(), engine.Calls()["create"]; n != 5 || calls != 5 {
		t.Fatalf("with two replicas: %d instances, %d create calls; want 5 and 5", n, calls)
	}
	first := holder(ctx, env)
	leader, standby := "replica-a", "replica-b"
	if strings.Contains(leaderLog(t, env, "replica-b"), "leading: the node-group core runs") {
		leader, standby = standby, leader
		killA, killB = killB, killA
	}
	_ = killB
	// The standby has not called the cloud at all: its core does not run.
	resp, err := http.Get("http://" + metrics[standby] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the standby's /metrics: %s\n%.500s", resp.Status, body)
	}
	if strings.Contains(string(body), "gpuscaler_cloud_api_calls_total{") {
		t.Fatalf("the standby %s called the cloud:\n%s", standby, grepLines(string(body), "gpuscaler_cloud_api_calls_total"))
	}
	// controller-runtime's own metrics are served beside gpuscaler's, and
	// what runs is said.
	for _, m := range []string{"rest_client_requests_total", "leader_election_master_status", "gpuscaler_build_info{"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("the controller's /metrics has no %s", m)
		}
	}
	t.Logf("%s leads, %s stands by", leader, standby)
	killA()
	waitFor(t, ctx, "replica b to take the lease", func() bool { h := holder(ctx, env); return h != "" && h != first })
	time.Sleep(5 * time.Second)
	if n, calls := live(), engine.Calls()["create"]; n != 5 || calls != 5 {
		t.Fatalf("after failover: %d instances, %d create calls; want 5 and 5", n, calls)
	}
	// An instance is lost under the new leader, and the first delete of its
	// instance fails in the API's per-instance results: the instance is
	// deleted all the same and replaced, once.
	lost := engine.Instances("verda-account")[0].Name
	fake.FailDeleteOf(lost, 1, http.StatusInternalServerError, "internal error")
	fake.Stop(lost, "discontinued") // lost at once (an offline one waits 10 minutes)
	gone := func() bool {
		for _, in := range engine.Instances("verda-account") {
			if in.Name == lost && in.State != cloud.StateDeleting {
				return false
			}
		}
		return true
	}
	waitFor(t, ctx, "the lost instance deleted and replaced", func() bool { return gone() && live() == 5 })
	time.Sleep(3 * time.Second)
	if n, calls := live(), engine.Calls()["create"]; n != 5 || calls != 6 {
		t.Fatalf("after a lost host: %d instances, %d create calls; want 5 and 6", n, calls)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// leaderLog reads a process's log so far.
func leaderLog(t *testing.T, env *testenv.Env, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.Dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// holder is the leader Lease's holder, or "".
func holder(ctx context.Context, env *testenv.Env) string {
	l, err := env.Client.CoordinationV1().Leases("default").Get(ctx, "gpuscaler-controller", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
