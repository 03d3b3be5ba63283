package scaleway_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

const (
	accessKey = "SCWACCESSKEY0000TEST"
	secretKey = "11111111-2222-4333-8444-555555555555"
	projectID = "22222222-2222-4222-8222-222222222222"
	account   = "scaleway-account"
)

// cloudInit stands in for bootstrap: a cloud-init document naming the
// node's provider ID, labels and taints, as the renderer writes them.
type cloudInit struct{}

func (cloudInit) UserData(_ context.Context, spec cloud.CreateSpec) (string, error) {
	var b strings.Builder
	b.WriteString("#cloud-config\nruncmd:\n  - [sh, -c, 'k3s agent --kubelet-arg=provider-id=" + spec.ProviderID + " --node-name " + spec.Name)
	for k, v := range spec.Labels {
		b.WriteString(" --node-label " + k + "=" + v)
	}
	for _, t := range spec.Taints {
		b.WriteString(" --node-taint " + t.ToString())
	}
	b.WriteString(" --token join-token-for-" + spec.Name + "']\n")
	return b.String(), nil
}

type backend struct {
	fake   *scwtest.Server
	engine *sim.Engine
	mgr    *nodegroup.Manager
	cfg    *config.Config
	logs   *coretest.LogBuffer
	stop   func()
	opts   scaleway.Options
}

const groupsYAML = `
  - name: l4
    cloud: scaleway
    instanceType: L4-1-24G
    locations: [fr-par-2, nl-ams-1]
    maxSize: 6
    diskSizeGiB: 80
    labels: {team: ml}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
`

func newBackend(t *testing.T, capacity int, groups string, fakeOpts scwtest.Options) *backend {
	t.Helper()
	return newBackendDeleting(t, capacity, groups, fakeOpts, 20*time.Millisecond)
}

