package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Every how many syncs the offerings and the catalog are refreshed: with the
// default 30 s period, availability every 3 minutes and the catalog hourly.
const (
	offeringsEvery = 6
	catalogEvery   = 120
	// minSyncGap spaces syncs asked for early, so a burst of deletes costs one list.
	minSyncGap = time.Second
	// releaseAt is the size of a list (in instances) past which a sync
	// hands the memory its answer took back to the system once folded (a
	// forced collection, ~30 ms of CPU at 100,000 instances): otherwise
	// the collector counts the answer of a sync it ran during as live, and
	// the process holds a second copy of the fleet's worth of heap until
	// the next one.
	releaseAt = 20_000
)

// syncer lists each cloud once per period (and early when asked) and folds
// the answer into memory: members' states, instances that vanished, lost
// create answers resolved, instances of managed groups adopted, duplicates
// and instances of other owners handed on.
type syncer struct {
	cfg       *config.Config
	store     *store
	offerings *offerings
	cost      *costGuard
	sizer     *sizer
	reaper    *reaper
	deleter   *deleter
	startups  *startups
	catalog   *catalog
	nodes     Nodes
	clients   map[string]*client
	clock     clock.WithTicker
	log       *slog.Logger
	metrics   *Metrics
	// resolveAfter is how long after a lost create answer a list must start
	// to be trusted to show the order, had it landed.
	resolveAfter time.Duration
	// startTimeout bounds the first list's calls (see DefaultStartTimeout).
	startTimeout time.Duration
	// reissuePending marks the clouds whose instances' scripts are still
	// to be put back (see unjoinedLocked); guarded by the store's lock.
	reissuePending map[string]bool
	syncNow        map[string]chan struct{}

	// nodesLeft are Nodes of gone instances whose delete failed.
	nodesMu   sync.Mutex
	nodesLeft [][]string

	// warm are the lists Manager.Warm took for the initial syncs.
	warmMu sync.Mutex
	warm   map[string]warmed

	// owners tells this install's instances from another's; an initial
	// sync refuses another's when refuseForeign (a core that starts, not
	// one a reload hands over to). foreignSeen are the clouds and
	// installs already warned of, guarded by the store's lock.
	owners        owners
	refuseForeign bool
	foreignSeen   map[string]bool

	// orphanSince is, by cloud, when a list first left out the instance
	// of each NotReady Node no member carries (see orphansLocked); guarded
	// by the store's lock.
	orphanSince map[string]map[string]time.Time
}

// kick asks for an early sync of one cloud without blocking.
func (y *syncer) kick(cloudName string) {
	select {
	case y.syncNow[cloudName] <- struct{}{}:
	default:
	}
}

// loop lists one cloud every sync period, early when asked, and again
// soon after a list that failed (backing off up to the period): a change
// waiting on a list, such as a create whose answer was lost, must not wait
// a whole period for the next one.
func (y *syncer) loop(ctx context.Context, cloudName string) {
	ticker := y.clock.NewTicker(y.cfg.Sync.Period.Duration)
	defer ticker.Stop()
	var retry <-chan time.Time
	failures := 0
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-retry:
		case <-y.syncNow[cloudName]:
			select {
			case <-ctx.Done():
				return
			case <-y.clock.After(min(minSyncGap, y.cfg.Sync.Period.Duration)):
			}
		}
		retry = nil
		if err := y.tick(ctx, cloudName, n); err != nil {
			failures++
			delay := min(y.cfg.Sync.Period.Duration, minSyncGap<<min(failures-1, 8))
			retry = y.clock.After(delay)
			y.log.Warn("list failed; answering from the last known state", "cloud", cloudName, "retryIn", delay, "error", err)
			continue
		}
		failures = 0
	}
}

// tick is the n-th sync of one cloud: every offeringsEvery-th also
// refreshes what the cloud can deliver now, every catalogEvery-th its
// catalog, then it lists.
func (y *syncer) tick(ctx context.Context, cloudName string, n int) error {
	if n%catalogEvery == 0 {
		if err := y.catalog.load(ctx, cloudName); err != nil {
			y.log.Error("catalog refresh failed; keeping the old one", "cloud", cloudName, "error", err)
		}
	}
	if n%offeringsEvery == 0 {
		y.refreshOfferings(ctx, cloudName)
	}
	return y.sync(ctx, cloudName, false)
}

// refreshOfferings caches what one cloud can deliver now. On failure the
// old answer is kept.
func (y *syncer) refreshOfferings(ctx context.Context, cloudName string) {
	offs, err := y.clients[cloudName].offerings(ctx)
	if err != nil {
		y.log.Warn("offerings refresh failed; keeping the old answer", "cloud", cloudName, "error", err)
		return
	}
	y.store.mu.Lock()
	y.offerings.set(cloudName, offs)
	y.store.mu.Unlock()
}

