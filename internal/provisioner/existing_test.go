package provisioner

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

func pool(name string, maxNodes int32, migs ...string) v1alpha1.NodeProvisioner {
	np := v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodeProvisionerSpec{ExistingInstanceGroupNames: migs}}
	if maxNodes > 0 {
		np.Spec.MaxNodes = &maxNodes
	}
	return np
}

// existingGroups is an ExistingGroups over the GCP fake with an L4 MIG
// "l4-grp" in two zones and one long-named MIG, all handed over, and a
// config group on "theirs-grp"; applied collects what it puts in force.
func existingGroups(t *testing.T) (e *ExistingGroups, fake *gcptest.Server, applied *[][]config.NodeGroup) {
	t.Helper()
	engine, err := gcptest.NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake = gcptest.New(engine, gcptest.Options{Project: "p"})
	t.Cleanup(fake.Close)
	tmpl := fake.AddTemplate(gcptest.Template{Name: "gke-l4", MachineType: "g2-standard-8", Metadata: map[string]string{
		"kube-labels": "cloud.google.com/gke-nodepool=l4,kubernetes.io/arch=amd64",
		"kube-env":    "NODE_TAINTS: nvidia.com/gpu=present:NoSchedule\n",
	}})
	fake.AddGroupFrom("us-central1-a", "l4-grp", tmpl)
	fake.AddGroupFrom("us-central1-b", "l4-grp", tmpl)
	fake.AddGroupFrom("us-central1-a", "gke-prod-a-very-long-node-pool-name-1234abcd-grp", tmpl)
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	applied = &[][]config.NodeGroup{}
	fileGroups := []config.NodeGroup{{Name: "filed", Cloud: "gcp", Locations: []string{"us-central1-b"}, CloudOptions: map[string]string{"instanceGroup": "theirs-grp"}}}
	handedOver := []string{"l4-grp", "zones/us-central1-b/instanceGroupManagers/l4-grp", "gke-prod-a-very-long-node-pool-name-1234abcd-grp"}
	e = &ExistingGroups{Describer: gcp.New(clients, gcp.Options{Project: "p"}), Zone: "us-central1-a", MaxGroupSize: 100,
		FileGroups: func() []config.NodeGroup { return fileGroups }, Adopt: func() []string { return handedOver },
		Apply: func(_ context.Context, g []config.NodeGroup) error {
			*applied = append(*applied, g)
			return nil
		}, Refresh: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	return e, fake, applied
}

// TestExistingGroups: pools' existing instance groups become node groups
// read from their templates through the real GCP client and fake API:
// bare names take the default zone; a MIG name found in two zones gets
// hashed group names; labels gpuscaler sets itself are dropped and the
// Baseten label names the pool; a MIG two pools name is the first pool's;
// descriptions are cached (no API call, no reload, on the next pass); a
// failed re-read keeps the groups in force; a pool whose MIG is missing is
// in error with none of its groups in force.
func TestExistingGroups(t *testing.T) {
	e, fake, applied := existingGroups(t)
	ctx := context.Background()
	nps := []v1alpha1.NodeProvisioner{
		pool("a", 4, "l4-grp", "zones/us-central1-b/instanceGroupManagers/l4-grp"),
		pool("b", 0, "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroups/gke-prod-a-very-long-node-pool-name-1234abcd-grp"),
		pool("c", 0, "zones/us-central1-b/instanceGroupManagers/l4-grp"),
		pool("d", 0, "missing-grp"),
		{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"configured"}}},
		pool("f", 0, "zones/us-central1-b/instanceGroupManagers/theirs-grp"),
		pool("g", 0, "missing-too", "zones/us-central1-a/instanceGroupManagers/missing-too"),
		pool(strings.Repeat("x", 64), 0, "another-grp"),
	}
	names, errs := e.Sync(ctx, nps)
	if len(*applied) != 1 {
		t.Fatalf("%d applies; want 1", len(*applied))
	}
	if len(names["a"]) != 2 || names["a"][0] == "l4-grp" || !strings.HasPrefix(names["a"][0], "l4-grp-") || names["a"][0] == names["a"][1] {
		t.Errorf("pool a's groups %v: one MIG name in two zones wants two hashed names", names["a"])
	}
	if g := names["b"]; len(g) != 1 || len(g[0]) > 40 || !strings.HasPrefix(g[0], "gke-prod-a-very-long-node-pool-") {
		t.Errorf("pool b's groups %v: a long MIG name is cut to 40 characters with a hash", g)
	}
	if err := errs["c"]; err == nil || !strings.Contains(err.Error(), `NodeProvisioner "a"`) {
		t.Errorf("pool c names pool a's MIG: %v", err)
	}
	if err := errs["d"]; err == nil || !strings.Contains(err.Error(), "missing-grp") || names["d"] != nil {
		t.Errorf("pool d's MIG is missing: %v, groups %v", err, names["d"])
	}
	if err := errs["f"]; err == nil || !strings.Contains(err.Error(), "nodeGroups[0] (filed) of the config") {
		t.Errorf("pool f names a MIG of the config's groups: %v", err)
	}
	if err := errs["g"]; err == nil || !strings.Contains(err.Error(), "the same managed instance group as existingInstanceGroupNames[0]") {
		t.Errorf("pool g names one MIG twice: %v", err)
	}
	if err := errs[strings.Repeat("x", 64)]; err == nil || !strings.Contains(err.Error(), LabelProvisionerName) {
		t.Errorf("a pool name too long for a label value: %v", err)
	}
	if _, ok := errs["e"]; ok || names["e"] != nil {
		t.Errorf("pool e has no existing instance groups: %v %v", errs["e"], names["e"])
	}
	g := (*applied)[0][0]
	want := config.NodeGroup{Name: names["a"][0], Cloud: "gcp", InstanceType: "g2-standard-8", Locations: []string{"us-central1-a"}, MaxSize: 100,
		Labels: map[string]string{"cloud.google.com/gke-nodepool": "l4", LabelProvisionerName: "a"}, Taints: g.Taints,
		ManagedBy: config.ManagedByNodeProvisioner, CloudOptions: map[string]string{"instanceGroup": "l4-grp"}}
	if !reflect.DeepEqual(g, want) || len(g.Taints) != 1 || g.Taints[0].Key != "nvidia.com/gpu" {
		t.Errorf("group %+v\nwant  %+v", g, want)
	}
	// maxNodes bounds the pool through the planner: a group's maxSize
	// would make the core delete the MIG's live nodes beyond it.
	before := fake.Calls()["GET instanceTemplate"]
	if again, _ := e.Sync(ctx, nps); !reflect.DeepEqual(again, names) || len(*applied) != 1 || fake.Calls()["GET instanceTemplate"] != before {
		t.Errorf("second pass: groups %v, %d applies, %d template reads; want the same groups read from memory", again, len(*applied), fake.Calls()["GET instanceTemplate"]-before)
	}
	time.Sleep(250 * time.Millisecond)
	for range 3 {
		fake.FailNext(http.MethodGet, "/gke-l4", http.StatusForbidden, "forbidden", "permission denied for a moment")
	}
	if again, errs := e.Sync(ctx, nps); !reflect.DeepEqual(again, names) || len(*applied) != 1 || errs["a"] != nil {
		t.Errorf("a failed re-read: groups %v, errors %v, %d applies; want the groups kept", again, errs, len(*applied))
	}
	if _, errs := e.Sync(ctx, nps[1:]); len(*applied) != 2 || len((*applied)[1]) != 2 || errs["c"] != nil {
		t.Errorf("pool a gone: %d applies, groups %v, errors %v; want b's and c's groups", len(*applied), (*applied)[len(*applied)-1], errs)
	}
}

