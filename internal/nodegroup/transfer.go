package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// The launch API takes from a standby pool (LaunchRequest.Standby) by
// handing a stopped instance over at the cloud, renamed to the launch's
// name and owned by its owner in one write (cloud.Transferer), then
// starting it. The name is the whole point: a front end that asks again
// after a crash (Karpenter repeats Create for the same NodeClaim) finds
// the machine by name, and a restarted core lists it as the owner's, not
// as a pool's. Until the transfer's outcome is known, the pool member is
// leaving (nobody takes, trims or deletes it) and the launched member is
// an order in flight, or one whose answer was lost, that a list resolves
// as any other (store.settleTransfer ends the pair).

// take hands a standby instance of req.Template's pool over to req.Owner
// under req.Name and starts it; ErrNoStandby when the pool has none that
// serves the request unchanged.
func (l *launcher) take(ctx context.Context, c *client, req LaunchRequest) (Instance, error) {
	if req.Name == "" || req.Template == "" {
		return Instance{}, cloud.Errorf(cloud.ErrInvalid, "launch", "a launch from standby needs a name and a template group")
	}
	if _, ok := c.p.(cloud.Transferer); !ok {
		return Instance{}, fmt.Errorf("%w: cloud %s cannot hand an instance over", ErrNoStandby, req.Cloud)
	}
	s := l.store
	lg := s.launches
	s.mu.Lock()
	pm, mem, err := l.takeLocked(req)
	if err != nil {
		s.mu.Unlock()
		return Instance{}, err
	}
	from := pm.instance()
	s.mu.Unlock()
	log := l.orderer.log.With("group", req.Template, "instance", from.Name, "name", req.Name, "owner", req.Owner)
	log.Info("handing a standby instance over to the launch API")

	got, err := c.transfer(ctx, from, req.Name, req.Owner)
	switch {
	case err == nil:
		s.mu.Lock()
		s.settleTransfer(mem, true, l.orderer.clock.Now())
		s.mu.Unlock()
		l.orderer.created(lg, mem, got)
	case errors.Is(err, cloud.ErrTransient) || errors.Is(err, cloud.ErrOutcomeUnknown) || ctx.Err() != nil:
		// It may have taken effect: a list tells, under which name the
		// instance now is.
		l.orderer.unknown(lg, mem, err)
		if _, err := l.await(ctx, mem); err != nil {
			return Instance{}, err
		}
		s.mu.RLock()
		got = mem.instance()
		s.mu.RUnlock()
	default:
		// Refused: nothing changed at the cloud (the instance went, or
		// is not stopped). The caller orders instead.
		s.mu.Lock()
		s.settleTransfer(mem, false, time.Time{})
		s.drop(lg, mem)
		s.mu.Unlock()
		mem.settle()
		log.Warn("standby instance not handed over; ordering instead", "error", err)
		return Instance{}, fmt.Errorf("%w: %w", ErrNoStandby, err)
	}
	return l.startTaken(ctx, c, mem, got, req.Template)
}

// takeLocked picks the pool member to hand over (the oldest stopped one
// of the offering: the newer have longer before maxAge; not one whose
// start the cloud refused within sync.offeringBackoff) and adds the
// launched member that will stand for it. Callers hold the store's lock.
func (l *launcher) takeLocked(req LaunchRequest) (pm, mem *member, err error) {
	s := l.store
	g, ok := s.groups[req.Template]
	if !ok {
		return nil, nil, cloud.Errorf(cloud.ErrInvalid, "launch", "template group %q is not configured", req.Template)
	}
	if why := unchanged(g, req); why != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrNoStandby, why)
	}
	if err := l.nameFreeLocked(req.Name); err != nil {
		return nil, nil, err
	}
	now := l.orderer.clock.Now()
	for _, m := range g.members {
		if m.standby == standbyStopped && m.phase == phaseCreated && m.offering() == req.Offering && !m.peek().outdated && !m.peek().recycled &&
			!m.refusedWithin(now, l.offerings.backoff) && (pm == nil || m.createdAt < pm.createdAt) {
			pm = m
		}
	}
	if pm == nil {
		return nil, nil, fmt.Errorf("%w: group %s holds none of %s", ErrNoStandby, g.cfg.Name, req.Offering)
	}
	price, err := l.priceLocked(req.Cloud, req.Offering)
	if err != nil {
		return nil, nil, err
	}
	mem = &member{
		name: req.Name, g: s.launches, phase: phaseCreating,
		providerID: cloud.ProviderIDOf(l.clients[req.Cloud].p, req.Name), placeholder: true, off: pm.off, price: price,
		createdAt: stampOf(l.orderer.clock.Now()),
		x:         &extras{owner: req.Owner, cloud: req.Cloud, resolved: make(chan struct{}), fromGroup: g.cfg.Name, fromName: pm.name},
	}
	s.change(g, pm, func() { pm.standby = standbyLeaving })
	s.add(s.launches, mem)
	return pm, mem, nil
}