// listing is one list's answer, filed for folding: by owning group
// (launchKey for launched instances), then by name. It indexes the listed
// slice instead of copying it, so a sync at 100,000 instances holds the
// cloud's answer once.
type listing struct {
	start time.Time
	insts []cloud.Instance
	// groups maps an owning group to its names, each to the index of the
	// first instance listed under it.
	groups map[string]map[string]int32
	// dups holds every instance of a name listed more than once (an order
	// that landed twice), by dupKey; nil when there are none.
	dups map[string][]cloud.Instance
}

// lists reports whether the listing shows an instance of that name.
func (l *listing) lists(name string) bool {
	for _, byName := range l.groups {
		if _, ok := byName[name]; ok {
			return true
		}
	}
	return false
}

func newListing(start time.Time, insts []cloud.Instance) *listing {
	l := &listing{start: start, insts: insts, groups: map[string]map[string]int32{}}
	sizes := map[string]int{}
	for i := range insts {
		sizes[listKey(&insts[i])]++
	}
	for i := range insts {
		in := &insts[i]
		key := listKey(in)
		byName := l.groups[key]
		if byName == nil {
			byName = make(map[string]int32, sizes[key])
			l.groups[key] = byName
		}
		first, seen := byName[in.Name]
		if !seen {
			byName[in.Name] = int32(i)
			continue
		}
		if l.dups == nil {
			l.dups = map[string][]cloud.Instance{}
		}
		dk := dupKey(key, in.Name)
		if l.dups[dk] == nil {
			l.dups[dk] = []cloud.Instance{insts[first]}
		}
		l.dups[dk] = append(l.dups[dk], *in)
	}
	return l
}

// named returns the instances listed under one name of a group, given the
// index its group's map holds.
func (l *listing) named(key, name string, first int32) []cloud.Instance {
	if l.dups != nil {
		if all, ok := l.dups[dupKey(key, name)]; ok {
			return all
		}
	}
	return l.insts[first : first+1 : first+1]
}

// listKey is the group a listed instance is filed under.
func listKey(in *cloud.Instance) string {
	if in.Group == "" && in.Owner != "" {
		return launchKey
	}
	return in.Group
}

// dupKey keys a name listed more than once.
func dupKey(key, name string) string { return key + "\x00" + name }

// launchKey files launched instances apart from every group name (which
// are DNS labels and cannot hold a slash).
const launchKey = "/launched"

// sync lists one cloud and folds the answer into every group on it. The
// first sync after start rebuilds the groups from scratch.
func (y *syncer) sync(ctx context.Context, cloudName string, initial bool) error {
	start := y.clock.Now()
	var insts []cloud.Instance
	if w, ok := y.warmList(cloudName, initial); ok {
		start, insts = w.start, w.insts
	} else {
		var err error
		if insts, err = y.list(ctx, cloudName, initial); err != nil {
			return err
		}
	}
	all := insts
	insts, others := y.owners.split(insts)
	if len(others) > 0 && initial && y.refuseForeign {
		return &ForeignInstallError{Cloud: cloudName, ClusterName: y.cfg.ClusterName, Install: y.owners.install, Others: others}
	}
	l := newListing(start, insts)

	s := y.store
	var out afterLock
	var goneIDs [][]string
	var reissue []reissue
	s.mu.Lock()
	// A deleted instance is gone, and a renamed one known by its new name,
	// only once a list that cannot lag behind leaves the old name out: a
	// delete that failed and is retried keeps it listed, and it must not
	// be adopted meanwhile.
	for _, names := range []map[string]time.Time{s.tombstones, s.renamed, s.goneAt} {
		maps.DeleteFunc(names, func(name string, at time.Time) bool {
			return !start.Before(at.Add(y.resolveAfter)) && !l.lists(name)
		})
	}
	y.foreignLocked(cloudName, others)
	y.reaper.beginLocked(cloudName)
	for _, g := range s.groupsOn(cloudName) {
		adopted := y.fold(ctx, cloudName, g, l, g.cfg.Name, initial, &out)
		delete(l.groups, g.cfg.Name)
		y.sizer.adoptedLocked(g, adopted, initial && !g.inherited)
		y.sizer.reconcileLocked(g)
		y.warmedLocked(g, start, &out)
		y.joinedPullsLocked(g, start, &out)
		out.stoppedNodes = append(out.stoppedNodes, y.stoppedNodesLocked(cloudName, g)...)
		untaint := y.untaintLocked(g)
		out.untaint = append(out.untaint, untaint...)
		if len(g.cfg.StandbyImages()) > 0 {
			out.endPull = append(out.endPull, untaint...)
		}
		g.recount()
		y.startups.observeLocked(g)
	}
	y.fold(ctx, cloudName, s.launches, l, launchKey, initial, &out)
	out.stoppedNodes = append(out.stoppedNodes, y.stoppedNodesLocked(cloudName, s.launches)...)
	out.untaint = append(out.untaint, y.untaintLocked(s.launches)...)
	y.startups.observeLocked(s.launches)
	delete(l.groups, launchKey)
	y.others(cloudName, l)
	y.reaper.unregisteredLocked(ctx, cloudName)
	out.orphans = y.orphansLocked(cloudName, all, start)
	if y.reissuePending[cloudName] {
		var ready bool
		if reissue, ready = y.unjoinedLocked(cloudName); ready {
			y.reissuePending[cloudName] = false
		}
	}
	s.lastSync[cloudName] = start
	y.metrics.lastSync.WithLabelValues(cloudName).Set(float64(start.UnixNano()) / 1e9)
	y.metrics.orphans.WithLabelValues(cloudName) // shown at 0 before the first
	close(s.synced)
	s.synced = make(chan struct{})
	for _, g := range s.groupsOn(cloudName) {
		y.sizer.publishLocked(g)
	}
	for _, mem := range out.gone {
		goneIDs = append(goneIDs, mem.providerIDs())
		s.goneAt[mem.name] = start
	}
	s.mu.Unlock()
	if len(insts) >= releaseAt {
		debug.FreeOSMemory() // the listing is not used past this point
	}

	y.act(ctx, cloudName, &out, goneIDs, reissue)
	return nil
}

