package gcp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

const project = "gpu-project"

type backend struct {
	fake   *gcptest.Server
	engine *sim.Engine
	mgr    *nodegroup.Manager
	cfg    *config.Config
	logs   *coretest.LogBuffer
	stop   func()
	// boot renders startup scripts when set.
	boot nodegroup.Bootstrapper
}

const groupsYAML = `
  - {name: l4, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1-a, us-central1-b], maxSize: 6,
     cloudOptions: {instanceGroup: gpu-l4}}
`

func newBackend(t *testing.T, capacity int, groups string, fakeOpts gcptest.Options) *backend {
	t.Helper()
	start := 30 * time.Millisecond
	engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(30 * time.Millisecond), DeleteDelay: sim.Duration(30 * time.Millisecond),
		StartDelay: &start, DefaultCapacity: &capacity}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fakeOpts.Project = project
	fake := gcptest.New(engine, fakeOpts)
	t.Cleanup(fake.Close)
	for _, z := range []string{"us-central1-a", "us-central1-b"} {
		fake.AddGroup(z, "gpu-l4", "g2-standard-8")
	}
	fake.AddRegionalGroup("us-central1", "l4r", "g2-standard-8")
	cfg, err := config.Parse([]byte("clusterName: prod\nsync: {period: 100ms, requestsPerSecond: 2000}\nclouds:\n  gcp: {project: " + project + "}\nnodeGroups:\n" + groups))
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{fake: fake, engine: engine, cfg: cfg, logs: &coretest.LogBuffer{}}
	b.start(t)
	t.Cleanup(func() { b.stop() })
	return b
}

func (b *backend) start(t *testing.T) {
	t.Helper()
	log := coretest.Logger(b.logs)
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: b.fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]gcp.Group{}
	for _, g := range b.cfg.NodeGroups {
		groups[g.Name] = gcp.NewGroup(g.Name, g.InstanceType, g.Locations, g.CloudOptions)
	}
	prov := gcp.New(clients, gcp.Options{Project: project, Groups: groups, PollInterval: 10 * time.Millisecond, CreateWatch: 2 * time.Second, Logger: log})
	b.mgr, b.stop = coretest.Start(t, b.cfg, gcp.Name, prov, nodegroup.Options{Logger: log, ResolveAfter: 300 * time.Millisecond, Bootstrap: b.boot})
}

func (b *backend) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	coretest.Wait(t, what, b.logs, cond)
}

func (b *backend) running(t *testing.T, group string) []nodegroup.Instance {
	t.Helper()
	return coretest.Running(t, b.mgr, group)
}

// TestOrdersMoveTheMIGTarget: instances are created by name in the first zone's
// MIG (raising its target size), run with their gce:// provider IDs, and
// are deleted from the MIG (lowering it).
func TestOrdersMoveTheMIGTarget(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	ctx := context.Background()
	tmpl, err := b.mgr.Template("l4")
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Labels[corev1.LabelTopologyRegion] != "us-central1" || tmpl.Labels[corev1.LabelTopologyZone] != "us-central1-a" {
		t.Errorf("a zonal group's template topology labels: %v; want region us-central1, zone us-central1-a", tmpl.Labels)
	}
	if err := b.mgr.IncreaseSize(ctx, "l4", 2); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "2 running", func() bool { return len(b.running(t, "l4")) == 2 })
	for _, in := range b.running(t, "l4") {
		if in.ProviderID != "gce://"+project+"/us-central1-a/"+in.Name || !strings.HasPrefix(in.Name, "l4-") || in.InstanceType != "g2-standard-8" {
			t.Errorf("instance %+v", in)
		}
	}
	if n := b.fake.TargetSize("us-central1-a", "gpu-l4"); n != 2 {
		t.Fatalf("target size %d", n)
	}
	victim := b.running(t, "l4")[0]
	if err := b.mgr.DeleteNodes(ctx, "l4", []string{victim.ProviderID}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the instance gone from the MIG", func() bool {
		_, there := b.fake.Instances("us-central1-a", "gpu-l4")[victim.Name]
		return !there && b.fake.TargetSize("us-central1-a", "gpu-l4") == 1
	})
}

// TestOptions: a group names its MIG with instanceGroup; other keys are
// refused with the key and what GCP reads.
func TestOptions(t *testing.T) {
	c := gcp.New(gcp.Clients{}, gcp.Options{Project: project})
	if errs := c.CheckOptions(map[string]string{"instanceGroup": "gpu-l4"}); len(errs) != 0 {
		t.Fatalf("instanceGroup refused: %v", errs)
	}
	errs := c.CheckOptions(map[string]string{"instanceGroupName": "x"})
	if len(errs) != 1 || errs[0].Key != "instanceGroupName" || !strings.Contains(errs[0].Detail, "instanceGroup") {
		t.Fatalf("unknown option: %v", errs)
	}
}

