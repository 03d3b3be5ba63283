package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// capacityPolicies are the values nodeGroups[*].capacityPolicy takes.
func capacityPolicies() []string {
	return []string{PolicySpotOnly, PolicyOnDemandOnly, PolicyPreferSpot, PolicyPreferOnDemand}
}

func validateGroups(p *field.Path, c *Config) field.ErrorList {
	if len(c.NodeGroups) == 0 && c.Clouds.GCP == nil {
		return field.ErrorList{field.Required(p, "at least one node group is needed")}
	}
	// With clouds.gcp, groups may all come from the cluster: the managed
	// instance groups NodeProvisioners name (existingInstanceGroupNames).
	var errs field.ErrorList
	seen := map[string]int{}
	for i := range c.NodeGroups {
		gp := p.Index(i)
		g := &c.NodeGroups[i]
		if j, dup := seen[g.Name]; dup && g.Name != "" {
			errs = append(errs, field.Duplicate(gp.Child("name"), fmt.Sprintf("%s (also nodeGroups[%d])", g.Name, j)))
		} else {
			seen[g.Name] = i
		}
		errs = append(errs, validateGroup(gp, g, c)...)
	}
	return errs
}

func validateGroup(p *field.Path, g *NodeGroup, c *Config) field.ErrorList {
	errs := validateName(p.Child("name"), g.Name)
	errs = append(errs, validateGroupCloud(p.Child("cloud"), g.Cloud, c.Clouds)...)
	if g.InstanceType == "" {
		errs = append(errs, field.Required(p.Child("instanceType"), "the cloud's instance type name"))
	} else {
		errs = append(errs, validateCloudName(p.Child("instanceType"), g.InstanceType)...)
	}
	errs = append(errs, validateLocations(p.Child("locations"), g, c.Clouds)...)
	if !slices.Contains(capacityPolicies(), g.CapacityPolicy) {
		errs = append(errs, field.NotSupported(p.Child("capacityPolicy"), g.CapacityPolicy, capacityPolicies()))
	}
	if owners := []string{ManagedByClusterAutoscaler, ManagedByNodeProvisioner, ManagedByKarpenter}; !slices.Contains(owners, g.ManagedBy) {
		errs = append(errs, field.NotSupported(p.Child("managedBy"), g.ManagedBy, owners))
	}
	if g.ManagedBy == ManagedByKarpenter && g.MinSize != 0 {
		errs = append(errs, field.Invalid(p.Child("minSize"), g.MinSize, "must be 0 for a group managed by karpenter: it is a template, and Karpenter launches one machine per NodeClaim"))
	}
	if g.MinSize < 0 {
		errs = append(errs, field.Invalid(p.Child("minSize"), g.MinSize, "must be >= 0"))
	}
	errs = append(errs, within(p.Child("gpuStartupTimeout"), g.GPUStartupTimeout, 10*time.Second, 24*time.Hour,
		"a GPU node that has not shown its GPUs by then is replaced")...)
	switch {
	case g.MaxSize < 1:
		errs = append(errs, field.Invalid(p.Child("maxSize"), g.MaxSize, "must be >= 1"))
	case g.MaxSize < g.MinSize:
		errs = append(errs, field.Invalid(p.Child("maxSize"), g.MaxSize, fmt.Sprintf("must be >= minSize (%d)", g.MinSize)))
	case g.MaxSize > c.Sync.MaxGroupSize:
		errs = append(errs, field.Invalid(p.Child("maxSize"), g.MaxSize, fmt.Sprintf("must be <= sync.maxGroupSize (%d); raise that to allow larger groups", c.Sync.MaxGroupSize)))
	}
	if g.DiskSizeGiB < 0 {
		errs = append(errs, field.Invalid(p.Child("diskSizeGiB"), g.DiskSizeGiB, "must be >= 0 (0: the cloud's default)"))
	}
	errs = append(errs, validateLabels(p.Child("labels"), g, c.Provider.GPULabel)...)
	errs = append(errs, validateTaints(p.Child("taints"), g.Taints)...)
	if g.MIG != nil {
		errs = append(errs, validateMIG(p.Child("mig"), g.MIG)...)
	}
	if g.OverrideNumGPUs != nil {
		if *g.OverrideNumGPUs < 1 {
			errs = append(errs, field.Invalid(p.Child("overrideNumGPUs"), *g.OverrideNumGPUs, "must be >= 1"))
		}
		if g.MIG != nil {
			errs = append(errs, field.Forbidden(p.Child("overrideNumGPUs"), "set either mig or overrideNumGPUs, not both"))
		}
	}
	errs = append(errs, nonNegativeFloat(p.Child("maxHourlyCost"), g.MaxHourlyCost)...)
	if o := g.AutoscalingOptions; o != nil {
		errs = append(errs, validateOptions(p.Child("autoscalingOptions"), o)...)
	}
	if g.Image != "" {
		errs = append(errs, validateText(p.Child("image"), g.Image)...)
	}
	for k, v := range g.CloudOptions {
		op := p.Child("cloudOptions").Key(k)
		if k == "" {
			errs = append(errs, field.Required(op, "option names may not be empty"))
		}
		errs = append(errs, validateText(op, k)...)
		errs = append(errs, validateText(op, v)...)
	}
	if b := g.Bootstrap; b != nil {
		errs = append(errs, validateBootstrap(p.Child("bootstrap"), b, c)...)
	}
	errs = append(errs, validateImages(p.Child("prePullImages"), g.PrePullImages)...)
	if g.ManagedBy == ManagedByKarpenter && len(g.PrePullImages) > 0 {
		errs = append(errs, field.Forbidden(p.Child("prePullImages"), "a group managed by karpenter is a template: Karpenter launches its machines, whose Nodes gpuscaler does not pull onto; pull the images with a DaemonSet"))
	}
	if s := g.Standby; s != nil {
		errs = append(errs, validateStandby(p.Child("standby"), g, s, c.Clouds)...)
	}
	return errs
}