// warmed is a list taken ahead of Start (Manager.Warm), with when it
// started.
type warmed struct {
	// listed is false for a cloud whose catalog and offerings were read
	// ahead, but not its list.
	listed bool
	start  time.Time
	insts  []cloud.Instance
}

// warmList takes the list Warm left for a cloud's initial sync, if any.
func (y *syncer) warmList(cloudName string, initial bool) (warmed, bool) {
	y.warmMu.Lock()
	defer y.warmMu.Unlock()
	w, ok := y.warm[cloudName]
	delete(y.warm, cloudName)
	return w, ok && w.listed && initial
}

// list lists one cloud's instances; the first list after start is tried
// five times within the start timeout.
func (y *syncer) list(ctx context.Context, cloudName string, initial bool) ([]cloud.Instance, error) {
	attempts := 1
	if initial {
		attempts = 5
	}
	lctx := ctx
	if initial {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, y.startTimeout)
		defer cancel()
	}
	var insts []cloud.Instance
	err := retry(lctx, y.clock, attempts, func() error {
		var err error
		insts, err = y.clients[cloudName].list(lctx)
		return err
	})
	if err != nil {
		if ctx.Err() == nil && errors.Is(lctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %s: %w", y.startTimeout, err)
		}
		return nil, err
	}
	return insts, nil
}

// act does what a sync found, once the store's lock is released: Nodes
// deleted, scripts put back and released, standby instances stopped and
// started, taints lifted, pre-pulls started and ended.
func (y *syncer) act(ctx context.Context, cloudName string, out *afterLock, goneIDs [][]string, reissue []reissue) {
	s := y.store
	y.deleteNodes(ctx, goneIDs)
	if r, ok := y.orderer().boot.(Reissuer); ok {
		for _, ri := range reissue {
			if err := r.Reissue(ctx, ri.spec, ri.ordered); err != nil {
				y.log.Warn("could not put back the startup script of an instance ordered before the restart; it may not join", "instance", ri.spec.Name, "error", err)
			}
		}
	}
	for _, mem := range out.gone {
		// What bootstrap holds for the instance (its script on the script
		// server, its join token) goes with it.
		y.orderer().release(ctx, mem.name)
	}
	for _, name := range out.release {
		y.orderer().release(ctx, name)
	}
	if pp, ok := y.nodes.(PrePuller); ok {
		for _, p := range out.prePull {
			if err := pp.PrePull(ctx, p.images, p.ids...); err != nil {
				y.log.Warn("could not start pulling a node's images; the next sync tries again", "group", p.group, "node", p.ids[0], "error", err)
			}
		}
	}
	y.stop(ctx, cloudName, out.stop)
	y.deleteStoppedNodes(ctx, out.stoppedNodes)
	y.deleteOrphans(ctx, cloudName, out.orphans)
	for _, mem := range out.start {
		s.mu.RLock()
		inst := mem.instance()
		s.mu.RUnlock()
		if mem.g == s.launches {
			y.orderer().run(func() { y.restart(mem, inst) })
			continue
		}
		y.orderer().run(func() { y.sizer.start(mem.g, mem, inst) })
	}
	for _, pids := range out.untaint {
		if err := y.nodes.Untaint(ctx, TaintStandby, pids...); err != nil {
			y.log.Warn("could not lift the standby taint of a node that serves; the next sync tries again", "node", pids[0], "error", err)
		}
	}
	if pp, ok := y.nodes.(PrePuller); ok {
		for _, pids := range out.endPull {
			// Taken while it warmed, or done: the pod has no more use.
			if err := pp.EndPrePull(ctx, pids...); err != nil {
				y.log.Warn("could not delete the pre-pull pod of a node that serves", "node", pids[0], "error", err)
			}
		}
	}
}

