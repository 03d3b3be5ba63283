package sim

import (
	"context"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// call is the front door of every API operation on subject (an
// instance's name, "" for none): it counts the call, waits the configured
// latency on the engine's clock, and rolls for a fault.
func (e *Engine) call(ctx context.Context, op, subject string) error {
	e.mu.Lock()
	e.calls[op]++
	fault := e.faultRate > 0 && e.rollLocked(op, subject) < e.faultRate
	if e.failNext[op] {
		delete(e.failNext, op)
		fault = true
	}
	latency := e.latency
	e.mu.Unlock()
	if latency > 0 {
		select {
		case <-ctx.Done():
			return cloud.NewError(cloud.ErrTransient, op, ctx.Err())
		case <-e.clock.After(latency):
		}
	}
	if fault {
		return cloud.Errorf(cloud.ErrTransient, op, "simulated fault: 503 service unavailable")
	}
	return nil
}

// InstanceTypes returns the catalog.
func (e *Engine) InstanceTypes(ctx context.Context) ([]cloud.InstanceType, error) {
	if err := e.call(ctx, "instance_types", ""); err != nil {
		return nil, err
	}
	return e.Catalog(), nil
}

// Offerings returns every offering with its availability now.
func (e *Engine) Offerings(ctx context.Context) ([]cloud.Offering, error) {
	if err := e.call(ctx, "offerings", ""); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	out := make([]cloud.Offering, 0, len(e.catalog)*len(e.locations)*2)
	for _, t := range e.catalog {
		for _, loc := range e.locations {
			for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
				k := cloud.OfferingKey{InstanceType: t.Name, Location: loc, CapacityType: ct}
				out = append(out, cloud.Offering{
					InstanceType: t.Name, Location: loc, CapacityType: ct,
					Available: e.used[k] < e.capacity[k],
					Price:     t.Price(ct),
				})
			}
		}
	}
	return out, nil
}

// List returns the instances of one cluster.
func (e *Engine) List(ctx context.Context, cluster string) ([]cloud.Instance, error) {
	if err := e.call(ctx, "list", ""); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	sorted := e.sortedLocked(cluster)
	out := make([]cloud.Instance, 0, len(sorted))
	listedBefore := e.clock.Now().Add(-e.listLag).UnixNano()
	for _, in := range sorted {
		if e.listLag > 0 && in.created > listedBefore {
			continue // accepted, not listed yet
		}
		out = append(out, in.view())
	}
	if e.lostLocked("list") {
		return nil, cloud.Errorf(cloud.ErrTransient, "list", "simulated timeout after the list was answered")
	}
	return out, nil
}

// Create orders one instance for a cluster.
func (e *Engine) Create(ctx context.Context, cluster string, spec cloud.CreateSpec) (cloud.Instance, error) {
	if err := e.call(ctx, "create", spec.Name); err != nil {
		return cloud.Instance{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	_, ok := e.types[spec.InstanceType]
	switch {
	case !ok:
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "instance type %q does not exist", spec.InstanceType)
	case !e.validLocation(spec.Location):
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "location %q does not exist (have %s)", spec.Location, knownLocations(e))
	case spec.CapacityType != cloud.Spot && spec.CapacityType != cloud.OnDemand:
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "capacity type %q is neither spot nor on-demand", spec.CapacityType)
	case spec.Name == "":
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "instance name is required")
	}
	if _, exists := e.instances[spec.Name]; exists {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "an instance named %q already exists", spec.Name)
	}
	k := cloud.OfferingKey{InstanceType: spec.InstanceType, Location: spec.Location, CapacityType: spec.CapacityType}
	if e.used[k] >= e.capacity[k] {
		e.stockOuts++
		return cloud.Instance{}, cloud.Errorf(cloud.ErrCapacity, "create",
			"not enough resources to deploy %s (%s) in %s", spec.InstanceType, spec.CapacityType, spec.Location)
	}
	e.used[k]++
	e.nextID++
	now := e.clock.Now()
	in := &instance{
		name:     spec.Name,
		num:      e.nextID,
		order:    e.internOrderLocked(cluster, spec),
		offering: e.internLocked(k),
		state:    pending,
		created:  now.UnixNano(),
	}
	e.instances[spec.Name] = in
	if spec.UserData != "" {
		e.scripts[spec.Name] = spec.UserData
	}
	in.runningAt = now.Add(e.delayLocked("boot", spec.Name, e.bootDelay, e.bootP95)).UnixNano()
	e.scheduleLocked(in, in.runningAt)
	e.notifyLocked()
	if e.lostLocked("create") || e.unknownRate > 0 && e.rollLocked("lose create", spec.Name) < e.unknownRate {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrOutcomeUnknown, "create", "simulated timeout after the order reached the cloud")
	}
	out := in.view()
	out.CreatedAt = now
	return out, nil
}

// Delete starts deleting one of a cluster's instances; an instance that is
// gone, or never was, is success.
func (e *Engine) Delete(ctx context.Context, cluster string, inst cloud.Instance) error {
	if err := e.call(ctx, "delete", inst.Name); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	in, ok := e.instances[inst.Name]
	if !ok || in.order.cluster != cluster || in.state == deleting {
		return nil
	}
	if in.state == stopped {
		e.used[*in.offering]++ // held again until gone, as removeLocked frees it
		in.parked = true
	}
	in.state = deleting
	if e.deleteDelay == 0 {
		e.removeLocked(in)
	} else {
		e.scheduleLocked(in, e.clock.Now().Add(e.deleteDelay).UnixNano())
		e.notifyLocked()
	}
	if e.lostLocked("delete") {
		return cloud.Errorf(cloud.ErrTransient, "delete", "simulated timeout after the delete reached the cloud")
	}
	return nil
}

