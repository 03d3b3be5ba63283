package nodegroup

import (
	"time"
)

// Start-up steps of a member, as bits of member.steps: each is observed
// once.
const (
	seenRegistered uint8 = 1 << iota
	seenReady
	seenGPUs
	seenAll = seenRegistered | seenReady | seenGPUs
)

// startups measures how long the core's instances take to become usable
// Nodes: from the order to the Node registered, Ready and (for GPU
// instances) GPUs allocatable, and the gap between Ready and GPUs that the
// driver and device plugin's start-up makes. Each step of an instance is
// observed once, and only a step reached after this core started: a
// restart or a reload never counts a step twice, and an adopted instance's
// steps count from the cloud's creation time. It runs under the store's
// lock, from the sync.
type startups struct {
	nodes   Nodes
	catalog *catalog
	metrics *metrics
	// since is when the core started.
	since time.Time
}

// observeLocked observes the steps the members of a group reached since the
// last sync.
func (u *startups) observeLocked(g *group) {
	if u.nodes == nil {
		return
	}
	for _, mem := range g.members {
		if mem.steps == seenAll || mem.phase != phaseCreated || mem.ageUnknown || mem.createdAt.IsZero() {
			continue
		}
		s, ok := u.nodes.Startup(mem.providerIDs()...)
		if !ok {
			continue
		}
		if mem.steps == 0 && !u.gpuInstance(g, mem) {
			mem.steps |= seenGPUs
		}
		u.step(mem, seenRegistered, stepRegistered, s.Registered)
		u.step(mem, seenReady, stepReady, s.Ready)
		switch {
		case mem.steps&seenGPUs != 0 || !s.HasGPUs:
		case s.GPUs.IsZero():
			mem.steps |= seenGPUs // there before anyone watched: when is unknown
		default:
			if u.step(mem, seenGPUs, stepGPUs, s.GPUs) && !s.Ready.IsZero() {
				u.metrics.gpuGap.WithLabelValues(mem.group).Observe(max(s.GPUs.Sub(s.Ready), 0).Seconds())
			}
		}
	}
}

// step observes one step reached at at (zero: not yet), once; it reports
// whether it observed it.
func (u *startups) step(mem *member, bit uint8, label string, at time.Time) bool {
	if mem.steps&bit != 0 || at.IsZero() {
		return false
	}
	mem.steps |= bit
	if at.Before(u.since) {
		return false
	}
	u.metrics.startup.WithLabelValues(mem.group, label).Observe(max(at.Sub(mem.createdAt), 0).Seconds())
	return true
}

// gpuInstance reports whether a member's instance type has GPUs.
func (u *startups) gpuInstance(g *group, mem *member) bool {
	if g.cfg.Name != "" {
		return g.itype.GPUCount > 0
	}
	it, _ := u.catalog.instanceType(mem.cloud, mem.offering.InstanceType)
	return it.GPUCount > 0
}
