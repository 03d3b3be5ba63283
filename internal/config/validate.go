package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxNameLength bounds cluster and group names, so that instance hostnames
// built from them stay within 63 characters.
const maxNameLength = 40

// reservedLabelPrefixes are label keys gpuscaler sets itself on every node.
var reservedLabelPrefixes = []string{
	"gpuscaler.dev/",
	"node.kubernetes.io/instance-type",
	"topology.kubernetes.io/",
	"kubernetes.io/arch",
	"kubernetes.io/os",
	"kubernetes.io/hostname",
}

// Validate returns every problem of a defaulted config, each with its path.
func Validate(c *Config) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateName(field.NewPath("clusterName"), c.ClusterName)...)
	errs = append(errs, validateAddress(field.NewPath("provider", "listenAddress"), c.Provider.ListenAddress)...)
	if c.Metrics.Address != "0" {
		errs = append(errs, validateAddress(field.NewPath("metrics", "address"), c.Metrics.Address)...)
	}
	errs = append(errs, validateTLS(field.NewPath("provider", "tls"), c.Provider.TLS)...)
	if c.Provider.GPULabel != "" {
		for _, msg := range validation.IsQualifiedName(c.Provider.GPULabel) {
			errs = append(errs, field.Invalid(field.NewPath("provider", "gpuLabel"), c.Provider.GPULabel, msg))
		}
	}
	errs = append(errs, validateSync(field.NewPath("sync"), c.Sync)...)
	if ss := c.ScriptServer; ss.ListenAddress != "" || ss.URL != "" {
		sp := field.NewPath("scriptServer")
		errs = append(errs, validateAddress(sp.Child("listenAddress"), ss.ListenAddress)...)
		if u, err := url.Parse(ss.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, field.Invalid(sp.Child("url"), ss.URL, "must be the http(s) URL nodes reach the server at"))
		}
		if (ss.TLS.CertFile == "") != (ss.TLS.KeyFile == "") {
			errs = append(errs, field.Required(sp.Child("tls"), "certFile and keyFile go together"))
		}
	}
	for i, g := range c.NodeGroups {
		if b := g.Bootstrap; b != nil && (b.TokenSecretRef != nil || b.MintToken) && c.Kubeconfig == "" {
			errs = append(errs, field.Required(field.NewPath("kubeconfig"),
				fmt.Sprintf("nodeGroups[%d].bootstrap reads or mints join tokens in the cluster; use in-cluster in a pod", i)))
			break
		}
	}
	if c.MaxHourlyCost < 0 {
		errs = append(errs, field.Invalid(field.NewPath("maxHourlyCost"), c.MaxHourlyCost, "must be >= 0"))
	}
	lp := field.NewPath("leakedInstances")
	if a := c.LeakedInstances.Action; a != LeakActionDelete && a != LeakActionReport {
		errs = append(errs, field.NotSupported(lp.Child("action"), a, []string{LeakActionDelete, LeakActionReport}))
	}
	errs = append(errs, positive(lp.Child("gracePeriod"), c.LeakedInstances.GracePeriod)...)
	errs = append(errs, validateClouds(field.NewPath("clouds"), c.Clouds)...)

	gp := field.NewPath("nodeGroups")
	if len(c.NodeGroups) == 0 {
		errs = append(errs, field.Required(gp, "at least one node group is needed"))
	}
	seen := map[string]int{}
	for i := range c.NodeGroups {
		p := gp.Index(i)
		g := &c.NodeGroups[i]
		if j, dup := seen[g.Name]; dup && g.Name != "" {
			errs = append(errs, field.Duplicate(p.Child("name"), fmt.Sprintf("%s (also nodeGroups[%d])", g.Name, j)))
		}
		seen[g.Name] = i
		errs = append(errs, validateGroup(p, g, c)...)
	}
	return errs
}

func validateName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	if len(name) > maxNameLength {
		errs = append(errs, field.TooLong(p, name, maxNameLength))
	}
	return errs
}

func validateAddress(p *field.Path, addr string) field.ErrorList {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return field.ErrorList{field.Invalid(p, addr, "must be host:port: "+err.Error())}
	}
	return nil
}

func validateTLS(p *field.Path, t TLSConfig) field.ErrorList {
	if !t.Enabled() {
		return nil
	}
	var errs field.ErrorList
	for name, v := range map[string]string{"certFile": t.CertFile, "keyFile": t.KeyFile, "caCertFile": t.CACertFile} {
		if v == "" {
			errs = append(errs, field.Required(p.Child(name), "mTLS needs certFile, keyFile and caCertFile together"))
		}
	}
	slices.SortFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs
}

