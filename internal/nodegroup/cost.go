package nodegroup

import (
	"fmt"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// costGuard refuses orders that would take a group, or the whole cluster,
// past its hourly cost cap. Spend counts every committed member (ordered,
// being created, running, or being deleted) at its offering's price, or at
// the group's cheapest price while the offering is not chosen yet, and the
// listed instances that stand for no member but still bill; the
// cluster-wide cap also counts the instances of groups another process
// manages, so the provider and the controller together stay under it.
type costGuard struct {
	cfg       *config.Config
	store     *store
	offerings *offerings
}

// groupSpend is a group's hourly spend now. Callers hold the store's lock.
func (c *costGuard) groupSpend(g *group) float64 {
	spend := g.spend
	for _, p := range g.lingering {
		spend += p
	}
	if g.unpriced > 0 {
		spend += float64(g.unpriced) * c.offerings.estimate(g)
	}
	return spend
}

// totalSpend is the cluster's hourly spend on every cloud.
func (c *costGuard) totalSpend() float64 {
	total := c.store.launches.spend
	for _, name := range c.store.order {
		total += c.groupSpend(c.store.groups[name])
	}
	for _, other := range c.store.others {
		total += other
	}
	return total
}

// capped reports whether a cost cap applies to group g's orders.
func (c *costGuard) capped(g *group) bool {
	return g.cfg.MaxHourlyCost > 0 || c.cfg.MaxHourlyCost > 0
}

// over is how far group g's spend is past its cap, and the cluster's
// past its, per hour; 0 within a cap. Callers hold the store's lock.
func (c *costGuard) over(g *group) (group, cluster float64) {
	if limit := g.cfg.MaxHourlyCost; limit > 0 {
		group = max(c.groupSpend(g)-limit, 0)
	}
	if limit := c.cfg.MaxHourlyCost; limit > 0 {
		cluster = max(c.totalSpend()-limit, 0)
	}
	return group, cluster
}

// priceOf is what a member bills per hour, or the group's estimate while
// its offering is not priced yet.
func (c *costGuard) priceOf(g *group, mem *member) float64 {
	if mem.price > 0 {
		return mem.price
	}
	return c.offerings.estimate(g)
}

// check refuses adding add per hour to group g (the launches for none);
// exclude is a member already counted that the addition replaces (the order
// being priced), or nil.
func (c *costGuard) check(g *group, exclude *member, add float64) error {
	less := 0.0
	if exclude != nil && exclude.committed() {
		less = c.priceOf(g, exclude)
	}
	if limit := g.cfg.MaxHourlyCost; limit > 0 {
		if spend := c.groupSpend(g) - less + add; spend > limit+1e-9 {
			return fmt.Errorf("%w: group %q would spend %.2f/h, over its maxHourlyCost %.2f", ErrCostLimit, g.cfg.Name, spend, limit)
		}
	}
	if limit := c.cfg.MaxHourlyCost; limit > 0 {
		if spend := c.totalSpend() - less + add; spend > limit+1e-9 {
			return fmt.Errorf("%w: the cluster would spend %.2f/h, over maxHourlyCost %.2f", ErrCostLimit, spend, limit)
		}
	}
	return nil
}