// newBackendDeleting is newBackend with servers that take deleteDelay to
// go once terminated.
func newBackendDeleting(t *testing.T, capacity int, groups string, fakeOpts scwtest.Options, deleteDelay time.Duration) *backend {
	t.Helper()
	engine, err := scwtest.NewEngine(sim.Config{BootDelay: sim.Duration(20 * time.Millisecond), DeleteDelay: sim.Duration(deleteDelay),
		DefaultCapacity: &capacity}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fakeOpts.SecretKey = secretKey
	fake := scwtest.New(engine, fakeOpts)
	t.Cleanup(fake.Close)
	cfg, err := config.Parse([]byte("clusterName: prod\nsync: {period: 100ms, requestsPerSecond: 2000}\nclouds:\n  scaleway: {}\nnodeGroups:\n" + groups))
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{fake: fake, engine: engine, cfg: cfg, logs: &coretest.LogBuffer{}, opts: scaleway.Options{
		ClusterName: "prod", ProjectID: projectID, Zones: []string{"fr-par-1", "fr-par-2", "nl-ams-1"},
		StartGrace: 2 * time.Second, RetryBase: time.Millisecond, Secrets: []string{secretKey},
	}}
	b.start(t)
	t.Cleanup(func() {
		b.stop()
		for _, s := range []string{secretKey, "join-token-for-"} {
			if strings.Contains(b.logs.String(), s) {
				t.Errorf("a secret (%s) reached the logs", s)
			}
		}
	})
	return b
}

func (b *backend) client(t *testing.T) *scw.Client {
	t.Helper()
	c, err := scaleway.NewClient(scaleway.ClientOptions{AccessKey: accessKey, SecretKey: secretKey, ProjectID: projectID,
		APIURL: b.fake.URL, RequestsPerSecond: 2000})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs a fresh backend and core, as a new process would.
func (b *backend) start(t *testing.T) {
	t.Helper()
	log := coretest.Logger(b.logs)
	opts := b.opts
	opts.Logger = log
	prov := scaleway.New(b.client(t), opts)
	b.mgr, b.stop = coretest.Start(t, b.cfg, scaleway.Name, prov, nodegroup.Options{Logger: log, Bootstrap: cloudInit{}, ResolveAfter: 300 * time.Millisecond})
}

func (b *backend) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	coretest.Wait(t, what, b.logs, cond)
}

func (b *backend) running(t *testing.T, group string) []nodegroup.Instance {
	t.Helper()
	return coretest.Running(t, b.mgr, group)
}

// TestServerGoesWithItsVolume: a server is made with the cluster's and group's
// tags and a boot volume of the group's size, booted with a cloud-init
// that names its provider ID (scaleway://<zone>/<id>), labels and taints
// and no Scaleway credential, and on scale-down it goes with its volume.
func TestServerGoesWithItsVolume(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	ctx := context.Background()
	if err := b.mgr.IncreaseSize(ctx, "l4", 2); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "2 running", func() bool { return len(b.running(t, "l4")) == 2 })
	for _, sv := range b.fake.Servers() {
		pid := "scaleway://" + sv.Zone + "/" + sv.ID
		if sv.Zone != "fr-par-2" || sv.CommercialType != "L4-1-24G" || sv.VolumeType != "sbs_volume" || sv.VolumeSize != 80_000_000_000 ||
			!slices.Contains(sv.Tags, "gpuscaler-cluster=prod") || !slices.Contains(sv.Tags, "gpuscaler-group=l4") ||
			sv.Image != scwtest.Images[scaleway.DefaultImage] {
			t.Errorf("server %+v", sv)
		}
		for _, want := range []string{"provider-id=" + pid + " ", "--node-label team=ml", "--node-taint nvidia.com/gpu=present:NoSchedule"} {
			if !strings.Contains(sv.BootCloudInit, want) {
				t.Errorf("cloud-init of %s lacks %q:\n%s", sv.Name, want, sv.BootCloudInit)
			}
		}
		for _, secret := range []string{secretKey, accessKey} {
			if strings.Contains(sv.BootCloudInit, secret) {
				t.Errorf("a Scaleway credential in the cloud-init of %s", sv.Name)
			}
		}
		if g, ok := b.mgr.GroupForProviderID(pid); !ok || g != "l4" {
			t.Errorf("%s resolves to %q, %v", pid, g, ok)
		}
		if g, ok := b.mgr.GroupForProviderID("scaleway://instance/" + sv.Zone + "/" + sv.ID); !ok || g != "l4" {
			t.Errorf("Kapsule's form of %s resolves to %q, %v", pid, g, ok)
		}
	}
	for _, in := range b.running(t, "l4") {
		if ip, ok := b.mgr.InstanceIP(in.Name); !ok || !strings.HasPrefix(ip, "51.15.0.") {
			t.Errorf("address of %s: %q", in.Name, ip)
		}
	}
	victim := b.running(t, "l4")[0]
	if err := b.mgr.DeleteNodes(ctx, "l4", []string{victim.ProviderID}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the server and its volume gone", func() bool { return b.fake.ServerCount() == 1 && b.fake.VolumeCount() == 1 })
}

// TestOutOfStockAtCreate: the stock read said available, the order met
// out_of_stock: the next zone is tried, and nothing is left in the first.
func TestOutOfStockAtCreate(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	b.stop()
	b.opts.AvailabilityTTL = time.Hour
	b.start(t)
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	b.engine.SetCapacity(cloud.OfferingKey{InstanceType: "L4-1-24G", Location: "fr-par-2", CapacityType: cloud.OnDemand}, 1)
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "2 running", func() bool { return len(b.running(t, "l4")) == 2 })
	zones := map[string]int{}
	for _, sv := range b.fake.Servers() {
		zones[sv.Zone]++
	}
	if zones["fr-par-2"] != 1 || zones["nl-ams-1"] != 1 || b.fake.VolumeCount() != 2 {
		t.Fatalf("servers by zone %v, %d volumes", zones, b.fake.VolumeCount())
	}
	if b.fake.Calls()["POST /instance/v1/zones/{zone}/servers"] != 3 {
		t.Fatalf("creates: %v", b.fake.Calls())
	}
}

// TestLostCreateAnswerWithoutMetadata: the create is carried out but its
// answer lost, behind a gateway that serves no /metadata: the server is
// found by name, started, and is the only one.
func TestLostCreateAnswerWithoutMetadata(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{NoMetadata: true}) // a gateway without /metadata works too
	b.fake.LoseNextAnswer(http.MethodPost, "/servers")
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	time.Sleep(500 * time.Millisecond)
	if n := b.fake.ServerCount(); n != 1 {
		t.Fatalf("%d servers", n)
	}
	if calls := b.fake.Calls()["POST /instance/v1/zones/{zone}/servers"]; calls != 1 {
		t.Fatalf("%d creates", calls)
	}
}