// afterLock is what a sync found under the store's lock and does once it
// is released: nothing that can reach the network (a Node's deletion, a
// join token's) runs under the lock, where it would hold up every read of
// cluster-autoscaler's.
type afterLock struct {
	// gone are members whose instances vanished: their Nodes are deleted
	// and what bootstrap holds for them released.
	gone []*member
	// release are instances whose orders did not land: what bootstrap
	// holds for them is released.
	release []string
	// stop are standby members done warming: their instances are stopped.
	stop []*member
	// untaint are the provider IDs of serving members whose Nodes still
	// carry TaintStandby.
	untaint [][]string
	// start are members taken from a standby pool whose start was lost (a
	// reload or a restart in the middle): started again.
	start []*member
	// prePull are the pulls of images to start (a standby pool's, or a
	// group's onto its joined nodes); endPull the provider IDs of serving
	// members whose pull is to end.
	prePull []prePull
	endPull [][]string
	// stoppedNodes are stopped standby members whose NotReady Node is
	// still there: deleted, sync after sync, until it is gone.
	stoppedNodes []*member
	// orphans are the provider IDs of NotReady Nodes whose instances the
	// cloud no longer has: deleted while still NotReady.
	orphans []string
}

// reissue is the script of an instance ordered before a restart.
type reissue struct {
	spec    cloud.CreateSpec
	ordered time.Time
}

// unjoinedLocked lists the scripts to put back after a restart (or a
// reload, which builds a new core; the script server, which lives as long
// as the process, refuses the scripts it handed out already): those of the
// cloud's instances that may still be booting, ordered at a known time,
// with no Node under any of their provider IDs. ready is false while the
// Node index cannot tell yet; the next sync asks again. Callers hold the
// store's lock.
func (y *syncer) unjoinedLocked(cloudName string) (out []reissue, ready bool) {
	if y.orderer().boot == nil {
		return nil, true
	}
	for _, g := range y.store.groupsOn(cloudName) {
		if g.cfg.Bootstrap == nil {
			continue
		}
		for _, mem := range g.members {
			if mem.phase != phaseCreated || mem.ageUnknown || mem.createdAt == 0 || mem.offering().InstanceType == "" {
				continue
			}
			if mem.state != statePending && mem.state != stateRunning {
				continue
			}
			if y.nodes != nil {
				registered, synced := y.nodes.Registered(mem.providerIDs()...)
				if !synced {
					return nil, false
				}
				if registered {
					continue
				}
			}
			spec := y.orderer().templater.spec(g, mem.name, mem.offering())
			spec.ProviderID = mem.providerID
			out = append(out, reissue{spec: spec, ordered: mem.createdAt.Time()})
		}
	}
	return out, true
}

// fold updates a group's members from a list that started at start: states,
// lost create answers resolved, members whose instance is gone dropped (and
// added to gone, for their Node and their bootstrap leftovers), and the
// group's listed instances the core did not know adopted and returned.
// Extra instances under a member's name are handed to the reaper as
// duplicates.
func (y *syncer) fold(ctx context.Context, cloudName string, g *group, l *listing, key string, initial bool, out *afterLock) []*member {
	start := l.start
	listed := l.groups[key]
	lingering := 0.0
	defer func() { g.lingering[cloudName] = lingering }()
	for name, mem := range g.members {
		if mem.cloud() != cloudName {
			continue // a launched instance on another cloud
		}
		first, ok := listed[name]
		if !ok {
			y.missing(g, mem, start, out)
			continue
		}
		delete(listed, name)
		in, dups := pick(l.named(key, name, first), mem.id)
		y.reaper.duplicatesLocked(cloudName, dups)
		lingering += y.listPrice(cloudName, dups...)
		y.foldMemberLocked(ctx, cloudName, g, mem, in, start, out)
	}
	var adopted []*member
	for name, first := range listed {
		in, dups := pick(l.named(key, name, first), "")
		y.reaper.duplicatesLocked(cloudName, dups)
		lingering += y.listPrice(cloudName, dups...)
		mem, deleted := y.adoptLocked(ctx, cloudName, g, in, start, initial, out)
		lingering += deleted
		if mem != nil {
			adopted = append(adopted, mem)
		}
	}
	return adopted
}