// validateStandby checks a group's standby pool: a cloud that can hold
// one (a stopped instance billing less than a running one, and started
// again as it was), a front end that takes from it, and a size within
// maxSize.
func validateStandby(p *field.Path, g *NodeGroup, s *Standby, c Clouds) field.ErrorList {
	var errs field.ErrorList
	if why := StandbyRefused(g, c); why != "" {
		errs = append(errs, field.Forbidden(p, why))
	}
	if g.ManagedBy == ManagedByKarpenter && g.Cloud == CloudGCP {
		errs = append(errs, field.Forbidden(p, "a group managed by karpenter keeps no standby pool on gcp: Karpenter's Create takes a pool's instance by renaming it for its NodeClaim, and a MIG member's name is fixed"))
	}
	switch {
	case s.Size < 0:
		errs = append(errs, field.Invalid(p.Child("size"), s.Size, "must be >= 0"))
	case s.Size > g.MaxSize:
		errs = append(errs, field.Invalid(p.Child("size"), s.Size, fmt.Sprintf("must be <= maxSize (%d): the pool and the running nodes share maxSize", g.MaxSize)))
	}
	errs = append(errs, within(p.Child("maxAge"), s.MaxAge, time.Hour, 60*24*time.Hour,
		"older standby instances are replaced (GCP deletes stopped VMs' reservations, images drift)")...)
	errs = append(errs, within(p.Child("warmFor"), s.WarmFor, 0, 2*time.Hour, "how long a new standby instance runs before it is stopped")...)
	errs = append(errs, within(p.Child("refillAfter"), s.RefillAfter, 0, 24*time.Hour,
		"how long a short pool waits for the group's scaled-down nodes before it orders fresh ones")...)
	errs = append(errs, within(p.Child("scaleDownAfter"), s.ScaleDownAfter, time.Second, 24*time.Hour,
		"how long a node stays unneeded before it goes back to the pool")...)
	if f := s.Forecast; f != nil {
		fp := p.Child("forecast")
		switch {
		case f.MaxSize <= s.Size:
			errs = append(errs, field.Invalid(fp.Child("maxSize"), f.MaxSize, fmt.Sprintf("must be more than size (%d): the pool grows from size to maxSize ahead of the demand the forecast expects", s.Size)))
		case f.MaxSize > g.MaxSize:
			errs = append(errs, field.Invalid(fp.Child("maxSize"), f.MaxSize, fmt.Sprintf("must be <= the group's maxSize (%d): the pool and the running nodes share it", g.MaxSize)))
		}
		errs = append(errs, within(fp.Child("trainFor"), f.TrainFor, 0, 90*24*time.Hour, "how long the group's size is observed before the pool follows it")...)
		errs = append(errs, within(fp.Child("leadTime"), f.LeadTime, time.Minute, 6*time.Hour, "how far ahead the pool is sized: a standby instance's order, boot and warm-up")...)
	}
	return append(errs, validateImages(p.Child("prePullImages"), s.PrePullImages)...)
}

