package test

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/config/seedconfig"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// scw-karpenter's Provisioner, converted, is accepted by the API server
// under Karpenter's and gpuscaler's CRDs (their schemas and CEL rules).
func TestConvertedProvisionerApplies(t *testing.T) {
	data, err := os.ReadFile("../../../internal/config/seedconfig/testdata/scw-karpenter-provisioner.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := seedconfig.ConvertProvisioners(data)
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.Options{CRDDirs: []string{karpenterCRDs(t), "../apis/crds"}})
	kube, err := client.New(env.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, doc := range splitYAML(out) {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		if err := kube.Create(ctx, obj); err != nil {
			t.Fatalf("the API server refuses the converted %s: %v\n%s", obj.GetKind(), err, doc)
		}
	}
}
