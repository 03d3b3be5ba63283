package seedconfig

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// scw-karpenter's Provisioner, verbatim from its README, becomes a
// GPUNodeClass on Scaleway and a v1 NodePool of on-demand GPU machines
// that consolidates empty nodes after 30 s.
func TestConvertScwKarpenterProvisioner(t *testing.T) {
	data, err := os.ReadFile("testdata/scw-karpenter-provisioner.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !IsProvisionerManifest(data) {
		t.Fatal("not recognized as a Provisioner manifest")
	}
	out, notes, err := ConvertProvisioners(data)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := splitDocuments(out)
	if err != nil || len(docs) != 2 {
		t.Fatalf("%d documents, %v:\n%s", len(docs), err, out)
	}
	var class, pool map[string]any
	if err := yaml.Unmarshal(docs[0], &class); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(docs[1], &pool); err != nil {
		t.Fatal(err)
	}
	get := func(m map[string]any, path ...string) any {
		var v any = m
		for _, k := range path {
			v = v.(map[string]any)[k]
		}
		return v
	}
	if class["kind"] != "GPUNodeClass" || get(class, "metadata", "name") != "scaleway-gpu" || get(class, "spec", "cloud") != "scaleway" {
		t.Fatalf("class:\n%s", docs[0])
	}
	if pool["apiVersion"] != "karpenter.sh/v1" || get(pool, "spec", "disruption", "consolidationPolicy") != "WhenEmpty" ||
		get(pool, "spec", "disruption", "consolidateAfter") != "30s" || get(pool, "spec", "limits", "memory") != "1000Gi" ||
		get(pool, "spec", "template", "spec", "expireAfter") != "Never" || get(pool, "spec", "template", "spec", "nodeClassRef", "name") != "scaleway-gpu" {
		t.Fatalf("pool:\n%s", docs[1])
	}
	reqs := string(docs[1])
	if !strings.Contains(reqs, "- on-demand") || strings.Contains(reqs, "scaleway-gpu\n    - ") || !strings.Contains(reqs, "nvidia.com/gpu.count") {
		t.Fatalf("requirements:\n%s", reqs)
	}
	if len(notes) < 2 {
		t.Fatalf("notes: %v", notes)
	}
}

// The names scw-karpenter knew map to Scaleway's commercial types.
func TestConvertProvisionerInstanceTypes(t *testing.T) {
	out, _, err := ConvertProvisioners([]byte(`
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: gpu}
spec:
  requirements:
    - {key: karpenter.sh/instance-type, operator: In, values: [l4, l40s, "3070", H100-1-80G]}
    - {key: topology.kubernetes.io/zone, operator: In, values: [fr-par-2]}
  providerRef: {name: scw}
  consolidation: {enabled: true}
  ttlSecondsUntilExpired: 604800
  taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
`))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"node.kubernetes.io/instance-type", "L4-1-24G", "L40S-1-48G", "GPU-3070-S", "H100-1-80G", "name: scw",
		"- fr-par-2", "WhenEmptyOrUnderutilized", "604800s", "nvidia.com/gpu"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

// What does not convert is refused with its field path.
func TestConvertProvisionerRefusals(t *testing.T) {
	for _, tc := range []struct{ name, spec, path string }{
		{"unknown field", "  instanceTypes: [l4]", "instanceTypes"},
		{"bad operator", "  requirements: [{key: a, operator: Within, values: [b]}]", "spec.requirements[0].operator"},
		{"no key", "  requirements: [{operator: Exists}]", "spec.requirements[0].key"},
		{"provider settings", "  provider: {subnetSelector: {a: b}}", "spec.provider.subnetSelector"},
		{"kubelet", "  kubeletConfiguration: {maxPods: 20}", "spec.kubeletConfiguration"},
		{"ttl and consolidation", "  ttlSecondsAfterEmpty: 30\n  consolidation: {enabled: true}", "spec.ttlSecondsAfterEmpty"},
		{"negative ttl", "  ttlSecondsAfterEmpty: -1", "spec.ttlSecondsAfterEmpty"},
		{"capacity type", "  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [reserved]}]", "spec.requirements[0].values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ConvertProvisioners([]byte("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n" + tc.spec + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("error %v, want one naming %s", err, tc.path)
			}
		})
	}
}
