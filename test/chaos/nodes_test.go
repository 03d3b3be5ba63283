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
	// pid is the provider ID an instance's kubelet registers with.
	pid func(cloud.Instance) string
	// nodes by instance name; ids maps a cloud ID to its instance's name
	// (a provider ID may end in either).
	nodes map[string]*kubeNode
	ids   map[string]string
	// atCloud are the provider IDs of the instances the cloud had when
	// the kubelets last played: a Node of none is an orphan (see closed).
	// byPID maps a provider ID to its Node's name: a Node keeps the name
	// its kubelet first registered, as an instance renamed at the cloud (a
	// standby handed to a launch) keeps its hostname.
	atCloud map[string]bool
	byPID   map[string]string
	// unhealthySince is when cluster-autoscaler's cluster-health gate
	// last closed (see health); zero while it is open. closedSyncs
	// counts the running cores' lists since; lastCore and lastLists are
	// the core and its count seen last. worst and worstSyncs are the
	// longest it stayed closed, and worstWhat what it saw then.
	unhealthySince time.Time
	closedSyncs    int
	lastCore       any
	lastLists      int
	worst          time.Duration
	worstSyncs     int
	worstWhat      string
	// lostAfter: syncs count toward the gate's closure only this long
	// after it closed (backend.lostAfter).
	lostAfter time.Duration
	// orphanLimit is how long one core may keep an orphan (a Node of an
	// instance the cloud no longer has): twice the list lag (an order whose
	// answer was lost is resolved a list lag after a list first leaves it
	// out; its Node is then an orphan, swept a list lag later) and six
	// syncs (the list under way at each step, a lost delete, a slow read).
	// worstOrphan is the longest one outlived it, worstOrphanWhat which.
	orphanLimit     time.Duration
	worstOrphan     time.Duration
	worstOrphanWhat string
}

type kubeNode struct {
	// pid is the provider ID its kubelet registered with.
	pid        string
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
	// While its instance is gone from the cloud (an orphan): the running
	// core's count of lists when last seen (orphanCore tells which core),
	// and the lists of running cores it has lived through since.
	orphanCore  any
	orphanLists int
	orphanSyncs int
	orphanSince time.Time
}

func newClusterNodes(seed uint64, pid func(cloud.Instance) string) *clusterNodes {
	if pid == nil {
		pid = func(in cloud.Instance) string { return in.ProviderID }
	}
	return &clusterNodes{rng: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), pid: pid, nodes: map[string]*kubeNode{}, ids: map[string]string{}, byPID: map[string]string{}}
}

// pooled is the name a standby pool's order gets ("<prefix>-p<10 hex>"):
// its kubelet registers with the standby taint.
var pooled = regexp.MustCompile(`-p[0-9a-f]{10}$`)

// kubelets plays the kubelets of the cloud's instances now.
func (n *clusterNodes) kubelets(insts []cloud.Instance, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.atCloud = make(map[string]bool, len(insts))
	for _, in := range insts {
		pid := n.pid(in)
		n.atCloud[pid] = true
		if in.ID != "" {
			n.ids[in.ID] = in.Name
		}
		name, known := n.byPID[pid]
		if !known {
			name = in.Name
		}
		node := n.nodes[name]
		switch in.State {
		case cloud.StateRunning:
			if node == nil {
				n.nodes[name] = &kubeNode{pid: pid, registered: now, ready: true, standby: pooled.MatchString(in.Name)}
				n.byPID[pid] = name
			} else if !node.ready {
				node.ready, node.notReadySince = true, time.Time{}
			}
		case cloud.StateStopped:
			if node != nil && node.ready {
				node.ready, node.notReadySince = false, now
			}
		}
	}
	// The kubelet of an instance the cloud no longer has is gone with it.
	for _, node := range n.nodes {
		if !n.atCloud[node.pid] && node.ready {
			node.ready, node.notReadySince = false, now
		}
	}
}

// orphanLists is how many lists one core may keep an orphan through (see
// orphans): two list-lag waits (see orphanLimit) of up to five lists each
// at the campaigns' period, the lists kicked early by writes, and a lost
// delete.
const orphanLists = 16

// Cluster-autoscaler's cluster-health gate (clusterstate.IsClusterHealthy,
// with the defaults of --ok-total-unready-count and
// --max-total-unready-percentage): more than 3 Nodes NotReady, and more
// than 45 % of all, stop it scaling up and down.
const (
	okTotalUnready    = 3
	maxUnreadyPercent = 45
	healthGate        = "cluster-autoscaler's cluster-health gate"
)

// closed reports whether the gate is closed now by the Nodes of
// instances the cloud has. Callers hold n.mu.
//
// Orphans, the Nodes of instances the cloud no longer has, are left out:
// a core deletes one only once two lists the list lag apart leave it out
// (see orphans), longer than the two syncs the gate allows.
func (n *clusterNodes) closed() (unready int, names []string) {
	total := 0
	for name, node := range n.nodes {
		if !n.atCloud[node.pid] {
			continue
		}
		total++
		if !node.ready {
			unready++
			names = append(names, name)
		}
	}
	if unready <= okTotalUnready || float64(unready) <= maxUnreadyPercent/100.0*float64(total) {
		return 0, nil
	}
	return unready, names
}