// script stands in for bootstrap: a startup script naming the node's
// provider ID.
type script struct{}

func (script) UserData(_ context.Context, spec cloud.CreateSpec) (string, error) {
	return "#!/bin/bash\nexec join --provider-id=" + spec.ProviderID + "\n", nil
}

// TestStartupScriptPerInstance: a group with bootstrap gives each instance
// its own startup script, rendered with its gce:// provider ID once the
// zone is chosen; running instances get their address.
func TestStartupScriptPerInstance(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	b.stop()
	b.boot = script{}
	b.start(t)
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running with an address", func() bool {
		run := b.running(t, "l4")
		if len(run) != 1 {
			return false
		}
		ip, ok := b.mgr.InstanceIP(run[0].Name)
		return ok && ip != ""
	})
	in := b.running(t, "l4")[0]
	md := b.fake.Metadata("us-central1-a", "gpu-l4", in.Name)
	if want := "--provider-id=gce://" + project + "/us-central1-a/" + in.Name + "\n"; !strings.Contains(md["startup-script"], want) {
		t.Fatalf("startup-script %q lacks %q", md["startup-script"], want)
	}
	calls := b.fake.Calls()["GET instances"]
	time.Sleep(500 * time.Millisecond)
	if more := b.fake.Calls()["GET instances"] - calls; more != 0 {
		t.Fatalf("%d instance lists once the address was known", more)
	}
}

// TestOtherProjectRefused: the fake serves its own project only, as a
// service account sees its own: a list in another project is a 403.
func TestOtherProjectRefused(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: b.fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	other := gcp.New(clients, gcp.Options{Project: "not-" + project, Groups: map[string]gcp.Group{
		"l4": {InstanceType: "g2-standard-8", MIGs: []gcp.MIG{{Location: "us-central1-a", Name: "gpu-l4"}}}}})
	if _, err := other.List(context.Background()); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("list in another project: %v", err)
	}
}

// newDirect returns a backend with its fake, and a second client of the
// fake's API for calls the core does not make (DescribeGroup, Advise).
func newDirect(t *testing.T) (*backend, *gcp.Cloud) {
	t.Helper()
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: b.fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	return b, gcp.New(clients, gcp.Options{Project: project})
}

// TestDescribeGroup: a MIG's template gives the group's instance type, node
// labels and taints, as GKE writes them: an N1 machine type with T4s
// attached becomes a learned catalog entry with their GPUs and prices; a
// G2 template keeps the table's entry; regional templates are read too;
// labels come from kube-labels, else kube-env's NODE_LABELS.
func TestDescribeGroup(t *testing.T) {
	b, c := newDirect(t)
	t4 := b.fake.AddTemplate(gcptest.Template{Name: "gke-t4", MachineType: "n1-standard-8", AcceleratorType: "nvidia-tesla-t4", AcceleratorCount: 2,
		Metadata: map[string]string{"kube-env": "NODE_LABELS: cloud.google.com/gke-nodepool=t4,team=ml\nNODE_TAINTS: 'nvidia.com/gpu=present:NoSchedule,spot:PreferNoSchedule'\n"}})
	l4 := b.fake.AddTemplate(gcptest.Template{Name: "gke-l4", Region: "us-central1", MachineType: "g2-standard-8",
		Metadata: map[string]string{"kube-labels": "cloud.google.com/gke-nodepool=l4", "kube-env": "NODE_LABELS: ignored=yes\n"}})
	b.fake.AddGroupFrom("us-central1-a", "gke-t4-grp", t4)
	b.fake.AddGroupFrom("us-central1-b", "gke-l4-grp", l4)
	ctx := context.Background()

	d, err := c.DescribeGroup(ctx, "us-central1-a", "gke-t4-grp")
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.ExistingGroup{Location: "us-central1-a", Name: "gke-t4-grp", InstanceType: "n1-standard-8.2xnvidia-tesla-t4",
		Labels: map[string]string{"cloud.google.com/gke-nodepool": "t4", "team": "ml"},
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}, {Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("described %+v\nwant      %+v", d, want)
	}
	types, _ := c.InstanceTypes(ctx)
	var learned cloud.InstanceType
	for _, ty := range types {
		if ty.Name == d.InstanceType {
			learned = ty
		}
	}
	if learned.GPUModel != "T4" || learned.NodeLabel != "n1-standard-8" || learned.GPUCount != 2 || learned.VCPUs != 8 || learned.OnDemandPrice < 1.07 || learned.OnDemandPrice > 1.09 {
		t.Errorf("learned type %+v; want n1-standard-8 with 2 T4 at 0.38+2*0.35 an hour", learned)
	}

	d, err = c.DescribeGroup(ctx, "us-central1-b", "gke-l4-grp")
	if err != nil {
		t.Fatal(err)
	}
	if d.InstanceType != "g2-standard-8" || !reflect.DeepEqual(d.Labels, map[string]string{"cloud.google.com/gke-nodepool": "l4"}) || d.Taints != nil {
		t.Errorf("regional template: %+v", d)
	}

	auto := b.fake.AddTemplate(gcptest.Template{Name: "gke-auto", MachineType: "g2-standard-8", Metadata: map[string]string{"kube-env": "NODE_LABELS: old=yes\n" +
		"NODE_TAINTS: old=yes:NoSchedule\nAUTOSCALER_ENV_VARS: kube_reserved=cpu=1060m;node_labels=pool=auto,tier=gpu;node_taints=nvidia.com/gpu=present:NoSchedule;os=linux\n"}})
	b.fake.AddGroupFrom("us-central1-a", "gke-auto-grp", auto)
	d, err = c.DescribeGroup(ctx, "us-central1-a", "gke-auto-grp")
	if err != nil || !reflect.DeepEqual(d.Labels, map[string]string{"pool": "auto", "tier": "gpu"}) || len(d.Taints) != 1 || d.Taints[0].Key != "nvidia.com/gpu" {
		t.Errorf("AUTOSCALER_ENV_VARS first: %+v %v", d, err)
	}
	if _, err := c.DescribeGroup(ctx, "us-central1-a", "no-such-grp"); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("missing MIG: %v; want ErrNotFound", err)
	}
	odd := b.fake.AddTemplate(gcptest.Template{Name: "odd", MachineType: "m3-ultramem-32"})
	b.fake.AddGroupFrom("us-central1-a", "odd-grp", odd)
	if _, err := c.DescribeGroup(ctx, "us-central1-a", "odd-grp"); !errors.Is(err, cloud.ErrInvalid) || !strings.Contains(err.Error(), "m3-ultramem-32") {
		t.Errorf("machine type outside the table: %v; want ErrInvalid naming it", err)
	}
}

