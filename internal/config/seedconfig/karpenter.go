package seedconfig

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Karpenter's v1alpha5 Provisioner, as scw-karpenter (seed 004) had its
// users write it, and what it becomes: a karpenter.sh/v1 NodePool and a
// GPUNodeClass of gpuscaler's Karpenter operator on Scaleway.
const (
	provisionerAPIVersion = "karpenter.sh/v1alpha5"
	nodePoolAPIVersion    = "karpenter.sh/v1"
	nodeClassAPIVersion   = "gpuscaler.dev/v1alpha1"
	// scwCapacityType is the capacity type scw-karpenter made up to mark
	// its NodeClaims; Scaleway sells on-demand only.
	scwCapacityType = "scaleway-gpu"
)

// scwInstanceTypes maps the instance-type names scw-karpenter knew to
// Scaleway's commercial types.
var scwInstanceTypes = map[string]string{"l4": "L4-1-24G", "l40s": "L40S-1-48G", "3070": "GPU-3070-S"}

// provisionerSpec is the v1alpha5 Provisioner's spec; a field it does not
// list is refused.
type provisionerSpec struct {
	Requirements  []corev1.NodeSelectorRequirement `json:"requirements,omitempty"`
	Labels        map[string]string                `json:"labels,omitempty"`
	Annotations   map[string]string                `json:"annotations,omitempty"`
	Taints        []corev1.Taint                   `json:"taints,omitempty"`
	StartupTaints []corev1.Taint                   `json:"startupTaints,omitempty"`
	Limits        *struct {
		Resources corev1.ResourceList `json:"resources,omitempty"`
	} `json:"limits,omitempty"`
	Provider    map[string]any `json:"provider,omitempty"`
	ProviderRef *struct {
		APIVersion string `json:"apiVersion,omitempty"`
		Kind       string `json:"kind,omitempty"`
		Name       string `json:"name"`
	} `json:"providerRef,omitempty"`
	TTLSecondsAfterEmpty   *int64 `json:"ttlSecondsAfterEmpty,omitempty"`
	TTLSecondsUntilExpired *int64 `json:"ttlSecondsUntilExpired,omitempty"`
	Consolidation          *struct {
		Enabled *bool `json:"enabled,omitempty"`
	} `json:"consolidation,omitempty"`
	Weight               *int32         `json:"weight,omitempty"`
	KubeletConfiguration map[string]any `json:"kubeletConfiguration,omitempty"`
}

// IsProvisionerManifest reports whether data holds Karpenter v1alpha5
// Provisioners (scw-karpenter's, to convert).
func IsProvisionerManifest(data []byte) bool {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	docs, _ := splitDocuments(data)
	for _, d := range docs {
		if yaml.Unmarshal(d, &head) == nil && head.Kind == "Provisioner" && head.APIVersion == provisionerAPIVersion {
			return true
		}
	}
	return false
}

// ConvertProvisioners turns v1alpha5 Provisioners into a GPUNodeClass and a
// v1 NodePool each, for gpuscaler's Karpenter operator on Scaleway:
// requirements keep their keys (karpenter.sh/instance-type becomes
// node.kubernetes.io/instance-type, and scw-karpenter's names l4, l40s and
// 3070 Scaleway's commercial types), the made-up capacity type
// scaleway-gpu becomes on-demand, limits stay, ttlSecondsAfterEmpty
// becomes WhenEmpty consolidation after as long, consolidation.enabled
// WhenEmptyOrUnderutilized, ttlSecondsUntilExpired expireAfter (Never when
// unset, as v1alpha5 had it). A field that does not convert is an error
// naming its path; what changes meaning is a note.
func ConvertProvisioners(data []byte) (out []byte, notes []string, err error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	seen := map[string]bool{}
	for i, d := range docs {
		var m struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
			Spec       map[string]any    `json:"spec"`
		}
		if err := yaml.Unmarshal(d, &m); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		where := fmt.Sprintf("document %d (%s %q)", i+1, m.Kind, m.Metadata.Name)
		if seen["NodePool/"+m.Metadata.Name] {
			return nil, nil, fmt.Errorf("%s: metadata.name: another Provisioner has it", where)
		}
		if m.Kind != "Provisioner" || m.APIVersion != provisionerAPIVersion {
			return nil, nil, fmt.Errorf("%s: %s %s: only %s Provisioners convert", where, m.APIVersion, m.Kind, provisionerAPIVersion)
		}
		raw, err := yaml.Marshal(m.Spec)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: spec: %w", where, err)
		}
		var spec provisionerSpec
		if err := yaml.UnmarshalStrict(raw, &spec); err != nil {
			return nil, nil, fmt.Errorf("%s: spec: %w", where, err)
		}
		objs, n, errs := convertProvisioner(m.Metadata, spec)
		if len(errs) > 0 {
			return nil, nil, fmt.Errorf("%s: %w", where, errs.ToAggregate())
		}
		for _, note := range n {
			notes = append(notes, where+": "+note)
		}
		for _, o := range objs {
			key := o["kind"].(string) + "/" + o["metadata"].(map[string]any)["name"].(string)
			if seen[key] {
				continue // a GPUNodeClass several Provisioners name
			}
			seen[key] = true
			y, err := yaml.Marshal(o)
			if err != nil {
				return nil, nil, err
			}
			if buf.Len() > 0 {
				buf.WriteString("---\n")
			}
			buf.Write(y)
		}
	}
	notes = append(notes,
		"the pods' nodeSelector karpenter.sh/instance-type: l4 becomes node.kubernetes.io/instance-type: L4-1-24G (l40s: L40S-1-48G, 3070: GPU-3070-S), or select the GPU with gpuscaler.dev/accelerator (l4, l40s, rtx3070); their toleration of karpenter.sh/capacity-type is no longer needed",
		"the scaleway-credentials Secret stays: give it to gpuscaler-karpenter as its environment (envFrom); it reads SCW_ACCESS_KEY, SCW_SECRET_KEY and SCW_DEFAULT_PROJECT_ID as they are, and its config file needs clouds: {scaleway: {}} (docs/karpenter.md)")
	return buf.Bytes(), notes, nil
}

