package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestGPUNodeClassSchemaOnARealAPIServer applies the generated CRD to a
// real kube-apiserver: bad GPUNodeClasses are refused with the schema's
// message (its CEL rules included) before any controller sees them, and a
// good one gets its defaults.
func TestGPUNodeClassSchemaOnARealAPIServer(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{CRDDirs: []string{"../apis/crds"}})
	gvr := schema.GroupVersionResource{Group: "gpuscaler.dev", Version: "v1alpha1", Resource: "gpunodeclasses"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(name, spec string) (*unstructured.Unstructured, error) {
		return env.Create(ctx, gvr, "apiVersion: gpuscaler.dev/v1alpha1\nkind: GPUNodeClass\nmetadata: {name: "+name+"}\nspec:\n"+spec)
	}

	good, err := create("good", "  cloud: verda\n  locations: [FIN-01]\n  sshKeyIDs: [k1]\n  diskSizeGiB: 100\n  mig: {profile: all-1g.10gb}\n  cloudOptions: {contract: PAY_AS_YOU_GO}\n")
	if err != nil {
		t.Fatalf("a valid GPUNodeClass was refused: %v", err)
	}
	if strategy, _, _ := unstructured.NestedString(good.Object, "spec", "mig", "strategy"); strategy != "mixed" {
		t.Errorf("mig.strategy defaulted to %q, want mixed", strategy)
	}

	tests := []struct{ name, spec, message string }{
		{"no-cloud", "  locations: [FIN-01]\n", "spec.cloud: Required value"},
		{"unknown-cloud", "  cloud: aws\n", "Unsupported value"},
		{"ssh-keys-elsewhere", "  cloud: scaleway\n  sshKeyIDs: [k1]\n", "sshKeyIDs are read on verda only"},
		{"empty-location", "  cloud: gcp\n  locations: [\"\"]\n", "should be at least 1 chars long"},
		{"small-disk", "  cloud: sim\n  diskSizeGiB: 5\n", "should be greater than or equal to 10"},
		{"empty-option-key", "  cloud: kamatera\n  cloudOptions: {\"\": x}\n", "an option's key must not be empty"},
		{"mig-profile", "  cloud: verda\n  mig: {profile: \"All 1g\"}\n", "should match"},
		{"mig-strategy", "  cloud: verda\n  mig: {profile: all-1g.10gb, strategy: none}\n", "Unsupported value"},
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