// TestEveryGPUFamilyIsAdoptable: a MIG of each GPU machine family GCP
// sells (A2 standard, mega and ultra, A3 high, mega, edge and ultra, A4,
// G2, and N1 with an attached P4) is read with its GPUs: those
// cluster-autoscaler prices and lists were refused before (issue 34).
func TestEveryGPUFamilyIsAdoptable(t *testing.T) {
	b, c := newDirect(t)
	ctx := context.Background()
	for _, tc := range []struct {
		machine, accel string
		count          int
		want           string // the instance type's name
		model          string
		gpus           int
	}{
		{machine: "a2-ultragpu-2g", want: "a2-ultragpu-2g", model: "A100-80GB", gpus: 2},
		{machine: "a2-ultragpu-4g", want: "a2-ultragpu-4g", model: "A100-80GB", gpus: 4},
		{machine: "a2-megagpu-16g", want: "a2-megagpu-16g", model: "A100-40GB", gpus: 16},
		{machine: "g2-standard-32", want: "g2-standard-32", model: "L4", gpus: 1},
		{machine: "a3-highgpu-1g", want: "a3-highgpu-1g", model: "H100-80GB", gpus: 1},
		{machine: "a3-megagpu-8g", want: "a3-megagpu-8g", model: "H100-80GB", gpus: 8},
		{machine: "a3-edgegpu-8g", want: "a3-edgegpu-8g", model: "H100-80GB", gpus: 8},
		{machine: "a3-ultragpu-8g", want: "a3-ultragpu-8g", model: "H200-141GB", gpus: 8},
		{machine: "a4-highgpu-8g", want: "a4-highgpu-8g", model: "B200", gpus: 8},
		{machine: "n1-standard-8", accel: "nvidia-tesla-p4", count: 2, want: "n1-standard-8.2xnvidia-tesla-p4", model: "P4", gpus: 2},
	} {
		name := strings.ReplaceAll(tc.want, ".", "-")
		tpl := b.fake.AddTemplate(gcptest.Template{Name: name, MachineType: tc.machine, AcceleratorType: tc.accel, AcceleratorCount: tc.count})
		b.fake.AddGroupFrom("us-central1-a", name+"-grp", tpl)
		d, err := c.DescribeGroup(ctx, "us-central1-a", name+"-grp")
		if err != nil || d.InstanceType != tc.want {
			t.Errorf("%s: described %+v, %v; want instance type %s", name, d, err, tc.want)
			continue
		}
		types, err := c.InstanceTypes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(types, func(ty cloud.InstanceType) bool { return ty.Name == tc.want })
		if i < 0 || types[i].GPUModel != tc.model || types[i].GPUCount != tc.gpus {
			t.Errorf("%s: not in the catalog with %d %s GPUs (index %d of %d types)", name, tc.gpus, tc.model, i, len(types))
		}
	}
}

