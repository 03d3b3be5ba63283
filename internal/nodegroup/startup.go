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
// observed once, and only for Nodes registered after this core started: a
// restart or a reload never counts a step twice, and an adopted instance's
// steps count from the cloud's creation time. It runs under the store's
// lock, from the sync.
type startups struct {
	nodes   Nodes
	catalog *catalog
	metrics *Metrics
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
		if mem.steps == seenAll || mem.phase != phaseCreated || mem.ageUnknown || mem.createdAt == 0 {
			continue
		}
		s, ok := u.nodes.Startup(mem.providerIDs()...)
		if !ok {
			continue
		}
		if mem.steps == 0 {
			if at := mem.peek().startedAt; !at.IsZero() && s.Registered.Before(at) {
				continue // the Node from before its stop: wait for the new one
			}
			if s.Registered.Before(u.since) {
				// A Node from before this core: its later changes (Ready
				// after an outage, GPUs back after a device plugin
				// restart) are not its start-up.
				mem.steps = seenAll
				continue
			}
			gpus, known := u.gpuInstance(g, mem)
			if !known {
				continue // ask again once the catalog knows the type
			}
			if !gpus {
				mem.steps |= seenGPUs
			}
		}
		if u.step(mem, seenRegistered, stepRegistered, s.Registered) {
			u.stage(mem, stageBoot, s.Registered.Sub(mem.since()))
		}
		if u.step(mem, seenReady, stepReady, s.Ready) {
			mem.readyAfter = max(s.Ready.Sub(mem.since()), 0)
			if !s.Registered.IsZero() {
				u.stage(mem, stageReady, s.Ready.Sub(s.Registered))
			}
		}
		switch {
		case mem.steps&seenGPUs != 0 || !s.GPUsSeen:
		case s.GPUs.IsZero():
			mem.steps |= seenGPUs // there before anyone watched: when is unknown
		default:
			if u.step(mem, seenGPUs, stepGPUs, s.GPUs) && mem.steps&seenReady != 0 {
				// From the first Ready this core saw, not a later one
				// after a flap.
				gap := s.GPUs.Sub(mem.since()) - mem.readyAfter
				u.metrics.gpuGap.WithLabelValues(mem.group()).Observe(max(gap, 0).Seconds())
				u.stage(mem, stageGPUs, gap)
			}
		}
	}
}

// step observes one step reached at at (zero: not yet), once; it reports
// whether it observed it. A member started from a standby pool counts
// from its start, in the standby start-up's histogram.
func (u *startups) step(mem *member, bit uint8, label string, at time.Time) bool {
	if mem.steps&bit != 0 || at.IsZero() {
		return false
	}
	mem.steps |= bit
	h := u.metrics.startup
	if !mem.peek().startedAt.IsZero() {
		h = u.metrics.standbyStartup
	}
	h.WithLabelValues(mem.group(), label).Observe(max(at.Sub(mem.since()), 0).Seconds())
	return true
}

// stage observes one stage of a member's start-up that took d.
func (u *startups) stage(mem *member, stage string, d time.Duration) {
	u.metrics.stages.WithLabelValues(mem.group(), stage).Observe(max(d, 0).Seconds())
}

// gpuInstance reports whether a member's instance type has GPUs; known is
// false while the catalog cannot tell.
func (u *startups) gpuInstance(g *group, mem *member) (gpus, known bool) {
	if g.cfg.Name != "" {
		return g.itype.GPUCount > 0, true
	}
	it, ok := u.catalog.instanceType(mem.cloud(), mem.offering().InstanceType)
	return it.GPUCount > 0, ok
}