// TestServerNeverStartedIsReplaced: the process died after making a server and
// before starting it: the server, stopped, is deleted with its volume
// once StartGrace passes, and replaced.
func TestServerNeverStartedIsReplaced(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	api := instance.NewAPI(b.client(t))
	_, err := api.CreateServer(&instance.CreateServerRequest{Zone: "fr-par-2", Name: "l4-deadbeef00", CommercialType: "L4-1-24G",
		Image: scw.StringPtr(scwtest.Images[scaleway.DefaultImage]), Tags: []string{"gpuscaler-cluster=prod", "gpuscaler-group=l4"},
		Volumes: map[string]*instance.VolumeServerTemplate{"0": {Boot: scw.BoolPtr(true), Size: scw.SizePtr(20 * scw.GB),
			VolumeType: instance.VolumeVolumeTypeSbsVolume, Name: scw.StringPtr("gpuscaler-prod-l4-deadbeef00")}}})
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	b.start(t)
	b.wait(t, "the stopped server replaced", func() bool {
		svs := b.fake.Servers()
		return len(svs) == 1 && svs[0].Name != "l4-deadbeef00" && svs[0].State == "running" && b.fake.VolumeCount() == 1
	})
}

// TestOnlyThisProjectsClusterIsAdopted: a running server of the group made
// elsewhere joins the group; nothing more is ordered; servers of another
// cluster, or of another project with the same cluster name, are not
// adopted. (The suite's conformance.Run adopts another replica's server.)
func TestOnlyThisProjectsClusterIsAdopted(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	if _, err := b.fake.AddServer(projectID, "nl-ams-1", "l4-aaaabbbbcc", "L4-1-24G", []string{"gpuscaler-cluster=prod", "gpuscaler-group=l4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.fake.AddServer(projectID, "nl-ams-1", "l4-otherclust", "L4-1-24G", []string{"gpuscaler-cluster=staging", "gpuscaler-group=l4"}); err != nil {
		t.Fatal(err)
	}
	// Another project of the organisation, with the same cluster name.
	if _, err := b.fake.AddServer("99999999-2222-4222-8222-222222222222", "nl-ams-1", "l4-otherproj0", "L4-1-24G", []string{"gpuscaler-cluster=prod", "gpuscaler-group=l4"}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	time.Sleep(300 * time.Millisecond)
	if n, _ := b.mgr.TargetSize("l4"); n != 1 || b.fake.Calls()["POST /instance/v1/zones/{zone}/servers"] != 0 {
		t.Fatalf("target %d, calls %v", n, b.fake.Calls())
	}
}

// TestCloudInitDeletedAfterBoot: a server boots with its cloud-init, and
// once it has run for UserDataGrace the API no longer holds it.
func TestCloudInitDeletedAfterBoot(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	b.stop()
	b.opts.UserDataGrace = 200 * time.Millisecond
	b.start(t)
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	b.wait(t, "the cloud-init deleted", func() bool {
		svs := b.fake.Servers()
		return len(svs) == 1 && svs[0].CloudInit == "" && strings.Contains(svs[0].BootCloudInit, "join-token-for-")
	})
}

// TestGroupOptions: a group's security group, placement group and public
// address setting reach the create request.
func TestGroupOptions(t *testing.T) {
	const sg, pg = "33333333-3333-4333-8333-333333333333", "44444444-4444-4444-8444-444444444444"
	b := newBackend(t, 5, `
  - {name: l4, cloud: scaleway, instanceType: L4-1-24G, locations: [fr-par-2], maxSize: 2,
     cloudOptions: {securityGroupID: `+sg+`, placementGroupID: `+pg+`, publicIP: "false"}}
`, scwtest.Options{})
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	sv := b.fake.Servers()[0]
	if sv.SecurityGroup != sg || sv.PlacementGroup != pg || sv.PublicIP {
		t.Fatalf("server %+v", sv)
	}
}

// TestDeletingManyServersCostsLinearCalls: deleting 20 servers deletes
// each volume with a bounded number of calls, not one per volume per
// delete (a budget-eating quadratic the scale-up benchmark once showed).
func TestDeletingManyServersCostsLinearCalls(t *testing.T) {
	b := newBackend(t, 30, `
  - {name: l4, cloud: scaleway, instanceType: L4-1-24G, locations: [fr-par-2], maxSize: 20}
`, scwtest.Options{})
	ctx := context.Background()
	if err := b.mgr.IncreaseSize(ctx, "l4", 20); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "20 running", func() bool { return len(b.running(t, "l4")) == 20 })
	var ids []string
	for _, in := range b.running(t, "l4") {
		ids = append(ids, in.ProviderID)
	}
	if err := b.mgr.DeleteNodes(ctx, "l4", ids); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "every server and volume gone", func() bool { return b.fake.ServerCount() == 0 && b.fake.VolumeCount() == 0 })
	n := b.fake.Calls()["DELETE /block/v1/zones/{zone}/volumes/{id}"]
	t.Logf("%d volume deletes", n)
	if n > 100 {
		t.Fatalf("%d volume deletes for 20 volumes", n)
	}
}