// TestReadsRetry: a 503 or a 429 on a read (a MIG, its template, its
// members) is asked again, as the compute client does not: a start-up or a
// sync does not fail on one.
func TestReadsRetry(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: b.fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	c := gcp.New(clients, gcp.Options{Project: project, PollInterval: 5 * time.Millisecond})
	t4 := b.fake.AddTemplate(gcptest.Template{Name: "gke-t4", MachineType: "n1-standard-8", AcceleratorType: "nvidia-tesla-t4", AcceleratorCount: 2})
	b.fake.AddGroupFrom("us-central1-a", "gke-t4-grp", t4)
	b.fake.FailNext(http.MethodGet, "/zones/us-central1-a/instanceGroupManagers/gke-t4-grp", http.StatusServiceUnavailable, "backendError", "try again")
	b.fake.FailNext(http.MethodGet, "/global/instanceTemplates/gke-t4", http.StatusTooManyRequests, "rateLimitExceeded", "slow down")
	b.fake.FailNext(http.MethodGet, "/global/instanceTemplates/gke-t4", http.StatusBadGateway, "backendError", "try again")
	d, err := c.DescribeGroup(context.Background(), "us-central1-a", "gke-t4-grp")
	if err != nil {
		t.Fatalf("a read that failed transiently three times was not asked again: %v", err)
	}
	if d.InstanceType != "n1-standard-8.2xnvidia-tesla-t4" {
		t.Fatalf("instance type %q", d.InstanceType)
	}
	// Bounded: a read that keeps failing is an error, classed transient.
	for range 4 {
		b.fake.FailNext(http.MethodGet, "/zones/us-central1-a/instanceGroupManagers/gke-t4-grp", http.StatusServiceUnavailable, "backendError", "down")
	}
	if _, err := c.DescribeGroup(context.Background(), "us-central1-a", "gke-t4-grp"); !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("four 503s in a row: %v, want a transient error", err)
	}
}

// TestMIGFromTemplate: a group whose MIG does not exist yet, with an
// instance template named, lists as empty and creates its MIG (marked as
// gpuscaler's) on its first order, even when the answer to that insert is
// lost (asked again, it is there already). Once the group leaves the config and its MIG is empty, the MIG is
// deleted; MIGs gpuscaler did not create, another cluster's, and its own
// while they have members are not.
func TestMIGFromTemplate(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	b.fake.AddTemplate(gcptest.Template{Name: "l4-template", MachineType: "g2-standard-8"})
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: b.fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	c := gcp.New(clients, gcp.Options{Project: project, ClusterName: "prod", PollInterval: 10 * time.Millisecond, CreateWatch: 2 * time.Second,
		SweepInterval: time.Nanosecond, Groups: map[string]gcp.Group{
			"made": gcp.NewGroup("made", "g2-standard-8", []string{"us-central1-b"}, map[string]string{gcp.OptionInstanceTemplate: "l4-template"}),
		}})
	ctx := context.Background()
	if insts, err := c.List(ctx); err != nil || len(insts) != 0 {
		t.Fatalf("a group whose MIG is still to be made: %v %v", insts, err)
	}
	b.fake.LoseNextAnswer(http.MethodPost, "/us-central1-b/instanceGroupManagers")
	spec := cloud.CreateSpec{Name: "made-0000000001", Group: "made", InstanceType: "g2-standard-8", Location: "us-central1-b", CapacityType: cloud.OnDemand}
	if _, err := c.Create(ctx, spec); err != nil {
		t.Fatalf("a create whose MIG insert went unanswered (asked again with its request id, the MIG found there): %v", err)
	}
	if groups := b.fake.Groups(); !slices.Contains(groups, "us-central1-b/made") {
		t.Fatalf("MIGs %v", groups)
	}
	// Not gpuscaler's, another cluster's: never deleted.
	b.fake.AddGroup("us-central1-b", "theirs", "g2-standard-8")
	other := gcp.New(clients, gcp.Options{Project: project, ClusterName: "prod2", PollInterval: 10 * time.Millisecond, Groups: map[string]gcp.Group{
		"other": gcp.NewGroup("other", "g2-standard-8", []string{"us-central1-a"}, map[string]string{gcp.OptionInstanceTemplate: "l4-template"})}})
	if _, err := other.Create(ctx, cloud.CreateSpec{Name: "other-0000000001", Group: "other", InstanceType: "g2-standard-8", Location: "us-central1-a"}); err != nil {
		t.Fatal(err)
	}
	if err := other.Delete(ctx, cloud.Instance{Name: "other-0000000001", Group: "other", Location: "us-central1-a"}); err != nil {
		t.Fatal(err)
	}
	c.SetGroups(map[string]gcp.Group{})
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	if groups := b.fake.Groups(); !slices.Contains(groups, "us-central1-b/made") {
		t.Fatalf("a MIG with a member was deleted: %v", groups)
	}
	if err := c.Delete(ctx, cloud.Instance{Name: "made-0000000001", Group: "made", Location: "us-central1-b"}); err == nil {
		t.Fatal("a delete in a group no longer configured")
	}
	c.SetGroups(map[string]gcp.Group{"made": gcp.NewGroup("made", "g2-standard-8", []string{"us-central1-b"}, nil)})
	if err := c.Delete(ctx, cloud.Instance{Name: "made-0000000001", Group: "made", Location: "us-central1-b"}); err != nil {
		t.Fatal(err)
	}
	c.SetGroups(map[string]gcp.Group{})
	coretest.Wait(t, "the empty MIG gpuscaler made deleted, and no other", b.logs, func() bool {
		if _, err := c.List(ctx); err != nil {
			t.Fatal(err)
		}
		groups := b.fake.Groups()
		return !slices.Contains(groups, "us-central1-b/made") && slices.Contains(groups, "us-central1-b/theirs") && slices.Contains(groups, "us-central1-a/other")
	})
}