// foldMemberLocked folds what a list shows of a member's instance into
// the member: a lost create answer resolved, a failed order that runs
// after all, a delete from outside, a standby instance's state.
func (y *syncer) foldMemberLocked(ctx context.Context, cloudName string, g *group, mem *member, in cloud.Instance, start time.Time, out *afterLock) {
	s := y.store
	name := mem.name
	if mem.unconfirmed && !y.mayShowPredecessorDeletes(cloudName, start) {
		mem.unconfirmed = false
	}
	if mem.x != nil && mem.x.fromName != "" {
		// Listed under the launch's name: a standby instance's
		// transfer landed, whatever became of the launch since (in
		// flight, its answer lost, terminated, failed). The pool's
		// member is gone.
		s.settleTransfer(mem, true, start)
	}
	switch mem.phase {
	case phaseCreating:
		return // the create in flight records it
	case phaseUnknown:
		if in.State == cloud.StateFailed {
			// The cloud took the order and failed it (a queued create
			// that ended in error): a failed order, reported, never
			// taken for one that did not land and sent again.
			// Its instance is recorded: the cloud may go on trying (a
			// MIG does), so removing the slot must delete it there,
			// not just forget it for the next list to adopt.
			y.log.Warn("lost create answer resolved: the order failed at the cloud", "group", g.cfg.Name, "instance", name, "error", in.Error)
			s.change(g, mem, func() {
				y.recordLocked(mem, in)
				// Recorded now, as a landed order is: a list that lags
				// right after must not take it for vanished.
				mem.recordedAt = stampOf(y.clock.Now())
				y.failed(g, mem, in)
			})
			mem.settle()
			return
		}
		y.metrics.created.WithLabelValues(g.cfg.Name, s.createdReason(g, mem)).Inc()
		y.log.Info("lost create answer resolved: the order landed", "group", g.cfg.Name, "instance", name)
		y.orderer().recordLocked(g, mem, in)
		return
	}
	s.change(g, mem, func() {
		y.recordLocked(mem, in)
		y.restateLocked(cloudName, g, mem, in, start, out)
	})
	if mem.phase == phaseDeleting && in.State != cloud.StateDeleting {
		// Still there: a delete that gave up, or one lost in a restart.
		y.deleter.delete(ctx, mem.cloud(), mem.instance(), "still listed after its delete")
	}
}

// restateLocked follows a recorded member's instance to the state the
// cloud shows, inside the store's change of the member.
func (y *syncer) restateLocked(cloudName string, g *group, mem *member, in cloud.Instance, start time.Time, out *afterLock) {
	s := y.store
	name := mem.name
	switch {
	case in.State == cloud.StateFailed && mem.phase == phaseCreated:
		y.failed(g, mem, in)
	case in.State == cloud.StateRunning && mem.phase == phaseFailed:
		// The cloud went on trying and made it (a MIG retries a
		// stocked-out member until it runs): it is no failed
		// order, but a node that runs and bills, until a front
		// end removes the slot.
		y.log.Info("the instance of a failed order runs after all; it is a member again", "group", g.cfg.Name, "instance", name)
		s.to(mem, phaseCreated)
		x := mem.extras()
		x.errCode, x.errClass, x.errMsg = "", ErrorClassNone, ""
	case in.State == cloud.StateDeleting && mem.phase != phaseDeleting:
		y.log.Warn("instance is being deleted outside gpuscaler; it will be replaced", "group", g.cfg.Name, "instance", name)
		s.to(mem, phaseDeleting)
	case in.State == cloud.StateStopped && in.Standby && mem.standby == standbyWarming:
		// Its stop took effect though the answer was lost.
		mem.standby, mem.price = standbyStopped, y.clients[cloudName].stoppedPrice(mem.offering())
	case in.State == cloud.StateStopped && in.Standby && mem.standby == standbyNone && mem.phase == phaseCreated &&
		mem.recordedAt < stampOf(start):
		// Taken for demand, and its start lost with the core that
		// sent it: started again (a start is idempotent).
		mem.standby = standbyStarting
		out.start = append(out.start, mem)
	case in.State == cloud.StateRunning && mem.standby == standbyStopped && mem.phase == phaseCreated:
		// Started behind the pool's back: a start sent by a process
		// that crashed took effect after this one listed the
		// instance stopped (or someone started it by hand). It
		// bills in full; warm already, it goes back to the pool,
		// stopped again by the next sync, and a front end that
		// still needs it takes it from there.
		y.log.Info("a stopped standby instance runs; it is stopped again", "group", g.cfg.Name, "instance", name)
		mem.standby = standbyWarming
		mem.price = y.offerings.price(cloudName, mem.offering(), y.catalog.listPrice(cloudName, mem.offering()))
		mem.extras().warmSince = y.clock.Now().Add(-g.cfg.Standby.StandbyWarmFor())
	case in.State == cloud.StateStopped && mem.phase != phaseDeleting && !in.Standby:
		// Gone for the cluster, not for the bill: delete it (below)
		// and let the group order a replacement.
		y.metrics.vanished.WithLabelValues(g.cfg.Name).Inc()
		y.log.Warn("instance stopped for good (spot reclaim or host lost); deleting it, and it will be replaced", "group", g.cfg.Name, "instance", name)
		s.to(mem, phaseDeleting)
	}
}

