package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// standbyState is where a member is in its group's standby pool: stopped
// instances that booted, joined and warmed up once, started when the group
// scales up (config.Standby, docs/standby.md).
//
//	none ──order for the pool──▶ warming ──running warmFor──▶ stopping ──▶ stopped
//	                                                                         │ │
//	none ◀──────────── started ◀──── starting ◀──taken for demand────────────┘ │
//	launched, renamed ◀──transfer landed── leaving ◀──taken by the launch API──┘
//
// A pooled member (warming, stopping, stopped) is no capacity: it does not
// count toward the target, front ends never see it, and the cost caps count
// it at what it bills (running while it warms, the stopped price after). A
// member taken for demand counts as live from that moment. A start the
// cloud refuses for capacity leaves it stopped in the pool where the cloud
// keeps it stopped, and another stopped member, or a fresh order, takes
// its place at once (refusedLocked); one that fails otherwise deletes it,
// and a fresh order takes its place.
type standbyState uint8

const (
	// standbyNone: the member serves, or was ordered to; most members.
	standbyNone standbyState = iota
	// standbyWarming: ordered for the pool; it boots, joins and warms up.
	standbyWarming
	// standbyStopping: its stop is in flight.
	standbyStopping
	// standbyStopped: stopped at the cloud, billed at the stopped price.
	standbyStopped
	// standbyStarting: taken for demand, its start in flight; live.
	standbyStarting
	// standbyLeaving: stopped, and being handed to the launch API (renamed
	// and re-owned at the cloud) until the transfer's outcome is known;
	// no longer the pool's to take, trim or delete, and no capacity.
	standbyLeaving
)

// TaintStandby keeps pods off an instance of a standby pool while it warms
// up: its orders register their Nodes with it, and gpuscaler lifts it
// once the instance serves (started for demand, or taken while warming).
const TaintStandby = "gpuscaler.dev/standby"

// poolTaints are what the orders of g's standby pool register with: the
// group's taints and TaintStandby. Callers hold the store's lock.
func (g *group) poolTaints() []corev1.Taint {
	if g.standbyTaints == nil {
		g.standbyTaints = append(slices.Clone(g.cfg.Taints), corev1.Taint{Key: TaintStandby, Effect: corev1.TaintEffectNoSchedule})
	}
	return g.standbyTaints
}

// untaintLocked returns the provider IDs of g's serving members whose Node
// still carries TaintStandby, for the sync to lift once the lock is
// released: a group's with a pool, or the launches (handed over from one)
// once their owner has claimed the Node, so that the owner's taints are on
// it before pods may land.
func (y *syncer) untaintLocked(g *group) [][]string {
	if y.nodes == nil || g != y.store.launches && g.cfg.StandbyMaxSize() == 0 || len(g.members) == 0 {
		return nil
	}
	var out [][]string
	for _, mem := range g.members {
		if mem.standby != standbyNone || mem.phase != phaseCreated {
			continue
		}
		if st, ok := y.nodes.Startup(mem.providerIDs()...); ok && st.Standby && (st.Claimed || g != y.store.launches) {
			out = append(out, mem.providerIDs())
		}
	}
	return out
}

// pooled reports whether the member is in its group's standby pool rather
// than capacity.
func (mem *member) pooled() bool {
	switch mem.standby {
	case standbyWarming, standbyStopping, standbyStopped, standbyLeaving:
		return true
	}
	return false
}

// returning reports whether the member is a node a front end deleted on
// its way back to the pool (sizer.returnLocked): warmed long ago, its Node
// perhaps gone already, and nobody takes it before it stops.
func (mem *member) returning() bool {
	return mem.peek().recycled && (mem.standby == standbyWarming || mem.standby == standbyStopping)
}

// since is when the member's instance last came up: its start from
// standby, else its order.
func (mem *member) since() time.Time {
	if t := mem.peek().startedAt; !t.IsZero() {
		return t
	}
	return mem.createdAt.Time()
}

