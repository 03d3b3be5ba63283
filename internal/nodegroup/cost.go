package nodegroup

import (
	"fmt"
	"math"
)

// usablePriceLocked is the cheapest hourly price among a group's offerings
// that may be tried now; ok is false when none may.
func (m *Manager) usablePriceLocked(g *group) (float64, bool) {
	best := math.Inf(1)
	for _, k := range candidates(g) {
		if p, ok := m.usableLocked(g.cfg.Cloud, g, k); ok {
			best = math.Min(best, p)
		}
	}
	return best, !math.IsInf(best, 1)
}

// minPriceLocked is the cheapest hourly price among a group's offerings that
// may be tried now, or among all of them when none may.
func (m *Manager) minPriceLocked(g *group) float64 {
	best, any := math.Inf(1), math.Inf(1)
	for _, k := range candidates(g) {
		any = math.Min(any, g.itype.Price(k.CapacityType))
		if p, ok := m.usableLocked(g.cfg.Cloud, g, k); ok {
			best = math.Min(best, p)
		}
	}
	if math.IsInf(best, 1) {
		best = any
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return best
}

// spendLocked is a group's hourly spend: the price of each live member, or
// the cheapest price for members whose offering is not chosen yet. skip is
// left out.
func (m *Manager) spendLocked(g *group, skip *member) float64 {
	est := m.minPriceLocked(g)
	total := 0.0
	for _, mem := range g.members {
		if mem == skip || mem.phase == phaseDeleting || mem.phase == phaseFailed && mem.inst == nil {
			continue
		}
		if mem.price > 0 {
			total += mem.price
		} else {
			total += est
		}
	}
	return total
}

func (m *Manager) totalSpendLocked(skip *member) float64 {
	total := 0.0
	for _, name := range m.order {
		total += m.spendLocked(m.groups[name], skip)
	}
	return total
}

// checkCost refuses a scale-up of delta instances that would pass the
// group's or the configuration's hourly cost cap.
func (m *Manager) checkCost(g *group, delta int) error {
	add := float64(delta) * m.minPriceLocked(g)
	return m.checkSpend(g, nil, add)
}

// checkCostPrice refuses to order one more instance at price when that
// would pass a cap; the member being ordered is counted at price.
func (m *Manager) checkCostPrice(g *group, mem *member, price float64) error {
	return m.checkSpend(g, mem, price)
}

func (m *Manager) checkSpend(g *group, skip *member, add float64) error {
	if limit := g.cfg.MaxHourlyCost; limit > 0 {
		if spend := m.spendLocked(g, skip) + add; spend > limit+1e-9 {
			return fmt.Errorf("%w: group %q would spend %.2f/h, over its maxHourlyCost %.2f", ErrCostLimit, g.cfg.Name, spend, limit)
		}
	}
	if limit := m.cfg.MaxHourlyCost; limit > 0 {
		if spend := m.totalSpendLocked(skip) + add; spend > limit+1e-9 {
			return fmt.Errorf("%w: all groups would spend %.2f/h, over maxHourlyCost %.2f", ErrCostLimit, spend, limit)
		}
	}
	return nil
}
