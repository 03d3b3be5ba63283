package verda_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

const secret = "verda-secret-never-logged"

// userData stands in for bootstrap: every instance gets a script holding a
// join token.
type userData struct{}

func (userData) UserData(_ context.Context, spec cloud.CreateSpec) (string, error) {
	return "#!/bin/bash\nJOIN_TOKEN=join-token-for-" + spec.Name + "\nk3s agent --token \"$JOIN_TOKEN\"\n", nil
}

type backend struct {
	fake *verdatest.Server
	api  *verda.Client
	mgr  *nodegroup.Manager
	logs *coretest.LogBuffer
}

func newBackend(t *testing.T, groupYAML string) *backend {
	t.Helper()
	engine, err := verdatest.NewEngine(sim.Config{
		BootDelay: sim.Duration(10 * time.Millisecond), DeleteDelay: sim.Duration(10 * time.Millisecond),
	}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: secret})
	t.Cleanup(fake.Close)
	cfg, err := config.Parse([]byte(`
clusterName: prod
sync: {period: 100ms, requestsPerSecond: 2000}
clouds:
  verda: {}
nodeGroups:
` + groupYAML))
	if err != nil {
		t.Fatal(err)
	}
	logs := &coretest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api, err := verda.NewClient(verda.ClientOptions{BaseURL: fake.URL + "/v1", ClientID: "id", ClientSecret: secret,
		RequestsPerSecond: 2000, RetryBase: time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	prov := verda.New(api, verda.Options{ClusterName: "prod", Logger: log, ScriptGrace: 2 * time.Second, OfflineGrace: 500 * time.Millisecond})
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{"verda": prov},
		nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), Bootstrap: userData{}, ResolveAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		mgr.Wait()
		if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), "join-token-for-") {
			t.Errorf("a secret reached the logs")
		}
	})
	return &backend{fake: fake, api: api, mgr: mgr, logs: logs}
}

func (b *backend) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	coretest.Wait(t, what, b.logs, cond)
}

func (b *backend) running(t *testing.T, group string) []nodegroup.Instance {
	t.Helper()
	return coretest.Running(t, b.mgr, group)
}

func TestSpotStockOutFallsBackUnderPreferSpot(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01], capacityPolicy: prefer-spot, maxSize: 3}`)
	// The availability answer said spot was there; the order gets a 503.
	b.fake.Engine().SetCapacity(cloud.OfferingKey{InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: cloud.Spot}, 0)
	if err := b.mgr.IncreaseSize(context.Background(), "gpu", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "a running on-demand node", func() bool { return len(b.running(t, "gpu")) == 1 })
	in := b.running(t, "gpu")[0]
	if in.CapacityType != string(cloud.OnDemand) || !strings.HasPrefix(in.ProviderID, "verda://gpu-") {
		t.Fatalf("instance %+v", in)
	}
	if b.fake.Calls()["POST /instances"] != 2 {
		t.Fatalf("want one spot order (503) and one on-demand order, got %v", b.fake.Calls())
	}
	// The seed systems' provider IDs name the same instance.
	insts, _ := b.api.ListInstances(context.Background())
	for _, pid := range []string{"verda://" + insts[0].ID, "datacrunch://" + insts[0].ID} {
		if g, ok := b.mgr.GroupForProviderID(pid); !ok || g != "gpu" {
			t.Errorf("GroupForProviderID(%s) = %q, %v", pid, g, ok)
		}
	}
}

// An instance the API lists as no_capacity (one of the statuses the SDKs
// define, ../shared/reference/cloud-apis.md 1.8) is an order that found
// no host: a failed order of the out-of-resources class, whose offering
// the next orders skip.
func TestNoCapacityStatusIsAStockOut(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], maxSize: 3}`)
	if err := b.mgr.IncreaseSize(context.Background(), "gpu", 1); err != nil {
		t.Fatal(err)
	}
	var name string
	b.wait(t, "the order made", func() bool {
		insts, _ := b.mgr.Instances("gpu")
		if len(insts) == 1 && !insts[0].Unresolved {
			name = insts[0].Name
		}
		return name != ""
	})
	b.fake.OverrideField(name, "status", `"no_capacity"`)
	b.wait(t, "the out-of-resources failure", func() bool {
		insts, _ := b.mgr.Instances("gpu")
		return len(insts) == 1 && insts[0].ErrorClass == nodegroup.ErrorClassOutOfResources
	})
	insts, _ := b.mgr.Instances("gpu")
	k := cloud.OfferingKey{InstanceType: insts[0].InstanceType, Location: insts[0].Location, CapacityType: cloud.CapacityType(insts[0].CapacityType)}
	offers, ok := b.mgr.Offers("verda", nil)
	if !ok {
		t.Fatal("no offers for verda")
	}
	seen := false
	for _, o := range offers.Offerings {
		seen = seen || o.Key() == k
		if o.Key() == k && o.Available {
			t.Fatalf("offering %s still available after an instance of it found no capacity", k)
		}
	}
	if !seen {
		t.Fatalf("offering %s not in the offers %+v", k, offers.Offerings)
	}
}

