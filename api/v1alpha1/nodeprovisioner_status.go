package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a NodeProvisioner.
const (
	ConditionReady               = "Ready"
	ConditionScalingUp           = "ScalingUp"
	ConditionScalingDown         = "ScalingDown"
	ConditionCapacityUnavailable = "CapacityUnavailable"
	// ConditionForecasting is True while the pool orders ahead of its
	// forecast; its reason says why not otherwise (Learning, Missing,
	// Disabled).
	ConditionForecasting = "Forecasting"
)

// NodeProvisionerStatus is what the controller observed and did.
type NodeProvisionerStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Nodes is the pool's node count over all groups.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// GPUsAllocatable and GPUsRequested are in GPU-equivalents (a 1g.10gb
	// MIG device is 1/7), over Ready nodes.
	// +optional
	GPUsAllocatable *resource.Quantity `json:"gpusAllocatable,omitempty"`
	// +optional
	GPUsRequested *resource.Quantity `json:"gpusRequested,omitempty"`
	// GPUUtilizationPercent is requested / allocatable.
	// +optional
	GPUUtilizationPercent int32 `json:"gpuUtilizationPercent,omitempty"`
	// Groups is the state of each node group.
	// +optional
	// +listType=map
	// +listMapKey=name
	Groups []GroupStatus `json:"groups,omitempty"`
	// LastScaleTime is when the pool last changed size.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`

	// DefragmentationEvictions are the times of the pod evictions
	// defragmentation started in the last hour (its cap counts them).
	// +optional
	DefragmentationEvictions []metav1.Time `json:"defragmentationEvictions,omitempty"`
	// Forecast is what the pool learned of its demand.
	// +optional
	Forecast *ForecastStatus `json:"forecast,omitempty"`
	// Conditions: Ready, ScalingUp, ScalingDown, CapacityUnavailable,
	// Forecasting.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GroupStatus is one node group's state within a pool.
type GroupStatus struct {
	Name        string `json:"name"`
	CurrentSize int32  `json:"currentSize"`
	TargetSize  int32  `json:"targetSize"`
	// +optional
	GPUsAllocatable *resource.Quantity `json:"gpusAllocatable,omitempty"`
	// +optional
	GPUsRequested *resource.Quantity `json:"gpusRequested,omitempty"`
	// CapacityUnavailable is set while the group's offerings are stocked out.
	// +optional
	CapacityUnavailable bool `json:"capacityUnavailable,omitempty"`
}

// ForecastStatus is a pool's demand against its forecast.
type ForecastStatus struct {
	// Learned is how long the pool's demand has been observed.
	Learned metav1.Duration `json:"learned"`
	// Pods is how many GPU pods run or wait in the pool now; ExpectedPods
	// how many the forecast expected now (absent before it has seen this
	// time of day).
	Pods int32 `json:"pods"`
	// +optional
	ExpectedPods *int32 `json:"expectedPods,omitempty"`
	// AheadPods is how many pods the last plan ordered ahead for.
	// +optional
	AheadPods int32 `json:"aheadPods,omitempty"`
}
