// Package conformance is the conformance suite of the cloud backends: the
// node-group core, driven as the front ends drive it, over a backend,
// over that cloud's in-process fake of its REST API. Every backend runs it
// (Run) with one Backend; a new cloud is a fake that implements Fake and
// one call of Run. What is true of one cloud only stays in that backend's
// own tests.
package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

// Op is a kind of call to a cloud's API.
type Op int

const (
	// Create orders an instance (a server create, a MIG's createInstances).
	Create Op = iota
	// Delete deletes or terminates an instance.
	Delete
	// List lists the instances.
	List
)

func (o Op) String() string {
	switch o {
	case Create:
		return "create"
	case Delete:
		return "delete"
	case List:
		return "list"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Fake is how the suite drives a cloud's fake API.
type Fake interface {
	// Fail makes the next call of op fail as the cloud fails a call it
	// could not serve (a 5xx, or a conflict the cloud asks to retry),
	// in the cloud's own words.
	Fail(op Op)
	// Lose makes the cloud carry out the next call of op and lose its
	// answer. A cloud whose create runs in the background (a queued
	// command) keeps it running past the core's ResolveAfter.
	Lose(op Op)
	// Creates is how many create calls the cloud has received.
	Creates() int
	// Instances are the cloud's instances as the cloud sees them; those
	// pending or running are billed.
	Instances() []cloud.Instance
	// Left describes what the cloud holds of the cluster: instances and
	// what they leave behind (volumes, startup scripts, a MIG's target
	// size); "" for nothing.
	Left() string
	// StockOut makes the group's instance type out of stock in a
	// location, as the cloud says so (a pre-check's answer, a create's
	// error, or an order that fails after it was taken).
	StockOut(location string)
}

// Quotas is a Fake whose cloud's quota answers were recorded: the suite
// runs QuotaFailsCleanly on it.
type Quotas interface {
	Fake
	// Quota caps the instances of the group's type the account may run.
	Quota(instances int)
}

// ErrorAnswers is a Fake whose cloud answers errors over HTTP: the suite
// runs ErrorAnswersAreBounded on it.
type ErrorAnswers interface {
	Fake
	// FailListWith makes the next list fail with a 400 whose message, in
	// the cloud's error shape, is text.
	FailListWith(text string)
}

// Backend is one cloud under test.
type Backend struct {
	// Cloud is the cloud's name in the config.
	Cloud string
	// Scheme is the provider IDs' scheme when it is not the cloud's name
	// (GCP's "gce").
	Scheme string
	// Clouds is the config's clouds entry for the cloud, e.g. "verda: {}".
	Clouds string
	// Group is the config of the node group "g" the suite scales, a YAML
	// flow mapping: on the cloud, two locations, maxSize 8, each offering
	// of the fake holding at least 4 instances.
	Group string
	// Fake is the cloud's fake API.
	Fake Fake
	// Provider builds the backend over the fake as a new process does: a
	// new client, nothing cached.
	Provider func(log *slog.Logger) cloud.Provider
	// Bootstrap renders the startup scripts; nil for none.
	Bootstrap nodegroup.Bootstrapper
	// Secrets must never reach the logs.
	Secrets []string
	// Credentials are the secrets the backend's client holds (its API
	// keys): an error answer that echoes them is redacted.
	Credentials []string
	// StockOutWords are the cloud's own words for a stock-out (its error
	// code), which the core's logs must carry; "" when the cloud has none.
	StockOutWords string
	// Launches: the cloud takes orders outside any group, for the launch
	// API (Karpenter); a GCP MIG member belongs to its MIG.
	Launches bool
}

// resolveAfter is the core's wait for a list to show an order: longer
// than any fake's list lag.
const resolveAfter = 300 * time.Millisecond

// Run runs the suite: each test gets a fresh backend from newBackend.
// The cloud's abilities (quotas, launches) are read from one backend
// built first; a test of an ability the cloud lacks is not run.
func Run(t *testing.T, newBackend func(t *testing.T) *Backend) {
	probe := newBackend(t)
	_, quotas := probe.Fake.(Quotas)
	_, errorAnswers := probe.Fake.(ErrorAnswers)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, h *harness)
		runs bool
	}{
		{"ScaleUpAndDown", scaleUpAndDown, true},
		{"LostCreateAnswerOrdersOnce", lostCreateAnswerOrdersOnce, true},
		{"RestartMidCreate", restartMidCreate, true},
		{"AnotherReplicasInstanceIsAdopted", anotherReplicasInstanceIsAdopted, true},
		{"ScaleCyclesLeaveNothing", scaleCyclesLeaveNothing, true},
		{"StockOutMovesToNextLocation", stockOutMovesToNextLocation, true},
		{"QuotaFailsCleanly", quotaFailsCleanly, quotas},
		{"ErrorAnswersAreBounded", errorAnswersAreBounded, errorAnswers},
		{"LaunchRecordsOwner", launchRecordsOwner, probe.Launches},
		{"AnotherInstallIsLeftAlone", anotherInstallIsLeftAlone, true},
	} {
		if !tc.runs {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, newBackend(t))
			tc.run(t, h)
		})
	}
}

