package gcp_test

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

const project = "gpu-project"

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type backend struct {
	fake   *gcptest.Server
	engine *sim.Engine
	mgr    *nodegroup.Manager
	cfg    *config.Config
	logs   *syncBuffer
	stop   func()
}

const groupsYAML = `
  - {name: l4, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1-a, us-central1-b], maxSize: 6,
     cloudOptions: {instanceGroup: gpu-l4}}
`

func newBackend(t *testing.T, capacity int, groups string, fakeOpts gcptest.Options) *backend {
	t.Helper()
	engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(30 * time.Millisecond), DeleteDelay: sim.Duration(30 * time.Millisecond),
		DefaultCapacity: &capacity}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fakeOpts.Project = project
	fake := gcptest.New(engine, fakeOpts)
	t.Cleanup(fake.Close)
	for _, z := range []string{"us-central1-a", "us-central1-b"} {
		fake.AddGroup(z, "gpu-l4", "g2-standard-8")
	}
	cfg, err := config.Parse([]byte("clusterName: prod\nsync: {period: 100ms, requestsPerSecond: 2000}\nclouds:\n  gcp: {project: " + project + "}\nnodeGroups:\n" + groups))
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{fake: fake, engine: engine, cfg: cfg, logs: &syncBuffer{}}
	b.start(t)
	t.Cleanup(func() { b.stop() })
	return b
}

func (b *backend) start(t *testing.T) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := gcp.NewClient(context.Background(), gcp.ClientOptions{Endpoint: b.fake.URL, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]gcp.Group{}
	for _, g := range b.cfg.NodeGroups {
		grp := gcp.Group{MachineType: g.InstanceType}
		for _, z := range g.Locations {
			grp.MIGs = append(grp.MIGs, gcp.MIG{Zone: z, Name: g.CloudOptions["instanceGroup"]})
		}
		groups[g.Name] = grp
	}
	prov := gcp.New(client, gcp.Options{Project: project, Groups: groups, PollInterval: 10 * time.Millisecond, CreateWatch: 2 * time.Second, Logger: log})
	mgr, err := nodegroup.New(b.cfg, map[string]cloud.Provider{gcp.Name: prov},
		nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), ResolveAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b.mgr = mgr
	b.stop = func() { cancel(); mgr.Wait() }
}

func (b *backend) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, b.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *backend) running(t *testing.T, group string) []nodegroup.Instance {
	t.Helper()
	insts, err := b.mgr.Instances(group)
	if err != nil {
		t.Fatal(err)
	}
	var out []nodegroup.Instance
	for _, in := range insts {
		if in.State == nodegroup.StateRunning {
			out = append(out, in)
		}
	}
	return out
}

// TestScaleUpAndDown: instances are created by name in the first zone's
// MIG (raising its target size), run with their gce:// provider IDs, and
// are deleted from the MIG (lowering it).
func TestScaleUpAndDown(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	ctx := context.Background()
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

// TestStockOutMovesToNextZone: the first zone's pool is exhausted: the
// MIG reports it only in the instance's lastAttempt; the instance is
// taken out again and the order goes to the next zone's MIG.
func TestStockOutMovesToNextZone(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	b.engine.SetCapacity(cloud.OfferingKey{InstanceType: "g2-standard-8", Location: "us-central1-a", CapacityType: cloud.OnDemand}, 0)
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	if in := b.running(t, "l4")[0]; in.Location != "us-central1-b" {
		t.Fatalf("ordered in %s", in.Location)
	}
	b.wait(t, "nothing left in the exhausted zone", func() bool {
		return len(b.fake.Instances("us-central1-a", "gpu-l4")) == 0 && b.fake.TargetSize("us-central1-a", "gpu-l4") == 0
	})
	if !strings.Contains(b.logs.String(), "ZONE_RESOURCE_POOL_EXHAUSTED") {
		t.Error("the stock-out's code is not in the logs")
	}
}

// TestQuotaFailsCleanly: past the project's GPU quota the order fails as
// quota, in every zone, and nothing is left.
func TestQuotaFailsCleanly(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{GPUQuota: 1})
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 2); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "a quota failure", func() bool {
		insts, _ := b.mgr.Instances("l4")
		for _, in := range insts {
			if in.ErrorCode == nodegroup.CodeQuotaExceeded {
				return true
			}
		}
		return false
	})
	b.wait(t, "1 running, 1 in the MIGs", func() bool {
		return len(b.running(t, "l4")) == 1 &&
			b.fake.TargetSize("us-central1-a", "gpu-l4")+b.fake.TargetSize("us-central1-b", "gpu-l4") == 1
	})
}

