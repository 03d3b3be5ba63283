package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Error codes reported on instances that could not be created, and on
// deleting ones whose delete failed (CodeDeleteFailed: the instance still
// runs, and bills, until a retry goes through).
const (
	CodeOutOfResources  = "OutOfResources"
	CodeQuotaExceeded   = "QuotaExceeded"
	CodeInvalidConfig   = "InvalidConfiguration"
	CodeCostLimit       = "CostLimitExceeded"
	CodeCreateFailed    = "CreateFailed"
	CodeDeleteFailed    = "DeleteFailed"
	CodeNeverRegistered = "NeverRegistered"
	// CodeGPUsNeverAppeared backs off a group whose nodes register but
	// never show their GPUs.
	CodeGPUsNeverAppeared = "GPUsNeverAppeared"
)

// orderer creates instances: it tries a group's offerings in order, skips
// the ones that stocked out, renders each order's startup script, retries
// what is safe to retry, and never sends an order again whose answer was
// lost: such a member waits, in phaseUnknown, for a list that started well
// after the order to say whether it landed (see syncer).
type orderer struct {
	store     *store
	offerings *offerings
	cost      *costGuard
	templater *templater
	deleter   *deleter
	clients   map[string]*client
	queues    map[string]*createQueue
	boot      Bootstrapper
	retries   int
	clock     clock.Clock
	log       *slog.Logger
	metrics   *Metrics
	events    *events
	run       func(func())
	kick      func(cloudName string)
	ctx       func() context.Context
	// publish refreshes a group's gauges after a change.
	publish func(*group)
	// holdUntil is, per cloud, when after this core started a list can
	// show every order of the process before it: orders wait for a list
	// that started then (see awaitPredecessor). No entry: no hold.
	holdUntil map[string]time.Time
}

// holding reports whether g's orders are held after a start: no core of
// this process has folded in a list that can show the process before
// it's orders (a reload hands over holdUntil and lastSync, so a group
// inherited during the hold is held on). The launch API's instances are
// found by name, so they are not held unless a cost cap must count what
// the lists hide. Callers hold the store's lock.
func (o *orderer) holding(g *group, cloudName string) bool {
	until, ok := o.holdUntil[cloudName]
	if !ok || !o.store.lastSync[cloudName].Before(until) {
		return false
	}
	if g == o.store.launches {
		return o.cost.capped(g)
	}
	return true
}

// awaitPredecessor holds an order, after a start, until a list that
// started at holdUntil is folded in: the process before this one (a
// crash, a rolling update, the previous leader) may have placed orders
// that lists do not show yet. When that list shows them, the held orders
// they stand for are withdrawn unsent (sizer.adoptedLocked) rather than
// bought twice, and a cost cap counts them. It reports false when ctx
// ends first.
func (o *orderer) awaitPredecessor(ctx context.Context, g *group, cloudName string) bool {
	s := o.store
	for {
		s.mu.RLock()
		held := o.holding(g, cloudName)
		synced := s.synced
		s.mu.RUnlock()
		if !held {
			return true
		}
		var timer <-chan time.Time
		if wait := o.holdUntil[cloudName].Sub(o.clock.Now()); wait > 0 {
			timer = o.clock.After(wait)
		} else {
			o.kick(cloudName) // the next list can tell: ask for it now
		}
		select {
		case <-ctx.Done():
			return false
		case <-synced:
		case <-timer:
		}
	}
}

// order queues the create of a new member of g for its cloud's workers.
// Callers hold the store's lock.
func (o *orderer) order(g *group, mem *member) {
	o.queues[g.cfg.Cloud].push(g, mem)
}

// start runs every cloud's create workers until ctx is done.
func (o *orderer) start(ctx context.Context) {
	for _, q := range o.queues {
		q.run(ctx, o.run, o.create)
	}
}