// harness is the core over one backend, restartable as a process is.
type harness struct {
	b    *Backend
	cfg  *config.Config
	logs *coretest.LogBuffer
	mgr  *nodegroup.Manager
	stop func()
	// install is the install ID the core records (nodegroup.Options).
	install string
}

// installID is the install ID of the suite's cores.
const installID = "conf0install"

func start(t *testing.T, b *Backend) *harness {
	t.Helper()
	cfg, err := config.Parse([]byte("clusterName: prod\nsync: {period: 100ms, requestsPerSecond: 2000}\nclouds:\n  " + b.Clouds +
		"\nnodeGroups:\n  - " + b.Group + "\n"))
	if err != nil {
		t.Fatalf("the backend's config: %v", err)
	}
	h := &harness{b: b, cfg: cfg, logs: &coretest.LogBuffer{}, install: installID}
	h.restart(t)
	t.Cleanup(func() {
		h.stop()
		for _, s := range b.Secrets {
			if strings.Contains(h.logs.String(), s) {
				t.Errorf("a secret (%.6s…) reached the logs", s)
			}
		}
	})
	return h
}

// restart runs a new core and backend, as a new process would; the one
// running before, if any, stops first.
func (h *harness) restart(t *testing.T) {
	t.Helper()
	if h.stop != nil {
		h.stop()
	}
	log := coretest.Logger(h.logs)
	h.mgr, h.stop = coretest.Start(t, h.cfg, h.b.Cloud, h.b.Provider(log),
		nodegroup.Options{Logger: log, Bootstrap: h.b.Bootstrap, ResolveAfter: resolveAfter, Install: h.install})
}

func (h *harness) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	coretest.Wait(t, what, h.logs, cond)
}

func (h *harness) running(t *testing.T) []nodegroup.Instance {
	t.Helper()
	return coretest.Running(t, h.mgr, "g")
}

func (h *harness) target(t *testing.T) int {
	t.Helper()
	n, err := h.mgr.TargetSize("g")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// scaleUpAndDown: instances ordered run under provider IDs that lead back
// to their group; deleted, they leave nothing at the cloud.
func scaleUpAndDown(t *testing.T, h *harness) {
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, "g", 2); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "2 running", func() bool { return len(h.running(t)) == 2 })
	scheme := cmp.Or(h.b.Scheme, h.b.Cloud)
	for _, in := range h.running(t) {
		if !strings.HasPrefix(in.ProviderID, scheme+"://") {
			t.Errorf("instance %s: provider ID %q is not the cloud's", in.Name, in.ProviderID)
		}
		if g, ok := h.mgr.GroupForProviderID(in.ProviderID); !ok || g != "g" {
			t.Errorf("instance %s: its provider ID leads to group %q, want g", in.Name, g)
		}
	}
	victim := h.running(t)[0]
	if err := h.mgr.DeleteNodes(ctx, "g", []string{victim.ProviderID}); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "one left", func() bool { insts, _ := h.mgr.Instances("g"); return len(insts) == 1 })
	if n := h.target(t); n != 1 {
		t.Fatalf("target %d after deleting 1 of 2", n)
	}
	rest := h.running(t)
	if len(rest) != 1 || rest[0].Name == victim.Name {
		t.Fatalf("running %+v after deleting %s", rest, victim.Name)
	}
	if err := h.mgr.DeleteNodes(ctx, "g", []string{rest[0].ProviderID}); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "nothing left at the cloud", func() bool { return h.b.Fake.Left() == "" })
	if creates := h.b.Fake.Creates(); creates != 2 {
		t.Fatalf("%d creates for 2 instances", creates)
	}
}