// A MIG another pool already names goes to the pool that holds it, else
// to the pool created first: a later pool with an earlier name does not
// take it, and is in error naming the holder.
func TestExistingGroupsFirstClaimWins(t *testing.T) {
	e, _, _ := existingGroups(t)
	ctx := context.Background()
	t0 := metav1.NewTime(time.Now().Add(-time.Hour))
	z := pool("z", 0, "l4-grp")
	z.CreationTimestamp = t0
	a := pool("a", 0, "l4-grp")
	a.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
	names, errs := e.Sync(ctx, []v1alpha1.NodeProvisioner{a, z})
	if len(names["z"]) != 1 || errs["z"] != nil {
		t.Fatalf("the first pool's groups %v, error %v", names["z"], errs["z"])
	}
	if err := errs["a"]; err == nil || !strings.Contains(err.Error(), `NodeProvisioner "z"`) {
		t.Errorf("a later pool naming the first's MIG: %v, want an error naming z", err)
	}
	// Holding wins over age: a pool restored with an older timestamp does
	// not take a MIG another pool holds.
	old := pool("0-restored", 0, "l4-grp")
	old.CreationTimestamp = metav1.NewTime(t0.Add(-time.Hour))
	if _, errs := e.Sync(ctx, []v1alpha1.NodeProvisioner{a, z, old}); errs["z"] != nil || errs["0-restored"] == nil {
		t.Errorf("the holder lost its MIG to an older pool: %v", errs)
	}
	// Held per MIG: an older pool that holds one MIG and names another
	// pool's does not take it.
	y := pool("y", 0, "zones/us-central1-b/instanceGroupManagers/l4-grp")
	y.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	if _, errs := e.Sync(ctx, []v1alpha1.NodeProvisioner{z, y}); errs["z"] != nil || errs["y"] != nil {
		t.Fatalf("two pools, two MIGs: %v", errs)
	}
	z.Spec.ExistingInstanceGroupNames = append(z.Spec.ExistingInstanceGroupNames, "zones/us-central1-b/instanceGroupManagers/l4-grp")
	if _, errs := e.Sync(ctx, []v1alpha1.NodeProvisioner{z, y}); errs["y"] != nil || errs["z"] == nil || !strings.Contains(errs["z"].Error(), `NodeProvisioner "y"`) {
		t.Errorf("an older pool naming a MIG a newer one holds: %v, want z in error naming y", errs)
	}
}

