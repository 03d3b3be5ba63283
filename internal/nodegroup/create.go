package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Error codes reported on instances that could not be created.
const (
	CodeOutOfResources = "OutOfResources"
	CodeQuotaExceeded  = "QuotaExceeded"
	CodeInvalidConfig  = "InvalidConfiguration"
	CodeCostLimit      = "CostLimitExceeded"
	CodeCreateFailed   = "CreateFailed"
)

// capacityTypes returns the capacity types a policy orders, in order.
func capacityTypes(policy string) []cloud.CapacityType {
	switch policy {
	case config.PolicySpotOnly:
		return []cloud.CapacityType{cloud.Spot}
	case config.PolicyPreferSpot:
		return []cloud.CapacityType{cloud.Spot, cloud.OnDemand}
	case config.PolicyPreferOnDemand:
		return []cloud.CapacityType{cloud.OnDemand, cloud.Spot}
	default:
		return []cloud.CapacityType{cloud.OnDemand}
	}
}

// candidates returns a group's offerings in the order they are tried: the
// capacity policy first (a preferred capacity type is tried in every
// location before the other), then the configured location order.
func candidates(g *group) []cloud.OfferingKey {
	var out []cloud.OfferingKey
	for _, ct := range capacityTypes(g.cfg.CapacityPolicy) {
		for _, loc := range g.cfg.Locations {
			out = append(out, cloud.OfferingKey{InstanceType: g.cfg.InstanceType, Location: loc, CapacityType: ct})
		}
	}
	return out
}

// usableLocked reports whether an offering may be tried now, and its price.
func (m *Manager) usableLocked(cloudName string, g *group, k cloud.OfferingKey) (float64, bool) {
	if until, ok := m.unavailable[cloudName][k]; ok && m.clock.Now().Before(until) {
		return 0, false
	}
	price := g.itype.Price(k.CapacityType)
	if o, ok := m.offerings[cloudName][k]; ok {
		if !o.Available {
			return 0, false
		}
		price = o.Price
	} else if len(m.offerings[cloudName]) > 0 {
		// The cloud listed its offerings and this one is not among them.
		return 0, false
	}
	return price, true
}

// markUnavailable remembers a stocked-out offering for the backoff period.
func (m *Manager) markUnavailableLocked(cloudName string, k cloud.OfferingKey) {
	m.unavailable[cloudName][k] = m.clock.Now().Add(m.cfg.Sync.OfferingBackoff.Duration)
}

// goCreate starts the background create of one member.
func (m *Manager) goCreate(g *group, mem *member) {
	cloudName := g.cfg.Cloud
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.create(m.ctx, cloudName, g, mem)
	}()
}

// create orders one member's instance, trying each usable offering in turn.
func (m *Manager) create(ctx context.Context, cloudName string, g *group, mem *member) {
	c := m.clients[cloudName]
	tried := 0
	for _, k := range candidates(g) {
		m.mu.Lock()
		if mem.cancelled {
			m.dropLocked(g, mem)
			m.updateGaugesLocked(g)
			m.mu.Unlock()
			return
		}
		price, ok := m.usableLocked(cloudName, g, k)
		if ok {
			if err := m.checkCostPrice(g, mem, price); err != nil {
				m.failLocked(g, mem, CodeCostLimit, ErrorClassOther, err.Error())
				m.mu.Unlock()
				return
			}
			mem.offering, mem.price = k, price
		}
		m.mu.Unlock()
		if !ok {
			continue
		}
		tried++
		spec, err := m.spec(ctx, g, mem, k)
		if err != nil {
			m.fail(g, mem, CodeInvalidConfig, ErrorClassOther, err.Error())
			return
		}
		done, err := m.createOn(ctx, c, g, mem, spec)
		if done {
			return
		}
		m.release(ctx, mem.name)
		if errors.Is(err, cloud.ErrCapacity) {
			m.log.Info("offering stocked out, trying the next", "group", g.cfg.Name, "offering", k.String(), "error", err)
			m.mu.Lock()
			m.markUnavailableLocked(cloudName, k)
			m.mu.Unlock()
			continue
		}
		if ctx.Err() != nil {
			return
		}
	}
	msg := fmt.Sprintf("no capacity for %s in %s (%s); %d offerings tried",
		g.cfg.InstanceType, strings.Join(g.cfg.Locations, ", "), g.cfg.CapacityPolicy, tried)
	m.fail(g, mem, CodeOutOfResources, ErrorClassOutOfResources, msg)
}

