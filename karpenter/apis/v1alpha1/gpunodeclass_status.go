package v1alpha1

import (
	"github.com/awslabs/operatorpkg/status"
)

// Conditions of a GPUNodeClass; Ready is true when all are.
const (
	// ConditionCloudReady: the cloud is configured and its catalog loaded.
	ConditionCloudReady = "CloudReady"
	// ConditionTemplateReady: the template group exists, is managed by
	// karpenter and is on the class's cloud (true when there is none).
	ConditionTemplateReady = "TemplateReady"
	// ConditionValidationSucceeded: the locations, SSH keys and MIG profile
	// make sense for the cloud.
	ConditionValidationSucceeded = "ValidationSucceeded"
)

// GPUNodeClassStatus is what the controller found of the class.
type GPUNodeClassStatus struct {
	// InstanceTypes counts the GPU instance types the class offers.
	// +optional
	InstanceTypes int `json:"instanceTypes,omitempty"`
	// Conditions say whether the class can launch machines, and why not.
	// +optional
	Conditions []status.Condition `json:"conditions,omitempty"`
}

// StatusConditions returns the class's conditions, Ready over the others.
func (in *GPUNodeClass) StatusConditions(opts ...status.ForOption) status.ConditionSet {
	return status.NewReadyConditions(ConditionCloudReady, ConditionTemplateReady, ConditionValidationSucceeded).For(in, opts...)
}

// GetConditions returns the conditions.
func (in *GPUNodeClass) GetConditions() []status.Condition { return in.Status.Conditions }

// SetConditions replaces the conditions.
func (in *GPUNodeClass) SetConditions(conditions []status.Condition) {
	in.Status.Conditions = conditions
}