// adoptLocked makes a member of an instance the list shows and the group
// does not know: an order of a process before this one, or one whose
// answer was lost. It adopts none that this process renamed or deleted;
// for one it deleted, it returns what that instance still bills.
func (y *syncer) adoptLocked(ctx context.Context, cloudName string, g *group, in cloud.Instance, start time.Time, initial bool, out *afterLock) (*member, float64) {
	s := y.store
	if _, ok := s.renamed[in.Name]; ok {
		// A standby instance handed to the launch API, shown under its
		// old name by a list that lags: it is the launched one now.
		return nil, 0
	}
	if at, ok := s.goneAt[in.Name]; ok && !at.Before(start) {
		// Found gone by a list that started after this one (taken ahead
		// of a reload's hand-over): this list is stale for it, and the
		// next one tells. Adopted, it would raise the target, then vanish
		// and be replaced.
		return nil, 0
	}
	if _, ok := s.tombstones[in.Name]; ok {
		// An instance this process deleted, shown again by a list that
		// lags: deleted again (deletes are idempotent), never adopted
		// as a new live instance, which would raise the target and,
		// once it vanished for good, be replaced by a new order.
		if in.State != cloud.StateDeleting {
			y.deleter.delete(ctx, cloudName, in, "listed again after its delete")
		}
		return nil, y.listPrice(cloudName, in)
	}
	mem := &member{
		name: in.Name, g: g,
		phase: phaseCreated, recordedAt: stampOf(start),
	}
	if in.Owner != "" {
		mem.extras().owner = in.Owner
	}
	if g.cfg.Cloud == "" {
		mem.extras().cloud = cloudName // launched: the launches span clouds
	}
	s.setInstance(mem, in)
	mem.unconfirmed = y.mayShowPredecessorDeletes(cloudName, start)
	if mem.createdAt == 0 {
		// A cloud that did not say when (or in a form we could not
		// read): the age counts from the first list that shows it, so
		// that the never-registered check does not take it for ancient.
		mem.createdAt, mem.ageUnknown = stampOf(start), true
	}
	mem.price = y.offerings.price(cloudName, mem.offering(), y.catalog.listPrice(cloudName, mem.offering()))
	restart := false
	switch {
	case in.State == cloud.StateStopped && in.Standby && g == s.launches:
		// A standby instance handed over to the launch API by a
		// process that stopped before it started it: started now.
		mem.standby, restart = standbyStarting, true
	case in.State == cloud.StateStopped && in.Standby && g.cfg.StandbyMaxSize() > 0:
		// A standby instance of a process before this one: it stays
		// in the pool (poolLocked trims a pool above its size).
		mem.standby, mem.price = standbyStopped, y.clients[cloudName].stoppedPrice(mem.offering())
	case (in.State == cloud.StatePending || in.State == cloud.StateRunning) && g.cfg.StandbyMaxSize() > 0 &&
		orderedForPool(in.Name) && !y.takenForDemand(mem):
		// An order of the pool that the process before this one left
		// warming up: still the pool's, no capacity. Taken for capacity
		// it would raise the target, and the pool would order again.
		mem.standby = standbyWarming
	case in.State == cloud.StateDeleting:
		s.to(mem, phaseDeleting)
	case in.State == cloud.StateStopped:
		s.to(mem, phaseDeleting) // deleted by the next sync, as above
		y.metrics.vanished.WithLabelValues(g.cfg.Name).Inc()
	case in.State == cloud.StateFailed:
		// Reported again: the process before this one may have
		// stopped before it saw the instance fail.
		y.failed(g, mem, in)
	}
	if !initial {
		y.log.Info("adopting instance the core did not know", "group", g.cfg.Name, "owner", in.Owner, "instance", in.Name)
	}
	s.add(g, mem)
	if restart {
		out.start = append(out.start, mem)
	}
	return mem, 0
}

// takenForDemand reports whether the Node of a pool's order shows it was
// taken for demand: registered, and TaintStandby lifted. Without a Node
// yet (booting) it is still the pool's: a front end that took it asks
// again, and the pool gives it at once. Without Nodes watched there is no
// telling, and it is capacity: taken for the pool, a node that serves
// would be stopped with its pods, which only a Node shows.
func (y *syncer) takenForDemand(mem *member) bool {
	if y.nodes == nil {
		return true
	}
	st, ok := y.nodes.Startup(mem.providerIDs()...)
	return ok && !st.Standby
}

// recordLocked records what a list says of a member's instance, its
// provider ID indexed. Callers hold the store's lock, inside a change.
func (y *syncer) recordLocked(mem *member, in cloud.Instance) {
	s := y.store
	pid := in.ProviderID
	in.ProviderID = ""
	s.setInstance(mem, in)
	s.reindex(mem, pid)
	s.index(mem)
}

// failed marks a member whose instance the cloud reports failed (a MIG
// member that stocked out, a server the cloud could not make) as a failed
// order, and reports it: a Warning Event and
// gpuscaler_scale_up_failures_total. Callers hold the store's lock.
func (y *syncer) failed(g *group, mem *member, in cloud.Instance) {
	y.metrics.scaleUpFailures.WithLabelValues(g.cfg.Name, "InstanceFailed").Inc()
	y.store.to(mem, phaseFailed)
	msg := "cloud reports the instance failed: " + in.Error
	code, class := failure(cloud.Class(in.ErrorClass))
	if k := mem.offering(); class == ErrorClassOutOfResources && k.InstanceType != "" {
		// As a create that stocked out: the next orders skip the offering.
		y.offerings.markStockedOut(mem.cloud(), k)
	}
	if backsOff(code) && g != y.store.launches {
		// As a create refused for these: the group backs off.
		y.offerings.fail(g.cfg.Name, code, msg, 0, 0)
	}
	x := mem.extras()
	x.errCode, x.errClass, x.errMsg = code, class, msg
	y.orderer().events.warn(g.cfg.Name, mem.name, mem.providerID, "ScaleUpFailed", x.errCode+": "+x.errMsg)
}