func validateSync(p *field.Path, s SyncConfig) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, positive(p.Child("period"), s.Period)...)
	errs = append(errs, positive(p.Child("offeringBackoff"), s.OfferingBackoff)...)
	if s.MaxConcurrentCreates < 1 {
		errs = append(errs, field.Invalid(p.Child("maxConcurrentCreates"), s.MaxConcurrentCreates, "must be >= 1"))
	}
	if s.RequestsPerSecond <= 0 {
		errs = append(errs, field.Invalid(p.Child("requestsPerSecond"), s.RequestsPerSecond, "must be > 0"))
	}
	if s.CreateRetries != nil && *s.CreateRetries < 0 {
		errs = append(errs, field.Invalid(p.Child("createRetries"), *s.CreateRetries, "must be >= 0"))
	}
	return errs
}

func positive(p *field.Path, d *metav1.Duration) field.ErrorList {
	if d != nil && d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be > 0")}
	}
	return nil
}

func nonNegative(p *field.Path, d *metav1.Duration) field.ErrorList {
	if d != nil && d.Duration < 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be >= 0")}
	}
	return nil
}

func validateClouds(p *field.Path, c Clouds) field.ErrorList {
	if c.Sim == nil && c.Verda == nil {
		return field.ErrorList{field.Required(p, "configure at least one cloud (sim, verda)")}
	}
	var errs field.ErrorList
	if v := c.Verda; v != nil && v.BaseURL != "" {
		if u, err := url.Parse(v.BaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("verda", "baseURL"), v.BaseURL, "must be an http(s) URL"))
		}
	}
	if v := c.Verda; v != nil && v.StartupScriptFetchURL != "" {
		if u, err := url.Parse(v.StartupScriptFetchURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("verda", "startupScriptFetchURL"), v.StartupScriptFetchURL, "must be an http(s) URL"))
		}
	}
	if c.Sim == nil {
		return errs
	}
	sp := p.Child("sim")
	s := c.Sim
	if s.FaultRate < 0 || s.FaultRate >= 1 {
		errs = append(errs, field.Invalid(sp.Child("faultRate"), s.FaultRate, "must be in [0, 1)"))
	}
	if s.SpotReclaimRate < 0 || s.SpotReclaimRate >= 1 {
		errs = append(errs, field.Invalid(sp.Child("spotReclaimRate"), s.SpotReclaimRate, "must be in [0, 1)"))
	}
	if s.DefaultCapacity != nil && *s.DefaultCapacity < 0 {
		errs = append(errs, field.Invalid(sp.Child("defaultCapacity"), *s.DefaultCapacity, "must be >= 0"))
	}
	errs = append(errs, nonNegative(sp.Child("bootDelay"), s.BootDelay)...)
	errs = append(errs, nonNegative(sp.Child("deleteDelay"), s.DeleteDelay)...)
	errs = append(errs, nonNegative(sp.Child("apiLatency"), s.APILatency)...)
	errs = append(errs, uniqueStrings(sp.Child("locations"), s.Locations)...)
	for i, c := range s.Capacity {
		cp := sp.Child("capacity").Index(i)
		if c.Count < 0 {
			errs = append(errs, field.Invalid(cp.Child("count"), c.Count, "must be >= 0"))
		}
		if c.CapacityType != "" && c.CapacityType != "spot" && c.CapacityType != "on-demand" {
			errs = append(errs, field.NotSupported(cp.Child("capacityType"), c.CapacityType, []string{"spot", "on-demand"}))
		}
		if c.Location != "" && !slices.Contains(s.Locations, c.Location) {
			errs = append(errs, field.Invalid(cp.Child("location"), c.Location, "not one of clouds.sim.locations"))
		}
	}
	return errs
}

func uniqueStrings(p *field.Path, vals []string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, v := range vals {
		if v == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
		} else if seen[v] {
			errs = append(errs, field.Duplicate(p.Index(i), v))
		}
		seen[v] = true
	}
	return errs
}

