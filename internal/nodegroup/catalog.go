package nodegroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// catalog holds each cloud's instance types and resolves every group's
// type, GPU model and MIG profile against them.
type catalog struct {
	store   *store
	clients map[string]*client
	clock   clock.Clock
	log     *slog.Logger
	// types is each cloud's catalog by type name, and version counts its
	// loads (see Offers); guarded by the store's mutex.
	types   map[string]map[string]cloud.InstanceType
	version uint64
	// clusterCap is the config's cluster-wide maxHourlyCost (0: none).
	clusterCap float64
}

// load fetches one cloud's catalog, with retries for transient failures,
// and resolves the groups on it. A group whose type or MIG profile the
// cloud does not have is an error naming its config path.
func (c *catalog) load(ctx context.Context, cloudName string) error {
	var types []cloud.InstanceType
	err := retry(ctx, c.clock, 5, func() error {
		var err error
		types, err = c.clients[cloudName].instanceTypes(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("catalog of cloud %q: %w", cloudName, err)
	}
	byName := make(map[string]cloud.InstanceType, len(types))
	for _, t := range types {
		byName[t.Name] = t
	}
	var errs []error
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	c.types[cloudName] = byName
	c.version++
	for _, g := range s.groupsOn(cloudName) {
		if err := resolve(g, byName, c.clusterCap); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// resolve sets a group's instance type and GPU model from a catalog. A
// cost cap over a group whose type the cloud gives no price for is an
// error: the cap could not be enforced (Kamatera's API publishes no
// prices).
func resolve(g *group, byName map[string]cloud.InstanceType, clusterCap float64) error {
	i := g.index
	t, ok := byName[g.cfg.InstanceType]
	if !ok {
		hint := fmt.Sprintf("not in the catalog of cloud %q (gpuscaler catalog --cloud %s lists its types", g.cfg.Cloud, g.cfg.Cloud)
		if near := nearest(g.cfg.InstanceType, byName); near != "" {
			hint += "; did you mean " + near + "?"
		}
		return &config.ValidationError{Errs: field.ErrorList{
			field.Invalid(field.NewPath("nodeGroups").Index(i).Child("instanceType"), g.cfg.InstanceType, hint+")")}}
	}
	if t.OnDemandPrice == 0 && t.SpotPrice == 0 {
		switch {
		case g.cfg.MaxHourlyCost > 0:
			return fmt.Errorf("nodeGroups[%d].maxHourlyCost: cloud %q gives no price for %q, so the cap cannot be enforced", i, g.cfg.Cloud, t.Name)
		case clusterCap > 0:
			return fmt.Errorf("maxHourlyCost: cloud %q gives no price for %q (nodeGroups[%d]), so the cap cannot be enforced", g.cfg.Cloud, t.Name, i)
		}
	}
	var model gpu.Model
	if t.GPUModel != "" {
		if model, ok = gpu.LookupModel(t.GPUModel); !ok {
			return fmt.Errorf("nodeGroups[%d].instanceType: GPU model %q of %q is unknown", i, t.GPUModel, t.Name)
		}
	}
	if g.cfg.MIG != nil {
		if t.GPUCount == 0 {
			return fmt.Errorf("nodeGroups[%d].mig: instance type %q has no GPU", i, t.Name)
		}
		if _, err := gpu.MIGResources(t.GPUModel, g.cfg.MIG.Profile, g.cfg.MIG.Strategy, t.GPUCount); err != nil {
			return fmt.Errorf("nodeGroups[%d].mig: %w", i, err)
		}
	}
	g.itype, g.gpuModel = t, model
	g.template = templateCache{}
	return nil
}

// nearest is the catalog's name closest to name by edit distance, when it
// is close enough to be a typo (a third of the name's length, at least
// 3); "" otherwise.
func nearest(name string, byName map[string]cloud.InstanceType) string {
	best, bestD := "", max(3, len(name)/3)+1
	for other := range byName {
		if d := editDistance(strings.ToLower(name), strings.ToLower(other)); d < bestD || d == bestD && other < best {
			best, bestD = other, d
		}
	}
	if bestD > max(3, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of two strings, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// instanceType returns a type of one cloud's catalog. Callers hold the
// store's lock.
func (c *catalog) instanceType(cloudName, name string) (cloud.InstanceType, bool) {
	t, ok := c.types[cloudName][name]
	return t, ok
}

// listPrice is an offering's catalog price; 0 for a type not in the
// catalog. Callers hold the store's lock.
func (c *catalog) listPrice(cloudName string, k cloud.OfferingKey) float64 {
	t, _ := c.instanceType(cloudName, k.InstanceType)
	return t.Price(k.CapacityType)
}

// retry runs fn up to attempts times while it fails with a retryable error,
// backing off exponentially from one second.
func retry(ctx context.Context, clk clock.Clock, attempts int, fn func() error) error {
	delay := time.Second
	var err error
	for i := 0; i < attempts; i++ {
		if err = fn(); err == nil || !cloud.Retryable(err) {
			return err
		}
		if i == attempts-1 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(delay):
		}
		delay *= 2
	}
	return err
}