// convertProvisioner converts one Provisioner.
func convertProvisioner(meta metav1.ObjectMeta, spec provisionerSpec) ([]map[string]any, []string, field.ErrorList) {
	p := field.NewPath("spec")
	var errs field.ErrorList
	var notes []string
	if meta.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "the NodePool and GPUNodeClass are named after it"))
	}
	reqs, zones, reqNotes, reqErrs := convertRequirements(p.Child("requirements"), spec.Requirements)
	notes, errs = append(notes, reqNotes...), append(errs, reqErrs...)
	for k := range spec.Provider {
		errs = append(errs, field.Invalid(p.Child("provider").Child(k), spec.Provider[k], "does not convert: the GPUNodeClass says where and how machines are made (docs/karpenter.md)"))
	}
	if len(spec.KubeletConfiguration) > 0 {
		keys := make([]string, 0, len(spec.KubeletConfiguration))
		for k := range spec.KubeletConfiguration {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		errs = append(errs, field.Invalid(p.Child("kubeletConfiguration"), keys, "does not convert: set kubelet flags in the bootstrap of the GPUNodeClass's template (kubeletExtraArgs)"))
	}
	className := meta.Name
	if spec.ProviderRef != nil {
		if spec.ProviderRef.Name == "" {
			errs = append(errs, field.Required(p.Child("providerRef", "name"), ""))
		}
		className = spec.ProviderRef.Name
	}
	disruption, expireAfter, lifeErrs := convertLifetimes(p, spec)
	errs = append(errs, lifeErrs...)
	if spec.Weight != nil && (*spec.Weight < 1 || *spec.Weight > 100) {
		errs = append(errs, field.Invalid(p.Child("weight"), *spec.Weight, "must be 1 to 100"))
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	templateSpec := map[string]any{
		"nodeClassRef": map[string]any{"group": "gpuscaler.dev", "kind": "GPUNodeClass", "name": className},
		"requirements": reqs,
		"expireAfter":  expireAfter,
	}
	if len(spec.Taints) > 0 {
		templateSpec["taints"] = spec.Taints
	}
	if len(spec.StartupTaints) > 0 {
		templateSpec["startupTaints"] = spec.StartupTaints
	}
	template := map[string]any{"spec": templateSpec}
	if len(spec.Labels) > 0 || len(spec.Annotations) > 0 {
		md := map[string]any{}
		if len(spec.Labels) > 0 {
			md["labels"] = spec.Labels
		}
		if len(spec.Annotations) > 0 {
			md["annotations"] = spec.Annotations
		}
		template["metadata"] = md
	}
	poolSpec := map[string]any{"template": template, "disruption": disruption}
	if spec.Limits != nil && len(spec.Limits.Resources) > 0 {
		limits := map[string]string{}
		for k, v := range spec.Limits.Resources {
			limits[string(k)] = v.String()
		}
		poolSpec["limits"] = limits
	}
	if spec.Weight != nil {
		poolSpec["weight"] = *spec.Weight
	}
	classSpec := map[string]any{"cloud": "scaleway"}
	if len(zones) > 0 {
		classSpec["locations"] = zones
	}
	objMeta := func(name string) map[string]any {
		m := map[string]any{"name": name}
		if len(meta.Labels) > 0 {
			m["labels"] = meta.Labels
		}
		return m
	}
	class := map[string]any{"apiVersion": nodeClassAPIVersion, "kind": "GPUNodeClass", "metadata": objMeta(className), "spec": classSpec}
	pool := map[string]any{"apiVersion": nodePoolAPIVersion, "kind": "NodePool", "metadata": objMeta(meta.Name), "spec": poolSpec}
	return []map[string]any{class, pool}, notes, nil
}

// convertRequirements converts a Provisioner's requirements (at p) to a
// NodePool's: Scaleway's capacity-type marker and instance-type names
// become gpuscaler's, and every pool asks for GPUs. zones are the
// requirements' zones, if any.
func convertRequirements(p *field.Path, requirements []corev1.NodeSelectorRequirement) (reqs []corev1.NodeSelectorRequirement, zones, notes []string, errs field.ErrorList) {
	operators := []string{string(corev1.NodeSelectorOpIn), string(corev1.NodeSelectorOpNotIn), string(corev1.NodeSelectorOpExists),
		string(corev1.NodeSelectorOpDoesNotExist), string(corev1.NodeSelectorOpGt), string(corev1.NodeSelectorOpLt)}
	hasCapacityType := false
	for i, r := range requirements {
		rp := p.Index(i)
		if r.Key == "" {
			errs = append(errs, field.Required(rp.Child("key"), ""))
			continue
		}
		if !slices.Contains(operators, string(r.Operator)) {
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, operators))
			continue
		}
		switch r.Key {
		case "karpenter.sh/capacity-type":
			hasCapacityType = true
			r.Values = slices.DeleteFunc(slices.Clone(r.Values), func(v string) bool { return v == scwCapacityType })
			if r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 0 {
				r.Values = []string{"on-demand"}
				notes = append(notes, "capacity type scaleway-gpu (scw-karpenter's marker) is on-demand: Scaleway sells no spot")
			}
			for _, v := range r.Values {
				if v != "on-demand" && v != "spot" {
					errs = append(errs, field.NotSupported(rp.Child("values"), v, []string{"on-demand", "spot", scwCapacityType}))
				}
			}
		case "karpenter.sh/instance-type", corev1.LabelInstanceTypeStable:
			r.Key = corev1.LabelInstanceTypeStable
			vals := make([]string, len(r.Values))
			for j, v := range r.Values {
				vals[j] = v
				if t, ok := scwInstanceTypes[v]; ok {
					vals[j] = t
				}
			}
			r.Values = vals
		case corev1.LabelTopologyZone:
			if r.Operator == corev1.NodeSelectorOpIn {
				zones = r.Values
			}
		}
		reqs = append(reqs, r)
	}
	if !hasCapacityType {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}})
	}
	// scw-karpenter only ever made GPU machines.
	reqs = append(reqs, corev1.NodeSelectorRequirement{Key: "nvidia.com/gpu.count", Operator: corev1.NodeSelectorOpExists})
	return reqs, zones, notes, errs
}

