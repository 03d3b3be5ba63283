package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// LaunchRequest orders one instance on one offering outside any group's
// target: the launch API, for front ends that think in single machines
// (Karpenter's NodeClaims). The instance is recorded as the Owner's at the
// cloud, shares the core's cost guard, stock-out backoff and outcome-unknown
// handling, and is never deleted by the core: its owner collects it.
type LaunchRequest struct {
	// Owner names the front end, recorded on the instance ("karpenter").
	Owner string
	// Cloud and Offering say what to order.
	Cloud    string
	Offering cloud.OfferingKey
	// Name is the instance's hostname; empty picks "<Owner>-<10 hex>".
	Name string
	// Template is an optional configured group whose image, disk, cloud
	// options, labels, taints and bootstrap the instance uses; Labels and
	// Taints are added to the template's.
	Template string
	Labels   map[string]string
	Taints   []corev1.Taint
	// Image and DiskGiB, when set, replace the template's; Options are
	// added to the template's cloud options.
	Image   string
	DiskGiB int
	Options map[string]string
	// Standby takes a stopped instance of the Template group's standby
	// pool on Offering instead of ordering one: it is renamed Name and
	// recorded as the Owner's at the cloud (cloud.Transferer), then
	// started, in the cloud's start delay rather than a cold boot. It
	// needs Name and Template, and the request must not change the
	// image, disk or cloud options the pool was made with. With nothing
	// to take, Launch answers ErrNoStandby at once and the caller orders.
	Standby bool
}

// launcher is the launch API over the orderer's parts.
type launcher struct {
	store     *store
	offerings *offerings
	cost      *costGuard
	catalog   *catalog
	templater *templater
	orderer   *orderer
	deleter   *deleter
	clients   map[string]*client
}

