package nodegroup

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// unreadyNodes adds UnreadyNodes to fakeNodes: the Nodes listed in
// unready are NotReady; DeleteUnready deletes only those.
type unreadyNodes struct {
	*fakeNodes
	unready map[string]bool
}

func (u *unreadyNodes) Unready(string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Collect(maps.Keys(u.unready))
}

func (u *unreadyNodes) DeleteUnready(ctx context.Context, pid string) (bool, error) {
	u.mu.Lock()
	ok := u.unready[pid] && u.registered[pid]
	delete(u.unready, pid)
	u.mu.Unlock()
	if !ok {
		return false, nil
	}
	return true, u.fakeNodes.Delete(ctx, pid)
}

func (u *unreadyNodes) notReady(pid string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.registered[pid], u.unready[pid] = true, true
}

// An instance deleted while no gpuscaler ran (a crash between the cloud's
// delete and the Node's) leaves a NotReady Node no member carries: a core
// that starts deletes it once two lists at least the list lag apart leave
// its instance out. The NotReady Nodes of a listed instance of no group,
// and of an order not yet listed, stay. Before, nothing deleted such a
// Node, and cluster-autoscaler counted it against the cluster's health.
func TestNodeOfAnInstanceGoneWhileNoProcessRanIsDeleted(t *testing.T) {
	nodes := &unreadyNodes{fakeNodes: newFakeNodes(), unready: map[string]bool{}}
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{Nodes: nodes, ResolveAfter: time.Minute})
	ctx := context.Background()
	if err := h.mgr.IncreaseSize(ctx, "g", 2); err != nil {
		t.Fatal(err)
	}
	var running []cloud.Instance
	h.eventually("both running", func() bool {
		h.clk.Step(30 * time.Second)
		running = h.cloudInstances()["g"]
		return len(running) == 2 && running[0].State == cloud.StateRunning && running[1].State == cloud.StateRunning
	})
	unknown, err := h.acct.Create(ctx, cloud.CreateSpec{Name: "newer-1", Group: "added-in-a-newer-config",
		InstanceType: "1V100.6V", Location: "FIN-01", CapacityType: cloud.OnDemand})
	if err != nil {
		t.Fatal(err)
	}

	h.stop()
	gone := running[0]
	if err := h.acct.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	h.settle(time.Minute) // the cloud's delete completes
	nodes.notReady(gone.ProviderID)
	nodes.notReady(running[1].ProviderID) // its kubelet is down, the instance listed
	nodes.notReady(unknown.ProviderID)
	h.start()

	h.settle(30 * time.Second)
	if reg, _ := nodes.Registered(gone.ProviderID); !reg {
		t.Fatal("the Node was deleted before a second list, the list lag later, left its instance out")
	}
	h.eventually("the gone instance's Node deleted", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		reg, _ := nodes.Registered(gone.ProviderID)
		return !reg
	})
	if n := h.metric("gpuscaler_orphan_nodes_deleted_total", map[string]string{"cloud": "sim"}); n != 1 {
		t.Errorf("gpuscaler_orphan_nodes_deleted_total = %v, want 1", n)
	}

	// An order whose Node registers NotReady before any list shows it.
	if err := h.mgr.IncreaseSize(ctx, "g", 1); err != nil {
		t.Fatal(err)
	}
	insts, err := h.mgr.Instances("g")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range insts {
		if in.State == StateCreating {
			nodes.notReady(in.ProviderID)
		}
	}
	h.settle(5 * time.Minute)
	for _, pid := range []string{running[1].ProviderID, unknown.ProviderID} {
		if reg, _ := nodes.Registered(pid); !reg {
			t.Errorf("the NotReady Node %s of a listed instance was deleted", pid)
		}
	}
	for _, in := range insts {
		if reg, _ := nodes.Registered(in.ProviderID); in.State == StateCreating && !reg {
			t.Errorf("the NotReady Node of the order %s was deleted", in.ProviderID)
		}
	}
}