// Stop powers one of a cluster's running instances off: it bills the
// stopped price and gives its capacity back until started. One stopped
// already is success.
func (e *Engine) Stop(ctx context.Context, cluster string, inst cloud.Instance) error {
	return e.power(ctx, "stop", cluster, inst.Name, func(in *instance) error {
		switch in.state {
		case stopped:
			return nil
		case running:
			in.state, in.due = stopped, 0
			e.used[*in.offering]--
			return nil
		}
		return cloud.Errorf(cloud.ErrInvalid, "stop", "instance %q is %s, not running", in.name, states[in.state])
	})
}

// Start powers one of a cluster's stopped instances on: it runs
// StartDelay later. With no capacity left for its offering, or at the
// start failure rate, it is refused (ErrCapacity) and stays stopped. One
// starting or running already is success.
func (e *Engine) Start(ctx context.Context, cluster string, inst cloud.Instance) error {
	return e.power(ctx, "start", cluster, inst.Name, func(in *instance) error {
		switch in.state {
		case pending, running:
			return nil
		case stopped:
		default:
			return cloud.Errorf(cloud.ErrInvalid, "start", "instance %q is %s, not stopped", in.name, states[in.state])
		}
		k := *in.offering
		refused := e.refuseStarts > 0
		if refused {
			e.refuseStarts--
		}
		if refused || e.used[k] >= e.capacity[k] || e.startFailureRate > 0 && e.rollLocked("fail start", in.name) < e.startFailureRate {
			return cloud.Errorf(cloud.ErrCapacity, "start", "not enough resources to start %s (%s) in %s", k.InstanceType, k.CapacityType, k.Location)
		}
		e.used[k]++
		in.state = pending
		in.runningAt = e.clock.Now().Add(e.delayLocked("start", in.name, e.startDelay, e.startP95)).UnixNano()
		e.scheduleLocked(in, in.runningAt)
		return nil
	})
}

// Transfer renames one of a cluster's stopped instances and records it as
// launched by owner, outside any group (cloud.Transferer). The labels and
// taints its Node registers with stay those of its order, as a real
// machine's kubelet keeps the flags it booted with. Its provider ID
// follows the new name; its ID stays. A transfer repeated after it took
// effect is success.
func (e *Engine) Transfer(ctx context.Context, cluster string, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
	if err := e.call(ctx, "transfer", inst.Name); err != nil {
		return cloud.Instance{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	if name == "" || owner == "" {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "transfer", "a name and an owner are required")
	}
	in, ok := e.instances[inst.Name]
	if again, done := e.instances[name]; !ok && done && again.id() == inst.ID && again.order.owner == owner {
		in, ok = again, true // the answer to the first was lost
	}
	switch {
	case !ok || in.order.cluster != cluster:
		return cloud.Instance{}, cloud.Errorf(cloud.ErrNotFound, "transfer", "no instance %q", inst.Name)
	case in.state != stopped:
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "transfer", "instance %q is %s, not stopped", in.name, states[in.state])
	}
	if in.name != name {
		if _, taken := e.instances[name]; taken {
			return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "transfer", "an instance named %q already exists", name)
		}
		delete(e.instances, in.name)
		if script, ok := e.scripts[in.name]; ok {
			delete(e.scripts, in.name)
			e.scripts[name] = script
		}
		in.name = name
		e.instances[name] = in
		o := in.order
		in.order = e.internOrderLocked(cluster, cloud.CreateSpec{Owner: owner, Install: o.install, Labels: o.labels, Taints: o.taints})
	}
	e.notifyLocked()
	if e.lostLocked("transfer") {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrTransient, "transfer", "simulated timeout after the transfer reached the cloud")
	}
	return in.view(), nil
}

// power is the front door of a stop or a start: the call, the instance
// looked up in the cluster, act on it under the engine's lock, and the
// answer lost when a test asks for it.
func (e *Engine) power(ctx context.Context, op, cluster, name string, act func(*instance) error) error {
	if err := e.call(ctx, op, name); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	in, ok := e.instances[name]
	if !ok || in.order.cluster != cluster {
		return cloud.Errorf(cloud.ErrNotFound, op, "no instance %q", name)
	}
	if err := act(in); err != nil {
		return err
	}
	e.notifyLocked()
	if e.lostLocked(op) {
		return cloud.Errorf(cloud.ErrTransient, op, "simulated timeout after the %s reached the cloud", op)
	}
	return nil
}

// StoppedPrice is a stopped instance's hourly price, the same for every
// offering.
func (e *Engine) StoppedPrice(cloud.OfferingKey) float64 { return e.stoppedPrice }

// RefusedStaysStopped is true, as a refused start leaves the instance
// stopped (Start), unless the engine plays a cloud that goes on trying it
// (Config.RefusalRetried).
func (e *Engine) RefusedStaysStopped() bool { return !e.refusalRetried }

// Count returns how many instances the engine holds for a cluster, in any
// state, without counting as an API call.
func (e *Engine) Count(cluster string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	n := 0
	for _, in := range e.instances {
		if in.order.cluster == cluster {
			n++
		}
	}
	return n
}

// Instances returns a cluster's instances, sorted by name, without counting
// as an API call.
func (e *Engine) Instances(cluster string) []cloud.Instance {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	sorted := e.sortedLocked(cluster)
	out := make([]cloud.Instance, len(sorted))
	for i, in := range sorted {
		out[i] = in.view()
	}
	return out
}

// UserData returns the startup script an instance was ordered with.
func (e *Engine) UserData(name string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.instances[name]; !ok {
		return "", false
	}
	return e.scripts[name], true
}
