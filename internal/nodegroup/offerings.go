package nodegroup

import (
	"math"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// offerings knows what each cloud can deliver now and what the core has
// learnt not to ask for: offerings that stocked out (per offering, for
// sync.offeringBackoff) and groups whose orders keep failing for other
// reasons (per group, backing off exponentially). It is the one backoff
// policy every front end shares. Its maps are guarded by the store's mutex.
type offerings struct {
	clock   clock.Clock
	backoff time.Duration
	// available caches each cloud's last Offerings answer.
	available map[string]map[cloud.OfferingKey]cloud.Offering
	// stockedOut holds offerings that stocked out, until the time given.
	stockedOut map[string]map[cloud.OfferingKey]time.Time
	// failing holds groups backing off after failures that are not
	// stock-outs, by group name.
	failing map[string]*groupBackoff
	// version counts changes of available and stockedOut (see Offers).
	version uint64
	metrics *Metrics
}

// groupBackoff is one group's failure streak.
type groupBackoff struct {
	until    time.Time
	reason   string
	message  string
	failures int
}

// Backoff bounds for groups whose orders fail for reasons other than a
// stock-out: quota, invalid configuration, create failures, cost caps and
// instances that never register.
const (
	minGroupBackoff = 30 * time.Second
	maxGroupBackoff = 30 * time.Minute
)

func newOfferings(clk clock.Clock, cfg *config.Config, met *Metrics) *offerings {
	return &offerings{
		metrics:    met,
		clock:      clk,
		backoff:    cfg.Sync.OfferingBackoff.Duration,
		available:  map[string]map[cloud.OfferingKey]cloud.Offering{},
		stockedOut: map[string]map[cloud.OfferingKey]time.Time{},
		failing:    map[string]*groupBackoff{},
	}
}

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

// set replaces a cloud's cached availability.
func (o *offerings) set(cloudName string, offs []cloud.Offering) {
	byKey := make(map[cloud.OfferingKey]cloud.Offering, len(offs))
	for _, of := range offs {
		byKey[of.Key()] = of
	}
	o.available[cloudName] = byKey
	o.version++
}

// usable reports whether an offering may be tried now, and its price;
// listPrice is the catalog's price, used when the cloud has not listed its
// offerings.
func (o *offerings) usable(cloudName string, k cloud.OfferingKey, listPrice float64) (float64, bool) {
	if until, ok := o.stockedOut[cloudName][k]; ok && o.clock.Now().Before(until) {
		return 0, false
	}
	if of, ok := o.available[cloudName][k]; ok {
		return of.Price, of.Available
	}
	if len(o.available[cloudName]) > 0 {
		// The cloud listed its offerings and this one is not among them.
		return 0, false
	}
	return listPrice, true
}

// price is an offering's hourly price as last listed, or the catalog's.
func (o *offerings) price(cloudName string, k cloud.OfferingKey, listPrice float64) float64 {
	if of, ok := o.available[cloudName][k]; ok && of.Price > 0 {
		return of.Price
	}
	return listPrice
}

// markStockedOut keeps an offering out of orders for the backoff period.
func (o *offerings) markStockedOut(cloudName string, k cloud.OfferingKey) {
	if o.stockedOut[cloudName] == nil {
		o.stockedOut[cloudName] = map[cloud.OfferingKey]time.Time{}
	}
	o.stockedOut[cloudName][k] = o.clock.Now().Add(o.backoff)
	o.version++
	o.metrics.stockOuts.WithLabelValues(cloudName, k.InstanceType, k.Location, string(k.CapacityType)).Inc()
}

// groupPrices returns the cheapest price among a group's offerings that may
// be tried now (ok false when none may) and among all of them.
func (o *offerings) groupPrices(g *group) (usable float64, ok bool, any float64) {
	usable, any = math.Inf(1), math.Inf(1)
	for _, k := range candidates(g) {
		list := g.itype.Price(k.CapacityType)
		any = math.Min(any, o.price(g.cfg.Cloud, k, list))
		if p, ok := o.usable(g.cfg.Cloud, k, list); ok {
			usable = math.Min(usable, p)
		}
	}
	if math.IsInf(any, 1) {
		any = 0
	}
	return usable, !math.IsInf(usable, 1), any
}

// estimate is the price to assume for a member of g whose offering is not
// chosen yet: the cheapest usable offering, else the cheapest of all.
func (o *offerings) estimate(g *group) float64 {
	if p, ok, any := o.groupPrices(g); ok {
		return p
	} else {
		return any
	}
}

// fail records one more failure of a group's orders and backs it off:
// base doubled per failure in a row, within the bounds above (or up to
// longest, when it is longer).
func (o *offerings) fail(group, reason, message string, base, longest time.Duration) time.Time {
	b := o.failing[group]
	if b == nil {
		b = &groupBackoff{}
		o.failing[group] = b
	}
	b.failures++
	longest = max(longest, maxGroupBackoff)
	d := max(base, minGroupBackoff)
	for i := 1; i < b.failures && d < longest; i++ {
		d *= 2
	}
	b.until = o.clock.Now().Add(min(d, longest))
	b.reason, b.message = reason, message
	return b.until
}

// succeed ends a group's failure streak.
func (o *offerings) succeed(group string) {
	delete(o.failing, group)
}

// backedOff returns the group's backoff when it is in force.
func (o *offerings) backedOff(group string) (groupBackoff, bool) {
	b := o.failing[group]
	if b == nil || !o.clock.Now().Before(b.until) {
		return groupBackoff{}, false
	}
	return *b, true
}