// TestLostPowerOnAnswer: the power-on is carried out but its answer lost;
// the retry is refused (the server is starting), which is taken for the
// success it is: one server, running, not deleted.
func TestLostPowerOnAnswer(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	b.fake.LoseNextAnswer(http.MethodPost, "/action")
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	time.Sleep(300 * time.Millisecond)
	if n, creates := b.fake.ServerCount(), b.fake.Calls()["POST /instance/v1/zones/{zone}/servers"]; n != 1 || creates != 1 {
		t.Fatalf("%d servers, %d creates", n, creates)
	}
}

// TestRestartMidDeleteLeavesNoVolume: a process that stops while a server
// it terminated is still stopping leaves the server's boot volume (kept by
// Scaleway, detached and billed) to the next process, which deletes it
// once the server is gone, at its next lists rather than a sweep period
// later. Found by the chaos campaign (test/chaos).
func TestRestartMidDeleteLeavesNoVolume(t *testing.T) {
	b := newBackendDeleting(t, 5, groupsYAML, scwtest.Options{}, 2*time.Second)
	ctx := context.Background()
	if err := b.mgr.IncreaseSize(ctx, "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "one running", func() bool { return len(b.running(t, "l4")) == 1 })
	victim := b.running(t, "l4")[0]
	if err := b.mgr.DeleteNodes(ctx, "l4", []string{victim.ProviderID}); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the server stopping", func() bool { svs := b.fake.Servers(); return len(svs) == 1 && svs[0].State == "stopping" })
	b.stop()
	b.start(t)
	b.wait(t, "the server and its volume gone", func() bool { return b.fake.ServerCount() == 0 && b.fake.VolumeCount() == 0 })
}

// TestRefusedPowerOnRollsBack: a server made but refused its power-on is
// deleted before Create answers, and the error says so (cloud.ErrRolledBack),
// so that the core may send the order again even when its context ended
// meanwhile, instead of taking it for a lost answer.
func TestRefusedPowerOnRollsBack(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	prov := scaleway.New(b.client(t), b.opts)
	b.fake.FailNext(http.MethodPost, "/action", http.StatusBadRequest, "invalid_arguments", "cannot power on")
	_, err := prov.Create(context.Background(), cloud.CreateSpec{Name: "l4-refused", Group: "l4", InstanceType: "L4-1-24G",
		Location: "fr-par-2", CapacityType: cloud.OnDemand})
	if !errors.Is(err, cloud.ErrRolledBack) || !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("create: %v, want an invalid request rolled back", err)
	}
	if n := b.fake.ServerCount(); n != 0 {
		t.Fatalf("%d servers left after a rolled-back create", n)
	}
}

