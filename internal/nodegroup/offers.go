package nodegroup

import (
	"slices"
	"strings"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Offers is one cloud's catalog as the core knows it now, for front ends
// that choose machines themselves (Karpenter asks on every pass): every
// instance type, and every offering the cloud listed with the core's
// verdict on it. It is built from memory; no cloud is called.
type Offers struct {
	// Cloud is the cloud's name.
	Cloud string
	// Types is the catalog, sorted by name.
	Types []cloud.InstanceType
	// Offerings are what the cloud last listed, sorted by type, location
	// and capacity type. Available is false while the core backs off an
	// offering that stocked out, even when the cloud lists it. When the
	// cloud lists no offerings at all, each type is offered at its list
	// price in Locations.
	Offerings []cloud.Offering
	// Regions gives each offering location's topology.kubernetes.io/region
	// (the location itself on clouds whose locations are regions).
	Regions map[string]string
	// Version changes whenever the catalog or the offerings change, so a
	// caller may keep what it built from the same Version.
	Version Version
	// ValidUntil is when a stock-out backoff in the answer ends (the answer
	// changes then without a new Version); zero when none.
	ValidUntil time.Time
}

// Version orders the answers of Offers: a new core (a reload) has a new
// Epoch.
type Version struct {
	Epoch int64
	N     uint64
}

// Offers returns one cloud's catalog and offerings; false when the cloud
// is not configured. Locations are used only when the cloud lists no
// offerings (each type is then offered in each location).
func (m *Manager) Offers(cloudName string, locations []string) (Offers, bool) {
	s := m.store
	s.mu.RLock()
	defer s.mu.RUnlock()
	types, ok := m.catalog.types[cloudName]
	if !ok {
		if _, configured := m.clients[cloudName]; !configured {
			return Offers{}, false
		}
	}
	out := Offers{Cloud: cloudName, Version: Version{Epoch: m.epoch, N: m.catalog.version + m.offerings.version}}
	out.Types = make([]cloud.InstanceType, 0, len(types))
	for _, t := range types {
		out.Types = append(out.Types, t)
	}
	slices.SortFunc(out.Types, func(a, b cloud.InstanceType) int { return strings.Compare(a.Name, b.Name) })
	o := m.offerings
	now := m.clock.Now()
	listed := o.available[cloudName]
	if len(listed) == 0 {
		for _, t := range out.Types {
			for _, loc := range locations {
				for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
					if t.Price(ct) > 0 {
						out.Offerings = append(out.Offerings, cloud.Offering{InstanceType: t.Name, Location: loc, CapacityType: ct, Available: true, Price: t.Price(ct)})
					}
				}
			}
		}
	} else {
		out.Offerings = make([]cloud.Offering, 0, len(listed))
		for _, of := range listed {
			out.Offerings = append(out.Offerings, of)
		}
	}
	for i := range out.Offerings {
		of := &out.Offerings[i]
		if until, ok := o.stockedOut[cloudName][of.Key()]; ok && now.Before(until) {
			of.Available = false
			if out.ValidUntil.IsZero() || until.Before(out.ValidUntil) {
				out.ValidUntil = until
			}
		}
	}
	out.Regions = map[string]string{}
	tp := m.templater.topology[cloudName]
	for _, of := range out.Offerings {
		if _, ok := out.Regions[of.Location]; ok {
			continue
		}
		region := of.Location
		if tp != nil {
			region, _ = tp.Topology(of.Location)
		}
		out.Regions[of.Location] = region
	}
	slices.SortFunc(out.Offerings, func(a, b cloud.Offering) int {
		if c := strings.Compare(a.InstanceType, b.InstanceType); c != 0 {
			return c
		}
		if c := strings.Compare(a.Location, b.Location); c != 0 {
			return c
		}
		return strings.Compare(string(a.CapacityType), string(b.CapacityType))
	})
	return out, true
}