// lostCreateAnswerOrdersOnce: a create carried out whose answer is lost is
// found by a list, never ordered again.
func lostCreateAnswerOrdersOnce(t *testing.T, h *harness) {
	h.b.Fake.Lose(Create)
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "1 running", func() bool { return len(h.running(t)) == 1 })
	time.Sleep(2 * resolveAfter) // several syncs past ResolveAfter
	if creates := h.b.Fake.Creates(); creates != 1 {
		t.Fatalf("%d creates for one instance", creates)
	}
	if n := len(h.running(t)); n != 1 || h.target(t) != 1 {
		t.Fatalf("%d running, target %d; want 1 and 1", n, h.target(t))
	}
}

// restartMidCreate: the process stops while its creates are in flight.
// The next one finds what the cloud made and orders nothing for it; what
// the first left unfinished (a server made but never started, whose
// create's answer the stop cut off) it deletes, and the front end asks
// again for what is missing, as cluster-autoscaler does for a target
// short of its plan. At no moment are more than two instances billed.
func restartMidCreate(t *testing.T, h *harness) {
	ctx := context.Background()
	billed := h.watchBilled(t)
	if err := h.mgr.IncreaseSize(ctx, "g", 2); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "2 creates sent", func() bool { return h.b.Fake.Creates() == 2 })
	h.restart(t)
	h.wait(t, "2 running after the restart", func() bool {
		if n := h.target(t); n < 2 {
			_ = h.mgr.IncreaseSize(ctx, "g", 2-n)
		}
		return len(h.running(t)) == 2
	})
	time.Sleep(2 * resolveAfter)
	if n := h.target(t); n != 2 {
		t.Fatalf("target %d after the restart, want 2", n)
	}
	if insts, _ := h.mgr.Instances("g"); len(insts) != 2 {
		t.Fatalf("%d members after the restart, want 2", len(insts))
	}
	switch n := billed(); {
	case n > 2:
		t.Fatalf("%d instances billed at once for two (%d creates)\n%s", n, h.b.Fake.Creates(), h.logs)
	case n < 2:
		t.Fatalf("the fake never showed 2 billed instances (%d): Fake.Instances does not show the cloud", n)
	}
}

// watchBilled samples the cloud's billed instances (pending or running)
// until the test ends; the returned func reports the most seen at once.
func (h *harness) watchBilled(t *testing.T) func() int {
	var mu sync.Mutex
	most := 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			n := 0
			for _, in := range h.b.Fake.Instances() {
				if in.State == cloud.StatePending || in.State == cloud.StateRunning {
					n++
				}
			}
			mu.Lock()
			most = max(most, n)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return most
	}
}

// anotherReplicasInstanceIsAdopted: an instance of the group that another
// process ordered joins the group (the target rises), and the core orders
// nothing for it.
func anotherReplicasInstanceIsAdopted(t *testing.T, h *harness) {
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "1 running", func() bool { return len(h.running(t)) == 1 })
	g := h.cfg.NodeGroups[0]
	other := h.b.Provider(slog.New(slog.DiscardHandler))
	spec := cloud.CreateSpec{Name: "g-0ther0rep1", Group: "g", InstanceType: g.InstanceType, Location: g.Locations[len(g.Locations)-1],
		CapacityType: cloud.OnDemand, Image: g.Image, DiskGiB: g.DiskSizeGiB, Options: g.CloudOptions}
	if _, err := other.Create(ctx, spec); err != nil {
		t.Fatalf("the other replica's create: %v", err)
	}
	h.wait(t, "2 running", func() bool { return len(h.running(t)) == 2 })
	if n := h.target(t); n != 2 {
		t.Fatalf("target %d with the other replica's instance, want 2", n)
	}
	if creates := h.b.Fake.Creates(); creates != 2 {
		t.Fatalf("%d creates: one each, want 2", creates)
	}
}

// scaleCyclesLeaveNothing: 100 random scale-ups and scale-downs while
// calls fail and answers are lost, then scale to zero: the cloud holds
// nothing of the cluster.
func scaleCyclesLeaveNothing(t *testing.T, h *harness) {
	coretest.ScaleCycles(t, h.mgr, "g", 8, func(rng *rand.Rand) {
		switch rng.IntN(10) {
		case 0:
			h.b.Fake.Fail(Delete)
		case 1:
			h.b.Fake.Fail(List)
		case 2:
			h.b.Fake.Lose(Create)
		}
	}, h.b.Fake.Left)
}