// TestRegionalMIG: a group whose location is a region orders into that
// region's MIG, where GCP picks the zone: the instances land in the zone
// with room (us-central1-a is stocked out), their provider IDs carry that
// zone once the MIG says it, and the core deletes one by its provider ID.
// A region with no room at all is a stock-out for the core.
func TestRegionalMIG(t *testing.T) {
	b := newBackend(t, 5, `
  - {name: l4r, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1], maxSize: 4}
`, gcptest.Options{})
	b.engine.SetCapacity(cloud.OfferingKey{InstanceType: "g2-standard-8", Location: "us-central1-a", CapacityType: cloud.OnDemand}, 0)
	ctx := context.Background()
	// GCE nodes say their region and zone: a regional group's template
	// has the region only.
	tmpl, err := b.mgr.Template("l4r")
	if err != nil {
		t.Fatal(err)
	}
	if _, hasZone := tmpl.Labels[corev1.LabelTopologyZone]; hasZone || tmpl.Labels[corev1.LabelTopologyRegion] != "us-central1" {
		t.Errorf("regional template topology labels: %v", tmpl.Labels)
	}
	if err := b.mgr.IncreaseSize(ctx, "l4r", 2); err != nil {
		t.Fatal(err)
	}
	coretest.Wait(t, "two instances running in us-central1-b", b.logs, func() bool {
		running := coretest.Running(t, b.mgr, "l4r")
		for _, in := range running {
			if !strings.HasPrefix(in.ProviderID, "gce://"+project+"/us-central1-b/l4r-") {
				return false
			}
		}
		return len(running) == 2
	})
	victim := coretest.Running(t, b.mgr, "l4r")[0]
	if err := b.mgr.DeleteNodes(ctx, "l4r", []string{victim.ProviderID}); err != nil {
		t.Fatal(err)
	}
	coretest.Wait(t, "the deleted instance out of the regional MIG", b.logs, func() bool {
		_, still := b.fake.Instances("us-central1", "l4r")[victim.Name]
		return !still && len(b.fake.Instances("us-central1", "l4r")) == 1
	})
	b.engine.SetCapacity(cloud.OfferingKey{InstanceType: "g2-standard-8", Location: "us-central1-b", CapacityType: cloud.OnDemand}, 0)
	if err := b.mgr.IncreaseSize(ctx, "l4r", 1); err != nil {
		t.Fatal(err)
	}
	coretest.Wait(t, "a stock-out of the whole region reported", b.logs, func() bool {
		return strings.Contains(b.logs.String(), "ZONE_RESOURCE_POOL_EXHAUSTED")
	})
	if n := len(b.fake.Instances("us-central1", "l4r")); n != 1 {
		t.Errorf("%d members after the region's stock-out; want the 1 running (the failed one taken out)", n)
	}
}

// TestAdvise: validate --online's findings for GCP groups: a MIG that is
// missing (unless a template would make it), and one whose template makes
// another instance type than the group says.
func TestAdvise(t *testing.T) {
	_, c := newDirect(t)
	ctx := context.Background()
	if got := c.Advise(ctx, "l4", "g2-standard-8", []string{"us-central1-a", "us-central1-b"}, map[string]string{"instanceGroup": "gpu-l4"}); len(got) != 0 {
		t.Errorf("a matching group: %v", got)
	}
	got := c.Advise(ctx, "l4", "a2-highgpu-1g", []string{"us-central1-a", "europe-west4-a"}, map[string]string{"instanceGroup": "gpu-l4"})
	if len(got) != 2 || !strings.Contains(got[0], "makes g2-standard-8") || !strings.Contains(got[1], "does not exist") {
		t.Errorf("findings %q", got)
	}
	if got := c.Advise(ctx, "new", "g2-standard-8", []string{"europe-west4-a"}, map[string]string{"instanceTemplate": "l4-template"}); len(got) != 0 {
		t.Errorf("a MIG its template will make: %v", got)
	}
}

