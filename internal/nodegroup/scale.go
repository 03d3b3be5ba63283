package nodegroup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// IncreaseSize raises a group's target by delta and returns at once; the
// instances are created in the background. It refuses a delta that passes
// the group's maximum size or a cost cap.
func (m *Manager) IncreaseSize(_ context.Context, name string, delta int) error {
	if delta <= 0 {
		return fmt.Errorf("%w: increase by %d", ErrInvalidDelta, delta)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.groups[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	if g.target+delta > g.cfg.MaxSize {
		return fmt.Errorf("%w: group %q target %d + %d exceeds maxSize %d", ErrSizeLimit, name, g.target, delta, g.cfg.MaxSize)
	}
	if err := m.checkCost(g, delta); err != nil {
		m.metrics.scaleUpFailures.WithLabelValues(name, "CostLimit").Add(float64(delta))
		return err
	}
	g.target += delta
	m.log.Info("scale up", "group", name, "delta", delta, "target", g.target)
	m.reconcileLocked(g)
	return nil
}

// DecreaseTargetSize lowers a group's target by -delta without touching any
// running instance: it withdraws orders not yet fulfilled (creates queued,
// in flight, failed, or instances still pending at the cloud), newest first.
func (m *Manager) DecreaseTargetSize(ctx context.Context, name string, delta int) error {
	if delta >= 0 {
		return fmt.Errorf("%w: decrease by %d", ErrInvalidDelta, delta)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.groups[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	var unfulfilled []*member
	for _, mem := range g.members {
		if mem.phase == phaseDeleting || mem.running() {
			continue
		}
		unfulfilled = append(unfulfilled, mem)
	}
	if -delta > len(unfulfilled) {
		return fmt.Errorf("%w: group %q has %d unfulfilled orders, cannot decrease target by %d without deleting running nodes",
			ErrSizeLimit, name, len(unfulfilled), -delta)
	}
	newestFirst(unfulfilled)
	for _, mem := range unfulfilled[:-delta] {
		m.removeLocked(ctx, g, mem)
	}
	g.target += delta
	m.log.Info("decrease target", "group", name, "delta", delta, "target", g.target)
	m.updateGaugesLocked(g)
	return nil
}

// DeleteNodes deletes the instances with the given provider IDs from a
// group and lowers its target accordingly. Every ID must belong to the
// group, or nothing is deleted. Running instances may not take the group
// below its minimum size; failed and unfulfilled slots always may.
func (m *Manager) DeleteNodes(ctx context.Context, name string, providerIDs []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.groups[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrGroupNotFound, name)
	}
	var doomed []*member
	seen := map[*member]bool{}
	running := 0
	for _, pid := range providerIDs {
		mem, ok := m.byProviderID[pid]
		if !ok || mem.group != name {
			return fmt.Errorf("%w: %q is not in group %q", ErrNotInGroup, pid, name)
		}
		if seen[mem] || mem.phase == phaseDeleting {
			continue
		}
		seen[mem] = true
		doomed = append(doomed, mem)
		if mem.running() {
			running++
		}
	}
	if running > 0 && g.target-len(doomed) < g.cfg.MinSize {
		return fmt.Errorf("%w: deleting %d nodes would take group %q below minSize %d", ErrSizeLimit, len(doomed), name, g.cfg.MinSize)
	}
	for _, mem := range doomed {
		m.removeLocked(ctx, g, mem)
	}
	g.target -= len(doomed)
	m.log.Info("delete nodes", "group", name, "count", len(doomed), "target", g.target)
	m.reconcileLocked(g)
	return nil
}

// running reports whether the member's instance runs.
func (mem *member) running() bool {
	return mem.phase == phaseCreated && mem.inst != nil && mem.inst.State == cloud.StateRunning
}

// removeLocked takes a member out of the target: a failed slot is dropped,
// an in-flight create is cancelled, and a cloud instance is deleted in the
// background.
func (m *Manager) removeLocked(ctx context.Context, g *group, mem *member) {
	switch mem.phase {
	case phaseFailed:
		if mem.inst == nil {
			m.dropLocked(g, mem)
			return
		}
		mem.phase = phaseDeleting
		m.goDelete(g.cfg.Cloud, *mem.inst)
	case phaseCreating:
		mem.cancelled = true
		mem.phase = phaseDeleting
	case phaseCreated:
		mem.phase = phaseDeleting
		inst := *mem.inst
		m.goDelete(g.cfg.Cloud, inst)
	}
}

// dropLocked forgets a member entirely.
func (m *Manager) dropLocked(g *group, mem *member) {
	delete(g.members, mem.name)
	if m.byProviderID[mem.providerID] == mem {
		delete(m.byProviderID, mem.providerID)
	}
	if mem.inst != nil {
		for _, a := range mem.inst.Aliases {
			if m.byProviderID[a] == mem {
				delete(m.byProviderID, a)
			}
		}
	}
}

// indexLocked makes a member findable by its provider IDs.
func (m *Manager) indexLocked(mem *member) {
	m.byProviderID[mem.providerID] = mem
	if mem.inst != nil {
		for _, a := range mem.inst.Aliases {
			m.byProviderID[a] = mem
		}
	}
}

// reconcileLocked orders new instances until the group's live members match
// its target. Members being deleted do not count.
func (m *Manager) reconcileLocked(g *group) {
	if g.target < g.cfg.MinSize {
		g.target = g.cfg.MinSize
	}
	live := 0
	for _, mem := range g.members {
		if mem.phase != phaseDeleting {
			live++
		}
	}
	for ; live < g.target; live++ {
		mem := &member{
			name:      m.newName(g),
			group:     g.cfg.Name,
			phase:     phaseCreating,
			createdAt: m.clock.Now(),
		}
		mem.providerID = cloud.ProviderID(g.cfg.Cloud, mem.name)
		g.members[mem.name] = mem
		m.indexLocked(mem)
		m.goCreate(g, mem)
	}
	m.updateGaugesLocked(g)
}

// newName returns a fresh hostname: "<group>-<10 hex>", unique with
// overwhelming probability and checked against the group's members.
func (m *Manager) newName(g *group) string {
	for {
		var b [5]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
		}
		name := g.cfg.Name + "-" + hex.EncodeToString(b[:])
		if _, taken := g.members[name]; !taken {
			return name
		}
	}
}

// updateGaugesLocked publishes a group's target, member states and spend.
func (m *Manager) updateGaugesLocked(g *group) {
	counts := map[string]int{"creating": 0, "running": 0, "deleting": 0, "failed": 0}
	spend := 0.0
	for _, mem := range g.members {
		switch {
		case mem.phase == phaseFailed:
			counts["failed"]++
		case mem.phase == phaseDeleting:
			counts["deleting"]++
		case mem.running():
			counts["running"]++
		default:
			counts["creating"]++
		}
		if mem.phase == phaseCreated || mem.phase == phaseDeleting && mem.inst != nil {
			spend += mem.price
		}
	}
	for state, n := range counts {
		m.metrics.instances.WithLabelValues(g.cfg.Name, state).Set(float64(n))
	}
	m.metrics.targetSize.WithLabelValues(g.cfg.Name).Set(float64(g.target))
	m.metrics.hourlySpend.WithLabelValues(g.cfg.Name).Set(spend)
}