// takeLocked takes a member of g's pool for demand: one still warming that
// runs already, else a stopped one (the oldest: the newer ones have longer
// before maxAge), started in the background, else one still booting for
// the pool. A warming member is a live one from then on, with no stop
// and start. It returns nil when the pool has none, or a cost cap refuses
// a stopped one's full price or cannot count the previous process's
// orders yet. Callers hold the store's lock.
func (z *sizer) takeLocked(g *group) *member {
	if g.cfg.StandbyMaxSize() == 0 || g.counts[stateStandby] == 0 {
		return nil // no pool: no scan of the group's members
	}
	var best *member
	now := z.clock.Now()
	rank := func(mem *member) int { return g.takeRank(mem, now, z.offerings.backoff) }
	for _, mem := range g.members {
		r := rank(mem)
		if r < 0 {
			continue
		}
		// The oldest of the best rank; among those ordered at one instant,
		// the first by name: the same member whatever order the map gives.
		if best == nil || r < rank(best) || r == rank(best) && (mem.createdAt < best.createdAt ||
			mem.createdAt == best.createdAt && mem.name < best.name) {
			best = mem
		}
	}
	if best == nil {
		return nil
	}
	mem, s := best, z.store
	if g.poolShort.IsZero() {
		g.poolShort = z.clock.Now() // the refill waits out refillAfter from here
	}
	if mem.standby == standbyWarming {
		s.change(g, mem, func() { mem.standby = standbyNone })
		z.log.Info("a standby instance still warming up serves instead", "group", g.cfg.Name, "instance", mem.name)
		z.liftOnSight(mem)
		return mem
	}
	if z.cost.capped(g) && z.orderer.holding(g, g.cfg.Cloud) {
		// Until a list can show the previous process's last orders
		// (orderer.awaitPredecessor), a cap cannot count them, and a start
		// spends at once: the fresh order made instead waits out the hold.
		return nil
	}
	price := z.offerings.price(mem.cloud(), mem.offering(), g.itype.Price(mem.offering().CapacityType))
	if err := z.cost.check(g, mem, price); err != nil {
		return nil
	}
	s.change(g, mem, func() {
		mem.standby, mem.price, mem.state = standbyStarting, price, statePending
	})
	inst := mem.instance()
	z.log.Info("starting a standby instance", "group", g.cfg.Name, "instance", mem.name)
	z.orderer.run(func() { z.start(g, mem, inst) })
	return mem
}

// takeRank is how soon a pool member of g taken for demand at now would
// serve: 0 a warming one that runs, 1 a stopped one, 2 a stopped one in a
// location that refused a start within backoff (sync.offeringBackoff), 3
// one still booting for the pool; -1 one that cannot be taken (outdated,
// on its way back to the pool, its own start refused within backoff, in a
// location a zonal refusal took out within backoff, or no pool member).
func (g *group) takeRank(mem *member, now time.Time, backoff time.Duration) int {
	refused := g.startRefused[mem.offering().Location]
	recent := !refused.at.IsZero() && now.Sub(refused.at) < backoff
	switch {
	case mem.peek().outdated:
		return -1
	case mem.returning():
		return -1 // a node a front end deleted, until it stops
	case mem.standby == standbyWarming && mem.running():
		return 0
	case mem.standby == standbyStopped && mem.phase == phaseCreated && (mem.refusedWithin(now, backoff) || recent && refused.zonal):
		return -1
	case mem.standby == standbyStopped && mem.phase == phaseCreated && recent:
		return 2
	case mem.standby == standbyStopped && mem.phase == phaseCreated:
		return 1
	case mem.standby == standbyWarming && (mem.phase == phaseCreating || mem.phase == phaseCreated):
		return 3
	}
	return -1
}