func TestSpotOnlyFailsCleanly(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], capacityPolicy: spot-only, maxSize: 3}`)
	for _, loc := range []string{"FIN-01", "FIN-02"} {
		b.fake.Engine().SetCapacity(cloud.OfferingKey{InstanceType: "1H100.80S.30V", Location: loc, CapacityType: cloud.Spot}, 0)
	}
	if err := b.mgr.IncreaseSize(context.Background(), "gpu", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the out-of-resources error", func() bool {
		insts, _ := b.mgr.Instances("gpu")
		return len(insts) == 1 && insts[0].ErrorClass == nodegroup.ErrorClassOutOfResources
	})
	if n := b.fake.Engine().Count("verda-account"); n != 0 {
		t.Fatalf("%d instances ordered", n)
	}
	if n := b.fake.ScriptCount(); n != 0 {
		t.Fatalf("%d scripts left after failed orders", n)
	}
}

// TestScriptsNeverLeak runs 100 scale cycles; every per-instance startup
// script is deleted once its instance runs, and none is left at the end.
func TestScriptsNeverLeak(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 3}`)
	ctx := context.Background()
	maxScripts := 0
	for cycle := range 100 {
		if err := b.mgr.IncreaseSize(ctx, "gpu", 2); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		b.wait(t, fmt.Sprintf("cycle %d up", cycle), func() bool { return len(b.running(t, "gpu")) == 2 })
		maxScripts = max(maxScripts, b.fake.ScriptCount())
		var ids []string
		for _, in := range b.running(t, "gpu") {
			ids = append(ids, in.ProviderID)
		}
		if err := b.mgr.DeleteNodes(ctx, "gpu", ids); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		b.wait(t, fmt.Sprintf("cycle %d down", cycle), func() bool {
			insts, _ := b.mgr.Instances("gpu")
			return len(insts) == 0
		})
	}
	b.wait(t, "no script left", func() bool { return b.fake.ScriptCount() == 0 })
	if maxScripts > 2 {
		t.Errorf("up to %d scripts held at once for 2 instances", maxScripts)
	}
	// Every order carries its own script (an order retried after a failure
	// uploads a fresh one and the failed one's script is deleted).
	calls := b.fake.Calls()
	if calls["POST /scripts"] < 200 || calls["POST /scripts"] != calls["POST /instances"] {
		t.Errorf("%d scripts uploaded for %d orders: %v", calls["POST /scripts"], calls["POST /instances"], calls)
	}
}

func TestLeftoverScriptsAreSwept(t *testing.T) {
	engine, _ := verdatest.NewEngine(sim.Config{}, sim.Options{})
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: secret})
	defer fake.Close()
	api, _ := verda.NewClient(verda.ClientOptions{BaseURL: fake.URL + "/v1", ClientID: "id", ClientSecret: secret})
	ctx := context.Background()
	if _, err := api.CreateScript(ctx, "gpuscaler-prod-gpu-0123456789", "#!/bin/bash\nJOIN_TOKEN=x\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.CreateScript(ctx, "someone-elses-script", "#!/bin/bash\n"); err != nil {
		t.Fatal(err)
	}
	prov := verda.New(api, verda.Options{ClusterName: "prod"})
	if _, err := prov.List(ctx); err != nil {
		t.Fatal(err)
	}
	scripts := fake.Scripts()
	if len(scripts) != 1 || strings.Contains(scripts[0], "JOIN_TOKEN") {
		t.Fatalf("after the sweep: %q", scripts)
	}
}

