package cloudprovider

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
)

// ErrNotStarted is returned while the core has not listed the clouds.
var ErrNotStarted = errors.New("the node-group core has not listed the clouds yet")

// Check is what the provider finds of a GPUNodeClass: one error per
// condition (nil when it holds) and the number of instance types offered.
type Check struct {
	Cloud, Template, Validation error
	InstanceTypes               int
}

// Check looks at a class the way Create will use it. It returns
// ErrNotStarted while the core has not started (nothing can be said yet).
func (p *CloudProvider) Check(class *v1alpha1.GPUNodeClass) (Check, error) {
	if !p.started() {
		return Check{}, ErrNotStarted
	}
	var c Check
	spec := class.Spec
	offers, ok := p.opts.Core.Read().Offers(spec.Cloud, spec.Locations)
	switch {
	case !ok:
		c.Cloud = fmt.Errorf("cloud %q is not configured in gpuscaler's config file", spec.Cloud)
	case len(offers.Types) == 0:
		c.Cloud = fmt.Errorf("the catalog of cloud %q is empty", spec.Cloud)
	}
	if spec.Template != "" {
		g, ok := p.opts.Templates(spec.Template)
		switch {
		case !ok:
			c.Template = fmt.Errorf("template %q is not a node group of gpuscaler's config file", spec.Template)
		case g.ManagedBy != config.ManagedByKarpenter:
			c.Template = fmt.Errorf("template %q is managed by %s; a GPUNodeClass template needs managedBy: karpenter", spec.Template, g.ManagedBy)
		case g.Cloud != spec.Cloud:
			c.Template = fmt.Errorf("template %q is on cloud %q, the class on %q", spec.Template, g.Cloud, spec.Cloud)
		}
	}
	if c.Cloud != nil {
		return c, nil
	}
	var errs []error
	offered := map[string]bool{}
	for _, of := range offers.Offerings {
		offered[of.Location] = true
	}
	for i, loc := range spec.Locations {
		if len(offers.Offerings) > 0 && !offered[loc] {
			errs = append(errs, fmt.Errorf("spec.locations[%d]: cloud %q offers nothing in %q", i, spec.Cloud, loc))
		}
	}
	if len(spec.SSHKeyIDs) > 0 && spec.Cloud != config.CloudVerda {
		errs = append(errs, fmt.Errorf("spec.sshKeyIDs: cloud %q takes no SSH key IDs; use its cloudOptions", spec.Cloud))
	}
	for _, e := range p.opts.Core.Read().CheckOptions(spec.Cloud, spec.CloudOptions) {
		errs = append(errs, fmt.Errorf("spec.cloudOptions[%s]: %s", e.Key, e.Detail))
	}
	if spec.MIG != nil && spec.MIG.Strategy != "" && !slices.Contains([]string{config.MIGStrategySingle, config.MIGStrategyMixed}, spec.MIG.Strategy) {
		errs = append(errs, fmt.Errorf("spec.mig.strategy: %q is not single or mixed", spec.MIG.Strategy))
	}
	if len(errs) == 0 && c.Template == nil {
		ct, err := p.classTypes(class)
		switch {
		case err != nil:
			errs = append(errs, err)
		case len(ct.types) == 0 && spec.MIG != nil:
			errs = append(errs, fmt.Errorf("spec.mig.profile: no instance type of cloud %q has GPUs that take %q", spec.Cloud, spec.MIG.Profile))
		case len(ct.types) == 0:
			errs = append(errs, fmt.Errorf("cloud %q offers no instance type", spec.Cloud))
		default:
			c.InstanceTypes = len(ct.types)
		}
	}
	c.Validation = errors.Join(errs...)
	return c, nil
}

// Forget drops what the provider keeps of a deleted class.
func (p *CloudProvider) Forget(class string) { p.catalog.forget(class) }