// stockOutMovesToNextLocation: the group's first location is out of
// stock; the order lands in the next one, and nothing of it is left (or
// billed) in the first.
func stockOutMovesToNextLocation(t *testing.T, h *harness) {
	g := h.cfg.NodeGroups[0]
	first, next := g.Locations[0], g.Locations[1]
	h.b.Fake.StockOut(first)
	billed := h.watchBilled(t)
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "1 running", func() bool { return len(h.running(t)) == 1 })
	if in := h.running(t)[0]; in.Location != next {
		t.Fatalf("ordered in %s, want %s after %s's stock-out", in.Location, next, first)
	}
	h.wait(t, "nothing in the location out of stock", func() bool {
		for _, in := range h.b.Fake.Instances() {
			if in.Location == first {
				return false
			}
		}
		return true
	})
	if w := h.b.StockOutWords; w != "" && !strings.Contains(h.logs.String(), w) {
		t.Errorf("the cloud's words for the stock-out (%s) are not in the logs", w)
	}
	if n := billed(); n > 1 {
		t.Fatalf("%d instances billed at once for one", n)
	}
	h.scaleToZero(t)
}

// quotaFailsCleanly: past the account's quota the order fails as quota,
// reported on the instance, in every location; what was had runs, and
// nothing else is left or billed.
func quotaFailsCleanly(t *testing.T, h *harness) {
	h.b.Fake.(Quotas).Quota(1)
	billed := h.watchBilled(t)
	if err := h.mgr.IncreaseSize(context.Background(), "g", 2); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "a quota failure", func() bool {
		insts, _ := h.mgr.Instances("g")
		for _, in := range insts {
			if in.ErrorCode == nodegroup.CodeQuotaExceeded {
				return true
			}
		}
		return false
	})
	h.wait(t, "1 running", func() bool { return len(h.running(t)) == 1 })
	if n := billed(); n > 1 {
		t.Fatalf("%d instances billed at once under a quota of 1", n)
	}
	h.scaleToZero(t)
}

// launchRecordsOwner: an instance launched outside any group (the launch
// API, for Karpenter) is recorded at the cloud as its owner's: a new
// process lists it as that owner's, in no group.
func launchRecordsOwner(t *testing.T, h *harness) {
	ctx := context.Background()
	g := h.cfg.NodeGroups[0]
	in, err := h.mgr.Launch(ctx, nodegroup.LaunchRequest{Owner: "karpenter", Cloud: h.b.Cloud, Template: g.Name,
		Offering: cloud.OfferingKey{InstanceType: g.InstanceType, Location: g.Locations[0], CapacityType: cloud.OnDemand}})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := h.b.Provider(slog.New(slog.DiscardHandler)).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Owner != "karpenter" || listed[0].Group != "" || listed[0].Name != in.Name || listed[0].InstanceType != g.InstanceType {
		t.Fatalf("a new process lists %+v, want %s, owned by karpenter, in no group", listed, in.Name)
	}
	h.restart(t)
	h.wait(t, "the launched instance known after a restart", func() bool {
		got, ok := h.mgr.LaunchedInstance(in.ProviderID)
		return ok && got.Owner == "karpenter"
	})
	if err := h.mgr.Terminate(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "nothing left at the cloud", func() bool { return h.b.Fake.Left() == "" })
}

// scaleToZero deletes every member of the group, failed orders included,
// and waits until the cloud holds nothing of the cluster.
func (h *harness) scaleToZero(t *testing.T) {
	t.Helper()
	insts, err := h.mgr.Instances("g")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(insts))
	for _, in := range insts {
		ids = append(ids, in.ProviderID)
	}
	if len(ids) > 0 {
		if err := h.mgr.DeleteNodes(context.Background(), "g", ids); err != nil {
			t.Fatal(err)
		}
	}
	h.wait(t, "nothing left at the cloud", func() bool { return h.b.Fake.Left() == "" })
}