// missing handles a member the list did not show.
func (y *syncer) missing(g *group, mem *member, start time.Time, out *afterLock) {
	s := y.store
	// How long a list may leave out a recorded instance before its silence
	// means the instance is gone; none for one whose delete the cloud
	// accepted (its tombstone keeps a list that shows it again from
	// adopting it), unless it was recorded within that time: a fresh
	// instance a lagging list leaves out bills until the delete is done,
	// deleted or not. One whose delete failed or is in flight may be such
	// a fresh instance too. Forgetting it would let a cost cap order past
	// it.
	lag := y.resolveAfter
	if mem.phase == phaseDeleting && mem.peek().deleted && mem.recordedAt < stampOf(start.Add(-y.resolveAfter)) {
		lag = 0
	}
	// An order whose answer was lost, then withdrawn (a target decrease)
	// before a list told whether it landed, is resolved as a lost answer
	// is; it would otherwise wait, deleting, for a list to show it forever.
	withdrawnLost := mem.phase == phaseDeleting && mem.cancelled && !mem.known() && !mem.peek().unknownSince.IsZero()
	switch {
	case mem.phase == phaseUnknown || withdrawnLost:
		if !start.After(mem.peek().unknownSince.Add(y.resolveAfter)) {
			return // too early to tell
		}
		s.drop(g, mem)
		s.settleTransfer(mem, false, start) // a standby instance not handed over: back in its pool
		if mem.cancelled || g == s.launches {
			y.log.Info("lost create answer resolved: the order did not land", "group", g.cfg.Name, "instance", mem.name)
			out.release = append(out.release, mem.name) // its script and join token
			mem.settle()
			return
		}
		y.log.Warn("lost create answer resolved: the order did not land; ordering again", "group", g.cfg.Name, "instance", mem.name)
		out.release = append(out.release, mem.name)
	case !mem.known() || mem.recordedAt >= stampOf(start.Add(-lag)):
		// Not at the cloud yet, or recorded too shortly before the list
		// started: a cloud's list may leave out its newest instances for a
		// while (as it may a lost create's), and a fresh instance taken for
		// vanished would have its Node deleted and be ordered twice. The
		// same window as a lost answer's (ResolveAfter); at the same
		// instant too, for a coarse clock.
	case mem.standby == standbyLeaving:
		// Being handed to the launch API, under a new name if the
		// transfer landed: the launched member's resolution settles it
		// (store.settleTransfer), and its Node, if the instance registers
		// again, is the launched one's.
	case mem.pooled() && mem.phase != phaseDeleting:
		// A standby instance is no capacity: nothing is replaced in its
		// place but the pool, which refills.
		y.log.Warn("standby instance gone; the pool refills", "group", g.cfg.Name, "instance", mem.name)
		s.drop(g, mem)
		out.gone = append(out.gone, mem)
	case mem.phase != phaseDeleting && g != s.launches && y.leaving(mem):
		// A front end was deleting its node (it tainted the Node, then
		// asked a process that stopped before the Node went, or the
		// cloud took the instance first): the target drops with it, as
		// the front end meant, and nothing is bought in its place.
		y.log.Info("an instance marked for deletion is gone; it is not replaced", "group", g.cfg.Name, "instance", mem.name)
		s.drop(g, mem)
		g.target = max(g.target-1, 0)
		out.gone = append(out.gone, mem)
	case mem.unconfirmed && mem.phase != phaseDeleting && g != s.launches && y.nodeless(mem):
		// Shown only by lists that may lag behind the deletes of the
		// process before this one, gone at the first that cannot, and
		// with no Node (a delete takes the Node with the instance): most
		// likely deleted before the restart. Replacing it would buy a
		// GPU nobody asked for; the target drops with it, and a front
		// end that needs the capacity asks again (minSize is kept). A
		// node that ran and was reclaimed still has its Node, and is
		// replaced as any vanished one.
		y.log.Info("an instance adopted at start is gone; deleted before the restart, it is not replaced", "group", g.cfg.Name, "instance", mem.name)
		s.drop(g, mem)
		g.target = max(g.target-1, 0)
		out.gone = append(out.gone, mem)
	default:
		if mem.phase != phaseDeleting {
			y.metrics.vanished.WithLabelValues(g.cfg.Name).Inc()
			y.log.Warn("instance vanished (spot reclaim or external delete); it will be replaced", "group", g.cfg.Name, "instance", mem.name)
		}
		if mem.phase == phaseDeleting {
			// Deleted: a lagging list may show it again for a while.
			s.tombstones[mem.name] = start
			y.metrics.deleted.WithLabelValues(g.cfg.Name, s.deletedReason(g, mem)).Inc()
		}
		s.drop(g, mem)
		out.gone = append(out.gone, mem)
	}
}