// answers is one MIG's member in the states listManagedInstances reports,
// read through the backend's List.
func answers(t *testing.T, fakeOpts gcptest.Options, states ...gcptest.MemberState) []cloud.Instance {
	t.Helper()
	fake, prov, _ := oneMIG(t, fakeOpts)
	ctx := context.Background()
	var names []string
	for i := range states {
		name := fmt.Sprintf("l4-%d", i)
		if _, err := prov.Create(ctx, cloud.CreateSpec{Name: name, Group: "l4", InstanceType: "g2-standard-8", Location: "us-central1-a", CapacityType: cloud.OnDemand}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for i, st := range states {
		fake.SetMemberState("us-central1-a", "gpu-l4", names[i], st)
	}
	list, err := prov.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]cloud.Instance{}
	for _, in := range list {
		byName[in.Name] = in
	}
	out := make([]cloud.Instance, len(names))
	for i, n := range names {
		out[i] = byName[n]
	}
	return out
}

// A VM that runs is running whatever the MIG is doing on it: the actions
// compute/v1 documents besides creating and deleting (VERIFYING,
// REFRESHING, RESTARTING on a RUNNING VM) leave it serving, as
// cluster-autoscaler's getInstanceState maps them. Taken for pending, a
// serving node counted as an unfulfilled order and could be deleted by a
// target decrease.
func TestRunningVMUnderAnActionIsRunning(t *testing.T) {
	// Every currentAction the discovery document enumerates, each on the
	// instanceStatus it is met with, and what it means for the member.
	cases := []struct {
		state gcptest.MemberState
		want  cloud.InstanceState
	}{
		{gcptest.MemberState{Action: "VERIFYING", Status: "RUNNING"}, cloud.StateRunning},
		{gcptest.MemberState{Action: "REFRESHING", Status: "RUNNING"}, cloud.StateRunning},
		{gcptest.MemberState{Action: "RESTARTING", Status: "RUNNING"}, cloud.StateRunning},
		{gcptest.MemberState{Action: "STOPPING", Status: "RUNNING"}, cloud.StateRunning},
		{gcptest.MemberState{Action: "SUSPENDING", Status: "RUNNING"}, cloud.StateRunning},
		{gcptest.MemberState{Action: "NONE", Status: "RUNNING"}, cloud.StateRunning},
		{gcptest.MemberState{Action: "STARTING", Status: "STOPPED"}, cloud.StatePending},
		{gcptest.MemberState{Action: "RESUMING", Status: "SUSPENDED"}, cloud.StatePending},
		{gcptest.MemberState{Action: "NONE", Status: "STOPPED"}, cloud.StateStopped},
		{gcptest.MemberState{Action: "CREATING", Status: "PROVISIONING"}, cloud.StatePending},
		{gcptest.MemberState{Action: "CREATING_WITHOUT_RETRIES", Status: "STAGING"}, cloud.StatePending},
		{gcptest.MemberState{Action: "RECREATING", Status: "STOPPING"}, cloud.StatePending},
		{gcptest.MemberState{Action: "DELETING", Status: "STOPPING"}, cloud.StateDeleting},
		{gcptest.MemberState{Action: "ABANDONING", Status: "RUNNING"}, cloud.StateDeleting},
	}
	states := make([]gcptest.MemberState, len(cases))
	for i, c := range cases {
		states[i] = c.state
	}
	got := answers(t, gcptest.Options{}, states...)
	for i, c := range cases {
		if got[i].State != c.want {
			t.Errorf("%s on a %s VM: %s, want %s", c.state.Action, c.state.Status, got[i].State, c.want)
		}
	}
}

// Every lastAttempt error is read, and classed as cluster-autoscaler's
// GetErrorInfo classes it: INSUFFICIENT_CAPACITY is a stock-out, a quota
// error behind another one still counts, and another error of a VM that
// never started (IP_SPACE_EXHAUSTED, PERMISSIONS_ERROR, an unknown code)
// is a failed order with its code, not a member pending for ever.
func TestEveryAttemptErrorIsRead(t *testing.T) {
	got := answers(t, gcptest.Options{},
		gcptest.MemberState{Action: "CREATING", Errors: [][2]string{{"INSUFFICIENT_CAPACITY", "no capacity"}}},
		gcptest.MemberState{Action: "CREATING", Errors: [][2]string{{"SOME_ERROR", "Ojojojoj!"}, {"QUOTA_EXCEEDED", "We run out of quota!"}}},
		gcptest.MemberState{Action: "CREATING", Errors: [][2]string{{"IP_SPACE_EXHAUSTED", "no address left"}}},
		gcptest.MemberState{Action: "CREATING", Status: "PROVISIONING", Errors: [][2]string{{"PERMISSIONS_ERROR", "denied"}}},
		gcptest.MemberState{Action: "CREATING", Errors: [][2]string{{"A_CODE_FROM_TOMORROW", "?"}}},
	)
	for i, wantCode := range []string{"INSUFFICIENT_CAPACITY", "QUOTA_EXCEEDED", "IP_SPACE_EXHAUSTED", "PERMISSIONS_ERROR", "A_CODE_FROM_TOMORROW"} {
		if got[i].State != cloud.StateFailed || !strings.HasPrefix(got[i].Error, wantCode+":") {
			t.Errorf("member %d: %s %q, want failed with %s", i, got[i].State, got[i].Error, wantCode)
		}
	}
	if !strings.Contains(got[1].Error, "Ojojojoj!; We run out of quota!") {
		t.Errorf("the messages of every error: %q", got[1].Error)
	}
}

// A list whose members carry only their instance URL, no name (older
// answers, and cluster-autoscaler's recorded ones), is read: each member's
// name is its URL's last segment. It failed the whole List, and every
// group of the project stopped scaling.
func TestMembersWithoutNames(t *testing.T) {
	got := answers(t, gcptest.Options{NoMemberNames: true}, gcptest.MemberState{Action: "NONE", Status: "RUNNING"})
	if got[0].Name != "l4-0" || got[0].State != cloud.StateRunning || got[0].ProviderID != "gce://"+project+"/us-central1-a/l4-0" {
		t.Errorf("member %+v", got[0])
	}
}

// oneMIG is the fake with one zonal MIG, gpu-l4 in us-central1-a (group
// l4), and a provider on it with no core: each test drives the provider's
// calls itself. clients are the provider's own.
func oneMIG(t *testing.T, fakeOpts gcptest.Options) (*gcptest.Server, *gcp.Cloud, gcp.Clients) {
	t.Helper()
	return oneMIGDeleting(t, fakeOpts, 0)
}

// oneMIGDeleting is oneMIG whose VMs take deleteDelay to delete (0: the
// simulated cloud's default).
func oneMIGDeleting(t *testing.T, fakeOpts gcptest.Options, deleteDelay time.Duration) (*gcptest.Server, *gcp.Cloud, gcp.Clients) {
	t.Helper()
	capacity := 1000
	cfg := sim.Config{BootDelay: sim.Duration(time.Millisecond), DefaultCapacity: &capacity}
	if deleteDelay > 0 {
		cfg.DeleteDelay = sim.Duration(deleteDelay)
	}
	engine, err := gcptest.NewEngine(cfg, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fakeOpts.Project = project
	fake := gcptest.New(engine, fakeOpts)
	t.Cleanup(fake.Close)
	fake.AddGroup("us-central1-a", "gpu-l4", "g2-standard-8")
	clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	prov := gcp.New(clients, gcp.Options{Project: project, PollInterval: 5 * time.Millisecond, CreateWatch: time.Second,
		Groups: map[string]gcp.Group{"l4": gcp.NewGroup("l4", "g2-standard-8", []string{"us-central1-a"}, map[string]string{"instanceGroup": "gpu-l4"})}})
	return fake, prov, clients
}

// TestStandbyPool: a group's standby instance is a member its MIG keeps
// stopped (stopInstances: targetSize down, targetStoppedSize up), billed
// as its disk; a scale-up starts it (startInstances) rather than ordering;
// a restart finds the pool again from the MIG's own record; a start the
// zone has no resources for deletes the member (the MIG would go on
// trying it) and serves the scale-up elsewhere.
func TestStandbyPool(t *testing.T) {
	b := newBackend(t, 5, strings.Replace(groupsYAML, "gpu-l4}}", "gpu-l4}, standby: {size: 1, warmFor: 50ms}}", 1), gcptest.Options{})
	var zone string
	var pooled []string
	b.wait(t, "a stopped standby member", func() bool {
		for _, z := range []string{"us-central1-a", "us-central1-b"} {
			if names, size := b.fake.Stopped(z, "gpu-l4"); len(names) == 1 && size == 1 && b.fake.TargetSize(z, "gpu-l4") == 0 {
				zone, pooled = z, names
				return b.mgr.GroupSpend("l4") < 0.1
			}
		}
		return false
	})
	if n, _ := b.mgr.TargetSize("l4"); n != 0 {
		t.Fatalf("target %d with a standby member only", n)
	}
	if got, want := b.mgr.GroupSpend("l4"), 100*0.17/730; got < want*0.99 || got > want*1.01 {
		t.Fatalf("spend %.4f/h with a stopped member, want its disk's %.4f", got, want)
	}
	creates := b.fake.Calls()["POST createInstances"]
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the standby member running for the scale-up", func() bool {
		r := b.running(t, "l4")
		return len(r) == 1 && r[0].Name == pooled[0]
	})
	if got := b.fake.Calls()["POST startInstances"]; got != 1 {
		t.Fatalf("%d startInstances calls, want 1", got)
	}
	b.wait(t, "the pool refilled", func() bool {
		for _, z := range []string{"us-central1-a", "us-central1-b"} {
			if names, _ := b.fake.Stopped(z, "gpu-l4"); len(names) == 1 && names[0] != pooled[0] {
				zone, pooled = z, names
				return true
			}
		}
		return false
	})
	if got := b.fake.Calls()["POST createInstances"] - creates; got != 1 {
		t.Fatalf("%d orders for a scale-up and a refill, want 1: the refill", got)
	}

	// A restart reads the pool back from the MIG: no order, no delete.
	b.stop()
	creates, deletes := b.fake.Calls()["POST createInstances"], b.fake.Calls()["POST deleteInstances"]
	b.start(t)
	b.wait(t, "the restarted core sees 1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	time.Sleep(300 * time.Millisecond) // a few syncs
	if names, size := b.fake.Stopped(zone, "gpu-l4"); len(names) != 1 || names[0] != pooled[0] || size != 1 {
		t.Fatalf("after a restart the pool is %v (targetStoppedSize %d), want %v", names, size, pooled)
	}
	if c, d := b.fake.Calls()["POST createInstances"]-creates, b.fake.Calls()["POST deleteInstances"]-deletes; c != 0 || d != 0 {
		t.Fatalf("a restart made %d orders and %d deletes, want none", c, d)
	}

	// The pool's zone has no resources left when a start comes.
	b.engine.SetCapacity(cloud.OfferingKey{InstanceType: "g2-standard-8", Location: zone, CapacityType: cloud.OnDemand}, 0)
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "a fresh order in its place", func() bool {
		r := b.running(t, "l4")
		return len(r) == 2 && !slices.ContainsFunc(r, func(in nodegroup.Instance) bool { return in.Name == pooled[0] })
	})
	b.wait(t, "the failed member gone from its MIG", func() bool {
		_, ok := b.fake.Instances(zone, "gpu-l4")[pooled[0]]
		return !ok
	})
	if !strings.Contains(b.logs.String(), "ZONE_RESOURCE_POOL_EXHAUSTED") {
		t.Error("the start's stock-out is not in the logs")
	}
}