// start starts a standby member's instance taken for demand. A start the
// cloud refuses (its capacity gone while the instance was stopped, an
// error) deletes the instance and orders a fresh one at once.
func (z *sizer) start(g *group, mem *member, inst cloud.Instance) {
	ctx := z.ctx()
	err := z.clearNode(ctx, mem)
	if err == nil {
		err = z.clients[g.cfg.Cloud].start(ctx, inst)
	}
	s := z.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.members[mem.name] != mem || mem.standby != standbyStarting {
		return // deleted meanwhile, or handed to the next core
	}
	if err == nil {
		mem.extras().startTries = 0
		z.metrics.standbyStarts.WithLabelValues(g.cfg.Name, "ok").Inc()
		s.started(g, mem, z.clock.Now())
		z.liftOnSight(mem)
		z.log.Info("standby instance started", "group", g.cfg.Name, "instance", mem.name)
		z.publishLocked(g)
		return
	}
	if ctx.Err() != nil {
		return // stopping: the next core lists it and takes it again or finds it started
	}
	z.metrics.standbyStarts.WithLabelValues(g.cfg.Name, "failed").Inc()
	z.events.warn(g.cfg.Name, mem.name, mem.providerID, "StandbyStartFailed", err.Error())
	if errors.Is(err, cloud.ErrCapacity) {
		z.refusedLocked(g, mem, err)
		return
	}
	z.log.Warn("standby instance would not start; deleting it and ordering a fresh one", "group", g.cfg.Name, "instance", mem.name, "error", err)
	s.change(g, mem, func() { mem.standby = standbyNone })
	z.removeLocked(g, mem, "standby start failed")
	z.orderFreshLocked(g)
}

// maxStartTries bounds the stopped members tried, one after the other, for
// one node a front end asked for: a third refusal in a row makes a fresh
// order, which may go elsewhere (the group's other locations, its other
// capacity type).
const maxStartTries = 3

// refusedLocked settles a member whose start the cloud refused for
// capacity. On a cloud where the instance stays stopped
// (cloud.Stopper.RefusedStaysStopped: a Scaleway server whose power-on is
// refused drops back to stopped) it goes back to the pool, with its disk
// and the images it pulled, and is not taken again for
// sync.offeringBackoff; elsewhere (a GCE MIG goes on trying the start) it
// is deleted, and its offering is stocked out: GCE's refusal is its
// zone's. Either way the node it was to be is another stopped member's at
// once, one in another location first, since a refusal may be its
// location's stock-out or only its host's GPUs taken meanwhile (none in a
// location a zonal refusal took out); after maxStartTries refusals, or
// with none left to take, it is a fresh order. What it learns is kept in
// memory: after a restart or a reload a refused instance may be tried
// again at once, which costs an API call.
func (z *sizer) refusedLocked(g *group, mem *member, err error) {
	s, now := z.store, z.clock.Now()
	tries := mem.peek().startTries + 1
	stays := z.clients[g.cfg.Cloud].refusedStaysStopped()
	if stays {
		z.log.Warn("standby instance would not start for capacity; it stays stopped in the pool", "group", g.cfg.Name, "instance", mem.name, "error", err)
		stopped := z.clients[g.cfg.Cloud].stoppedPrice(mem.offering())
		s.change(g, mem, func() {
			mem.standby, mem.state, mem.price = standbyStopped, stateStopped, stopped
			x := mem.extras()
			x.refusedAt, x.startTries, x.startedAt = now, 0, time.Time{}
		})
	} else {
		z.log.Warn("standby instance would not start for capacity; deleting it", "group", g.cfg.Name, "instance", mem.name, "error", err)
		s.change(g, mem, func() { mem.standby = standbyNone })
		z.removeLocked(g, mem, "standby start refused")
	}
	if g.startRefused == nil {
		g.startRefused = map[string]refusal{}
	}
	g.startRefused[mem.offering().Location] = refusal{at: now, zonal: !stays}
	if !stays {
		// The whole location refused: fresh orders go elsewhere too.
		z.offerings.markStockedOut(mem.cloud(), mem.offering())
	}
	if g.live < g.target && tries < maxStartTries {
		if next := z.takeLocked(g); next != nil && next.standby == standbyStarting {
			next.extras().startTries = tries
		}
	}
	z.orderFreshLocked(g)
}

// refusedWithin reports whether the cloud refused the member's start for
// capacity within d before now (sizer.refusedLocked).
func (mem *member) refusedWithin(now time.Time, d time.Duration) bool {
	t := mem.peek().refusedAt
	return !t.IsZero() && now.Sub(t) < d
}

