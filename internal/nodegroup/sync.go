package nodegroup

import (
	"context"
	"time"

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
)

// syncLoop lists one cloud every sync period, and early when asked.
func (m *Manager) syncLoop(ctx context.Context, cloudName string, c *client) {
	ticker := m.clock.NewTicker(m.cfg.Sync.Period.Duration)
	defer ticker.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-m.syncNow[cloudName]:
			select {
			case <-ctx.Done():
				return
			case <-m.clock.After(min(minSyncGap, m.cfg.Sync.Period.Duration)):
			}
		}
		if n%catalogEvery == 0 {
			if err := m.loadCatalog(ctx, cloudName, c); err != nil {
				m.log.Error("catalog refresh failed; keeping the old one", "cloud", cloudName, "error", err)
			}
		}
		if n%offeringsEvery == 0 {
			m.refreshOfferings(ctx, cloudName, c)
		}
		if err := m.syncCloud(ctx, cloudName, c, false); err != nil {
			m.log.Warn("list failed; answering from the last known state", "cloud", cloudName, "error", err)
		}
	}
}

// refreshOfferings caches what one cloud can deliver now. On failure the
// old answer is kept.
func (m *Manager) refreshOfferings(ctx context.Context, cloudName string, c *client) {
	offs, err := c.offerings(ctx)
	if err != nil {
		m.log.Warn("offerings refresh failed; keeping the old answer", "cloud", cloudName, "error", err)
		return
	}
	byKey := make(map[cloud.OfferingKey]cloud.Offering, len(offs))
	for _, o := range offs {
		byKey[o.Key()] = o
	}
	m.mu.Lock()
	m.offerings[cloudName] = byKey
	m.mu.Unlock()
}

// syncCloud lists one cloud and folds the answer into every group on it.
// The first sync after start rebuilds the groups from scratch.
func (m *Manager) syncCloud(ctx context.Context, cloudName string, c *client, initial bool) error {
	start := m.clock.Now()
	var insts []cloud.Instance
	attempts := 1
	if initial {
		attempts = 5
	}
	err := retry(ctx, m.clock, attempts, func() error {
		var err error
		insts, err = c.list(ctx)
		return err
	})
	if err != nil {
		return err
	}
	listed := make(map[string]cloud.Instance, len(insts))
	for _, in := range insts {
		listed[in.Name] = in
	}

	var leaked []cloud.Instance
	m.mu.Lock()
	for _, name := range m.order {
		g := m.groups[name]
		if g.cfg.Cloud != cloudName {
			continue
		}
		m.foldLocked(g, listed, start)
		if initial {
			g.target = 0
			for _, mem := range g.members {
				if mem.phase != phaseDeleting {
					g.target++
				}
			}
			m.log.Info("node group rebuilt from the cloud", "group", name, "target", g.target, "members", len(g.members))
		}
		m.reconcileLocked(g)
	}
	// Whatever is left is owned by the cluster but by no configured group.
	for _, in := range listed {
		if in.State != cloud.StateDeleting && !m.foreign[in.Group] {
			leaked = append(leaked, in)
		}
	}
	m.unregisteredLocked(cloudName)
	leaked = m.gracedLocked(cloudName, leaked)
	m.lastSync[cloudName] = start
	m.mu.Unlock()

	m.handleLeaks(cloudName, leaked)
	return nil
}

// foldLocked updates a group's members from a list that started at start,
// adopts listed instances of the group it did not know, and removes them
// from listed.
func (m *Manager) foldLocked(g *group, listed map[string]cloud.Instance, start time.Time) {
	for name, mem := range g.members {
		in, ok := listed[name]
		if ok {
			delete(listed, name)
			if mem.phase == phaseCreating {
				continue // the create in flight records it
			}
			inst := in
			mem.inst = &inst
			m.indexLocked(mem)
			switch {
			case in.State == cloud.StateFailed && mem.phase == phaseCreated:
				m.metrics.scaleUpFailures.WithLabelValues(g.cfg.Name, "InstanceFailed").Inc()
				mem.phase = phaseFailed
				mem.errCode, mem.errClass, mem.errMsg = CodeCreateFailed, ErrorClassOther, "cloud reports the instance failed: "+in.Error
			case in.State == cloud.StateDeleting && mem.phase != phaseDeleting:
				m.log.Warn("instance is being deleted outside gpuscaler; it will be replaced", "group", g.cfg.Name, "instance", name)
				mem.phase = phaseDeleting
			}
			continue
		}
		if mem.inst == nil || mem.recordedAt.After(start) {
			continue
		}
		if mem.phase != phaseDeleting {
			m.log.Warn("instance vanished (spot reclaim or external delete); it will be replaced", "group", g.cfg.Name, "instance", name)
		}
		m.dropLocked(g, mem)
	}
	for name, in := range listed {
		if in.Group != g.cfg.Name {
			continue
		}
		delete(listed, name)
		inst := in
		mem := &member{
			name:       in.Name,
			group:      g.cfg.Name,
			providerID: in.ProviderID,
			phase:      phaseCreated,
			inst:       &inst,
			offering:   cloud.OfferingKey{InstanceType: in.InstanceType, Location: in.Location, CapacityType: in.CapacityType},
			price:      g.itype.Price(in.CapacityType),
			createdAt:  in.CreatedAt,
			recordedAt: start,
		}
		if o, ok := m.offerings[g.cfg.Cloud][mem.offering]; ok {
			mem.price = o.Price
		}
		switch in.State {
		case cloud.StateDeleting:
			mem.phase = phaseDeleting
		case cloud.StateFailed:
			mem.phase = phaseFailed
			mem.errCode, mem.errClass, mem.errMsg = CodeCreateFailed, ErrorClassOther, "cloud reports the instance failed: "+in.Error
		}
		g.members[mem.name] = mem
		m.indexLocked(mem)
	}
}

