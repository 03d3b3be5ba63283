package seedconfig

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
)

// TestConvertNodeProvisioners: Baseten NodeProvisioner manifests become
// gpuscaler's with their spec as it is; a field gpuscaler lacks is an
// error naming the document and the field.
func TestConvertNodeProvisioners(t *testing.T) {
	in := `apiVersion: compute.baseten.co/v1alpha1
kind: NodeProvisioner
metadata:
  name: h100
  namespace: np
  labels: {team: infra}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"spec":{}}'
spec:
  existingInstanceGroupNames: [gke-prod-h100-grp]
  minGPUUtilizationPercent: 40
  minUnutilizedGPUNodes: 2
  scaleDownDelay: 15m
status:
  targetSize: 3
---
apiVersion: compute.baseten.co/v1alpha1
kind: NodeProvisioner
metadata: {name: l4}
spec:
  existingInstanceGroupNames: [zones/us-east4-c/instanceGroupManagers/gke-prod-l4-grp]
`
	if !IsNodeProvisionerManifest([]byte(in)) || IsNodeProvisionerManifest([]byte("clusterName: x\nnodeGroups: []\n")) {
		t.Fatal("manifest detection")
	}
	out, notes, err := ConvertNodeProvisioners([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "---\n")
	if len(docs) != 2 || len(notes) != 3 || !strings.Contains(notes[0], `namespace "np"`) ||
		!strings.Contains(notes[1], "list gke-prod-h100-grp in clouds.gcp.adoptInstanceGroups") ||
		!strings.Contains(notes[2], "zones/us-east4-c/instanceGroupManagers/gke-prod-l4-grp") {
		t.Fatalf("%d documents, notes %v:\n%s", len(docs), notes, out)
	}
	var np v1alpha1.NodeProvisioner
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &np); err != nil {
		t.Fatal(err)
	}
	s := np.Spec
	if np.APIVersion != "gpuscaler.dev/v1alpha1" || np.Name != "h100" || np.Namespace != "" || np.Labels["team"] != "infra" || np.Annotations != nil ||
		len(s.ExistingInstanceGroupNames) != 1 || *s.MinGPUUtilizationPercent != 40 || *s.MinUnutilizedGPUNodes != 2 || s.ScaleDownDelay.Duration.Minutes() != 15 {
		t.Errorf("converted:\n%s", docs[0])
	}
	for _, c := range []struct{ in, want string }{
		{"apiVersion: compute.baseten.co/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: x}\nspec: {existingInstanceGroupNames: [g], maxGPUs: 4}\n", `document 1 (NodeProvisioner "x"): spec: error unmarshaling JSON: while decoding JSON: json: unknown field "maxGPUs"`},
		{"apiVersion: gpuscaler.dev/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: x}\nspec: {nodeGroups: [g]}\n", "gpuscaler's already"},
		{"apiVersion: compute.baseten.co/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: x}\nspec: {minUnutilizedGPUNodes: 1}\n", "spec.existingInstanceGroupNames: required"},
		{"apiVersion: compute.baseten.co/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: x, namespace: a}\nspec: {existingInstanceGroupNames: [g]}\n---\n" +
			"apiVersion: compute.baseten.co/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: x, namespace: b}\nspec: {existingInstanceGroupNames: [h]}\n", "document 1 has it too"},
	} {
		if _, _, err := ConvertNodeProvisioners([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.in, err, c.want)
		}
	}
}
