package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// clusterNodes are the cluster's Node objects as a campaign plays them
// (nodegroup.Nodes): a kubelet registers a Node for each running instance
// at the cloud, Ready with its GPUs, and with the standby taint when a
// standby pool ordered it; its Node goes NotReady when the instance stops
// (the heartbeats end) and Ready again when it starts, keeping whatever
// taints it had; a front end marks a Node for deletion before it deletes
// its node (cluster-autoscaler's ToBeDeletedByClusterAutoscaler) and
// unmarks it when the delete is refused. The API server loses the first
// delete of a Node now and then. The cluster outlives process restarts.
type clusterNodes struct {
	mu  sync.Mutex
	rng *rand.Rand
	// nodes by instance name; ids maps a cloud ID to its instance's name
	// (a provider ID may end in either).
	nodes map[string]*kubeNode
	ids   map[string]string
}

type kubeNode struct {
	registered time.Time
	ready      bool
	// notReadySince is when it last went NotReady; zero while Ready.
	notReadySince time.Time
	standby       bool
	leaving       bool
	// markedAt is when a front end last marked it for deletion.
	markedAt time.Time
	// lost: its first delete was already failed (lose one only).
	lost bool
}

func newClusterNodes(seed uint64) *clusterNodes {
	return &clusterNodes{rng: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), nodes: map[string]*kubeNode{}, ids: map[string]string{}}
}

// pooled is the name a standby pool's order gets ("<prefix>-p<10 hex>"):
// its kubelet registers with the standby taint.
var pooled = regexp.MustCompile(`-p[0-9a-f]{10}$`)

// kubelets plays the kubelets of the cloud's instances now.
func (n *clusterNodes) kubelets(insts []cloud.Instance, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, in := range insts {
		if in.ID != "" {
			n.ids[in.ID] = in.Name
		}
		node := n.nodes[in.Name]
		switch in.State {
		case cloud.StateRunning:
			if node == nil {
				n.nodes[in.Name] = &kubeNode{registered: now, ready: true, standby: pooled.MatchString(in.Name)}
			} else if !node.ready {
				node.ready, node.notReadySince = true, time.Time{}
			}
		case cloud.StateStopped:
			if node != nil && node.ready {
				node.ready, node.notReadySince = false, now
			}
		}
	}
}

// find returns the Node of the first provider ID that names one. Callers
// hold n.mu.
func (n *clusterNodes) find(pids []string) (string, *kubeNode) {
	for _, pid := range pids {
		last := pid[strings.LastIndexByte(pid, '/')+1:]
		if node, ok := n.nodes[last]; ok {
			return last, node
		}
		if name, ok := n.ids[last]; ok {
			if node, ok := n.nodes[name]; ok {
				return name, node
			}
		}
	}
	return "", nil
}

func (n *clusterNodes) Registered(pids ...string) (bool, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, node := n.find(pids)
	return node != nil, true
}

func (n *clusterNodes) Delete(_ context.Context, pids ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, node := n.find(pids)
	if node == nil {
		return nil
	}
	if !node.lost && n.rng.IntN(2) == 0 {
		node.lost = true
		return errors.New("etcdserver: request timed out")
	}
	delete(n.nodes, name)
	return nil
}

func (n *clusterNodes) Untaint(_ context.Context, key string, pids ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, node := n.find(pids); node != nil && key == nodegroup.TaintStandby {
		node.standby = false
	}
	return nil
}

func (n *clusterNodes) Startup(pids ...string) (nodegroup.Startup, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, node := n.find(pids)
	if node == nil {
		return nodegroup.Startup{}, false
	}
	s := nodegroup.Startup{Registered: node.registered, GPUs: node.registered, GPUsSeen: true, GPUsNow: node.ready, Standby: node.standby, Leaving: node.leaving}
	if node.ready {
		s.Ready = node.registered
	}
	return s, true
}

func (n *clusterNodes) Workloads(context.Context, ...string) ([]string, error) { return nil, nil }

// mark puts (or takes off) a front end's deletion mark on the Nodes of
// these provider IDs.
func (n *clusterNodes) mark(on bool, now time.Time, pids ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, pid := range pids {
		if _, node := n.find([]string{pid}); node != nil {
			node.leaving, node.markedAt = on, now
		}
	}
}

// stale describes the Nodes of stopped instances that have been NotReady
// for longer than limit, "" for none.
func (n *clusterNodes) stale(insts []cloud.Instance, now time.Time, limit time.Duration) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, in := range insts {
		node := n.nodes[in.Name]
		if in.State == cloud.StateStopped && node != nil && !node.ready && now.Sub(node.notReadySince) > limit {
			out = append(out, fmt.Sprintf("%s (NotReady for %s)", in.Name, now.Sub(node.notReadySince)))
		}
	}
	return strings.Join(out, ", ")
}

// markedBefore reports whether the Node of an instance carries a front
// end's deletion mark put on before t.
func (n *clusterNodes) markedBefore(pid string, t time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, node := n.find([]string{pid})
	return node != nil && node.leaving && node.markedAt.Before(t)
}
