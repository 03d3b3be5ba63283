package nodegroup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// pullGroup is a group whose nodes pull an image as they join.
const pullGroup = `
clusterName: test
sync: {period: 30s, requestsPerSecond: 10000, maxConcurrentCreates: 8}
clouds:
  sim: {bootDelay: 60s, deleteDelay: 10s}
nodeGroups:
  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 5, prePullImages: [vllm/vllm-openai:v0.6.3]}
`

// A node of a group with prePullImages pulls them once its Node joins:
// the pull is asked for once, and its pod goes once the images are there.
// A pull that fails is reported with a PrePullFailed Event and its pod
// goes too; a Node that joined longer than prePullTimeout ago (before a
// restart) is asked for nothing.
func TestJoinedNodesPullTheGroupsImages(t *testing.T) {
	nodes, events := newFakeNodes(), &eventLog{}
	h := newHarness(t, pullGroup, sim.Options{}, Options{Nodes: nodes, Events: events})
	if err := h.mgr.IncreaseSize(context.Background(), "g", 2); err != nil {
		t.Fatal(err)
	}
	var pids []string
	h.eventually("two instances running", func() bool {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		pids = pids[:0]
		for _, in := range h.engine.Instances("test") {
			if in.State == cloud.StateRunning {
				pids = append(pids, cloud.ProviderID("sim", in.Name))
			}
		}
		return len(pids) == 2
	})
	sync := func() {
		h.clk.Step(30 * time.Second)
		h.mgr.syncer.kick("sim")
		time.Sleep(20 * time.Millisecond)
	}
	for range 3 {
		sync()
	}
	if nodes.asks() != 0 {
		t.Fatalf("%d pulls asked for before any Node joined", nodes.asks())
	}
	now := h.clk.Now()
	nodes.setStartup(pids[0], Startup{Registered: now, Ready: now})
	nodes.setStartup(pids[1], Startup{Registered: now.Add(-prePullTimeout - time.Minute), Ready: now})
	h.eventually("the joined node's pull asked for", func() bool { sync(); return nodes.pulled(pids[0]) })
	for range 3 {
		sync()
	}
	if n := nodes.asks(); n != 1 || nodes.pulled(pids[1]) {
		t.Fatalf("%d pulls asked for, the Node that joined long ago's among them: %v; want the new Node's alone", n, nodes.pulled(pids[1]))
	}
	nodes.setPull(pids[0], Pull{Started: true, Done: true})
	h.eventually("the done pull's pod gone", func() bool { sync(); return !nodes.pulled(pids[0]) })
	for range 3 {
		sync()
	}
	if n := nodes.asks(); n != 1 {
		t.Errorf("%d pulls asked for after the first was done, want no more", n)
	}

	// A third node whose pull fails.
	if err := h.mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	var third string
	h.eventually("a third instance running", func() bool {
		sync()
		for _, in := range h.engine.Instances("test") {
			if pid := cloud.ProviderID("sim", in.Name); in.State == cloud.StateRunning && pid != pids[0] && pid != pids[1] {
				third = pid
				return true
			}
		}
		return false
	})
	nodes.setStartup(third, Startup{Registered: h.clk.Now()})
	h.eventually("the third node's pull asked for", func() bool { sync(); return nodes.pulled(third) })
	nodes.setPull(third, Pull{Started: true, Failed: "vllm/vllm-openai:v0.6.3: ImagePullBackOff: not found"})
	h.eventually("the failed pull's pod gone", func() bool { sync(); return !nodes.pulled(third) })
	if !events.has("PrePullFailed", strings.TrimPrefix(third, "sim://")) {
		t.Errorf("no PrePullFailed Event: %+v", events.events)
	}
}