// warmProvider returns a provider over b's fake that has ordered and
// deleted one server: its image is resolved and cached, so that a test's
// order makes only its create and its power-on.
func warmProvider(t *testing.T, b *backend) *scaleway.Cloud {
	t.Helper()
	prov := scaleway.New(b.client(t), b.opts)
	warm, err := prov.Create(context.Background(), cloud.CreateSpec{Name: "l4-warm", Group: "l4", InstanceType: "L4-1-24G",
		Location: "fr-par-2", CapacityType: cloud.OnDemand})
	if err != nil {
		t.Fatal(err)
	}
	if err := prov.Delete(context.Background(), warm); err != nil {
		t.Fatal(err)
	}
	return prov
}

// TestRollbackWaitsForTheServerToGo: a create says it rolled back only
// once the server it made is gone, not while it is still terminating. Here
// the order's context ends while its power-on is in flight; the API
// carries the power-on out, so the server is starting when it is discarded
// and goes only after a terminate. The core sends a rolled-back order
// again under the same name (the next core does, after a restart): a
// server still listed beside the new one is two of one name, both billing
// (seen in a chaos campaign as a cluster cost cap passed while an order
// "landed twice"). With its context ended the order does not wait (its
// core is stopping): the outcome is unknown, and a list settles it.
func TestRollbackWaitsForTheServerToGo(t *testing.T) {
	b := newBackendDeleting(t, 5, groupsYAML, scwtest.Options{}, time.Second)
	prov := warmProvider(t, b)
	const latency = 200 * time.Millisecond
	b.fake.SetLatency(latency)
	// The create answers at 1×latency; the power-on is sent then and
	// carried out at 2×; the context ends in between.
	ctx, cancel := context.WithTimeout(context.Background(), latency*3/2)
	defer cancel()
	_, err := prov.Create(ctx, cloud.CreateSpec{Name: "l4-slow-to-go", Group: "l4", InstanceType: "L4-1-24G",
		Location: "fr-par-2", CapacityType: cloud.OnDemand})
	if errors.Is(err, cloud.ErrRolledBack) || !errors.Is(err, cloud.ErrOutcomeUnknown) {
		t.Fatalf("create: %v, want an unknown outcome: its server is still terminating", err)
	}
	listed := false
	for _, sv := range b.fake.Servers() {
		listed = listed || sv.Name == "l4-slow-to-go"
	}
	if !listed {
		t.Fatal("the server is gone already: the test no longer meets a terminating one")
	}
}

// TestRollbackWaitsForATerminatingServer: an order whose power-on took
// effect although every answer said otherwise (the first answer lost, the
// reads that would show the server starting failing, the second power-on
// refused) is discarded while its server is starting: a terminate, which
// takes a while. Create says it rolled back only once the server is gone.
func TestRollbackWaitsForATerminatingServer(t *testing.T) {
	b := newBackendDeleting(t, 5, groupsYAML, scwtest.Options{}, time.Second)
	b.stop() // no core's reads between the rules below and the order
	prov := warmProvider(t, b)
	b.fake.LoseNextAnswer(http.MethodPost, "/action")
	for range 10 { // every attempt of the reads after each power-on (5 each)
		b.fake.FailNext(http.MethodGet, "", http.StatusInternalServerError, "internal_error", "internal error")
	}
	_, err := prov.Create(context.Background(), cloud.CreateSpec{Name: "l4-terminating", Group: "l4", InstanceType: "L4-1-24G",
		Location: "fr-par-2", CapacityType: cloud.OnDemand})
	if !errors.Is(err, cloud.ErrRolledBack) {
		t.Fatalf("create: %v, want it rolled back; calls %v", err, b.fake.Calls())
	}
	for _, sv := range b.fake.Servers() {
		if sv.Name == "l4-terminating" {
			t.Fatalf("the rolled-back server is still listed (%s) when Create answers", sv.State)
		}
	}
}