// orderFreshLocked orders fresh members until the live ones match the
// target, then reconciles g: the fallback of a failed start is a fresh
// order, not the next standby instance, which likely meets what refused
// this one (refusedLocked tries a few first).
func (z *sizer) orderFreshLocked(g *group) {
	for g.live < g.target {
		fresh := z.newMember(g, false)
		z.store.add(g, fresh)
		z.orderer.order(g, fresh)
	}
	z.reconcileLocked(g)
}

// clearNode deletes the Node a stopped member's instance had, if it is
// still there, before the instance starts: the kubelet registers a fresh
// one as it boots. The old one may carry a front end's deletion marks
// (cluster-autoscaler's ToBeDeletedByClusterAutoscaler, Karpenter's
// disruption taint, a cordon) from when the node was scaled down into the
// pool; started with them, the node would bill in full and take no pod.
// A Node that cannot be deleted fails the start (the instance is deleted
// and a fresh one ordered, as for a start the cloud refuses).
func (z *sizer) clearNode(ctx context.Context, mem *member) error {
	if z.nodes == nil {
		return nil
	}
	s := z.store
	s.mu.RLock()
	ids := mem.providerIDs()
	s.mu.RUnlock()
	var err error
	for range 3 { // a conflict or a dropped connection: tried again at once
		if err = z.nodes.Delete(ctx, ids...); err == nil {
			return nil
		}
	}
	return fmt.Errorf("delete the Node it had before it stopped: %w", err)
}

// liftOnSight asks the Nodes to lift TaintStandby from a group member
// that serves now the moment its Node shows it (Lifter), so that no front
// end sees it Ready and tainted; the sync lifts it otherwise. Not for a
// launched member: its owner registers its Node first (untaintLocked).
// Callers hold the store's lock; the call does not block.
func (z *sizer) liftOnSight(mem *member) {
	if l, ok := z.nodes.(Lifter); ok {
		l.LiftOnSight(TaintStandby, mem.providerIDs()...)
	}
}

// started records that a standby instance's start was accepted at now:
// it serves from then on, and its Node, which registers again, is timed
// from the start. Callers hold the store's lock.
func (s *store) started(g *group, mem *member, now time.Time) {
	s.change(g, mem, func() {
		mem.standby, mem.state = standbyNone, statePending
		mem.extras().startedAt = now
		mem.recordedAt = stampOf(now)
		mem.steps = 0
	})
}

