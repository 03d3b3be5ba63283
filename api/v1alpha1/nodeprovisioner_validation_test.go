package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestSchemaOnARealAPIServer applies the generated CRD to a real
// kube-apiserver and checks that bad NodeProvisioners are refused with the
// schema's message, and good ones get their defaults.
func TestSchemaOnARealAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDDirs: []string{"../../deploy/crds"}})
	gvr := v1alpha1.GroupVersion.WithResource("nodeprovisioners")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(name, spec string) (*unstructured.Unstructured, error) {
		return env.Create(ctx, gvr, "apiVersion: gpuscaler.dev/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: "+name+"}\nspec:\n"+spec)
	}

	good, err := create("good", "  nodeGroups: [h100, a100]\n  minGPUUtilizationPercent: 20\n  maxGPUUtilizationPercent: 80\n  minUnutilizedGPUNodes: 1\n  maxHourlyCost: \"12.50\"\n")
	if err != nil {
		t.Fatalf("a valid NodeProvisioner was refused: %v", err)
	}
	if order, _, _ := unstructured.NestedString(good.Object, "spec", "groupOrder"); order != "Ordered" {
		t.Errorf("groupOrder defaulted to %q", order)
	}
	if delay, _, _ := unstructured.NestedString(good.Object, "spec", "scaleDownDelay"); delay != "10m" {
		t.Errorf("scaleDownDelay defaulted to %q", delay)
	}

	tests := []struct{ name, spec, message string }{
		{"no-groups", "  nodeGroups: []\n", "should have at least 1 items"},
		{"dup-groups", "  nodeGroups: [a, a]\n", "Duplicate value"},
		{"band", "  nodeGroups: [a]\n  minGPUUtilizationPercent: 80\n  maxGPUUtilizationPercent: 50\n", "minGPUUtilizationPercent must be below maxGPUUtilizationPercent"},
		{"nodes", "  nodeGroups: [a]\n  minNodes: 5\n  maxNodes: 2\n", "minNodes must not exceed maxNodes"},
		{"percent", "  nodeGroups: [a]\n  maxGPUUtilizationPercent: 150\n", "should be less than or equal to 100"},
		{"buffer", "  nodeGroups: [a]\n  minUnutilizedGPUNodes: -1\n", "should be greater than or equal to 0"},
		{"order", "  nodeGroups: [a]\n  groupOrder: Random\n", "Unsupported value"},
		{"cost", "  nodeGroups: [a]\n  maxHourlyCost: lots\n", "should match"},
		{"no-groups-at-all", "  minNodes: 1\n", "name nodeGroups, existingInstanceGroupNames, or both"},
		{"delay", "  nodeGroups: [a]\n  scaleDownDelay: soon\n", "a duration such as"},
		{"lifetime", "  nodeGroups: [a]\n  maxNodeLifetime: 6 hours\n", "a duration such as"},
		{"defrag", "  nodeGroups: [a]\n  defragmentation: {enabled: true, maxEvictionsPerHour: 0}\n", "should be greater than or equal to 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := create(tt.name, tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("err = %v, want the message %q", err, tt.message)
			}
		})
	}
}
