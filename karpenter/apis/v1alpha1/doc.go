// Package v1alpha1 is the GPUNodeClass API (gpuscaler.dev/v1alpha1): what
// Karpenter's NodePools point at to get GPU machines from a cloud gpuscaler
// serves.
//
// +kubebuilder:object:generate=true
// +groupName=gpuscaler.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "gpuscaler.dev", Version: "v1alpha1"}

// Karpenter core resolves a NodePool's nodeClassRef through client-go's
// shared scheme (its IsManaged compares GroupKinds it looks up there), so the
// types are registered in it, as every Karpenter provider does.
func init() {
	metav1.AddToGroupVersion(clientgoscheme.Scheme, GroupVersion)
	clientgoscheme.Scheme.AddKnownTypes(GroupVersion, &GPUNodeClass{}, &GPUNodeClassList{})
}
