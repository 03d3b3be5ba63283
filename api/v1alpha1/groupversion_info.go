// Package v1alpha1 holds gpuscaler's Kubernetes API types: NodeProvisioner,
// which sizes GPU node pools by utilization targets and warm buffers.
//
// +kubebuilder:object:generate=true
// +groupName=gpuscaler.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "gpuscaler.dev", Version: "v1alpha1"}

// AddToScheme registers the types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &NodeProvisioner{}, &NodeProvisionerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