// health plays the gate once at now, and keeps how long it stayed closed
// and across how many of the running core's syncs: lists is that core's
// count of successful lists so far (core tells one core from the next;
// the count of a core that starts begins again). Callers play the
// kubelets first.
func (n *clusterNodes) health(now time.Time, core any, lists func() int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// lists gathers the core's registry: only when there is something
	// to count it for.
	count := -1
	if n.anyOrphan() {
		count = lists()
		n.orphans(now, core, count)
	}
	unready, names := n.closed()
	if unready == 0 {
		n.unhealthySince, n.closedSyncs, n.lastCore = time.Time{}, 0, nil
		return
	}
	if count < 0 {
		count = lists()
	}
	switch {
	case n.unhealthySince.IsZero():
		n.unhealthySince = now
	case core == n.lastCore && now.Sub(n.unhealthySince) > n.lostAfter:
		n.closedSyncs += count - n.lastLists
	}
	n.lastCore, n.lastLists = core, count
	if n.closedSyncs > n.worstSyncs || n.closedSyncs == n.worstSyncs && now.Sub(n.unhealthySince) > n.worst {
		n.worst, n.worstSyncs = now.Sub(n.unhealthySince), n.closedSyncs
		n.worstWhat = fmt.Sprintf("%d Nodes NotReady: %s", unready, strings.Join(names, ", "))
	}
}

// orphans follows each Node whose instance the cloud no longer has
// through the lists of the running core (core, its count so far): since
// when, and across how many, the one core has seen it so. One that lives
// through more than orphanLists lists and longer than orphanLimit is
// recorded. A core deletes it once two lists the list lag apart leave its
// instance out (a member's as vanished, any other's as an orphan, after
// a lost create answer both in turn); the list under way when it went, a
// lost delete and a slow list take one more each. Callers hold n.mu.
func (n *clusterNodes) orphans(now time.Time, core any, count int) {
	for name, node := range n.nodes {
		switch {
		case n.atCloud[node.pid]:
			node.orphanCore, node.orphanSyncs = nil, 0
			continue
		case core == nil || node.orphanCore != core:
			node.orphanSince, node.orphanSyncs = now, 0
		default:
			node.orphanSyncs += count - node.orphanLists
		}
		node.orphanCore, node.orphanLists = core, count
		if age := now.Sub(node.orphanSince); node.orphanSyncs > orphanLists && age > n.orphanLimit && age > n.worstOrphan {
			n.worstOrphan = age
			n.worstOrphanWhat = fmt.Sprintf("the Node of %s, whose instance the cloud no longer has, lived through %d lists in %s", name, node.orphanSyncs, age)
		}
	}
}

// anyOrphan reports whether any Node's instance is gone from the cloud.
// Callers hold n.mu.
func (n *clusterNodes) anyOrphan() bool {
	for _, node := range n.nodes {
		if !n.atCloud[node.pid] {
			return true
		}
	}
	return false
}

// orphaned describes the orphan that outlived orphanLimit the longest,
// "" if none did.
func (n *clusterNodes) orphaned() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.worstOrphanWhat
}

// unhealthy describes the longest the health gate stayed closed across
// more than syncs successful lists of a running core (past lostAfter), ""
// if it never did.
func (n *clusterNodes) unhealthy(syncs int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.worstSyncs <= syncs {
		return ""
	}
	return fmt.Sprintf("%s closed for %s, across %d syncs (%s)", healthGate, n.worst, n.worstSyncs, n.worstWhat)
}

// find returns the Node of the first provider ID that names one. Callers
// hold n.mu.
func (n *clusterNodes) find(pids []string) (string, *kubeNode) {
	for _, pid := range pids {
		if name, ok := n.byPID[pid]; ok {
			if node, ok := n.nodes[name]; ok {
				return name, node
			}
		}
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
	return n.deleteLocked(name, node)
}

// deleteLocked deletes a Node, but loses its first delete now and then.
// Callers hold n.mu.
func (n *clusterNodes) deleteLocked(name string, node *kubeNode) error {
	if !node.lost && n.rng.IntN(2) == 0 {
		node.lost = true
		return errors.New("etcdserver: request timed out")
	}
	delete(n.nodes, name)
	if n.byPID[node.pid] == name {
		delete(n.byPID, node.pid)
	}
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

// Unready is nodegroup.UnreadyNodes': the campaign's Nodes are all of
// its one cloud.
func (n *clusterNodes) Unready(string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, node := range n.nodes {
		if !node.ready && node.pid != "" {
			out = append(out, node.pid)
		}
	}
	return out
}

func (n *clusterNodes) DeleteUnready(_ context.Context, pid string) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, node := n.find([]string{pid})
	if node == nil || node.ready {
		return false, nil
	}
	err := n.deleteLocked(name, node)
	return err == nil, err
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
		_, node := n.find([]string{n.pid(in)})
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