// validateImages checks a list of images to pull: each named once, and
// an image reference.
func validateImages(p *field.Path, images []string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, img := range images {
		ip := p.Index(i)
		switch {
		case strings.TrimSpace(img) == "":
			errs = append(errs, field.Required(ip, "name an image, e.g. nvcr.io/nvidia/pytorch:24.05-py3"))
		case strings.ContainsAny(img, " \t\n"):
			errs = append(errs, field.Invalid(ip, img, "not an image reference: it holds white space"))
		case seen[img]:
			errs = append(errs, field.Duplicate(ip, img))
		}
		seen[img] = true
	}
	return errs
}

// StandbyRefused says why a group's cloud cannot hold a standby pool;
// empty when it can. The simulated cloud playing a real cloud's catalog
// plays its standby too: none where that cloud cannot hold one.
func StandbyRefused(g *NodeGroup, c Clouds) string {
	if g.Cloud == CloudSim && c.Sim != nil && c.Sim.Catalog != "" && c.Sim.Catalog != SimCatalogSim {
		if why := standbyRefused(c.Sim.Catalog); why != "" {
			return fmt.Sprintf("clouds.sim.catalog is %s: %s", c.Sim.Catalog, why)
		}
	}
	return standbyRefused(g.Cloud)
}

// standbyRefused says why a cloud cannot hold a standby pool; empty when
// it can. docs/clouds/<cloud>.md cite what each cloud bills for a stopped
// instance.
func standbyRefused(cloudName string) string {
	switch cloudName {
	case CloudSim, CloudScaleway, CloudGCP:
		return ""
	case CloudVerda:
		return "Verda bills a shut-down instance in full (docs.verda.com: shutdown instances continue to charge), so a standby pool would cost as much as running nodes"
	case CloudKamatera:
		return "Kamatera does not document what a powered-off hourly server is billed; gpuscaler does not guess"
	default:
		return fmt.Sprintf("standby pools are not supported on %s yet (docs/clouds/%s.md says which stopped state would serve)", cloudName, cloudName)
	}
}

// validateGroupCloud checks that a group names a cloud with a section.
func validateGroupCloud(p *field.Path, name string, c Clouds) field.ErrorList {
	switch {
	case name == "":
		return field.ErrorList{field.Required(p, "name a cloud configured under clouds")}
	case !slices.Contains(cloudNames(), name):
		return field.ErrorList{field.NotSupported(p, name, cloudNames())}
	case !slices.Contains(c.Configured(), name):
		return field.ErrorList{field.Invalid(p, name, fmt.Sprintf("clouds.%s is not configured", name))}
	}
	return nil
}

// validateLocations checks a group's locations: at least one, no repeats,
// and on the simulated cloud only the locations it offers.
func validateLocations(p *field.Path, g *NodeGroup, c Clouds) field.ErrorList {
	if len(g.Locations) == 0 {
		return field.ErrorList{field.Required(p, "at least one location")}
	}
	errs := uniqueStrings(p, g.Locations)
	for i, loc := range g.Locations {
		bad := validateCloudName(p.Index(i), loc)
		errs = append(errs, bad...)
		if loc != "" && len(bad) == 0 && g.Cloud == CloudSim && c.Sim != nil && !slices.Contains(c.Sim.Locations, loc) {
			errs = append(errs, field.NotSupported(p.Index(i), loc, c.Sim.Locations))
		}
	}
	return errs
}

// validateMIG checks the profile is named and the strategy known; whether
// the profile fits the instance type's GPU is the core's check, which
// knows the catalog.
func validateMIG(p *field.Path, m *MIG) field.ErrorList {
	var errs field.ErrorList
	if m.Profile == "" {
		errs = append(errs, field.Required(p.Child("profile"), "a mig-parted profile such as all-1g.10gb"))
	}
	if strategies := []string{MIGStrategySingle, MIGStrategyMixed}; !slices.Contains(strategies, m.Strategy) {
		errs = append(errs, field.NotSupported(p.Child("strategy"), m.Strategy, strategies))
	}
	return errs
}

func validateOptions(p *field.Path, o *AutoscalingOptions) field.ErrorList {
	var errs field.ErrorList
	if v := o.ScaleDownUtilizationThreshold; v != nil {
		errs = append(errs, fraction(p.Child("scaleDownUtilizationThreshold"), *v, false)...)
	}
	if v := o.ScaleDownGPUUtilizationThreshold; v != nil {
		errs = append(errs, fraction(p.Child("scaleDownGpuUtilizationThreshold"), *v, false)...)
	}
	errs = append(errs, nonNegative(p.Child("scaleDownUnneededTime"), o.ScaleDownUnneededTime)...)
	errs = append(errs, nonNegative(p.Child("scaleDownUnreadyTime"), o.ScaleDownUnreadyTime)...)
	errs = append(errs, positive(p.Child("maxNodeProvisionTime"), o.MaxNodeProvisionTime)...)
	return errs
}