func validateGroup(p *field.Path, g *NodeGroup, c *Config) field.ErrorList {
	errs := validateName(p.Child("name"), g.Name)
	switch g.Cloud {
	case "":
		errs = append(errs, field.Required(p.Child("cloud"), "name a cloud configured under clouds"))
	case "sim":
		if c.Clouds.Sim == nil {
			errs = append(errs, field.Invalid(p.Child("cloud"), g.Cloud, "clouds.sim is not configured"))
		}
	case "verda":
		if c.Clouds.Verda == nil {
			errs = append(errs, field.Invalid(p.Child("cloud"), g.Cloud, "clouds.verda is not configured"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("cloud"), g.Cloud, []string{"sim", "verda"}))
	}
	if g.InstanceType == "" {
		errs = append(errs, field.Required(p.Child("instanceType"), ""))
	}
	if len(g.Locations) == 0 {
		errs = append(errs, field.Required(p.Child("locations"), "at least one location"))
	}
	errs = append(errs, uniqueStrings(p.Child("locations"), g.Locations)...)
	if g.Cloud == "sim" && c.Clouds.Sim != nil {
		for i, loc := range g.Locations {
			if loc != "" && !slices.Contains(c.Clouds.Sim.Locations, loc) {
				errs = append(errs, field.NotSupported(p.Child("locations").Index(i), loc, c.Clouds.Sim.Locations))
			}
		}
	}
	policies := []string{PolicySpotOnly, PolicyOnDemandOnly, PolicyPreferSpot, PolicyPreferOnDemand}
	if !slices.Contains(policies, g.CapacityPolicy) {
		errs = append(errs, field.NotSupported(p.Child("capacityPolicy"), g.CapacityPolicy, policies))
	}
	if owners := []string{ManagedByClusterAutoscaler, ManagedByNodeProvisioner}; !slices.Contains(owners, g.ManagedBy) {
		errs = append(errs, field.NotSupported(p.Child("managedBy"), g.ManagedBy, owners))
	}
	if g.MinSize < 0 {
		errs = append(errs, field.Invalid(p.Child("minSize"), g.MinSize, "must be >= 0"))
	}
	if g.MaxSize < 1 {
		errs = append(errs, field.Invalid(p.Child("maxSize"), g.MaxSize, "must be >= 1"))
	} else if g.MaxSize < g.MinSize {
		errs = append(errs, field.Invalid(p.Child("maxSize"), g.MaxSize, fmt.Sprintf("must be >= minSize (%d)", g.MinSize)))
	}
	if g.DiskSizeGiB < 0 {
		errs = append(errs, field.Invalid(p.Child("diskSizeGiB"), g.DiskSizeGiB, "must be >= 0"))
	}
	if g.OverrideNumGPUs != nil && *g.OverrideNumGPUs < 1 {
		errs = append(errs, field.Invalid(p.Child("overrideNumGPUs"), *g.OverrideNumGPUs, "must be >= 1"))
	}
	if g.OverrideNumGPUs != nil && g.MIG != nil {
		errs = append(errs, field.Forbidden(p.Child("overrideNumGPUs"), "set either mig or overrideNumGPUs, not both"))
	}
	if g.MaxHourlyCost < 0 {
		errs = append(errs, field.Invalid(p.Child("maxHourlyCost"), g.MaxHourlyCost, "must be >= 0"))
	}
	errs = append(errs, validateLabels(p.Child("labels"), g.Labels)...)
	errs = append(errs, validateTaints(p.Child("taints"), g.Taints)...)
	if g.MIG != nil {
		mp := p.Child("mig")
		if g.MIG.Profile == "" {
			errs = append(errs, field.Required(mp.Child("profile"), "a mig-parted profile such as all-1g.10gb"))
		}
		if s := g.MIG.Strategy; s != MIGStrategySingle && s != MIGStrategyMixed {
			errs = append(errs, field.NotSupported(mp.Child("strategy"), s, []string{MIGStrategySingle, MIGStrategyMixed}))
		}
	}
	if b := g.Bootstrap; b != nil {
		errs = append(errs, validateBootstrap(p.Child("bootstrap"), b, c)...)
	}
	if o := g.AutoscalingOptions; o != nil {
		errs = append(errs, validateOptions(p.Child("autoscalingOptions"), o)...)
	}
	return errs
}

func validateLabels(p *field.Path, labels map[string]string) field.ErrorList {
	var errs field.ErrorList
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kp := p.Key(k)
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(kp, k, "key: "+msg))
		}
		for _, msg := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, field.Invalid(kp, labels[k], msg))
		}
		for _, prefix := range reservedLabelPrefixes {
			if strings.HasPrefix(k, prefix) {
				errs = append(errs, field.Forbidden(kp, "gpuscaler sets "+prefix+"* itself"))
			}
		}
	}
	return errs
}