// convertLifetimes converts a Provisioner's empty-node and expiry TTLs and
// its consolidation to a NodePool's disruption and expireAfter.
func convertLifetimes(p *field.Path, spec provisionerSpec) (disruption map[string]any, expireAfter string, errs field.ErrorList) {
	disruption = map[string]any{"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
	switch {
	case spec.TTLSecondsAfterEmpty != nil && spec.Consolidation != nil && spec.Consolidation.Enabled != nil && *spec.Consolidation.Enabled:
		errs = append(errs, field.Forbidden(p.Child("ttlSecondsAfterEmpty"), "with consolidation.enabled: v1alpha5 allowed one of the two"))
	case spec.TTLSecondsAfterEmpty != nil && *spec.TTLSecondsAfterEmpty < 0:
		errs = append(errs, field.Invalid(p.Child("ttlSecondsAfterEmpty"), *spec.TTLSecondsAfterEmpty, "must be >= 0"))
	case spec.TTLSecondsAfterEmpty != nil:
		disruption["consolidateAfter"] = strconv.FormatInt(*spec.TTLSecondsAfterEmpty, 10) + "s"
	case spec.Consolidation != nil && spec.Consolidation.Enabled != nil && *spec.Consolidation.Enabled:
		disruption = map[string]any{"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
	}
	expireAfter = "Never"
	if t := spec.TTLSecondsUntilExpired; t != nil {
		if *t <= 0 {
			errs = append(errs, field.Invalid(p.Child("ttlSecondsUntilExpired"), *t, "must be > 0"))
		}
		expireAfter = strconv.FormatInt(*t, 10) + "s"
	}
	return disruption, expireAfter, errs
}