// TestLostPowerOnAnswerAndAFailedRead: the power-on's answer is lost,
// the second power-on is refused (the server is starting), and the first
// reads of the server fail: the read is retried, finds the server
// starting, and the order stands. Before, one failed read made the
// refusal final; a standby start handed to a launch then failed with
// ErrInvalid although its server ran.
func TestLostPowerOnAnswerAndAFailedRead(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	b.stop()
	prov := warmProvider(t, b)
	b.fake.LoseNextAnswer(http.MethodPost, "/action")
	for range 2 {
		b.fake.FailNext(http.MethodGet, "", http.StatusInternalServerError, "internal_error", "internal error")
	}
	in, err := prov.Create(context.Background(), cloud.CreateSpec{Name: "l4-read-failed", Group: "l4", InstanceType: "L4-1-24G",
		Location: "fr-par-2", CapacityType: cloud.OnDemand})
	if err != nil {
		t.Fatalf("create: %v, want the order to stand; calls %v", err, b.fake.Calls())
	}
	n := 0
	for _, sv := range b.fake.Servers() {
		if sv.Name != in.Name {
			continue
		}
		if n++; sv.State != "starting" && sv.State != "running" {
			t.Fatalf("the server is %s", sv.State)
		}
	}
	if n != 1 {
		t.Fatalf("%d servers named %s, want 1", n, in.Name)
	}
}

// TestDiscardReadsTheStateAgain: a delete refused because the server's
// state moved after it was read (a power-on accepted before the read,
// carried out after it: the API refuses deleting a server that is not
// stopped) reads the state again and deletes as it now allows, so a
// rolled-back create leaves nothing (seen in a chaos campaign, where the
// refused discard left a server billing under an order sent again).
func TestDiscardReadsTheStateAgain(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, scwtest.Options{})
	prov := scaleway.New(b.client(t), b.opts)
	b.fake.FailNext(http.MethodPost, "/action", http.StatusBadRequest, "invalid_arguments", "cannot power on")
	b.fake.FailNext(http.MethodDelete, "", http.StatusBadRequest, "invalid_request_error", "instance must be powered off to be deleted (state: starting)")
	_, err := prov.Create(context.Background(), cloud.CreateSpec{Name: "l4-raced", Group: "l4", InstanceType: "L4-1-24G",
		Location: "fr-par-2", CapacityType: cloud.OnDemand})
	if !errors.Is(err, cloud.ErrRolledBack) {
		t.Fatalf("create: %v, want it rolled back", err)
	}
	if n := b.fake.ServerCount(); n != 0 {
		t.Fatalf("%d servers left after a rolled-back create", n)
	}
	if n := b.fake.Calls()["DELETE /instance/v1/zones/{zone}/servers/{id}"]; n != 2 {
		t.Fatalf("%d server deletes, want the refused one and one after reading again", n)
	}
}

// TestStandbyPool: a group's standby server is made, booted, powered off
// (`poweroff`, which bills its volume only) and tagged as standby, so the
// core counts it in the pool and no front end sees it; a scale-up powers
// it on (the tag goes), and the pool makes another.
func TestStandbyPool(t *testing.T) {
	b := newBackend(t, 5, groupsYAML+"    standby: {size: 1, warmFor: 50ms}\n", scwtest.Options{})
	standby := func() []scwtest.ServerView { return standbyServers(b) }
	pooled := poolReady(t, b)
	if n, _ := b.mgr.TargetSize("l4"); n != 0 {
		t.Fatalf("target %d with a standby server only", n)
	}
	if insts, _ := b.mgr.Instances("l4"); len(insts) != 0 {
		t.Fatalf("front ends see %+v", insts)
	}
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the standby server running for the scale-up", func() bool {
		r := b.running(t, "l4")
		return len(r) == 1 && strings.HasSuffix(r[0].ProviderID, "/"+pooled.ID)
	})
	for _, sv := range b.fake.Servers() {
		if sv.ID == pooled.ID && slices.Contains(sv.Tags, "gpuscaler-standby") {
			t.Fatalf("the started server keeps its standby tag: %v", sv.Tags)
		}
	}
	b.wait(t, "the pool refilled", func() bool { s := standby(); return len(s) == 1 && s[0].ID != pooled.ID })
	if v, s := b.fake.VolumeCount(), b.fake.ServerCount(); v != s {
		t.Fatalf("%d volumes for %d servers", v, s)
	}
}

// standbyServers are the fake's powered-off servers tagged as standby.
func standbyServers(b *backend) []scwtest.ServerView {
	var out []scwtest.ServerView
	for _, sv := range b.fake.Servers() {
		if sv.State == "stopped" && slices.Contains(sv.Tags, "gpuscaler-standby") {
			out = append(out, sv)
		}
	}
	return out
}

