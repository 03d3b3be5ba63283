package gcp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// DescribeGroup implements cloud.GroupDescriber: it reads a zonal MIG and
// its instance template (global or regional): the machine type and any
// GPUs attached to it (guestAccelerators) give the instance type, learned
// into the catalog when the table does not have it; the node labels and
// taints are the ones GKE writes into a node pool's template metadata
// (kube-labels, else kube-env's NODE_LABELS, and NODE_TAINTS).
func (c *Cloud) DescribeGroup(ctx context.Context, zone, name string) (cloud.ExistingGroup, error) {
	var m *compute.InstanceGroupManager
	err := c.read(ctx, "describe", func() (err error) {
		m, err = answer(c.api.InstanceGroupManagers.Get(c.opts.Project, zone, name).Context(ctx).Do())
		return err
	})
	if err != nil {
		return cloud.ExistingGroup{}, err
	}
	link := m.InstanceTemplate
	if link == "" && len(m.Versions) > 0 && m.Versions[0] != nil {
		link = m.Versions[0].InstanceTemplate
	}
	tmpl, err := c.template(ctx, link)
	if err != nil {
		return cloud.ExistingGroup{}, fmt.Errorf("managed instance group %s/%s: %w", zone, name, err)
	}
	props := tmpl.Properties
	if props == nil {
		props = &compute.InstanceProperties{}
	}
	t, err := instanceType(lastSegment(props.MachineType), props.GuestAccelerators)
	if err != nil {
		return cloud.ExistingGroup{}, cloud.Errorf(cloud.ErrInvalid, "describe", "managed instance group %s/%s, template %s: %v", zone, name, tmpl.Name, err)
	}
	if _, known := tableType(t.Name); !known {
		c.mu.Lock()
		learned := make(map[string]cloud.InstanceType, len(c.learned)+1)
		for k, v := range c.learned {
			learned[k] = v
		}
		learned[t.Name] = t
		c.learned = learned
		c.mu.Unlock()
	}
	meta := map[string]string{}
	if props.Metadata != nil {
		for _, it := range props.Metadata.Items {
			if it != nil && it.Value != nil {
				meta[it.Key] = *it.Value
			}
		}
	}
	labels, taints, err := nodeSettings(meta)
	if err != nil {
		return cloud.ExistingGroup{}, cloud.Errorf(cloud.ErrInvalid, "describe", "managed instance group %s/%s, template %s: %v", zone, name, tmpl.Name, err)
	}
	return cloud.ExistingGroup{Location: zone, Name: name, InstanceType: t.Name, Labels: labels, Taints: taints, Size: int(m.TargetSize),
		Description: m.Description}, nil
}

// template reads an instance template by its link: global
// (projects/p/global/instanceTemplates/t) or regional
// (projects/p/regions/r/instanceTemplates/t).
func (c *Cloud) template(ctx context.Context, link string) (*compute.InstanceTemplate, error) {
	i := strings.Index(link, "projects/")
	if i < 0 {
		return nil, cloud.Errorf(cloud.ErrInvalid, "describe", "instance template %q is not a template link", link)
	}
	parts := strings.Split(link[i+len("projects/"):], "/")
	project, parts := parts[0], parts[1:]
	var (
		t   *compute.InstanceTemplate
		err error
	)
	var get func(...googleapi.CallOption) (*compute.InstanceTemplate, error)
	switch {
	case len(parts) == 3 && parts[0] == "global" && parts[1] == "instanceTemplates":
		get = c.api.InstanceTemplates.Get(project, parts[2]).Context(ctx).Do
	case len(parts) == 4 && parts[0] == "regions" && parts[2] == "instanceTemplates":
		get = c.api.RegionInstanceTemplates.Get(project, parts[1], parts[3]).Context(ctx).Do
	default:
		return nil, cloud.Errorf(cloud.ErrInvalid, "describe", "instance template %q is not a template link", link)
	}
	err = c.read(ctx, "describe", func() (err error) {
		t, err = answer(get())
		return err
	})
	return t, err
}

// lastSegment is the name at the end of a link (a template may give its
// machine type as a name or as a URL).
func lastSegment(s string) string { return s[strings.LastIndex(s, "/")+1:] }