// pick chooses the listed instance a member stands for: the one with its
// cloud ID, else the oldest of those not being deleted (an order sent
// again under its name while the first, rolled back, still terminates),
// else the oldest. The others are duplicates.
func pick(all []cloud.Instance, id string) (cloud.Instance, []cloud.Instance) {
	best := -1
	better := func(a, b cloud.Instance) bool {
		if da, db := a.State == cloud.StateDeleting, b.State == cloud.StateDeleting; da != db {
			return db
		}
		return a.CreatedAt.Before(b.CreatedAt)
	}
	for i, in := range all {
		if id != "" && in.ID == id {
			best = i
			break
		}
		if best < 0 || better(in, all[best]) {
			best = i
		}
	}
	var dups []cloud.Instance
	for i, in := range all {
		if i != best {
			dups = append(dups, in)
		}
	}
	return all[best], dups
}

// listPrice is what listed instances cost per hour.
func (y *syncer) listPrice(cloudName string, ins ...cloud.Instance) float64 {
	total := 0.0
	for _, in := range ins {
		k := cloud.OfferingKey{InstanceType: in.InstanceType, Location: in.Location, CapacityType: in.CapacityType}
		total += y.offerings.price(cloudName, k, y.catalog.listPrice(cloudName, k))
	}
	return total
}

// others records the listed instances of groups this process does not
// manage: their spend counts toward the cluster's cap, and those of groups
// this config does not know are reported, never deleted.
func (y *syncer) others(cloudName string, l *listing) {
	s := y.store
	spend := 0.0
	unknown := map[string]int{}
	for group, byName := range l.groups {
		for name, first := range byName {
			for _, in := range l.named(group, name, first) {
				if in.State != cloud.StateDeleting {
					spend += y.listPrice(cloudName, in)
				}
				if !s.foreign[group] {
					unknown[group]++
					y.reaper.unknownLocked(cloudName, in)
				}
			}
		}
	}
	s.others[cloudName] = spend
	y.reaper.forgetUnknownLocked(cloudName)
	total := 0
	for _, n := range unknown {
		total += n
	}
	y.metrics.unknownGroup.WithLabelValues(cloudName).Set(float64(total))
}

// foreignLocked reports the instances of this cluster name another
// install ordered, which the sync left out: never members, never
// deleted. Each install is warned of once per cloud.
func (y *syncer) foreignLocked(cloudName string, others map[string][]string) {
	total := 0
	for id, names := range others {
		total += len(names)
		if key := cloudName + "/" + id; !y.foreignSeen[key] {
			y.foreignSeen[key] = true
			y.log.Warn("the cloud holds instances of this cluster name that another gpuscaler install ordered: they are left alone; "+
				"give one of the two clusters another clusterName", "cloud", cloudName, "install", y.owners.install, "other_install", id,
				"instances", len(names), "example", names[0])
		}
	}
	y.metrics.foreign.WithLabelValues(cloudName).Set(float64(total))
}

// deleteNodes deletes the Nodes of instances a list confirmed gone; the
// ones that fail are tried again after the next sync.
func (y *syncer) deleteNodes(ctx context.Context, gone [][]string) {
	if y.nodes == nil {
		return
	}
	y.nodesMu.Lock()
	gone = append(gone, y.nodesLeft...)
	y.nodesLeft = nil
	y.nodesMu.Unlock()
	var left [][]string
	for _, pids := range gone {
		if err := y.nodes.Delete(ctx, pids...); err != nil {
			y.log.Warn("could not delete the Node of a gone instance; the next sync tries again", "providerID", pids[0], "error", err)
			left = append(left, pids)
		}
	}
	y.nodesMu.Lock()
	y.nodesLeft = append(y.nodesLeft, left...)
	y.nodesMu.Unlock()
}

// orderer is reached through the sizer, which owns it.
func (y *syncer) orderer() *orderer { return y.sizer.orderer }

// nodeless reports whether the Nodes known say that no Node carries the
// member's provider IDs; false without Nodes or before their cache is
// synced.
func (y *syncer) nodeless(mem *member) bool {
	if y.nodes == nil {
		// No Nodes to tell by (the core run without a cluster): nothing
		// shows that the process before deleted it. In a cluster the
		// front ends' deletion taints do (leaving).
		return false
	}
	registered, synced := y.nodes.Registered(mem.providerIDs()...)
	return synced && !registered
}

// leaving reports whether a member's Node carries a front end's deletion
// taint.
func (y *syncer) leaving(mem *member) bool {
	if y.nodes == nil {
		return false
	}
	st, ok := y.nodes.Startup(mem.providerIDs()...)
	return ok && st.Leaving
}

// mayShowPredecessorDeletes reports whether a list of cloudName that
// started at start may still show instances the process before this one
// deleted: it started within the list lag of this process's start.
func (y *syncer) mayShowPredecessorDeletes(cloudName string, start time.Time) bool {
	until, ok := y.orderer().holdUntil[cloudName]
	return ok && start.Before(until)
}