// poolReady waits for one powered-off standby server, known so by the core
// (its poweroff answered: a scale-up before that orders afresh rather than
// wait), and returns it.
func poolReady(t *testing.T, b *backend) scwtest.ServerView {
	t.Helper()
	b.wait(t, "a powered-off standby server", func() bool {
		return len(standbyServers(b)) == 1 && strings.Contains(b.logs.String(), "standby instance warmed and stopped")
	})
	return standbyServers(b)[0]
}

// TestStandbyServerHandedOverToALaunch: a launch from standby (Karpenter's
// Create) renames the pool's powered-off server for the launch and moves
// its tags from the group to the owner in one PATCH (sent again when its
// answer is lost: it sets values), then powers it on. The provider ID,
// which holds the server's ID, stays; the pool refills.
func TestStandbyServerHandedOverToALaunch(t *testing.T) {
	b := newBackend(t, 5, groupsYAML+"    standby: {size: 1, warmFor: 50ms}\n", scwtest.Options{})
	pooled := poolReady(t, b)
	b.fake.LoseNextAnswer("PATCH", "/servers/"+pooled.ID)
	in, err := b.mgr.Launch(context.Background(), nodegroup.LaunchRequest{Owner: "karpenter", Cloud: scaleway.Name, Name: "nc-1",
		Template: "l4", Standby: true, Offering: cloud.OfferingKey{InstanceType: "L4-1-24G", Location: pooled.Zone, CapacityType: cloud.OnDemand}})
	if err != nil {
		t.Fatal(err)
	}
	if in.Name != "nc-1" || in.ProviderID != scaleway.ProviderID(pooled.Zone, pooled.ID) || in.Owner != "karpenter" {
		t.Fatalf("launched %+v from the standby server %s", in, pooled.ID)
	}
	for _, sv := range b.fake.Servers() {
		if sv.ID != pooled.ID {
			continue
		}
		if sv.Name != "nc-1" || !slices.Contains(sv.Tags, "gpuscaler-owner=karpenter") || slices.ContainsFunc(sv.Tags, func(t string) bool {
			return strings.HasPrefix(t, "gpuscaler-group=") || t == "gpuscaler-standby"
		}) || sv.State == "stopped" {
			t.Fatalf("the handed-over server: %s %s %v", sv.Name, sv.State, sv.Tags)
		}
	}
	if _, err := b.mgr.Launch(context.Background(), nodegroup.LaunchRequest{Owner: "karpenter", Cloud: scaleway.Name, Name: "nc-2",
		Template: "l4", Standby: true, Offering: cloud.OfferingKey{InstanceType: "L4-1-24G", Location: pooled.Zone, CapacityType: cloud.OnDemand}}); !errors.Is(err, nodegroup.ErrNoStandby) {
		t.Fatalf("a second launch from the emptied pool: %v, want ErrNoStandby", err)
	}
	b.wait(t, "the pool refilled", func() bool { s := standbyServers(b); return len(s) == 1 && s[0].ID != pooled.ID })
	if got, ok := b.mgr.LaunchedNamed("nc-1"); !ok || got.ProviderID != in.ProviderID {
		t.Fatalf("the launch after the refill: %+v %v", got, ok)
	}
	// Its boot volume keeps the pool's name; attached to a listed server,
	// it is that server's, not a volume to sweep again at every list once
	// a server lost (here another launch's, powered off behind gpuscaler's
	// back) has made a sweep due.
	_, err = b.mgr.Launch(context.Background(), nodegroup.LaunchRequest{Owner: "karpenter", Cloud: scaleway.Name, Name: "nc-2",
		Template: "l4", Offering: cloud.OfferingKey{InstanceType: "L4-1-24G", Location: pooled.Zone, CapacityType: cloud.OnDemand}})
	if err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the other launch running", func() bool { got, _ := b.mgr.LaunchedNamed("nc-2"); return got.State == nodegroup.StateRunning })
	if !b.fake.Lose("nc-2") { // powered off behind gpuscaler's back: its volume is to be swept
		t.Fatal("nc-2 is not running at the cloud")
	}
	b.wait(t, "the other launch gone", func() bool { _, ok := b.mgr.LaunchedNamed("nc-2"); return !ok })
	time.Sleep(300 * time.Millisecond)
	const sweeps = "GET /block/v1/zones/{zone}/volumes"
	before := b.fake.Calls()[sweeps]
	time.Sleep(time.Second) // ten lists
	if n := b.fake.Calls()[sweeps] - before; n > 3 {
		t.Errorf("%d volume lists in ten server lists after the hand-over, want the volumes swept no more often than usual", n)
	}
	if v, s := b.fake.VolumeCount(), b.fake.ServerCount(); v != s {
		t.Fatalf("%d volumes for %d servers", v, s)
	}
}