// createOn orders the member on one offering, retrying transient failures.
// It returns done=true when the member's fate is settled (created, failed
// for good, or cancelled), and otherwise the capacity error that sends the
// caller to the next offering.
func (m *Manager) createOn(ctx context.Context, c *client, g *group, mem *member, spec cloud.CreateSpec) (bool, error) {
	backoff := time.Second
	for attempt := 0; ; attempt++ {
		inst, err := c.create(ctx, spec)
		if errors.Is(err, cloud.ErrOutcomeUnknown) {
			// The order may have landed: never send it again before looking.
			found, lerr := m.lookup(ctx, c, spec.Name)
			if lerr != nil {
				err = lerr
			} else if found != nil {
				inst, err = *found, nil
			}
		}
		if err == nil {
			m.created(ctx, g, mem, inst)
			return true, nil
		}
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		switch cloud.Class(err) {
		case cloud.ErrCapacity:
			return false, err
		case cloud.ErrQuota:
			m.fail(g, mem, CodeQuotaExceeded, ErrorClassOther, err.Error())
			return true, err
		case cloud.ErrInvalid, cloud.ErrNotFound:
			m.fail(g, mem, CodeInvalidConfig, ErrorClassOther, err.Error())
			return true, err
		}
		if attempt >= *m.cfg.Sync.CreateRetries {
			m.fail(g, mem, CodeCreateFailed, ErrorClassOther, err.Error())
			return true, err
		}
		m.log.Warn("create failed, retrying", "group", g.cfg.Name, "instance", spec.Name, "attempt", attempt+1, "error", err)
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-m.clock.After(backoff):
		}
		if backoff < 30*time.Second {
			backoff *= 2
		}
		m.mu.RLock()
		cancelled := mem.cancelled
		m.mu.RUnlock()
		if cancelled {
			m.mu.Lock()
			m.dropLocked(g, mem)
			m.updateGaugesLocked(g)
			m.mu.Unlock()
			return true, nil
		}
	}
}

// lookup lists the cloud until it answers and returns the owned instance
// with the given name, or nil when the cloud has none.
func (m *Manager) lookup(ctx context.Context, c *client, name string) (*cloud.Instance, error) {
	var insts []cloud.Instance
	err := retry(ctx, m.clock, 10, func() error {
		var err error
		insts, err = c.list(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("look up %q after an outcome-unknown create: %w", name, err)
	}
	for i := range insts {
		if insts[i].Name == name {
			return &insts[i], nil
		}
	}
	return nil, nil
}

// created records a member's instance, or deletes it if the member was
// withdrawn while the create was in flight.
func (m *Manager) created(_ context.Context, g *group, mem *member, inst cloud.Instance) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem.inst = &inst
	mem.createdAt = inst.CreatedAt
	mem.recordedAt = m.clock.Now()
	if inst.ProviderID != "" && inst.ProviderID != mem.providerID {
		delete(m.byProviderID, mem.providerID)
		mem.providerID = inst.ProviderID
	}
	m.indexLocked(mem)
	if mem.cancelled {
		m.log.Info("deleting instance withdrawn during its create", "group", g.cfg.Name, "instance", inst.Name)
		mem.phase = phaseDeleting
		m.goDelete(g.cfg.Cloud, inst)
		return
	}
	mem.phase = phaseCreated
	m.log.Info("instance created", "group", g.cfg.Name, "instance", inst.Name, "offering", mem.offering.String(), "price", mem.price)
	m.updateGaugesLocked(g)
}

// release tells the bootstrapper an order for name did not go through.
func (m *Manager) release(ctx context.Context, name string) {
	if r, ok := m.opts.Bootstrap.(Releaser); ok {
		r.Release(context.WithoutCancel(ctx), name)
	}
}

func (m *Manager) fail(g *group, mem *member, code string, class ErrorClass, msg string) {
	m.release(m.ctx, mem.name)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failLocked(g, mem, code, class, msg)
}

// failLocked marks a member failed; it stays in the target, reported with
// its error, until a front end deletes it. A withdrawn member is dropped.
func (m *Manager) failLocked(g *group, mem *member, code string, class ErrorClass, msg string) {
	m.metrics.scaleUpFailures.WithLabelValues(g.cfg.Name, code).Inc()
	if mem.cancelled {
		m.dropLocked(g, mem)
		m.updateGaugesLocked(g)
		return
	}
	m.log.Warn("instance could not be created", "group", g.cfg.Name, "instance", mem.name, "code", code, "error", msg)
	mem.phase = phaseFailed
	mem.errCode, mem.errClass, mem.errMsg = code, class, msg
	m.updateGaugesLocked(g)
}

// goDelete deletes an instance in the background, retrying until the cloud
// confirms or the manager stops. The member is dropped once the cloud's list
// no longer shows the instance (see sync).
func (m *Manager) goDelete(cloudName string, inst cloud.Instance) {
	c := m.clients[cloudName]
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx := m.ctx
		backoff := time.Second
		for {
			err := c.delete(ctx, inst)
			if err == nil || errors.Is(err, cloud.ErrNotFound) {
				m.kick(cloudName)
				return
			}
			m.log.Warn("delete failed, retrying", "instance", inst.Name, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-m.clock.After(backoff):
			}
			if backoff < time.Minute {
				backoff *= 2
			}
		}
	}()
}

// newestFirst sorts members by creation time, newest first.
func newestFirst(ms []*member) {
	sort.Slice(ms, func(i, j int) bool {
		if !ms[i].createdAt.Equal(ms[j].createdAt) {
			return ms[i].createdAt.After(ms[j].createdAt)
		}
		return ms[i].name > ms[j].name
	})
}