// TestDataCrunchScriptFetchURL keeps DATACRUNCH_STARTUP_SCRIPT_FETCH_URL
// working: a script server in the DataCrunch autoscaler's style stores a
// script at the cloud and answers its ID; the instance boots with it, and
// gpuscaler deletes it once the instance runs.
// bareAPI is Verda's fake, booting in 10 ms, and a client of it.
func bareAPI(t *testing.T) (*verdatest.Server, *verda.Client) {
	t.Helper()
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(10 * time.Millisecond)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: secret})
	t.Cleanup(fake.Close)
	api, err := verda.NewClient(verda.ClientOptions{BaseURL: fake.URL + "/v1", ClientID: "id", ClientSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return fake, api
}

func TestDataCrunchScriptFetchURL(t *testing.T) {
	fake, api := bareAPI(t)
	var posts atomic.Int32
	scripts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/script" {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		posts.Add(1)
		id, err := api.CreateScript(r.Context(), fmt.Sprintf("dc-%d", posts.Load()), "#!/bin/bash\nK3S_TOKEN=x k3s agent\n")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(id + "\n"))
	}))
	defer scripts.Close()
	prov := verda.New(api, verda.Options{ClusterName: "prod", ScriptFetchURL: scripts.URL + "/script"})
	ctx := context.Background()
	inst, err := prov.Create(ctx, cloud.CreateSpec{Name: "gpu-nodes-0123456789", Group: "gpu-nodes", InstanceType: "1V100.6V",
		Location: "FIN-01", CapacityType: cloud.OnDemand})
	if err != nil {
		t.Fatal(err)
	}
	got, err := api.GetInstance(ctx, inst.ID)
	if err != nil || got.StartupScriptID == nil || posts.Load() != 1 {
		t.Fatalf("instance %+v (%v), %d script requests", got, err, posts.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for fake.ScriptCount() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the fetched script is still stored after boot")
		}
		if _, err := prov.List(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A script server that answers a script already in the account (not made
// for this order) gets it run, but gpuscaler never deletes it: it is not
// gpuscaler's.
func TestFetchedScriptOfSomeoneElseIsNotDeleted(t *testing.T) {
	fake, api := bareAPI(t)
	ctx := context.Background()
	shared, err := api.CreateScript(ctx, "team-shared-bootstrap", "#!/bin/bash\necho shared\n")
	if err != nil {
		t.Fatal(err)
	}
	scripts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(shared + "\n"))
	}))
	defer scripts.Close()
	prov := verda.New(api, verda.Options{ClusterName: "prod", ScriptFetchURL: scripts.URL + "/script", ScriptGrace: time.Millisecond})
	inst, err := prov.Create(ctx, cloud.CreateSpec{Name: "gpu-nodes-0123456789", Group: "gpu-nodes", InstanceType: "1V100.6V",
		Location: "FIN-01", CapacityType: cloud.OnDemand})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := api.GetInstance(ctx, inst.ID); err != nil || got.StartupScriptID == nil || *got.StartupScriptID != shared {
		t.Fatalf("instance %+v (%v) does not run the script the server answered", got, err)
	}
	for range 20 {
		if _, err := prov.List(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := prov.Delete(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if fake.ScriptCount() != 1 {
		t.Fatalf("%d scripts in the account, want the shared one kept", fake.ScriptCount())
	}
}

// Deleting by hostname (an instance whose ID was never heard) deletes only
// this cluster's instance of that name, never another cluster's.
func TestDeleteByNameSparesAnotherCluster(t *testing.T) {
	b := newBackend(t, "  - {name: gpu-pool, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 3}\n")
	ctx := context.Background()
	theirs, err := b.api.CreateInstance(ctx, verda.CreateRequest{InstanceType: "1V100.6V", Image: "ubuntu-22.04", Hostname: "gpu-pool-0123456789",
		Description: "gpuscaler cluster=staging group=gpu-pool", LocationCode: "FIN-01", SSHKeyIDs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	prov := verda.New(b.api, verda.Options{ClusterName: "prod"})
	if err := prov.Delete(ctx, cloud.Instance{Name: "gpu-pool-0123456789"}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.api.GetInstance(ctx, theirs); err != nil || got.Status == verda.StatusDeleting {
		t.Fatalf("another cluster's instance of the same hostname: %+v, %v", got, err)
	}
}

// Instances a seed autoscaler made are adopted by name only when a Node of
// this cluster carries one of their provider IDs: another cluster's
// instances named like one of our groups are not ours.
func TestLegacyAdoptionIsScopedToTheCluster(t *testing.T) {
	b := newBackend(t, "  - {name: gpu-pool, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 3}\n")
	ctx := context.Background()
	ours, err := b.api.CreateInstance(ctx, verda.CreateRequest{InstanceType: "1V100.6V", Image: "ubuntu-22.04", Hostname: "gpu-pool-0a1b2c3d",
		Description: "gpu-pool", LocationCode: "FIN-01", SSHKeyIDs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.api.CreateInstance(ctx, verda.CreateRequest{InstanceType: "1V100.6V", Image: "ubuntu-22.04", Hostname: "gpu-pool-9f8e7d6c",
		Description: "gpu-pool", LocationCode: "FIN-01", SSHKeyIDs: []string{}}); err != nil {
		t.Fatal(err)
	}
	inCluster := func(ids ...string) (bool, bool) {
		for _, id := range ids {
			if id == "datacrunch://"+ours {
				return true, true
			}
		}
		return false, true
	}
	for _, tc := range []struct {
		name  string
		scope func(...string) (bool, bool)
		want  []string
	}{
		{"no cluster access", nil, nil},
		{"node in this cluster", inCluster, []string{"gpu-pool-0a1b2c3d"}},
	} {
		prov := verda.New(b.api, verda.Options{ClusterName: "prod", LegacyGroups: []string{"gpu-pool"}, LegacyInCluster: tc.scope})
		insts, err := prov.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range insts {
			if in.Group == "gpu-pool" {
				got = append(got, in.Name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: adopted %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLaunchOwnerInDescription: an instance launched outside any group is
// recorded at Verda, which has no tags on instances, in its description
// (the conformance suite lists it back as its owner's).
func TestLaunchOwnerInDescription(t *testing.T) {
	b := newBackend(t, "  - {name: gpu, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 3}\n")
	ctx := context.Background()
	if _, err := b.mgr.Launch(ctx, nodegroup.LaunchRequest{Owner: "karpenter", Cloud: "verda",
		Offering: cloud.OfferingKey{InstanceType: "1V100.6V", Location: "FIN-01", CapacityType: cloud.OnDemand}}); err != nil {
		t.Fatal(err)
	}
	raw, err := b.api.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 1 || raw[0].Description != "gpuscaler cluster=prod owner=karpenter" {
		t.Fatalf("at Verda: %+v", raw)
	}
}

// TestStoppedInstancesAreDeletedAndReplaced: an instance that goes offline
// (host lost) or discontinued (spot reclaimed) still bills: it is deleted,
// no longer counts toward the group, and is replaced. A discontinued spot
// instance is deleted without its volumes, which met their
// onSpotDiscontinue fate already; an offline one with the API's default.
func TestStoppedInstancesAreDeletedAndReplaced(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], capacityPolicy: prefer-spot, minSize: 2, maxSize: 4}`)
	b.wait(t, "2 running", func() bool { return len(b.running(t, "gpu")) == 2 })
	first := b.running(t, "gpu")
	b.fake.Stop(first[0].Name, "discontinued")
	b.fake.Stop(first[1].Name, "offline")
	gone := func(name string) bool {
		for _, in := range b.fake.Engine().Instances("verda-account") {
			if in.Name == name {
				return false
			}
		}
		return true
	}
	b.wait(t, "both stopped instances deleted", func() bool { return gone(first[0].Name) && gone(first[1].Name) })
	b.wait(t, "2 replacements running", func() bool {
		r := b.running(t, "gpu")
		return len(r) == 2 && r[0].Name != first[0].Name && r[0].Name != first[1].Name && r[1].Name != first[0].Name && r[1].Name != first[1].Name
	})
	if v, _ := b.fake.DeleteVolumes(first[0].Name); v != "[]" {
		t.Errorf("the discontinued spot instance was deleted with volume_ids %s, want [] (its volume's fate was set at create)", v)
	}
	if v, _ := b.fake.DeleteVolumes(first[1].Name); v != "null" {
		t.Errorf("the offline instance was deleted with volume_ids %s, want the API default", v)
	}
	if n, _ := b.mgr.TargetSize("gpu"); n != 2 {
		t.Fatalf("target %d after the replacements, want 2", n)
	}
	if live := len(b.fake.Engine().Instances("verda-account")); live != 2 {
		t.Fatalf("%d instances at the cloud, want the 2 replacements", live)
	}
}

// TestImagePerTypeAndArch: a type whose supported_os lacks the image gets
// a supported one (V100 does not take the default image); a type whose
// listing names no image (GB300) gets the configured one as is; Grace
// types are arm64 in their node template.
func TestImagePerTypeAndArch(t *testing.T) {
	b := newBackend(t, `  - {name: v100, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 1}
  - {name: gb300, cloud: verda, instanceType: 1GB300.32V, locations: [FIN-01], maxSize: 1}
`)
	ctx := context.Background()
	for _, g := range []string{"v100", "gb300"} {
		if err := b.mgr.IncreaseSize(ctx, g, 1); err != nil {
			t.Fatal(err)
		}
	}
	b.wait(t, "both running", func() bool { return len(b.running(t, "v100")) == 1 && len(b.running(t, "gb300")) == 1 })
	insts, err := b.api.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range insts {
		switch in.InstanceType {
		case "1V100.6V":
			if in.Image != "ubuntu-22.04-cuda-12.0-docker" {
				t.Errorf("V100 ordered with %q, want the first supported fallback", in.Image)
			}
		case "1GB300.32V":
			if in.Image != "ubuntu-24.04-cuda-12.8-open-docker" {
				t.Errorf("GB300 ordered with %q, want the configured image", in.Image)
			}
		}
	}
	for group, want := range map[string]string{"v100": "amd64", "gb300": "arm64"} {
		tmpl, err := b.mgr.Template(group)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Labels["kubernetes.io/arch"]; got != want {
			t.Errorf("%s: kubernetes.io/arch=%q, want %q", group, got, want)
		}
	}
}

// TestReclaimsAndFailedDeletesLeaveNothing: 100 scale-ups and scale-downs while spot
// instances are reclaimed, hosts go offline and deletes partly fail; once
// the group is scaled to zero, the account holds no instance, no startup
// script and no volume.
func TestReclaimsAndFailedDeletesLeaveNothing(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01, FIN-02], capacityPolicy: prefer-spot, maxSize: 8}`)
	live := func() []cloud.Instance { return b.fake.Engine().Instances("verda-account") }
	coretest.ScaleCycles(t, b.mgr, "gpu", 8, func(rng *rand.Rand) {
		if all := live(); len(all) > 0 && rng.IntN(10) < 3 {
			in := all[rng.IntN(len(all))]
			status := "offline"
			if in.CapacityType == cloud.Spot {
				status = "discontinued"
			}
			b.fake.Stop(in.Name, status)
		}
		if all := live(); len(all) > 0 && rng.IntN(10) < 3 {
			b.fake.FailDeleteOf(all[rng.IntN(len(all))].Name, 1+rng.IntN(2), http.StatusInternalServerError, "internal error")
		}
	}, func() string {
		if n, sc, v := len(live()), b.fake.ScriptCount(), b.fake.Volumes(); n+sc+v > 0 {
			return fmt.Sprintf("%d instances, %d scripts, %d volumes", n, sc, v)
		}
		return ""
	})
}

// TestFailingDeleteShowsOnTheInstance: a delete that keeps failing leaves
// the instance deleting with a DeleteFailed error on its status (what
// cluster-autoscaler reads), while it still runs, instead of dropping it.
func TestFailingDeleteShowsOnTheInstance(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], minSize: 0, maxSize: 2}`)
	ctx := context.Background()
	if err := b.mgr.IncreaseSize(ctx, "gpu", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "gpu")) == 1 })
	in := b.running(t, "gpu")[0]
	b.fake.FailDeleteOf(in.Name, 1000, http.StatusInternalServerError, "internal error")
	if err := b.mgr.DeleteNodes(ctx, "gpu", []string{in.ProviderID}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the failed delete on the instance's status", func() bool {
		insts, _ := b.mgr.Instances("gpu")
		return len(insts) == 1 && insts[0].State == nodegroup.StateDeleting && insts[0].ErrorCode == nodegroup.CodeDeleteFailed
	})
	for _, live := range b.fake.Engine().Instances("verda-account") {
		if live.Name == in.Name && live.State == cloud.StateDeleting {
			t.Fatal("the fake deleted an instance whose delete it failed")
		}
	}
}

// TestOfflineForAWhileIsNotLost: an instance offline for less than the
// grace (a reboot, a shutdown to debug) is neither deleted nor replaced.
func TestOfflineForAWhileIsNotLost(t *testing.T) {
	b := newBackend(t, `  - {name: gpu, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], minSize: 1, maxSize: 2}`)
	b.wait(t, "1 running", func() bool { return len(b.running(t, "gpu")) == 1 })
	name := b.running(t, "gpu")[0].Name
	b.fake.Stop(name, "offline")
	time.Sleep(250 * time.Millisecond) // half the test's 500 ms grace
	b.fake.Stop(name, "")
	b.wait(t, "it running again", func() bool { r := b.running(t, "gpu"); return len(r) == 1 && r[0].Name == name })
	time.Sleep(time.Second)
	if v, asked := b.fake.DeleteVolumes(name); asked || len(b.fake.Engine().Instances("verda-account")) != 1 {
		t.Fatalf("an instance offline for less than the grace was deleted (volume_ids %s) or replaced", v)
	}
}