// poolLocked keeps g's standby pool at its size: stopped members past
// maxAge, and members past the size, are deleted (those still warming
// first), and missing ones ordered while maxSize leaves room beside the
// live members. Callers hold the store's lock.
func (z *sizer) poolLocked(g *group) {
	want := g.standbySize()
	if want == 0 && g.counts[stateStandby] == 0 {
		return
	}
	now := z.clock.Now()
	var pool []*member
	for _, mem := range g.members {
		if !mem.pooled() || mem.phase == phaseDeleting || mem.standby == standbyLeaving {
			continue
		}
		if mem.phase == phaseFailed {
			z.removeLocked(g, mem, "standby order failed") // reported when it failed; refilled below
			continue
		}
		if mem.standby == standbyStopped && now.Sub(mem.createdAt.Time()) > g.cfg.Standby.StandbyMaxAge() {
			z.removeLocked(g, mem, "standby instance past its maxAge")
			continue
		}
		if mem.peek().outdated && (mem.standby == standbyStopped || mem.standby == standbyWarming) {
			z.log.Info("replacing a standby instance made under the group's former configuration", "group", g.cfg.Name, "instance", mem.name)
			z.removeLocked(g, mem, "standby instance made under a former configuration")
			continue
		}
		pool = append(pool, mem)
	}
	if len(pool) > want {
		g.poolShort = time.Time{}
		sort.Slice(pool, func(i, j int) bool {
			if (pool[i].standby == standbyStopped) != (pool[j].standby == standbyStopped) {
				return pool[i].standby == standbyStopped
			}
			if pool[i].createdAt != pool[j].createdAt {
				return pool[i].createdAt > pool[j].createdAt
			}
			return pool[i].name > pool[j].name // the same ones whatever order the map gave
		})
		for _, mem := range pool[want:] {
			z.removeLocked(g, mem, "standby pool above its size")
		}
		return
	}
	// Over a cost cap (instances found at the cloud were adopted, a
	// failed order ran after all): the pool, which serves nothing yet,
	// gives way first, those billed in full (warming) before the stopped.
	if over := z.overCapLocked(g); over > 1e-9 {
		newestFirst(pool)
		sort.SliceStable(pool, func(i, j int) bool { return pool[i].standby != standbyStopped && pool[j].standby == standbyStopped })
		g.poolShort = time.Time{}
		for _, mem := range pool {
			if over <= 1e-9 {
				break
			}
			over -= z.cost.priceOf(g, mem)
			z.log.Warn("deleting a standby instance: the group is over a cost cap", "group", g.cfg.Name, "instance", mem.name)
			z.removeLocked(g, mem, "over a cost cap")
		}
		return
	}
	if len(pool) >= want {
		g.poolShort = time.Time{}
		return
	}
	if !g.poolShort.IsZero() && now.Sub(g.poolShort) < g.cfg.Standby.StandbyRefillAfter() {
		return // the group's scaled-down nodes may come back first (returnLocked)
	}
	if _, off := z.offerings.backedOff(g.cfg.Name); off {
		return
	}
	if _, usable, _ := z.offerings.groupPrices(g); !usable {
		return // every offering stocked out: an order would fail at once
	}
	for n := len(pool); n < want && g.live+n < g.cfg.MaxSize; n++ {
		if z.cost.check(g, nil, z.offerings.estimate(g)) != nil {
			return // the pool waits for room under the cost caps
		}
		mem := z.newMember(g, true)
		mem.standby = standbyWarming
		z.store.add(g, mem)
		z.orderer.order(g, mem)
	}
}

// standbySize is how many instances g's standby pool holds now: its
// configured size, or more, up to its forecast's maxSize, when the
// forecast asked for more (Manager.SetStandbySize).
func (g *group) standbySize() int {
	return max(g.cfg.StandbySize(), min(g.standbyAsked, g.cfg.StandbyMaxSize()))
}

// setStandbySize asks for a standby pool of n (bounded by standbySize)
// and brings the pool to it. Callers hold the store's lock.
func (z *sizer) setStandbySize(name string, n int) (int, error) {
	g, err := z.group(name)
	if err != nil {
		return 0, err
	}
	if g.cfg.Standby == nil || g.cfg.Standby.Forecast == nil {
		return 0, fmt.Errorf("%w: group %q has no standby.forecast", ErrNoStandbyForecast, name)
	}
	if g.standbyAsked != n {
		g.standbyAsked = n
		z.log.Info("standby pool resized by the forecast", "group", name, "size", g.standbySize())
		z.poolLocked(g)
		z.publishLocked(g)
	}
	return g.standbySize(), nil
}

// overCapLocked is how far g, or the cluster, is over its cost cap per
// hour, less what the standby instances being deleted bill (until they
// are gone they still count, but no longer stand in the way of the
// members that serve): of g's for g's cap, of every group's for the
// cluster's. Callers hold the store's lock.
func (z *sizer) overCapLocked(g *group) float64 {
	leaving := func(g *group) float64 {
		sum := 0.0
		for _, mem := range g.members {
			if mem.pooled() && mem.phase == phaseDeleting {
				sum += z.cost.priceOf(g, mem)
			}
		}
		return sum
	}
	groupOver, clusterOver := z.cost.over(g)
	over := 0.0
	if groupOver > 0 {
		over = groupOver - leaving(g)
	}
	if clusterOver > 0 {
		for _, name := range z.store.order {
			clusterOver -= leaving(z.store.groups[name])
		}
		over = max(over, clusterOver)
	}
	return over
}