// create orders one member's instance, trying each usable offering in turn.
func (o *orderer) create(ctx context.Context, g *group, mem *member) {
	s := o.store
	s.mu.Lock()
	if mem.cancelled {
		s.drop(g, mem)
		s.mu.Unlock()
		return
	}
	if b, ok := o.offerings.backedOff(g.cfg.Name); ok {
		o.failLocked(g, mem, b.reason, ErrorClassOther, fmt.Sprintf("group backing off until %s: %s", b.until.Format(time.RFC3339), b.message), false)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if !o.awaitPredecessor(ctx, g, mem.cloud()) {
		return // stopping: the member is rebuilt from the cloud, or ordered again, by the next process
	}
	tried := 0
	var last error // the last stock-out, whose words say why
	for _, k := range candidates(g) {
		s.mu.Lock()
		if mem.cancelled {
			s.drop(g, mem)
			s.mu.Unlock()
			return
		}
		price, ok := o.offerings.usable(g.cfg.Cloud, k, g.itype.Price(k.CapacityType))
		if ok {
			if err := o.cost.check(g, mem, price); err != nil {
				if mem.pooled() {
					// A standby pool is never worth a cost cap: the order
					// goes, and the group does not back off for it.
					s.drop(g, mem)
					s.mu.Unlock()
					return
				}
				o.failLocked(g, mem, CodeCostLimit, ErrorClassOther, err.Error(), true)
				s.mu.Unlock()
				return
			}
			s.change(g, mem, func() { mem.off, mem.price = s.keys.intern(k), price })
		}
		var spec cloud.CreateSpec
		if ok {
			spec = o.templater.spec(g, mem.name, k)
			if mem.pooled() {
				spec.Taints = g.poolTaints()
			}
			spec.ProviderID = mem.providerID
		}
		s.mu.Unlock()
		if !ok {
			continue
		}
		tried++
		var out outcome
		switch out, last = o.send(ctx, g, mem, spec); out {
		case settled:
			return
		case stockedOut:
			o.log.Info("offering stocked out, trying the next", "group", g.cfg.Name, "offering", k.String(), "error", last)
			o.events.normal(g.cfg.Name, mem.name, mem.providerID, "OfferingStockedOut",
				fmt.Sprintf("%s has no capacity; the order moves to the next offering", k))
			s.mu.Lock()
			o.offerings.markStockedOut(g.cfg.Cloud, k)
			s.mu.Unlock()
		}
	}
	msg := fmt.Sprintf("no capacity for %s in %s (%s); %d offerings tried",
		g.cfg.InstanceType, strings.Join(g.cfg.Locations, ", "), g.cfg.CapacityPolicy, tried)
	if last != nil {
		msg += "; the last said: " + last.Error()
	}
	o.fail(g, mem, CodeOutOfResources, ErrorClassOutOfResources, msg, false)
}

// failure names a cloud's error class as a scale-up failure: the code
// reported (Events, metrics, the instance's error) and its class, the same
// for a create the cloud refused and an instance it reports failed.
func failure(class error) (string, ErrorClass) {
	switch {
	case errors.Is(class, cloud.ErrCapacity):
		return CodeOutOfResources, ErrorClassOutOfResources
	case errors.Is(class, cloud.ErrQuota):
		return CodeQuotaExceeded, ErrorClassOther
	case errors.Is(class, cloud.ErrInvalid), errors.Is(class, cloud.ErrNotFound):
		return CodeInvalidConfig, ErrorClassOther
	}
	return CodeCreateFailed, ErrorClassOther
}

// backsOff reports whether a failure of this code makes its group stop
// ordering for a while: asking again cannot help before someone acts
// (a quota raised, the config fixed).
func backsOff(code string) bool {
	return code == CodeQuotaExceeded || code == CodeInvalidConfig
}

// outcome is how one offering's order ended.
type outcome int

const (
	// settled: the member's fate is decided (created, unknown, failed or withdrawn).
	settled outcome = iota
	// stockedOut: the offering had no capacity; try the next.
	stockedOut
)

// send renders the startup script and orders the member on one offering
// (a stock-out's error comes back with stockedOut),
// retrying transient failures, which by the cloud contract did not take
// effect.
func (o *orderer) send(ctx context.Context, g *group, mem *member, spec cloud.CreateSpec) (outcome, error) {
	if err := o.render(ctx, g.cfg.Cloud, g.cfg.Name, &spec); err != nil {
		o.fail(g, mem, CodeInvalidConfig, ErrorClassOther, err.Error(), true)
		return settled, nil
	}
	c := o.clients[g.cfg.Cloud]
	backoff := time.Second
	for attempt := 0; ; attempt++ {
		inst, err := c.create(ctx, spec)
		switch {
		case err == nil:
			o.created(g, mem, inst)
			return settled, nil
		case errors.Is(err, cloud.ErrOutcomeUnknown), ctx.Err() != nil && !errors.Is(err, cloud.ErrRolledBack):
			// The order may have landed: never send it again before a list says.
			o.unknown(g, mem, err)
			return settled, nil
		}
		o.release(ctx, mem.name)
		if ctx.Err() != nil {
			// The core stops, and the cloud undid what it had made: the
			// order was never sent, and the next core (Inherit) sends it.
			return settled, nil
		}
		if cloud.IsClass(err, cloud.ErrCapacity) {
			return stockedOut, err
		}
		if code, class := failure(cloud.Class(err)); backsOff(code) {
			o.fail(g, mem, code, class, err.Error(), true)
			return settled, nil
		}
		if attempt >= o.retries {
			o.fail(g, mem, CodeCreateFailed, ErrorClassOther, err.Error(), true)
			return settled, nil
		}
		o.log.Warn("create failed, retrying", "group", g.cfg.Name, "instance", spec.Name, "attempt", attempt+1, "error", err)
		select {
		case <-ctx.Done():
			return settled, nil
		case <-o.clock.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
		o.store.mu.Lock()
		cancelled := mem.cancelled
		if cancelled {
			o.store.drop(g, mem)
		}
		o.store.mu.Unlock()
		if cancelled {
			return settled, nil
		}
		if err := o.render(ctx, g.cfg.Cloud, g.cfg.Name, &spec); err != nil {
			o.fail(g, mem, CodeInvalidConfig, ErrorClassOther, err.Error(), true)
			return settled, nil
		}
	}
}

// render puts the startup script of bootGroup's bootstrap on an order. A
// launched instance renders with its template group's (spec.Group is set to
// it only while rendering); with no group, the order has no script.
func (o *orderer) render(ctx context.Context, cloudName, bootGroup string, spec *cloud.CreateSpec) error {
	if o.boot == nil || bootGroup == "" {
		return nil
	}
	rs := *spec
	rs.Group = bootGroup
	if a, ok := o.clients[cloudName].p.(cloud.IDAssigner); ok && a.AssignsIDs() {
		// The cloud renders once it knows the instance's ID.
		boot := o.boot
		spec.RenderUserData = func(ctx context.Context, providerID string) (string, error) {
			r := rs
			r.ProviderID = providerID
			ud, err := boot.UserData(ctx, r)
			if err != nil {
				return "", fmt.Errorf("render startup script for %s: %w", r.Name, err)
			}
			return ud, nil
		}
		return nil
	}
	ud, err := o.boot.UserData(ctx, rs)
	if err != nil {
		return fmt.Errorf("render startup script for %s: %w", spec.Name, err)
	}
	spec.UserData = ud
	return nil
}

// created records a member's instance, or deletes it if the member was
// withdrawn while the create was in flight.
func (o *orderer) created(g *group, mem *member, inst cloud.Instance) {
	s := o.store
	s.mu.Lock()
	defer s.mu.Unlock()
	o.recordLocked(g, mem, inst)
	o.offerings.succeed(g.cfg.Name)
	o.publish(g)
	o.metrics.created.WithLabelValues(g.cfg.Name, s.createdReason(g, mem)).Inc()
	o.log.Info("instance created", "group", g.cfg.Name, "owner", mem.peek().owner, "instance", inst.Name, "offering", mem.offering().String(), "price", mem.price)
}

// recordLocked puts what the cloud accepted on the member.
func (o *orderer) recordLocked(g *group, mem *member, inst cloud.Instance) {
	s := o.store
	s.change(g, mem, func() {
		pid := inst.ProviderID
		inst.ProviderID = ""
		s.setInstance(mem, inst)
		if mem.state == stateUnknown {
			mem.state = statePending
		}
		mem.recordedAt = stampOf(o.clock.Now())
		if mem.cancelled {
			s.to(mem, phaseDeleting)
		} else {
			s.to(mem, phaseCreated)
		}
		s.reindex(mem, pid)
		s.index(mem)
	})
	if mem.cancelled {
		o.log.Info("deleting instance withdrawn during its create", "group", g.cfg.Name, "instance", inst.Name)
		o.deleter.delete(o.ctx(), mem.cloud(), mem.instance(), "withdrawn while it was being created")
	}
	mem.settle()
}

// unknown parks a member whose create answer was lost until a list says
// whether the order landed.
func (o *orderer) unknown(g *group, mem *member, err error) {
	s := o.store
	s.mu.Lock()
	s.change(g, mem, func() {
		// A withdrawn order stays withdrawn: a later list deletes what
		// landed and forgets what did not, and it never counts as live.
		if !mem.cancelled {
			s.to(mem, phaseUnknown)
		}
		mem.extras().unknownSince = o.clock.Now()
	})
	cloudName := mem.cloud() // a launched member's is in its extras, which a sync may change
	s.mu.Unlock()
	o.log.Warn("create answer lost; waiting for a list to say whether it landed", "group", g.cfg.Name, "instance", mem.name, "error", err)
	o.kick(cloudName)
}

// release tells the bootstrapper an order for name did not go through.
func (o *orderer) release(ctx context.Context, name string) {
	if r, ok := o.boot.(Releaser); ok {
		r.Release(context.WithoutCancel(ctx), name)
	}
}

func (o *orderer) fail(g *group, mem *member, code string, class ErrorClass, msg string, backoff bool) {
	o.release(o.ctx(), mem.name)
	o.store.mu.Lock()
	defer o.store.mu.Unlock()
	o.failLocked(g, mem, code, class, msg, backoff)
}

// failLocked marks a member failed; it stays in the target, reported with
// its error, until a front end removes it. A withdrawn member is dropped.
// With backoff, the group gets no new orders for a while (see offerings).
func (o *orderer) failLocked(g *group, mem *member, code string, class ErrorClass, msg string, backoff bool) {
	s := o.store
	o.metrics.scaleUpFailures.WithLabelValues(g.cfg.Name, code).Inc()
	if backoff && g != s.launches {
		until := o.offerings.fail(g.cfg.Name, code, msg, 0, 0)
		o.log.Warn("node group backs off", "group", g.cfg.Name, "reason", code, "until", until.Format(time.RFC3339))
		o.events.warn(g.cfg.Name, "", "", "BackedOff", fmt.Sprintf("no new orders until %s after %s", until.Format(time.RFC3339), code))
	}
	if mem.cancelled {
		s.drop(g, mem)
		mem.settle()
		return
	}
	o.log.Warn("instance could not be created", "group", g.cfg.Name, "instance", mem.name, "code", code, "error", msg)
	o.events.warn(g.cfg.Name, mem.name, mem.providerID, "ScaleUpFailed", code+": "+msg)
	s.change(g, mem, func() {
		s.to(mem, phaseFailed)
		x := mem.extras()
		x.errCode, x.errClass, x.errMsg = code, class, msg
	})
	o.publish(g)
	mem.settle()
}

// settle wakes a caller waiting on a launch's outcome.
func (mem *member) settle() {
	if r := mem.peek().resolved; r != nil {
		select {
		case <-r:
		default:
			close(r)
		}
	}
}