// A scale-up that takes a standby member while the MIG still stops its
// VM (stopInstances is DONE once accepted) starts it once it has stopped,
// rather than failing the start and buying a fresh instance.
func TestStandbyStartWaitsForTheStop(t *testing.T) {
	b := newBackend(t, 5, strings.Replace(groupsYAML, "gpu-l4}}", "gpu-l4}, standby: {size: 1, warmFor: 50ms}}", 1), gcptest.Options{StopDelay: 3 * time.Second})
	b.wait(t, "the core counts its pool's member stopped", func() bool {
		spend := b.mgr.GroupSpend("l4")
		return spend > 0 && spend < 0.1
	})
	var stopping string
	for _, z := range []string{"us-central1-a", "us-central1-b"} {
		for name, action := range b.fake.Instances(z, "gpu-l4") {
			if action == "STOPPING" {
				stopping = name
			}
		}
	}
	if stopping == "" {
		t.Fatalf("no member stopping 3 s long: %v", b.fake.Instances("us-central1-a", "gpu-l4"))
	}
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the member started for the scale-up", func() bool {
		r := b.running(t, "l4")
		return len(r) == 1 && r[0].Name == stopping
	})
	if strings.Contains(b.logs.String(), "would not start") {
		t.Fatal("the start failed while the VM stopped, and a fresh instance was ordered")
	}
}