// TestLostCreateAnswerOrdersOnce: createInstances is carried out but its
// answer lost: the instance is found by name, and nothing is ordered
// twice.
func TestLostCreateAnswerOrdersOnce(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	b.fake.LoseNextAnswer(http.MethodPost, "/createInstances")
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 1); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "1 running", func() bool { return len(b.running(t, "l4")) == 1 })
	time.Sleep(500 * time.Millisecond)
	if n := b.fake.Calls()["POST createInstances"]; n != 1 {
		t.Fatalf("%d creates", n)
	}
	if n := b.fake.TargetSize("us-central1-a", "gpu-l4") + b.fake.TargetSize("us-central1-b", "gpu-l4"); n != 1 {
		t.Fatalf("target sizes add to %d", n)
	}
}

// TestRestartAdoptsMembers: a new process finds the MIGs' members and
// orders nothing.
func TestRestartAdoptsMembers(t *testing.T) {
	b := newBackend(t, 5, groupsYAML, gcptest.Options{})
	if err := b.mgr.IncreaseSize(context.Background(), "l4", 2); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "2 running", func() bool { return len(b.running(t, "l4")) == 2 })
	b.stop()
	b.start(t)
	b.wait(t, "2 running after the restart", func() bool { return len(b.running(t, "l4")) == 2 })
	time.Sleep(300 * time.Millisecond)
	if n := b.fake.Calls()["POST createInstances"]; n != 2 {
		t.Fatalf("%d creates", n)
	}
}

// TestScaleCyclesLeaveNothing: 100 random scale-ups and scale-downs with
// conflicts, failing and lost calls, then scale to zero: every MIG is
// empty at target size 0.
func TestScaleCyclesLeaveNothing(t *testing.T) {
	b := newBackend(t, 4, groupsYAML, gcptest.Options{})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	ctx := context.Background()
	for i := range 100 {
		insts, err := b.mgr.Instances("l4")
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if room := 6 - len(insts); room > 0 {
				_ = b.mgr.IncreaseSize(ctx, "l4", 1+rng.IntN(min(room, 3)))
			}
		} else {
			var ids []string
			for _, in := range insts {
				if in.State == nodegroup.StateRunning && rng.IntN(2) == 0 {
					ids = append(ids, in.ProviderID)
				}
			}
			if len(ids) > 0 {
				_ = b.mgr.DeleteNodes(ctx, "l4", ids)
			}
		}
		switch rng.IntN(10) {
		case 0:
			b.fake.FailNext(http.MethodPost, "/deleteInstances", http.StatusConflict, "resourceNotReady", "The resource is not ready")
		case 1:
			b.fake.FailNext(http.MethodPost, "/listManagedInstances", http.StatusServiceUnavailable, "backendError", "Backend Error")
		case 2:
			b.fake.LoseNextAnswer(http.MethodPost, "/createInstances")
		}
		time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		insts, _ := b.mgr.Instances("l4")
		var ids []string
		for _, in := range insts {
			ids = append(ids, in.ProviderID)
		}
		if len(ids) > 0 {
			_ = b.mgr.DeleteNodes(ctx, "l4", ids)
		}
		left := len(b.fake.Instances("us-central1-a", "gpu-l4")) + len(b.fake.Instances("us-central1-b", "gpu-l4"))
		size := b.fake.TargetSize("us-central1-a", "gpu-l4") + b.fake.TargetSize("us-central1-b", "gpu-l4")
		if left == 0 && size == 0 && len(insts) == 0 && len(b.engine.Instances("gcp-account")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %d members %v %v, target %d, core members %+v, engine %+v (seed %d)", left,
				b.fake.Instances("us-central1-a", "gpu-l4"), b.fake.Instances("us-central1-b", "gpu-l4"), size, insts, b.engine.Instances("gcp-account"), seed)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOptions: a group names its MIG with instanceGroup; other keys are
// refused with the key and what GCP reads.
func TestOptions(t *testing.T) {
	c := gcp.New(nil, gcp.Options{Project: project})
	if errs := c.CheckOptions(map[string]string{"instanceGroup": "gpu-l4"}); len(errs) != 0 {
		t.Fatalf("instanceGroup refused: %v", errs)
	}
	errs := c.CheckOptions(map[string]string{"instanceGroupName": "x"})
	if len(errs) != 1 || errs[0].Key != "instanceGroupName" || !strings.Contains(errs[0].Detail, "instanceGroup") {
		t.Fatalf("unknown option: %v", errs)
	}
}