func validateTaints(p *field.Path, taints []corev1.Taint) field.ErrorList {
	var errs field.ErrorList
	effects := []string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}
	for i, t := range taints {
		tp := p.Index(i)
		if t.Key == "" {
			errs = append(errs, field.Required(tp.Child("key"), ""))
		}
		for _, msg := range validation.IsQualifiedName(t.Key) {
			if t.Key != "" {
				errs = append(errs, field.Invalid(tp.Child("key"), t.Key, msg))
			}
		}
		if t.Value != "" {
			for _, msg := range validation.IsValidLabelValue(t.Value) {
				errs = append(errs, field.Invalid(tp.Child("value"), t.Value, msg))
			}
		}
		if !slices.Contains(effects, string(t.Effect)) {
			errs = append(errs, field.NotSupported(tp.Child("effect"), string(t.Effect), effects))
		}
	}
	return errs
}

func validateOptions(p *field.Path, o *AutoscalingOptions) field.ErrorList {
	var errs field.ErrorList
	for name, v := range map[string]*float64{
		"scaleDownUtilizationThreshold":    o.ScaleDownUtilizationThreshold,
		"scaleDownGpuUtilizationThreshold": o.ScaleDownGPUUtilizationThreshold,
	} {
		if v != nil && (*v < 0 || *v > 1) {
			errs = append(errs, field.Invalid(p.Child(name), *v, "must be in [0, 1]"))
		}
	}
	errs = append(errs, nonNegative(p.Child("scaleDownUnneededTime"), o.ScaleDownUnneededTime)...)
	errs = append(errs, nonNegative(p.Child("scaleDownUnreadyTime"), o.ScaleDownUnreadyTime)...)
	errs = append(errs, positive(p.Child("maxNodeProvisionTime"), o.MaxNodeProvisionTime)...)
	slices.SortFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs
}

var caCertHash = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func validateBootstrap(p *field.Path, b *Bootstrap, c *Config) field.ErrorList {
	var errs field.ErrorList
	methods := []string{BootstrapK3s, BootstrapKubeadm, BootstrapCustom}
	if !slices.Contains(methods, b.Method) {
		errs = append(errs, field.NotSupported(p.Child("method"), b.Method, methods))
	}
	if b.Method != BootstrapCustom && b.Server == "" {
		errs = append(errs, field.Required(p.Child("server"), "the endpoint nodes join"))
	}
	if b.Method == BootstrapK3s && b.Server != "" && !strings.HasPrefix(b.Server, "https://") {
		errs = append(errs, field.Invalid(p.Child("server"), b.Server, "k3s joins an https:// URL"))
	}
	if b.TokenSecretRef == nil && !b.MintToken && b.Method != BootstrapCustom {
		errs = append(errs, field.Required(p.Child("tokenSecretRef"), "name the join token's Secret (or set mintToken for kubeadm)"))
	}
	if b.TokenSecretRef != nil && b.MintToken {
		errs = append(errs, field.Forbidden(p.Child("mintToken"), "set tokenSecretRef or mintToken, not both"))
	}
	if b.MintToken && b.Method == BootstrapK3s {
		errs = append(errs, field.Forbidden(p.Child("mintToken"), "k3s joins with its server token; use tokenSecretRef"))
	}
	if r := b.TokenSecretRef; r != nil {
		rp := p.Child("tokenSecretRef")
		for name, v := range map[string]string{"namespace": r.Namespace, "name": r.Name, "key": r.Key} {
			if v == "" {
				errs = append(errs, field.Required(rp.Child(name), ""))
			}
		}
	}
	if b.Method == BootstrapKubeadm && !caCertHash.MatchString(b.CACertHash) {
		errs = append(errs, field.Invalid(p.Child("caCertHash"), b.CACertHash, "kubeadm needs the CA pin, sha256:<64 hex>"))
	}
	if b.Method == BootstrapCustom && b.TemplateFile == "" {
		errs = append(errs, field.Required(p.Child("templateFile"), "the custom method renders your template"))
	}
	if b.Method != BootstrapCustom && b.TemplateFile != "" {
		errs = append(errs, field.Forbidden(p.Child("templateFile"), "only the custom method takes a template"))
	}
	switch b.Delivery {
	case DeliveryInline:
	case DeliveryServer:
		if c.ScriptServer.URL == "" || c.ScriptServer.ListenAddress == "" {
			errs = append(errs, field.Required(field.NewPath("scriptServer", "url"), "delivery: server needs scriptServer.url and scriptServer.listenAddress"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("delivery"), b.Delivery, []string{DeliveryInline, DeliveryServer}))
	}
	errs = append(errs, positive(p.Child("tokenTTL"), b.TokenTTL)...)
	slices.SortFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs
}