// newMember makes the member for a new order of g.
func (z *sizer) newMember(g *group, pool bool) *member {
	mem := &member{
		name:      z.store.newName(g, z.namePrefix(g), pool),
		g:         g,
		phase:     phaseCreating,
		createdAt: stampOf(z.clock.Now()),
	}
	mem.providerID, mem.placeholder = cloud.ProviderIDOf(z.clients[g.cfg.Cloud].p, mem.name), true
	return mem
}

// warmedLocked files g's warming members whose warm-up is done in
// out.stop, marked stopping: they ran warmFor since a list first showed
// them running and, where the core sees Nodes, their Node showed its GPUs
// and pulled the pool's prePullImages. The pull is filed in out.prePull
// to start once the Node registers, beside the GPUs' start-up and
// warmFor, not after them: a warm-up runs at the full price. Callers hold
// the store's lock and stop them once it is released (stop).
func (y *syncer) warmedLocked(g *group, now time.Time, out *afterLock) {
	if g.counts[stateStandby] == 0 {
		return
	}
	from := len(out.stop)
	for _, mem := range g.members {
		if mem.standby != standbyWarming || !mem.running() {
			continue
		}
		x := mem.extras()
		if x.warmSince.IsZero() {
			x.warmSince = now
		}
		warm := now.Sub(x.warmSince) >= g.cfg.Standby.StandbyWarmFor()
		if y.nodes != nil && !mem.returning() { // a returned node warmed long ago; its Node may be gone already
			st, joined := y.nodes.Startup(mem.providerIDs()...)
			if !joined {
				continue
			}
			pulled := y.pulledLocked(g, mem, out)
			if !warm || !pulled || !st.GPUsSeen && g.itype.GPUCount > 0 {
				continue // not warm yet
			}
		} else if !warm {
			continue
		}
		y.store.change(g, mem, func() { mem.standby = standbyStopping })
		out.stop = append(out.stop, mem)
	}
	// Stopped in the order of their names, whatever order the map gave:
	// the stops go to the cloud in this order.
	slices.SortFunc(out.stop[from:], func(a, b *member) int { return strings.Compare(a.name, b.name) })
}

// pulledLocked reports whether a warming member's Node has the pool's
// prePullImages, filing the pull to start in out.prePull when it has not
// begun. A pull that fails (a wrong name, a registry that refuses) is
// reported once and let go: the instance is stopped without the images
// rather than kept running at full price. Callers hold the store's lock.
func (y *syncer) pulledLocked(g *group, mem *member, out *afterLock) bool {
	images := g.cfg.StandbyImages()
	pp, ok := y.nodes.(PrePuller)
	if len(images) == 0 || !ok {
		return true
	}
	p := pp.PrePulled(images, mem.providerIDs()...)
	if x := mem.peek(); !p.Done && p.Failed == "" && !x.warmSince.IsZero() &&
		y.clock.Since(x.warmSince) > g.cfg.Standby.StandbyWarmFor()+prePullTimeout {
		p.Failed = fmt.Sprintf("not every image pulled within %s", prePullTimeout)
	}
	switch {
	case p.Failed != "":
		if x := mem.extras(); !x.pullFailed {
			x.pullFailed = true
			y.log.Warn("a standby instance could not pull an image; it is stopped without it", "group", g.cfg.Name, "instance", mem.name, "error", p.Failed)
			y.orderer().events.warn(g.cfg.Name, mem.name, mem.providerID, "PrePullFailed", "standby instance "+mem.name+" could not pull "+p.Failed)
		}
		return true
	case !p.Started:
		out.prePull = append(out.prePull, prePull{group: g.cfg.Name, images: images, ids: mem.providerIDs()})
		return false
	}
	return p.Done
}

// prePullTimeout bounds a pull of a standby pool's images past warmFor:
// an instance is not kept running in full for a pull that does not end
// (a registry that hangs, a pod the kubelet refused).
const prePullTimeout = 15 * time.Minute

// busyTimeout bounds how long a warmed member waits for the pods that
// landed on it: past it, the member is taken into the group as one that
// serves (it does), and the pool refills.
const busyTimeout = 10 * time.Minute