// unchanged says why a launch cannot take from g's pool as it is (it asks
// for another image, disk or cloud option than the pool's instances were
// made with), or "" when it can.
func unchanged(g *group, req LaunchRequest) string {
	switch {
	case g.cfg.Cloud != req.Cloud:
		return fmt.Sprintf("group %s is on cloud %s", g.cfg.Name, g.cfg.Cloud)
	case req.Image != "" && req.Image != g.cfg.Image:
		return fmt.Sprintf("the image %q is not the pool's %q", req.Image, g.cfg.Image)
	case req.DiskGiB != 0 && req.DiskGiB != g.cfg.DiskSizeGiB:
		return fmt.Sprintf("a disk of %d GiB is not the pool's %d GiB", req.DiskGiB, g.cfg.DiskSizeGiB)
	}
	for k, v := range req.Options {
		if have, ok := g.cfg.CloudOptions[k]; !ok || have != v {
			return fmt.Sprintf("the cloud option %s=%q is not the pool's", k, v)
		}
	}
	return ""
}

// startTaken starts a handed-over instance. A start the cloud refuses for
// capacity deletes it (its name stays held until it is gone) and answers
// ErrCapacity, the offering skipped as for a stocked-out order; another
// error leaves it stopped, and the next list starts it again (syncer.fold:
// a start lost with the core that sent it).
func (l *launcher) startTaken(ctx context.Context, c *client, mem *member, inst cloud.Instance, pool string) (Instance, error) {
	s := l.store
	err := c.start(ctx, inst)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.launches.members[mem.name] != mem || mem.phase != phaseCreated {
		// Terminated meanwhile (withdrawn during the transfer: the record
		// deleted it).
		return Instance{}, cloud.Errorf(cloud.ErrTransient, "launch", "instance %s was terminated while it was handed over", mem.name)
	}
	if err == nil {
		l.orderer.metrics.standbyStarts.WithLabelValues(pool, "ok").Inc()
		s.started(s.launches, mem, l.orderer.clock.Now())
		l.orderer.log.Info("standby instance handed over and started", "group", pool, "instance", mem.name, "owner", mem.peek().owner)
		return mem.view(), nil
	}
	if ctx.Err() == nil && errors.Is(err, cloud.ErrCapacity) {
		l.orderer.metrics.standbyStarts.WithLabelValues(pool, "failed").Inc()
		l.orderer.events.warn(pool, mem.name, mem.providerID, "StandbyStartFailed", err.Error())
		l.offerings.markStockedOut(mem.cloud(), mem.offering())
		l.deleteLocked(mem, "its start from standby was refused")
		return Instance{}, err
	}
	l.orderer.log.Warn("standby instance handed over, its start not confirmed; the next list starts it", "group", pool, "instance", mem.name, "error", err)
	// The cause's text only: its class (a 400 for a start that landed
	// already is ErrInvalid) would make this error, which the next list
	// resolves, look final to errors.Is and cloud.Class.
	return Instance{}, cloud.NewError(cloud.ErrTransient, "launch", fmt.Errorf("instance %s: start from standby: %s", mem.name, err.Error()))
}

// settleTransfer ends the hand-over of a standby instance to the launched
// member mem once the transfer's outcome is known. Landed, the pool
// member is gone from its group (the instance has another name and owner
// now), and its old name is kept from a lagging list's adoption; not
// landed, it is a stopped member of its pool again. Callers hold the
// store's lock.
func (s *store) settleTransfer(mem *member, landed bool, now time.Time) {
	x := mem.peek()
	if x.fromName == "" {
		return
	}
	mem.x.fromGroup, mem.x.fromName = "", ""
	g, ok := s.groups[x.fromGroup]
	if !ok {
		return // removed by a reload: the next list adopts what it finds
	}
	pm, ok := g.members[x.fromName]
	if !ok || pm.standby != standbyLeaving {
		return
	}
	if landed {
		s.drop(g, pm)
		s.renamed[pm.name] = now
		return
	}
	s.change(g, pm, func() { pm.standby = standbyStopped })
}

// restart starts again a launched instance handed over from a standby
// pool whose start was lost (the process that sent it stopped, or the
// cloud failed it). It is its owner's machine, which a NodeClaim may
// hold: a failure leaves it for the next list to start, never deletes and
// replaces it as the pool's own start does (its owner deletes it if it
// gives up on it).
func (y *syncer) restart(mem *member, inst cloud.Instance) {
	ctx := y.sizer.ctx()
	s := y.store
	s.mu.RLock()
	cloudName := mem.cloud()
	s.mu.RUnlock()
	err := y.clients[cloudName].start(ctx, inst)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.launches.members[mem.name] != mem || mem.standby != standbyStarting {
		return // deleted meanwhile, or handed to the next core
	}
	if err != nil {
		if ctx.Err() == nil {
			y.log.Warn("a launched instance handed over from standby would not start; the next list tries again", "instance", mem.name, "error", err)
		}
		s.change(s.launches, mem, func() { mem.standby = standbyNone })
		return
	}
	s.started(s.launches, mem, y.clock.Now())
	y.log.Info("launched instance handed over from standby started", "instance", mem.name, "owner", mem.peek().owner)
}
