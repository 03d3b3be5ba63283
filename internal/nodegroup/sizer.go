package nodegroup

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// sizer owns the target-size rules: what IncreaseSize, DecreaseTargetSize
// and DeleteNodes may do, min and max checked on live members, and keeping
// live members at the target (ordering the missing ones, and taking the
// target up to what a sync found within maxSize, deleting what is past it).
type sizer struct {
	store     *store
	offerings *offerings
	cost      *costGuard
	orderer   *orderer
	deleter   *deleter
	clock     clock.Clock
	log       *slog.Logger
	metrics   *Metrics
	events    *events
	ctx       func() context.Context
	// maxIncrease caps one IncreaseSize (sync.maxIncrease).
	maxIncrease int
	clients     map[string]*client
	// nodes is Options.Nodes; nil without a cluster.
	nodes Nodes
}

// namePrefix is what a group's instance names start with: the group's
// name, unless its cloud names instances its own way (cloud.Namer).
func (z *sizer) namePrefix(g *group) string {
	if n, ok := z.clients[g.cfg.Cloud].p.(cloud.Namer); ok {
		if p := n.NamePrefix(g.cfg.Name, g.cfg.CloudOptions); p != "" {
			return p
		}
	}
	return g.cfg.Name
}

// group returns a managed group by name. Callers hold the store's lock.
func (z *sizer) group(name string) (*group, error) {
	g, ok := z.store.groups[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	return g, nil
}

// increase raises a group's target by delta; the instances are created in
// the background, or started from the group's standby pool unless fresh.
// It refuses a delta past maxSize or a cost cap, and while the group backs
// off after failed orders.
func (z *sizer) increase(name string, delta int, fresh bool) error {
	if delta <= 0 {
		return fmt.Errorf("%w: increase by %d", ErrInvalidDelta, delta)
	}
	if z.maxIncrease > 0 && delta > z.maxIncrease {
		return fmt.Errorf("%w: increase by %d is more than sync.maxIncrease (%d) in one call", ErrSizeLimit, delta, z.maxIncrease)
	}
	s := z.store
	s.mu.Lock()
	defer s.mu.Unlock()
	g, err := z.group(name)
	if err != nil {
		return err
	}
	if g.target+delta > g.cfg.MaxSize {
		return fmt.Errorf("%w: group %q target %d + %d exceeds maxSize %d", ErrSizeLimit, name, g.target, delta, g.cfg.MaxSize)
	}
	if b, ok := z.offerings.backedOff(name); ok {
		return fmt.Errorf("%w: group %q until %s (%s: %s)", ErrBackingOff, name, b.until.Format(time.RFC3339), b.reason, b.message)
	}
	if err := z.cost.check(g, nil, float64(delta)*z.offerings.estimate(g)); err != nil {
		z.metrics.scaleUpFailures.WithLabelValues(name, CodeCostLimit).Add(float64(delta))
		z.events.warn(name, "", "", "CostLimit", fmt.Sprintf("an increase of %d refused: %v", delta, err))
		return err
	}
	g.target += delta
	z.log.Info("scale up", "group", name, "delta", delta, "target", g.target, "fresh", fresh)
	if fresh {
		z.reconcileFreshLocked(g, delta)
	} else {
		z.reconcileLocked(g)
	}
	return nil
}

// decrease lowers a group's target by -delta, withdrawing orders the
// cloud has not made (creates queued, in flight or unresolved, and failed
// slots), newest first. It never goes below minSize, and never withdraws
// an instance the cloud has, booting or running: cluster-autoscaler's
// fixNodeGroupSize decreases a group whose nodes have not registered
// within --max-node-provision-time, and withdrawing a slow GPU instance
// there would have it deleted and, at minSize, bought again every cycle.
// Such an instance goes through DeleteNodes, which knows minSize. A
// decrease that cannot be done in full changes nothing.
func (z *sizer) decrease(name string, delta int) error {
	if delta >= 0 {
		return fmt.Errorf("%w: decrease by %d", ErrInvalidDelta, delta)
	}
	s := z.store
	s.mu.Lock()
	defer s.mu.Unlock()
	g, err := z.group(name)
	if err != nil {
		return err
	}
	if g.target+delta < g.cfg.MinSize {
		return fmt.Errorf("%w: decreasing group %q's target %d by %d would take it below minSize %d",
			ErrSizeLimit, name, g.target, -delta, g.cfg.MinSize)
	}
	var unfulfilled []*member
	for _, mem := range g.members {
		if (mem.phase == phaseCreating || mem.phase == phaseUnknown || mem.phase == phaseFailed) && !mem.pooled() {
			unfulfilled = append(unfulfilled, mem)
		}
	}
	if -delta > len(unfulfilled) {
		return fmt.Errorf("%w: group %q has %d orders the cloud has not made, cannot decrease its target by %d without deleting instances it has (booting or running); delete those nodes instead",
			ErrSizeLimit, name, len(unfulfilled), -delta)
	}
	newestFirst(unfulfilled)
	for _, mem := range unfulfilled[:-delta] {
		why := "target decreased"
		if mem.phase == phaseFailed {
			why = "failed order withdrawn" // a failed instance (a MIG member that stocked out) goes with its slot
		}
		z.removeLocked(g, mem, why)
	}
	// A withdrawn order past maxSize (a restart rebuilt the group from
	// more than that, and capped the target) was over the target already:
	// as for deletes, the target falls only past those, and never below
	// the members that remain.
	g.target = max(g.target+delta, min(g.live, g.cfg.MaxSize))
	z.log.Info("decrease target", "group", name, "delta", delta, "target", g.target)
	z.reconcileLocked(g)
	return nil
}

// deleteNodes deletes the members with the given provider IDs and lowers
// the target by as many, less those past maxSize. Every ID must belong to
// the group, or nothing is deleted. Instances the cloud has (booting or
// running) may not take the group's live members below minSize, where
// they would be bought again at once; failed and unfulfilled slots always
// may go.
func (z *sizer) deleteNodes(ctx context.Context, name string, providerIDs []string) error {
	s := z.store
	s.mu.Lock()
	defer s.mu.Unlock()
	g, err := z.group(name)
	if err != nil {
		return err
	}
	var doomed []*member
	seen := map[*member]bool{}
	atCloud := 0
	for _, pid := range providerIDs {
		mem, ok := s.pids.get(pid)
		if !ok || mem.group() != name || mem.pooled() {
			return fmt.Errorf("%w: %q is not in group %q", ErrNotInGroup, pid, name)
		}
		if seen[mem] || mem.phase == phaseDeleting {
			continue
		}
		seen[mem] = true
		doomed = append(doomed, mem)
		if mem.phase == phaseCreated {
			atCloud++
		}
	}
	if atCloud > 0 && g.live-len(doomed) < g.cfg.MinSize {
		return fmt.Errorf("%w: deleting %d nodes would take group %q from %d to %d live nodes, below minSize %d",
			ErrSizeLimit, len(doomed), name, g.live, g.live-len(doomed), g.cfg.MinSize)
	}
	// Members past maxSize (a restart rebuilt the group from more
	// instances than that) are over the target already: deletes take from
	// them first, and lower the target only past them.
	over := 0
	if g.target == g.cfg.MaxSize {
		over = max(g.live-g.target, 0)
	}
	for _, mem := range doomed {
		if z.returnLocked(ctx, g, mem) {
			continue
		}
		z.removeLocked(g, mem, "deleted by the autoscaler")
	}
	g.target = max(g.target-max(len(doomed)-over, 0), 0)
	z.log.Info("delete nodes", "group", name, "count", len(doomed), "target", g.target)
	z.reconcileLocked(g)
	return nil
}

// returnLocked takes a member a front end deletes back into g's standby
// pool, instead of deleting it, while the pool is short: it ran, joined
// and loaded its GPUs already, so the next sync stops it as it stops a
// warmed pool member, and the pool orders one fresh instance fewer, whose
// warm-up would bill in full. Nobody takes it before it stops (takeLocked):
// its Node still carries the front end's deletion taint until the stop
// deletes the Node, and the kubelet registers it afresh on a start.
// Callers hold the store's lock.
func (z *sizer) returnLocked(ctx context.Context, g *group, mem *member) bool {
	if g.cfg.StandbyMaxSize() == 0 || g.counts[stateStandby] >= g.standbySize() || !mem.running() || mem.peek().outdated || replacing(ctx) {
		return false
	}
	if _, ok := z.clients[mem.cloud()].stopper(); !ok {
		return false
	}
	if z.nodes != nil {
		// Only a healthy node: Ready, its GPUs allocatable now. One that
		// never registered, went unready (cluster-autoscaler removes
		// both) or lost its GPUs (a failed driver or device plugin, which
		// a start would bring back with it) is deleted.
		if st, ok := z.nodes.Startup(mem.providerIDs()...); !ok || st.Ready.IsZero() || !st.GPUsNow && g.itype.GPUCount > 0 {
			return false
		}
	}
	z.store.change(g, mem, func() { mem.standby = standbyWarming })
	x := mem.extras()
	x.recycled = true
	x.warmSince = z.clock.Now().Add(-g.cfg.Standby.StandbyWarmFor())
	z.log.Info("a deleted node goes back to the standby pool instead", "group", g.cfg.Name, "instance", mem.name)
	return true
}

// removeLocked takes a member out of the target: a failed order the cloud
// never knew is dropped, an order in flight or unresolved is withdrawn (its
// instance is deleted if it lands), and a cloud instance is deleted.
func (z *sizer) removeLocked(g *group, mem *member, why string) {
	s := z.store
	switch {
	case mem.phase == phaseFailed && !mem.known():
		s.drop(g, mem)
	case mem.phase == phaseCreating || mem.phase == phaseUnknown:
		s.change(g, mem, func() { mem.cancelled = s.to(mem, phaseDeleting) })
	default:
		s.change(g, mem, func() { s.to(mem, phaseDeleting) })
		z.deleter.delete(z.ctx(), mem.cloud(), mem.instance(), why)
	}
}

// reconcileLocked keeps minSize and orders new members until the live ones
// match the target.
func (z *sizer) reconcileLocked(g *group) {
	z.reconcileFreshLocked(g, 0)
}

// reconcileFreshLocked is reconcileLocked with the first fresh of the
// instances it adds ordered anew, leaving the standby pool for demand
// nearer than a boot.
func (z *sizer) reconcileFreshLocked(g *group, fresh int) {
	if g.target < g.cfg.MinSize {
		g.target = g.cfg.MinSize
	}
	for g.live < g.target {
		if fresh > 0 {
			fresh--
		} else if z.takeLocked(g) != nil {
			continue // a standby instance starts: seconds, not a cold boot
		}
		mem := z.newMember(g, false)
		z.store.add(g, mem)
		z.orderer.order(g, mem)
	}
	if g != z.store.launches {
		z.poolLocked(g)
	}
	z.checkLocked(g)
	z.publishLocked(g)
}

// checkLocked checks the target against the members after a change: the
// live members (ordered, booting, running or failed slots, not being
// deleted) are the target, or more only while a group holds more than its
// maxSize (rebuilt from the cloud, or a reload lowered it; scale-down
// takes the rest). Anything else means the two have drifted, which buys
// or removes capacity nobody asked for: it is counted and logged as the
// bug it is.
func (z *sizer) checkLocked(g *group) {
	if g == z.store.launches || g.live == g.target || g.live > g.target && g.target == g.cfg.MaxSize {
		return
	}
	z.metrics.targetMismatches.WithLabelValues(g.cfg.Name).Inc()
	z.log.Error("target and members disagree", "group", g.cfg.Name, "target", g.target, "live", g.live, "maxSize", g.cfg.MaxSize)
}

// adoptedLocked settles a group after a sync found instances of it the core
// did not know (an order whose answer was lost, another replica's order):
// the target rises to cover them within maxSize, and adopted instances past
// maxSize are deleted, orders still pending before running ones. At the
// first sync after start everything is adopted and nothing is deleted: the
// target becomes what runs, capped at maxSize, and scale-down does the rest.
func (z *sizer) adoptedLocked(g *group, adopted []*member, initial bool) {
	if initial {
		g.target = min(g.live, g.cfg.MaxSize)
		z.log.Info("node group rebuilt from the cloud", "group", g.cfg.Name, "target", g.target, "members", len(g.members))
		return
	}
	if len(adopted) == 0 || g.live <= g.target {
		return
	}
	z.withdrawHeldLocked(g, g.live-g.target)
	if g.live <= g.target {
		return
	}
	g.target = min(g.live, g.cfg.MaxSize)
	surplus := g.live - g.cfg.MaxSize
	if surplus <= 0 {
		z.log.Info("adopted instances raise the target", "group", g.cfg.Name, "adopted", len(adopted), "target", g.target)
		return
	}
	sort.SliceStable(adopted, func(i, j int) bool {
		if adopted[i].running() != adopted[j].running() {
			return !adopted[i].running()
		}
		return adopted[i].createdAt > adopted[j].createdAt
	})
	for _, mem := range adopted[:min(surplus, len(adopted))] {
		z.log.Warn("deleting adopted instance past maxSize", "group", g.cfg.Name, "instance", mem.name, "maxSize", g.cfg.MaxSize)
		z.events.warn(g.cfg.Name, mem.name, mem.providerID, "SurplusDeleted",
			fmt.Sprintf("instance %s was found past maxSize %d and is deleted", mem.name, g.cfg.MaxSize))
		z.removeLocked(g, mem, "past maxSize")
	}
}

// withdrawHeldLocked withdraws up to n orders held after a start (see
// orderer.awaitPredecessor), newest first: a list has just shown the
// orders of the process before this one that they would have bought
// again. The target keeps what the front end asked for.
func (z *sizer) withdrawHeldLocked(g *group, n int) {
	if n <= 0 || !z.orderer.holding(g, g.cfg.Cloud) {
		return
	}
	var held []*member
	for _, mem := range g.members {
		if mem.phase == phaseCreating && !mem.cancelled && !mem.pooled() {
			held = append(held, mem)
		}
	}
	newestFirst(held)
	for _, mem := range held[:min(n, len(held))] {
		z.log.Info("a list shows the previous process's order; withdrawing the held order it stands for", "group", g.cfg.Name, "instance", mem.name)
		z.removeLocked(g, mem, "the previous process ordered it")
	}
}

// publishLocked sets a group's gauges from its counts.
func (z *sizer) publishLocked(g *group) {
	if g == z.store.launches {
		return
	}
	for _, state := range memberStates {
		z.metrics.instances.WithLabelValues(g.cfg.Name, state).Set(float64(g.counts[state]))
	}
	z.metrics.targetSize.WithLabelValues(g.cfg.Name).Set(float64(g.target))
	z.metrics.minSize.WithLabelValues(g.cfg.Name).Set(float64(g.cfg.MinSize))
	z.metrics.maxSize.WithLabelValues(g.cfg.Name).Set(float64(g.cfg.MaxSize))
	// Counted from 0, so a rate over a group that has not scaled yet is 0.
	z.metrics.created.WithLabelValues(g.cfg.Name, ReasonScaleUp)
	z.metrics.deleted.WithLabelValues(g.cfg.Name, ReasonScaleDown)
	z.metrics.hourlySpend.WithLabelValues(g.cfg.Name, g.itype.PriceCurrency()).Set(z.cost.groupSpend(g))
	var oldest time.Time
	if g.counts[stateStandby] > 0 { // no pool, no scan
		for _, mem := range g.members {
			if t := mem.createdAt.Time(); mem.standby == standbyStopped && mem.phase != phaseDeleting && (oldest.IsZero() || t.Before(oldest)) {
				oldest = t
			}
		}
	}
	at := 0.0
	if !oldest.IsZero() {
		at = float64(oldest.UnixNano()) / 1e9
	}
	z.metrics.standbyOldest.WithLabelValues(g.cfg.Name).Set(at)
}

// newestFirst sorts members by creation time, newest first.
func newestFirst(ms []*member) {
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].createdAt != ms[j].createdAt {
			return ms[i].createdAt > ms[j].createdAt
		}
		return ms[i].name > ms[j].name
	})
}