// prePull is a pull of a standby pool's images to start on a Node.
type prePull struct {
	group  string
	images []string
	ids    []string
}

// stop stops warmed members' instances in the background and, once
// stopped, bills them at the stopped price and deletes their Nodes: the
// kubelet registers them again when they start, and a stopped node would
// only be a NotReady one to every controller meanwhile.
func (y *syncer) stop(ctx context.Context, cloudName string, mems []*member) {
	s := y.store
	for _, mem := range mems {
		s.mu.RLock()
		inst, ids := mem.instance(), mem.providerIDs()
		s.mu.RUnlock()
		y.orderer().run(func() {
			if busy := y.busy(ctx, mem, ids); busy {
				return
			}
			if len(mem.g.cfg.StandbyImages()) > 0 {
				y.endPrePull(ctx, inst.Name, ids)
			}
			err := y.clients[cloudName].stop(ctx, inst)
			s.mu.Lock()
			g := mem.g
			if g.members[mem.name] != mem || mem.standby != standbyStopping {
				s.mu.Unlock()
				return
			}
			if err != nil && mem.returning() {
				// A node the front end deleted: deleted, as it asked, rather
				// than kept at full price until a stop goes through.
				y.log.Warn("could not stop a scaled-down node for the standby pool; deleting it", "group", g.cfg.Name, "instance", mem.name, "error", err)
				y.sizer.removeLocked(g, mem, "deleted by the autoscaler; its stop for the pool failed")
				y.sizer.reconcileLocked(g)
				s.mu.Unlock()
				return
			}
			if err != nil {
				y.log.Warn("could not stop a warmed standby instance; the next sync tries again", "group", g.cfg.Name, "instance", mem.name, "error", err)
				s.change(g, mem, func() { mem.standby = standbyWarming })
				s.mu.Unlock()
				return
			}
			stopped := y.clients[cloudName].stoppedPrice(mem.offering())
			s.change(g, mem, func() { mem.standby, mem.state, mem.price = standbyStopped, stateStopped, stopped })
			y.sizer.publishLocked(g)
			s.mu.Unlock()
			y.log.Info("standby instance warmed and stopped", "group", g.cfg.Name, "instance", mem.name)
			if y.nodes != nil {
				if err := y.nodes.Delete(ctx, ids...); err != nil {
					y.log.Warn("could not delete a stopped standby instance's Node", "instance", inst.Name, "error", err)
				}
			}
		})
	}
}

// stoppedNodesLocked returns g's members on cloudName whose instance is stopped (for
// its standby pool, or for good and being deleted) and whose Node is still
// there and NotReady. A standby stop deletes it once; that delete may
// fail, or be lost with a restart or a reload (a stop that lands after
// its core handed over), and cluster-autoscaler counts every NotReady
// Node against the cluster's health (past 3 nodes and 45 %, it stops
// scaling). Callers hold the store's lock.
func (y *syncer) stoppedNodesLocked(cloudName string, g *group) []*member {
	if y.nodes == nil {
		return nil
	}
	var out []*member
	for _, mem := range g.members {
		if !mem.stoppedNode() || mem.cloud() != cloudName {
			continue // the launched members of other clouds are their syncs'
		}
		if st, ok := y.nodes.Startup(mem.providerIDs()...); ok && st.Ready.IsZero() {
			out = append(out, mem)
		}
	}
	return out
}

// stoppedNode reports whether the member's instance is stopped, as its
// stop's answer or a list says, or being deleted, and no start of it is
// in flight: its Node is of no use until a start, which deletes it anyway
// (clearNode); a NotReady Node of an instance being deleted (one lost,
// whose delete the cloud takes its time over) only holds
// cluster-autoscaler's cluster-health gate closed until it is gone.
func (mem *member) stoppedNode() bool {
	return (mem.standby == standbyStopped || mem.state == stateStopped || mem.phase == phaseDeleting) &&
		mem.standby != standbyStarting && mem.standby != standbyLeaving
}