// instanceType is the catalog entry of a machine type with the GPUs a
// template attaches: the table's own entry when the machine type carries
// its GPUs (A2, A3, G2) or has none attached; otherwise a learned entry
// named "<machine type>.<count>x<accelerator>" with the accelerators'
// GPUs and prices added; its nodes' instance-type label stays the machine
// type, as GCE nodes register it.
func instanceType(machineType string, accels []*compute.AcceleratorConfig) (cloud.InstanceType, error) {
	t, ok := tableType(machineType)
	if !ok {
		return cloud.InstanceType{}, fmt.Errorf("machine type %q is not in gpuscaler's GCP table (docs/clouds/gcp.md)", machineType)
	}
	if t.GPUCount > 0 || len(accels) == 0 {
		return t, nil
	}
	if len(accels) > 1 || accels[0] == nil {
		return cloud.InstanceType{}, fmt.Errorf("machine type %q has %d kinds of accelerators; one is supported", machineType, len(accels))
	}
	name, count := lastSegment(accels[0].AcceleratorType), int(accels[0].AcceleratorCount)
	a, ok := accelerators[name]
	if !ok || count < 1 {
		return cloud.InstanceType{}, fmt.Errorf("accelerator %q (count %d) is not in gpuscaler's GCP table (docs/clouds/gcp.md)", name, count)
	}
	t.Name, t.NodeLabel = fmt.Sprintf("%s.%dx%s", machineType, count, name), machineType
	t.GPUModel, t.GPUCount, t.GPUMemoryGiB = a.model, count, a.memoryGiB
	t.OnDemandPrice += float64(count) * a.price
	return t, nil
}

// nodeSettings reads the node labels and taints GKE puts in a node pool's
// template: the kube-labels item ("k=v,k2=v2"), else node_labels of
// kube-env's AUTOSCALER_ENV_VARS ("a=b;node_labels=k=v,...;node_taints=..."),
// else NODE_LABELS in kube-env; taints from AUTOSCALER_ENV_VARS'
// node_taints, else NODE_TAINTS ("k=v:Effect,k2:Effect").
func nodeSettings(meta map[string]string) (map[string]string, []corev1.Taint, error) {
	env := kubeEnv(meta["kube-env"])
	// cluster-autoscaler's own variables come first where GKE writes them.
	auto := map[string]string{}
	for kv := range strings.SplitSeq(env["AUTOSCALER_ENV_VARS"], ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			auto[k] = v
		}
	}
	rawLabels, ok := meta["kube-labels"]
	if !ok {
		if rawLabels, ok = auto["node_labels"]; !ok {
			rawLabels = env["NODE_LABELS"]
		}
	}
	rawTaints, ok := auto["node_taints"]
	if !ok {
		rawTaints = env["NODE_TAINTS"]
	}
	labels := map[string]string{}
	for _, kv := range splitList(rawLabels) {
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			return nil, nil, fmt.Errorf("node label %q has no key", kv)
		}
		labels[k] = v
	}
	var taints []corev1.Taint
	for _, raw := range splitList(rawTaints) {
		kv, effect, ok := strings.Cut(raw, ":")
		k, v, _ := strings.Cut(kv, "=")
		switch e := corev1.TaintEffect(effect); {
		case !ok || k == "":
			return nil, nil, fmt.Errorf("node taint %q is not key[=value]:Effect", raw)
		case e != corev1.TaintEffectNoSchedule && e != corev1.TaintEffectPreferNoSchedule && e != corev1.TaintEffectNoExecute:
			return nil, nil, fmt.Errorf("node taint %q: unknown effect %q", raw, effect)
		default:
			taints = append(taints, corev1.Taint{Key: k, Value: v, Effect: e})
		}
	}
	return labels, taints, nil
}

// kubeEnv reads the "KEY: value" lines of a kube-env item (values may be
// quoted).
func kubeEnv(s string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[strings.TrimSpace(k)] = v
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// Advise implements cloud.Advisor: each zonal MIG of a group is read with
// its template; one that does not exist (and that no instanceTemplate
// option would create), or whose template makes another instance type
// than the group's, is a finding. Node templates follow the config, so a
// mismatch means wrong GPUs in scale-from-zero decisions.
func (c *Cloud) Advise(ctx context.Context, group, instanceType string, locations []string, options map[string]string) []string {
	g := NewGroup(group, instanceType, locations, options)
	var out []string
	for _, m := range g.MIGs {
		if m.Regional() {
			continue
		}
		d, err := c.DescribeGroup(ctx, m.Location, m.Name)
		switch {
		case errors.Is(err, cloud.ErrNotFound) && g.Template != "":
		case errors.Is(err, cloud.ErrNotFound):
			out = append(out, fmt.Sprintf("managed instance group zones/%s/instanceGroupManagers/%s does not exist: create it, or name its template in cloudOptions.instanceTemplate", m.Location, m.Name))
		case err != nil:
			out = append(out, fmt.Sprintf("managed instance group zones/%s/instanceGroupManagers/%s could not be read: %v", m.Location, m.Name, err))
		case d.InstanceType != instanceType:
			out = append(out, fmt.Sprintf("instanceType is %s, but managed instance group zones/%s/instanceGroupManagers/%s makes %s (its template): set instanceType to that", instanceType, m.Location, m.Name, d.InstanceType))
		}
	}
	return out
}