// A NodeProvisioner alone never widens what gpuscaler may touch: a MIG
// is adopted only when the config lists it (clouds.gcp.adoptInstanceGroups)
// or its description carries this cluster's mark; another cluster's mark,
// a mark that only starts with this cluster's name, or none at all leave
// the pool in error with no group in force and the MIG untouched.
func TestExistingGroupsNeedHandingOver(t *testing.T) {
	engine, err := gcptest.NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := gcptest.New(engine, gcptest.Options{Project: "p"})
	t.Cleanup(fake.Close)
	const zone = "us-central1-a"
	tmpl := fake.AddTemplate(gcptest.Template{Name: "l4", MachineType: "g2-standard-8"})
	for _, g := range []string{"serving", "listed", "marked", "theirs", "prefix"} {
		fake.AddGroupFrom(zone, g, tmpl)
	}
	fake.SetDescription(zone, "marked", "l4 pool\ngpuscaler.dev/cluster=prod")
	fake.SetDescription(zone, "theirs", "gpuscaler.dev/cluster=staging")
	fake.SetDescription(zone, "prefix", "gpuscaler.dev/cluster=prod-2")
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	var applied []config.NodeGroup
	e := &ExistingGroups{Describer: gcp.New(clients, gcp.Options{Project: "p"}), Zone: zone, ClusterName: "prod", MaxGroupSize: 10,
		Adopt: func() []string { return []string{"zones/us-central1-a/instanceGroupManagers/listed"} },
		Apply: func(_ context.Context, g []config.NodeGroup) error { applied = g; return nil }, Logger: slog.New(slog.DiscardHandler)}
	names, errs := e.Sync(context.Background(), []v1alpha1.NodeProvisioner{
		pool("takeover", 0, "serving"), pool("listed", 0, "listed"), pool("marked", 0, "marked"),
		pool("staging", 0, "theirs"), pool("prefix", 0, "prefix"),
	})
	for _, p := range []string{"takeover", "staging", "prefix"} {
		if !errors.Is(errs[p], ErrNotHandedOver) || names[p] != nil {
			t.Errorf("pool %s: error %v, groups %v; want it refused", p, errs[p], names[p])
		}
	}
	if err := errs["takeover"]; err != nil && !strings.Contains(err.Error(), "gpuscaler.dev/cluster=prod") {
		t.Errorf("the refusal does not say how to hand the MIG over: %v", err)
	}
	for _, p := range []string{"listed", "marked"} {
		if errs[p] != nil || len(names[p]) != 1 {
			t.Errorf("pool %s: error %v, groups %v; want its MIG adopted", p, errs[p], names[p])
		}
	}
	if len(applied) != 2 {
		t.Errorf("groups in force: %v; want the two handed over", applied)
	}
	if fake.TargetSize(zone, "serving") != 0 || fake.Calls()["POST resize"] != 0 {
		t.Errorf("an unowned MIG was touched: %v", fake.Calls())
	}
}

// TestParseInstanceGroup: the forms existingInstanceGroupNames takes.
func TestParseInstanceGroup(t *testing.T) {
	for _, c := range []struct{ ref, zone, wantZone, wantName, err string }{
		{ref: "grp", zone: "us-east4-c", wantZone: "us-east4-c", wantName: "grp"},
		{ref: "zones/europe-west4-a/instanceGroupManagers/grp", wantZone: "europe-west4-a", wantName: "grp"},
		{ref: "projects/p/zones/europe-west4-a/instanceGroups/grp", wantZone: "europe-west4-a", wantName: "grp"},
		{ref: "grp", err: "clouds.gcp.zone"},
		{ref: "regions/us-east4/instanceGroupManagers/grp", err: "not zones/"},
		{ref: "Grp_1", zone: "us-east4-c", err: "instance group name"},
	} {
		zone, name, err := config.ParseInstanceGroup(c.ref, c.zone)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v; want an error saying %q", c.ref, err, c.err)
			}
			continue
		}
		if err != nil || zone != c.wantZone || name != c.wantName {
			t.Errorf("%q: %s %s %v", c.ref, zone, name, err)
		}
	}
}