// deleteStoppedNodes deletes the Nodes stoppedNodesLocked found, each only
// while its member is still stopped: one taken for demand meanwhile has
// its old Node deleted by its start, and a new one may register.
func (y *syncer) deleteStoppedNodes(ctx context.Context, mems []*member) {
	s := y.store
	for _, mem := range mems {
		s.mu.RLock()
		stopped := mem.g.members[mem.name] == mem && mem.stoppedNode()
		ids := mem.providerIDs()
		s.mu.RUnlock()
		if !stopped {
			continue
		}
		if err := y.nodes.Delete(ctx, ids...); err != nil {
			y.log.Warn("could not delete a stopped standby instance's Node; the next sync tries again", "instance", mem.name, "error", err)
		}
	}
}

// busy reports whether a warmed member's Node runs work, which its stop
// would kill: a pod that tolerates every taint, TaintStandby with them, or
// one bound to the node by name. Such a member stays warming, billed as
// running, until its pods are gone, or for busyTimeout: then it serves
// the group (its target one higher, within maxSize) and the pool refills.
// A failed pod list is busy too: the next sync asks again.
func (y *syncer) busy(ctx context.Context, mem *member, ids []string) bool {
	if y.nodes == nil {
		return false
	}
	pods, err := y.nodes.Workloads(ctx, ids...)
	if err == nil && len(pods) == 0 {
		return false
	}
	s := y.store
	s.mu.Lock()
	g, first, taken := mem.g, false, false
	if g.members[mem.name] == mem && mem.returning() && err == nil {
		// A node the front end drained and deleted still runs pods (ones
		// that tolerate its deletion taint): deleted, as the front end
		// asked, not kept at full price in a pool slot.
		y.sizer.removeLocked(g, mem, "deleted by the autoscaler; pods still ran on it")
		y.sizer.reconcileLocked(g)
		s.mu.Unlock()
		y.log.Warn("a scaled-down node still runs pods; deleted rather than returned to the standby pool", "group", g.cfg.Name, "instance", mem.name, "pods", pods)
		return true
	}
	if g.members[mem.name] == mem && mem.standby == standbyStopping {
		s.change(g, mem, func() { mem.standby = standbyWarming })
		x := mem.extras()
		if err == nil {
			first = x.busySince.IsZero()
			if first {
				x.busySince = y.clock.Now()
			}
			if y.clock.Since(x.busySince) > busyTimeout && g.live < g.cfg.MaxSize {
				// It serves: a member of the group from now on.
				s.change(g, mem, func() { mem.standby = standbyNone })
				g.target++
				y.sizer.reconcileLocked(g)
				taken = true
			}
		}
	}
	s.mu.Unlock()
	if taken {
		y.log.Warn("a standby instance has run pods for too long; it serves the group now", "group", g.cfg.Name, "instance", mem.name, "pods", pods)
		y.orderer().events.warn(g.cfg.Name, mem.name, ids[0], "StandbyServes",
			fmt.Sprintf("standby instance %s runs pods %s past %s: it is the group's now, and the pool refills", mem.name, strings.Join(pods, ", "), busyTimeout))
		return true
	}
	if err != nil {
		y.log.Warn("could not list a warmed standby instance's pods; it is stopped later", "group", g.cfg.Name, "instance", mem.name, "error", err)
		return true
	}
	if !first {
		return true
	}
	y.log.Warn("a warmed standby instance runs pods; it is stopped once they are gone", "group", g.cfg.Name, "instance", mem.name, "pods", pods)
	y.orderer().events.warn(g.cfg.Name, mem.name, ids[0], "StandbyBusy",
		fmt.Sprintf("standby instance %s is not stopped: pods %s run on it (they tolerate %s)", mem.name, strings.Join(pods, ", "), TaintStandby))
	return true
}

// endPrePull deletes the pod that pulled a standby instance's images, if
// any: before a stop, and once the instance serves.
func (y *syncer) endPrePull(ctx context.Context, name string, ids []string) {
	if pp, ok := y.nodes.(PrePuller); ok {
		if err := pp.EndPrePull(ctx, ids...); err != nil {
			y.log.Warn("could not delete a standby instance's pre-pull pod", "instance", name, "error", err)
		}
	}
}
