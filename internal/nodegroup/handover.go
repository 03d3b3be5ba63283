package nodegroup

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Inherit takes over what prev, the core of the configuration in force
// before a reload in this process, knows and a list may not show yet, so
// that a reload neither forgets a write it acknowledged nor buys an
// instance twice: each group that keeps its name and cloud keeps its
// target (within the new bounds) and its members (orders not sent yet
// are queued again, lost create answers keep waiting for a list,
// withdrawn orders and deleting instances stay so), the launch API keeps
// its instances, and the names of deleted instances a lagging list may
// show again stay known, as do stock-outs and back-offs; every group is
// held after the start only while the process's first core held its
// orders (orderer.awaitPredecessor). Call it before
// Start, after prev has stopped (its Start context done, Wait returned).
func (m *Manager) Inherit(prev *Manager) {
	ps, s := prev.store, m.store
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The aliases of the members handed over render with the forms their
	// cloud's instances were listed with.
	ps.forms.mu.RLock()
	s.forms.mu.Lock()
	if s.forms.schemes == nil {
		s.forms.schemes = map[string][]string{}
	}
	for c, schemes := range ps.forms.schemes {
		s.forms.schemes[c] = slices.Clone(schemes)
	}
	s.forms.mu.Unlock()
	ps.forms.mu.RUnlock()

	for name, pg := range ps.groups {
		g, ok := s.groups[name]
		if !ok || g.cfg.Cloud != pg.cfg.Cloud {
			continue // a new or moved group is rebuilt from the cloud
		}
		g.inherited = true
		changed := machineChanged(pg.cfg, g.cfg)
		for _, pm := range pg.members {
			mem := m.inheritMember(g, pm)
			if changed && mem != nil && mem.phase != phaseCreating {
				// Booted and joined as the old configuration made it:
				// from the pool, started, it would serve the old image,
				// disk or labels; a live one serves until scaled down but
				// never goes back to the pool (returnLocked). An order not
				// sent yet is made as the new configuration says.
				mem.extras().outdated = true
			}
		}
		target := pg.target
		if g.live > pg.target && pg.target == pg.cfg.MaxSize {
			// It held more than its old maxSize (rebuilt from the cloud,
			// or a bound lowered) for scale-down to take: what a higher
			// bound admits is capacity again, which the target covers.
			target = g.live
		}
		g.target = min(max(target, g.cfg.MinSize), g.cfg.MaxSize)
		g.standbyAsked = pg.standbyAsked // the forecast's size holds until it asks again
		g.poolShort = pg.poolShort       // and a refill waits out what is left of refillAfter
		if b, ok := prev.offerings.failing[name]; ok {
			bc := *b
			m.offerings.failing[name] = &bc
		}
	}
	for _, pm := range ps.launches.members {
		if _, ok := m.clients[pm.cloud()]; ok {
			m.inheritMember(s.launches, pm)
		}
	}
	maps.Copy(s.tombstones, ps.tombstones)
	maps.Copy(s.renamed, ps.renamed)
	maps.Copy(s.goneAt, ps.goneAt)
	// The process started once: a group new in this configuration is held
	// only as long as the process's first core held its orders.
	m.inherited = true
	m.orderer.holdUntil = maps.Clone(prev.orderer.holdUntil)
	// The hold ends with the first list, by any core of the process, that
	// can show the process before it's orders: one the old core folded in
	// counts, and a reload during the hold holds on (orderer.holding).
	for c, at := range ps.lastSync {
		if _, ok := m.clients[c]; ok {
			s.lastSync[c] = at
		}
	}
	for c, out := range prev.offerings.stockedOut {
		if _, ok := m.clients[c]; !ok {
			continue
		}
		if m.offerings.stockedOut[c] == nil {
			m.offerings.stockedOut[c] = map[cloud.OfferingKey]time.Time{}
		}
		maps.Copy(m.offerings.stockedOut[c], out)
	}
}

// inheritMember puts a copy of a member of the core before a reload into
// g; an order the old core never sent is queued again, one withdrawn
// before it was sent is forgotten. (The old core has stopped and its
// creates have returned: a withdrawn order the cloud does not know, with
// no lost answer to resolve, was never sent; nothing would ever settle it
// here.) It returns the copy, nil for none. Callers hold both stores'
// locks.
func (m *Manager) inheritMember(g *group, pm *member) *member {
	if pm.cancelled && !pm.known() && pm.peek().unknownSince.IsZero() {
		return nil
	}
	mem := new(member)
	*mem = *pm
	mem.g = g
	// A standby stop or start in flight stays with the old core; the next
	// sync of this one takes it up again from what the cloud lists.
	switch mem.standby {
	case standbyStopping:
		mem.standby = standbyWarming
	case standbyStarting:
		mem.standby = standbyNone
	}
	if pm.x != nil {
		x := *pm.x
		x.aliases = slices.Clone(pm.x.aliases)
		mem.x = &x
	}
	if pm.off != nil {
		mem.off = m.store.keys.intern(*pm.off)
	}
	m.store.add(g, mem)
	if mem.phase == phaseCreating {
		m.orderer.order(g, mem)
	}
	return mem
}

// machineChanged reports whether a group's instances are made otherwise
// under next than under prev: another type, image, disk, labels, taints,
// MIG partitioning, cloud options, bootstrap (but how the join's token is
// handed over: a stopped instance joined already), GPU count, or images
// pulled ahead. What only sizes, prices or times the group is no change.
func machineChanged(prev, next config.NodeGroup) bool {
	machine := func(c config.NodeGroup) any {
		var boot *config.Bootstrap
		if c.Bootstrap != nil {
			b := *c.Bootstrap
			b.TokenSecretRef, b.MintToken, b.TokenTTL, b.Delivery = nil, false, nil, ""
			boot = &b
		}
		return struct {
			InstanceType, Image string
			DiskGiB             int
			Labels, Options     map[string]string
			Taints              []corev1.Taint
			MIG                 *config.MIG
			Bootstrap           *config.Bootstrap
			GPUs                *int
			Images              []string
		}{c.InstanceType, c.Image, c.DiskSizeGiB, c.Labels, c.CloudOptions, c.Taints, c.MIG, boot, c.OverrideNumGPUs, c.StandbyImages()}
	}
	return !equality.Semantic.DeepEqual(machine(prev), machine(next))
}
