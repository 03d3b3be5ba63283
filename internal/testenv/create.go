package testenv

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// Create creates the cluster-scoped object of a YAML document as its
// admin, as kubectl create does, and returns what the API server stored
// (its defaults applied) or its refusal: a CRD's schema and CEL rules
// judge it as they judge a user's.
func (e *Env) Create(ctx context.Context, gvr schema.GroupVersionResource, doc string) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", gvr.Resource, err)
	}
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return nil, err
	}
	return dyn.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
}