// TestTwinsVolumeIsSwept: an order that landed twice leaves two servers
// of one name, and so two boot volumes of one name. A process that
// deletes the second and stops before its volume is free leaves that
// volume to the next process, whose sweep must not take it for the
// volume of the twin still listed: it is attached to nothing. Found by
// the chaos campaign (scaleway, seed 1795806116402739624: "8 volumes for
// 7 servers").
func TestTwinsVolumeIsSwept(t *testing.T) {
	b := newBackendDeleting(t, 5, groupsYAML, scwtest.Options{}, 300*time.Millisecond)
	b.stop() // no core: the twins are the test's
	ctx := context.Background()
	first := scaleway.New(b.client(t), b.opts)
	spec := cloud.CreateSpec{Name: "l4-twin", Group: "l4", InstanceType: "L4-1-24G", Location: "fr-par-2", CapacityType: cloud.OnDemand}
	var twins []cloud.Instance
	for range 2 {
		in, err := first.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		twins = append(twins, in)
	}
	if n := b.fake.VolumeCount(); n != 2 {
		t.Fatalf("%d volumes for two servers", n)
	}
	b.wait(t, "both running", func() bool {
		svs := b.fake.Servers()
		return len(svs) == 2 && svs[0].State == "running" && svs[1].State == "running"
	})
	if err := first.Delete(ctx, twins[1]); err != nil {
		t.Fatal(err)
	}
	// The process stops here; the next one lists.
	next := scaleway.New(b.client(t), b.opts)
	b.wait(t, "the deleted twin's volume gone, the other's kept", func() bool {
		if _, err := next.List(ctx); err != nil {
			return false
		}
		return b.fake.ServerCount() == 1 && b.fake.VolumeCount() == 1
	})
}

// A standby server handed to Karpenter keeps its boot volume's first name.
// Deleted by its new name, with the process stopping before the volume is
// free, the next process sweeps the volume as soon as the server is gone,
// not ten minutes on. Found by a chaos campaign on the virtual clock
// (scaleway, seed 1795846291256238605: "7 volumes for 6 servers").
func TestHandedOverServersVolumeIsSwept(t *testing.T) {
	b := newBackendDeleting(t, 5, groupsYAML, scwtest.Options{}, 300*time.Millisecond)
	b.stop() // no core: the server is the test's
	ctx := context.Background()
	first := scaleway.New(b.client(t), b.opts)
	in, err := first.Create(ctx, cloud.CreateSpec{Name: "l4-pooled", Group: "l4", InstanceType: "L4-1-24G", Location: "fr-par-2", CapacityType: cloud.OnDemand})
	if err != nil {
		t.Fatal(err)
	}
	b.wait(t, "running", func() bool { svs := b.fake.Servers(); return len(svs) == 1 && svs[0].State == "running" })
	if err := first.Stop(ctx, in); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "stopped", func() bool { svs := b.fake.Servers(); return len(svs) == 1 && svs[0].State == "stopped" })
	claimed, err := first.Transfer(ctx, in, "nc-1", "karpenter")
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "running again", func() bool { svs := b.fake.Servers(); return len(svs) == 1 && svs[0].State == "running" })
	if err := first.Delete(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	// The process stops here; the next one lists while the server is
	// being deleted, and again after it is gone, as its syncs do.
	next := scaleway.New(b.client(t), b.opts)
	if _, err := next.List(ctx); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "the server gone", func() bool { return b.fake.ServerCount() == 0 })
	for range 3 {
		if _, err := next.List(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if left := b.fake.OrphanVolumes(); len(left) != 0 {
		t.Fatalf("volumes left after three lists: %v (swept only every 10 minutes)", left)
	}
}