// A create that meets a stock-out answers once its member has left the
// MIG. The MIG retries a member's creation on its own, so a VM may run by
// the time the member is taken out, and it bills until its deletion ends;
// on the answer the core orders the slot in the next zone, and a cost cap
// counts one VM where two run. Found by a chaos campaign on the virtual
// clock (gcp, seed 1795844840359192508): a group went past its cap.
func TestStockOutAnswersOnceTheMemberIsGone(t *testing.T) {
	fake, prov, _ := oneMIGDeleting(t, gcptest.Options{}, 300*time.Millisecond)
	// The VM is made; the first list shows the member as the MIG showed it
	// one retry earlier: still creating, the zone exhausted.
	const name = "l4-retried"
	fake.AnswerNext(http.MethodPost, "/listManagedInstances", http.StatusOK, []byte(`{"managedInstances": [{"name": "`+name+`",
		"instance": "https://www.googleapis.com/compute/v1/projects/`+project+`/zones/us-central1-a/instances/`+name+`",
		"currentAction": "CREATING", "targetStatus": "RUNNING", "lastAttempt": {"errors": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED",
		"message": "The zone 'projects/`+project+`/zones/us-central1-a' does not have enough resources available to fulfill the request."}]}}}]}`))
	_, err := prov.Create(context.Background(), cloud.CreateSpec{Name: name, Group: "l4", InstanceType: "g2-standard-8",
		Location: "us-central1-a", CapacityType: cloud.OnDemand})
	if !errors.Is(err, cloud.ErrCapacity) {
		t.Fatalf("create: %v, want a stock-out", err)
	}
	for _, in := range fake.Project() {
		if in.Name == name {
			t.Fatalf("the stock-out was answered with the member's VM still at the cloud (%s): the next order would run beside it", in.State)
		}
	}
}