// launch orders the instance and returns once the cloud accepted it. A
// stock-out is an error of class cloud.ErrCapacity, and the offering is
// skipped by every later order for the backoff period. A lost answer is
// resolved by a later list before launch returns (or ctx ends).
func (l *launcher) launch(ctx context.Context, req LaunchRequest) (Instance, error) {
	c, ok := l.clients[req.Cloud]
	if !ok {
		return Instance{}, cloud.Errorf(cloud.ErrInvalid, "launch", "cloud %q is not configured", req.Cloud)
	}
	if req.Owner == "" {
		return Instance{}, cloud.Errorf(cloud.ErrInvalid, "launch", "an owner is required")
	}
	s := l.store
	lg := s.launches
	// After a start, under a cost cap, a launch waits as a group's orders
	// do for a list that can show the previous process's last orders:
	// the cap must count them (orderer.holding).
	if !l.orderer.awaitPredecessor(ctx, lg, req.Cloud) {
		return Instance{}, cloud.Errorf(cloud.ErrTransient, "launch", "waiting for a list that can show the previous process's orders: %v", ctx.Err())
	}
	if req.Standby {
		return l.take(ctx, c, req)
	}
	s.mu.Lock()
	spec, mem, err := l.prepareLocked(req)
	if err != nil {
		s.mu.Unlock()
		return Instance{}, err
	}
	s.add(lg, mem)
	s.mu.Unlock()

	if err := l.orderer.render(ctx, req.Cloud, req.Template, &spec); err != nil {
		l.abandon(mem)
		return Instance{}, cloud.NewError(cloud.ErrInvalid, "launch", err)
	}
	inst, err := c.create(ctx, spec)
	switch {
	case err == nil:
		l.orderer.created(lg, mem, inst)
	case errors.Is(err, cloud.ErrOutcomeUnknown) || ctx.Err() != nil && !errors.Is(err, cloud.ErrRolledBack):
		l.orderer.unknown(lg, mem, err)
		return l.await(ctx, mem)
	default:
		l.orderer.release(ctx, mem.name)
		l.abandon(mem)
		if errors.Is(err, cloud.ErrCapacity) {
			s.mu.Lock()
			l.offerings.markStockedOut(req.Cloud, req.Offering)
			s.mu.Unlock()
		}
		return Instance{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return mem.view(), nil
}

// prepareLocked checks the order against the stock-out backoff and the cost
// cap and builds it.
func (l *launcher) prepareLocked(req LaunchRequest) (cloud.CreateSpec, *member, error) {
	s := l.store
	k := req.Offering
	price, err := l.priceLocked(req.Cloud, k)
	if err != nil {
		return cloud.CreateSpec{}, nil, err
	}
	name := req.Name
	if name == "" {
		name = s.newName(s.launches, req.Owner, false)
	} else if err := l.nameFreeLocked(name); err != nil {
		return cloud.CreateSpec{}, nil, err
	}
	spec := cloud.CreateSpec{Name: name, Owner: req.Owner, InstanceType: k.InstanceType, Location: k.Location, CapacityType: k.CapacityType}
	if req.Template != "" {
		g, ok := s.groups[req.Template]
		if !ok {
			return cloud.CreateSpec{}, nil, cloud.Errorf(cloud.ErrInvalid, "launch", "template group %q is not configured", req.Template)
		}
		spec = l.templater.spec(g, name, k)
		spec.Group, spec.Owner = "", req.Owner
	}
	spec.Labels = maps.Clone(spec.Labels) // the template's are shared
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	maps.Copy(spec.Labels, req.Labels)
	spec.Taints = append(slices.Clone(spec.Taints), req.Taints...)
	if req.Image != "" {
		spec.Image = req.Image
	}
	if req.DiskGiB > 0 {
		spec.DiskGiB = req.DiskGiB
	}
	if len(req.Options) > 0 {
		if spec.Options == nil {
			spec.Options = map[string]string{}
		}
		maps.Copy(spec.Options, req.Options)
	}
	mem := &member{
		name: name, g: l.store.launches, phase: phaseCreating,
		providerID: cloud.ProviderIDOf(l.clients[req.Cloud].p, name), placeholder: true, off: l.store.keys.intern(k), price: price,
		createdAt: stampOf(l.orderer.clock.Now()), x: &extras{owner: req.Owner, cloud: req.Cloud, resolved: make(chan struct{})},
	}
	spec.ProviderID = mem.providerID
	return spec, mem, nil
}

// priceLocked is what an instance of the offering costs per hour, once it
// is known to be in the catalog, not stocked out (a start needs the
// capacity an order would), and within the cost caps. Callers hold the
// store's lock.
func (l *launcher) priceLocked(cloudName string, k cloud.OfferingKey) (float64, error) {
	it, ok := l.catalog.instanceType(cloudName, k.InstanceType)
	if !ok {
		return 0, cloud.Errorf(cloud.ErrInvalid, "launch", "instance type %q is not in the catalog of cloud %q", k.InstanceType, cloudName)
	}
	price, usable := l.offerings.usable(cloudName, k, it.Price(k.CapacityType))
	if !usable {
		return 0, cloud.Errorf(cloud.ErrCapacity, "launch", "offering %s is unavailable", k)
	}
	if err := l.cost.check(l.store.launches, nil, price); err != nil {
		return 0, err
	}
	return price, nil
}

// nameFreeLocked checks that no launched instance holds name. Callers
// hold the store's lock.
func (l *launcher) nameFreeLocked(name string) error {
	mem, taken := l.store.launches.members[name]
	switch {
	case !taken:
		return nil
	case mem.phase == phaseDeleting:
		// A failed or terminated instance of the name not gone yet: the
		// name is free once its delete is.
		return cloud.Errorf(cloud.ErrTransient, "launch", "instance %q is still being deleted", name)
	}
	return cloud.Errorf(cloud.ErrInvalid, "launch", "instance %q is launched already", name)
}

// await waits until a list resolves a lost answer.
func (l *launcher) await(ctx context.Context, mem *member) (Instance, error) {
	select {
	case <-ctx.Done():
		return Instance{}, cloud.NewError(cloud.ErrOutcomeUnknown, "launch",
			fmt.Errorf("instance %s: answer lost and not resolved yet: %w", mem.name, ctx.Err()))
	case <-mem.x.resolved: // set when the launch was prepared, never changed
	}
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.launches.members[mem.name] != mem {
		return Instance{}, cloud.Errorf(cloud.ErrTransient, "launch", "instance %s: the order did not land", mem.name)
	}
	if mem.phase == phaseFailed {
		// The cloud took the order and failed it (a stock-out found after
		// the create was queued). The caller never gets the instance, so
		// nobody else would delete it: it goes now, and the error says
		// why, classed as a create's would be.
		x := mem.peek()
		l.deleteLocked(mem, "its order failed at the cloud")
		return Instance{}, cloud.Errorf(launchFailure(x.errCode), "launch", "instance %s: the order failed at the cloud: %s", mem.name, x.errMsg)
	}
	return mem.view(), nil
}

// launchFailure is the class of error a launch whose order the cloud
// failed returns, by the failure's code: a stock-out or a quota as a
// create refused for them, anything else worth a retry.
func launchFailure(code string) error {
	switch code {
	case CodeOutOfResources:
		return cloud.ErrCapacity
	case CodeQuotaExceeded:
		return cloud.ErrQuota
	}
	return cloud.ErrTransient
}

// abandon forgets an order that did not go through.
func (l *launcher) abandon(mem *member) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	l.store.drop(l.store.launches, mem)
}

// terminate deletes a launched instance; a provider ID the launch API does
// not know (gone already) is ErrNotLaunched.
func (l *launcher) terminate(_ context.Context, providerID string) error {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, ok := s.pids.get(providerID)
	if !ok || mem.group() != "" {
		return fmt.Errorf("%w: %q", ErrNotLaunched, providerID)
	}
	switch mem.phase {
	case phaseDeleting:
		return nil
	case phaseCreating, phaseUnknown:
		s.change(s.launches, mem, func() { mem.cancelled = s.to(mem, phaseDeleting) })
		return nil
	}
	l.deleteLocked(mem, "terminated by "+mem.peek().owner)
	return nil
}

// deleteLocked deletes a launched member's instance at the cloud; the
// delete outlives the call that asked for it. Callers hold the store's
// lock.
func (l *launcher) deleteLocked(mem *member, why string) {
	l.store.change(l.store.launches, mem, func() { l.store.to(mem, phaseDeleting) })
	l.deleter.delete(l.orderer.ctx(), mem.cloud(), mem.instance(), why)
}

// launched returns the launched instances of one owner (all for ""),
// sorted by name.
func (l *launcher) launched(owner string) []Instance {
	s := l.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Instance
	for _, mem := range s.launches.members {
		if owner == "" || mem.peek().owner == owner {
			out = append(out, mem.view())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// find returns one launched instance, by provider ID (or alias) or, with
// byName, by instance name.
func (l *launcher) find(key string, byName bool) (Instance, bool) {
	s := l.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	mem, ok := s.pids.get(key)
	if byName {
		mem, ok = s.launches.members[key]
	}
	if !ok || mem.group() != "" {
		return Instance{}, false
	}
	return mem.view(), true
}
