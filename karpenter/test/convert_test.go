package test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/config/seedconfig"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// scw-karpenter's Provisioner, converted, and the manifests of
// examples/karpenter are accepted by the API server under Karpenter's and
// gpuscaler's CRDs (their schemas and CEL rules).
func TestManifestsApply(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../internal/config/seedconfig/testdata/scw-karpenter-provisioner.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := seedconfig.ConvertProvisioners(data)
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.Options{CRDDirs: []string{karpenterCRDs(t), "../apis/crds"}})
	kube, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	examples, err := filepath.Glob("../../examples/karpenter/*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("examples: %v", err)
	}
	docs := splitYAML(out)
	for _, f := range examples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, splitYAML(data)...)
	}
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		if err := kube.Create(ctx, obj); err != nil {
			t.Fatalf("the API server refuses %s %s: %v\n%s", obj.GetKind(), obj.GetName(), err, doc)
		}
	}
}