// gracedLocked returns the ownerless instances seen for longer than the
// grace period that still need action (deletion, or a first report), and
// forgets the ones no longer listed.
func (m *Manager) gracedLocked(cloudName string, ownerless []cloud.Instance) []cloud.Instance {
	now := m.clock.Now()
	var out []cloud.Instance
	current := map[string]bool{}
	for _, in := range ownerless {
		key := leakKey{cloud: cloudName, name: in.Name}
		current[in.Name] = true
		l, ok := m.leaks[key]
		if !ok {
			m.leaks[key] = &leak{first: now}
			m.log.Warn("instance owned by this cluster belongs to no configured group", "cloud", cloudName, "instance", in.Name, "group", in.Group)
			continue
		}
		if now.Sub(l.first) >= m.cfg.LeakedInstances.GracePeriod.Duration && !l.reported {
			out = append(out, in)
			l.reported = m.cfg.LeakedInstances.Action == config.LeakActionReport
		}
	}
	for key := range m.leaks {
		if key.cloud == cloudName && !key.unregistered && !current[key.name] {
			delete(m.leaks, key)
		}
	}
	return out
}

// unregisteredLocked deletes (or reports once) the running instances whose
// Node never registered within the grace period; a deleted one leaves its
// group's target, so a broken bootstrap does not buy GPUs in a loop.
func (m *Manager) unregisteredLocked(cloudName string) {
	if m.opts.Registered == nil {
		return
	}
	now := m.clock.Now()
	grace := m.cfg.LeakedInstances.GracePeriod.Duration
	live := map[string]bool{}
	for _, name := range m.order {
		g := m.groups[name]
		if g.cfg.Cloud != cloudName {
			continue
		}
		for _, mem := range g.members {
			live[mem.name] = true
			if !mem.running() || now.Sub(mem.createdAt) < grace || m.opts.Registered(mem.providerID) {
				continue
			}
			key := leakKey{cloud: cloudName, name: mem.name, unregistered: true}
			if m.cfg.LeakedInstances.Action == config.LeakActionReport {
				if _, seen := m.leaks[key]; !seen {
					m.leaks[key] = &leak{first: now, reported: true}
					m.metrics.leaked.WithLabelValues(cloudName, config.LeakActionReport).Inc()
					m.log.Warn("instance never registered as a node (report only)", "group", name, "instance", mem.name, "age", now.Sub(mem.createdAt).String())
				}
				continue
			}
			m.log.Warn("deleting instance that never registered as a node", "group", name, "instance", mem.name, "age", now.Sub(mem.createdAt).String())
			m.metrics.leaked.WithLabelValues(cloudName, config.LeakActionDelete).Inc()
			mem.phase = phaseDeleting
			g.target--
			m.goDelete(cloudName, *mem.inst)
			m.updateGaugesLocked(g)
		}
	}
	for key := range m.leaks {
		if key.cloud == cloudName && key.unregistered && !live[key.name] {
			delete(m.leaks, key)
		}
	}
}

// handleLeaks deletes or reports ownerless instances past their grace.
func (m *Manager) handleLeaks(cloudName string, leaked []cloud.Instance) {
	action := m.cfg.LeakedInstances.Action
	for _, in := range leaked {
		m.metrics.leaked.WithLabelValues(cloudName, action).Inc()
		if action == config.LeakActionReport {
			m.log.Warn("leaked instance (report only)", "cloud", cloudName, "instance", in.Name)
			continue
		}
		m.log.Warn("deleting leaked instance", "cloud", cloudName, "instance", in.Name, "group", in.Group)
		m.goDelete(cloudName, in)
	}
}
