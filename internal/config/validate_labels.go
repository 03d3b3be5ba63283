package config

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// validateLabels checks a group's labels: valid keys and values, none that
// gpuscaler sets itself and, for groups whose nodes gpuscaler bootstraps,
// none that the kubelet refuses to register with.
func validateLabels(p *field.Path, g *NodeGroup, gpuLabel string) field.ErrorList {
	var errs field.ErrorList
	for k, v := range g.Labels {
		kp := p.Key(k)
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(kp, k, "key: "+msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(kp, v, msg))
		}
		if reason := ReservedLabel(k, g, gpuLabel); reason != "" {
			errs = append(errs, field.Forbidden(kp, reason))
		} else if g.Bootstrap != nil && !kubeletMaySet(k) {
			errs = append(errs, field.Forbidden(kp, "the kubelet refuses --node-labels in the kubernetes.io and k8s.io "+
				"namespaces other than kubelet.kubernetes.io/ and node.kubernetes.io/; set it once the node has registered"))
		}
	}
	return sortByField(errs)
}

// ReservedLabel says why gpuscaler keeps a label key of the group for
// itself, or returns "" if the user may set it. GPU Feature Discovery's
// nvidia.com/gpu.* labels stay open: seed configs set them for
// scale-from-zero matching, and so does nvidia.com/mig.config on groups
// that leave MIG to the user (the DataCrunch autoscaler's way).
func ReservedLabel(key string, g *NodeGroup, gpuLabel string) string {
	switch {
	case key == gpuLabel:
		return "gpuscaler sets provider.gpuLabel itself from the instance type's GPU"
	case strings.HasPrefix(key, "gpuscaler.dev/"):
		return "the gpuscaler.dev/ prefix is gpuscaler's own"
	case strings.HasPrefix(key, "topology.kubernetes.io/"):
		return "gpuscaler sets topology labels from the instance's location"
	}
	switch key {
	case corev1.LabelArchStable, corev1.LabelOSStable, corev1.LabelHostname, corev1.LabelInstanceTypeStable:
		return "gpuscaler sets this well-known label itself"
	case gpu.LabelMIGConfig, gpu.LabelMIGStrategy:
		if g.MIG != nil {
			return "gpuscaler sets this label from the group's mig section"
		}
	}
	return ""
}

// kubeletMaySet reports whether the kubelet accepts a label key in its
// --node-labels flag: outside the kubernetes.io and k8s.io namespaces
// anything goes; inside, only kubelet.kubernetes.io/, node.kubernetes.io/
// (and their subdomains) and a few well-known keys.
func kubeletMaySet(key string) bool {
	ns, _, found := strings.Cut(key, "/")
	if !found {
		return true
	}
	if !inDomain(ns, "kubernetes.io") && !inDomain(ns, "k8s.io") {
		return true
	}
	if inDomain(ns, "kubelet.kubernetes.io") || inDomain(ns, "node.kubernetes.io") {
		return true
	}
	return slices.Contains([]string{
		corev1.LabelHostname, corev1.LabelArchStable, corev1.LabelOSStable, corev1.LabelInstanceTypeStable,
		corev1.LabelTopologyRegion, corev1.LabelTopologyZone,
		corev1.LabelInstanceType, corev1.LabelFailureDomainBetaRegion, corev1.LabelFailureDomainBetaZone,
		"beta.kubernetes.io/arch", "beta.kubernetes.io/os",
	}, key)
}

// inDomain reports whether name is domain or one of its subdomains.
func inDomain(name, domain string) bool {
	return name == domain || strings.HasSuffix(name, "."+domain)
}

// validateTaints checks each taint's key, value and effect, and that no
// key and effect pair repeats (the API server refuses such a Node).
func validateTaints(p *field.Path, taints []corev1.Taint) field.ErrorList {
	var errs field.ErrorList
	effects := []string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}
	type pair struct{ key, effect string }
	seen := map[pair]int{}
	for i, t := range taints {
		tp := p.Index(i)
		if t.Key == "" {
			errs = append(errs, field.Required(tp.Child("key"), ""))
		} else {
			for _, msg := range validation.IsQualifiedName(t.Key) {
				errs = append(errs, field.Invalid(tp.Child("key"), t.Key, msg))
			}
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(tp.Child("value"), t.Value, msg))
		}
		if !slices.Contains(effects, string(t.Effect)) {
			errs = append(errs, field.NotSupported(tp.Child("effect"), string(t.Effect), effects))
		}
		if t.TimeAdded != nil {
			errs = append(errs, field.Forbidden(tp.Child("timeAdded"), "Kubernetes sets it"))
		}
		k := pair{t.Key, string(t.Effect)}
		if j, dup := seen[k]; dup {
			errs = append(errs, field.Duplicate(tp, fmt.Sprintf("%s:%s (also %s)", t.Key, t.Effect, p.Index(j))))
		} else {
			seen[k] = i
		}
	}
	return errs
}
