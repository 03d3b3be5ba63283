package seedconfig

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
)

// IsNodeProvisionerManifest reports whether data holds Kubernetes
// manifests of kind NodeProvisioner (Baseten's, to convert) rather than a
// config file.
func IsNodeProvisionerManifest(data []byte) bool {
	var head struct {
		Kind string `json:"kind"`
	}
	docs, _ := splitDocuments(data)
	for _, d := range docs {
		if yaml.Unmarshal(d, &head) == nil && head.Kind == "NodeProvisioner" {
			return true
		}
	}
	return false
}

// ConvertNodeProvisioners turns Baseten NodeProvisioner manifests (one or
// several YAML documents) into gpuscaler's: the spec keeps its fields
// (existingInstanceGroupNames, minGPUUtilizationPercent,
// minUnutilizedGPUNodes, scaleDownDelay, and any other gpuscaler's spec
// has); metadata keeps the name, labels and annotations. gpuscaler's
// NodeProvisioner is cluster-scoped, so a namespace is dropped, with a
// note. A spec field gpuscaler does not have is an error naming the
// document and the field; the status is not carried over.
func ConvertNodeProvisioners(data []byte) (out []byte, notes []string, err error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	seen := map[string]int{}
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
		switch {
		case m.Kind != "NodeProvisioner":
			return nil, nil, fmt.Errorf("%s: kind %q: only NodeProvisioner manifests convert", where, m.Kind)
		case m.APIVersion == v1alpha1.GroupVersion.String():
			return nil, nil, fmt.Errorf("%s: apiVersion %s is gpuscaler's already", where, m.APIVersion)
		case m.Metadata.Name == "":
			return nil, nil, fmt.Errorf("%s: metadata.name: required (the pool's nodes carry it in %s)", where, "nodeprovisioner.compute.baseten.co/provisioner-name")
		}
		raw, err := yaml.Marshal(m.Spec)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: spec: %w", where, err)
		}
		var spec v1alpha1.NodeProvisionerSpec
		if err := yaml.UnmarshalStrict(raw, &spec); err != nil {
			return nil, nil, fmt.Errorf("%s: spec: %w (gpuscaler's NodeProvisioner has no such field: see docs/provisioner.md#migrating-from-basetens-nodeprovisioner)", where, err)
		}
		if len(spec.NodeGroups) == 0 && len(spec.ExistingInstanceGroupNames) == 0 {
			return nil, nil, fmt.Errorf("%s: spec.existingInstanceGroupNames: required (the managed instance groups the pool scales)", where)
		}
		if j, dup := seen[m.Metadata.Name]; dup {
			return nil, nil, fmt.Errorf("%s: metadata.name: document %d has it too; gpuscaler's NodeProvisioner is cluster-scoped, so one would replace the other: rename one (and its nodes' label)", where, j)
		}
		seen[m.Metadata.Name] = i + 1
		if m.Metadata.Namespace != "" {
			notes = append(notes, fmt.Sprintf("%s: namespace %q dropped: gpuscaler's NodeProvisioner is cluster-scoped", where, m.Metadata.Namespace))
		}
		if len(spec.ExistingInstanceGroupNames) > 0 {
			notes = append(notes, fmt.Sprintf("%s: gpuscaler scales an existing managed instance group only when it is handed over to the cluster: "+
				"list %s in clouds.gcp.adoptInstanceGroups of gpuscaler's config, or put gpuscaler.dev/cluster=<clusterName> in each MIG's description",
				where, strings.Join(spec.ExistingInstanceGroupNames, ", ")))
		}
		np := v1alpha1.NodeProvisioner{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeProvisioner"},
			ObjectMeta: metav1.ObjectMeta{Name: m.Metadata.Name, Labels: m.Metadata.Labels, Annotations: dropKubectl(m.Metadata.Annotations)},
			Spec:       spec,
		}
		y, err := yaml.Marshal(struct {
			APIVersion string                       `json:"apiVersion"`
			Kind       string                       `json:"kind"`
			Metadata   metav1.ObjectMeta            `json:"metadata"`
			Spec       v1alpha1.NodeProvisionerSpec `json:"spec"`
		}{np.APIVersion, np.Kind, np.ObjectMeta, np.Spec})
		if err != nil {
			return nil, nil, err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(bytes.ReplaceAll(y, []byte("  creationTimestamp: null\n"), nil))
	}
	return buf.Bytes(), notes, nil
}

// dropKubectl drops kubectl's last-applied annotation, which holds the
// old object.
func dropKubectl(a map[string]string) map[string]string {
	delete(a, "kubectl.kubernetes.io/last-applied-configuration")
	if len(a) == 0 {
		return nil
	}
	return a
}

// splitDocuments splits a YAML stream into its non-empty documents.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(string(d)) != "" {
			out = append(out, d)
		}
	}
}