// errorAnswersAreBounded: an error answer of 2 MB, with the client's
// credentials in it, becomes an error of at most 1 KiB that holds none of
// them, and no log line of the backend is longer.
func errorAnswersAreBounded(t *testing.T, h *harness) {
	const bound = 1 << 10
	var text strings.Builder
	for _, s := range h.b.Credentials {
		text.WriteString(s + " ")
	}
	text.WriteString(strings.Repeat("an echoed request\n", 2<<20/18))
	for _, s := range h.b.Credentials {
		text.WriteString(" " + s)
	}
	// The core's own lists would take the answer first.
	h.stop()
	h.stop = func() {}
	h.b.Fake.(ErrorAnswers).FailListWith(text.String())
	logs := &coretest.LogBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := h.b.Provider(slog.New(slog.NewTextHandler(logs, nil))).List(ctx)
	if err == nil {
		t.Fatal("the list succeeded through its error answer")
	}
	if n := len(err.Error()); n > bound {
		t.Errorf("the error is %d bytes, want at most %d: %.300s…", n, bound, err)
	}
	for _, s := range h.b.Credentials {
		if strings.Contains(err.Error()+logs.String(), s) {
			t.Errorf("a credential (%.6s…) is in the error or the logs", s)
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2*bound {
			t.Errorf("a log line of %d bytes: %.300s…", len(line), line)
		}
	}
}

// anotherInstallIsLeftAlone: the cloud records the install ID of the
// core that ordered each instance, and lists it. A core of another
// install that shares the cluster name refuses to start beside them,
// naming both installs; one that takes the first install over starts and
// adopts them; and an instance a third install orders meanwhile is left
// alone: never a member, never deleted.
func anotherInstallIsLeftAlone(t *testing.T, h *harness) {
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "1 running", func() bool { return len(h.running(t)) == 1 })
	first := h.running(t)[0]
	listed, err := h.b.Provider(slog.New(slog.DiscardHandler)).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Install != installID {
		t.Fatalf("a new process lists %+v, want one instance of install %s", listed, installID)
	}
	h.stop()
	h.stop = func() {}

	// Another install, same cluster name: refused, naming both.
	log := coretest.Logger(h.logs)
	mgr, err := nodegroup.New(h.cfg, map[string]cloud.Provider{h.b.Cloud: h.b.Provider(log)},
		nodegroup.Options{Logger: log, ResolveAfter: resolveAfter, Install: "other0install"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	err = mgr.Start(sctx)
	cancel()
	mgr.Wait()
	var foreign *nodegroup.ForeignInstallError
	if !errors.Is(err, nodegroup.ErrForeignInstall) || !errors.As(err, &foreign) {
		t.Fatalf("another install's core started beside the instances of %s: %v", installID, err)
	}
	for _, want := range []string{installID, "other0install", first.Name, "ownership.takeOver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %q: %v", want, err)
		}
	}

	// The same install, taking the first over: the instance is its own.
	cfg := *h.cfg
	cfg.Ownership.TakeOver = []string{installID}
	h.cfg, h.install = &cfg, "other0install"
	h.restart(t)
	h.wait(t, "the taken-over instance adopted", func() bool { return len(h.running(t)) == 1 && h.target(t) == 1 })

	// A third install orders an instance of the group meanwhile.
	g := h.cfg.NodeGroups[0]
	third := h.b.Provider(slog.New(slog.DiscardHandler))
	spec := cloud.CreateSpec{Name: "g-th1rd0inst", Group: "g", InstanceType: g.InstanceType, Location: g.Locations[len(g.Locations)-1],
		CapacityType: cloud.OnDemand, Image: g.Image, DiskGiB: g.DiskSizeGiB, Options: g.CloudOptions, Install: "third0install"}
	if _, err := third.Create(ctx, spec); err != nil {
		t.Fatalf("the third install's create: %v", err)
	}
	var theirs cloud.Instance
	h.wait(t, "the third install's instance listed", func() bool {
		all, err := third.List(ctx)
		for _, in := range all {
			if in.Name == spec.Name && in.Install == "third0install" {
				theirs = in
			}
		}
		return err == nil && theirs.Name != ""
	})
	for range 10 { // ten syncs
		time.Sleep(h.cfg.Sync.Period.Duration)
		if n := h.target(t); n != 1 {
			t.Fatalf("target %d with another install's instance at the cloud, want 1", n)
		}
		insts, err := h.mgr.Instances("g")
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range insts {
			if in.Name == spec.Name {
				t.Fatalf("another install's instance %s became a member", in.Name)
			}
		}
	}
	if !strings.Contains(h.logs.String(), "third0install") {
		t.Error("the log does not name the other install")
	}
	if err := third.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	// Its lists finish what its delete left (a volume, a script).
	h.wait(t, "the third install's instance gone", func() bool {
		all, err := third.List(ctx)
		return err == nil && !slices.ContainsFunc(all, func(in cloud.Instance) bool { return in.Name == spec.Name })
	})
	h.scaleToZero(t)
}
