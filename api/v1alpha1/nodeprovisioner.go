package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// NodeProvisioner sizes a GPU pool made of one or more node groups of the
// config file (across clouds, in fallback order) so that GPU utilization
// stays within a band and a warm buffer of idle GPU nodes is kept.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=np
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Groups",type=string,JSONPath=`.spec.nodeGroups`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="GPU util %",type=integer,JSONPath=`.status.gpuUtilizationPercent`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeProvisioner struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeProvisionerSpec   `json:"spec"`
	Status NodeProvisionerStatus `json:"status,omitempty"`
}

// GroupOrder is how a pool picks among its node groups.
// +kubebuilder:validation:Enum=Ordered;CheapestFirst
type GroupOrder string

// Group orders.
const (
	// GroupOrderOrdered tries the groups in the order listed.
	GroupOrderOrdered GroupOrder = "Ordered"
	// GroupOrderCheapestFirst tries the cheapest available offering first.
	GroupOrderCheapestFirst GroupOrder = "CheapestFirst"
)

// NodeProvisionerSpec is the desired shape of the pool.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minGPUUtilizationPercent) || !has(self.maxGPUUtilizationPercent) || self.minGPUUtilizationPercent < self.maxGPUUtilizationPercent",message="minGPUUtilizationPercent must be below maxGPUUtilizationPercent"
// +kubebuilder:validation:XValidation:rule="has(self.nodeGroups) || has(self.existingInstanceGroupNames)",message="name nodeGroups, existingInstanceGroupNames, or both"
// +kubebuilder:validation:XValidation:rule="!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",message="minNodes must not exceed maxNodes"
type NodeProvisionerSpec struct {
	// NodeGroups are names of node groups in gpuscaler's config, tried in
	// this order (or cheapest first). A group belongs to at most one pool
	// and is then not served to cluster-autoscaler.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=set
	// +optional
	NodeGroups []string `json:"nodeGroups,omitempty"`

	// ExistingInstanceGroupNames are GCP managed instance groups the pool
	// scales directly, with no node group in gpuscaler's config (the field
	// of Baseten's NodeProvisioner): "zones/<zone>/instanceGroupManagers/<name>",
	// or a bare name in clouds.gcp.zone. They come after NodeGroups, in
	// this order. Their machine type, GPUs, node labels and taints are read
	// from their instance templates.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=300
	// +listType=set
	// +optional
	ExistingInstanceGroupNames []string `json:"existingInstanceGroupNames,omitempty"`

	// GroupOrder is Ordered (default) or CheapestFirst.
	// +kubebuilder:default=Ordered
	// +optional
	GroupOrder GroupOrder `json:"groupOrder,omitempty"`

	// MinGPUUtilizationPercent: below it, idle nodes beyond the buffer are
	// removed after ScaleDownDelay.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MinGPUUtilizationPercent *int32 `json:"minGPUUtilizationPercent,omitempty"`

	// MaxGPUUtilizationPercent: above it, nodes are added before the pool is full.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxGPUUtilizationPercent *int32 `json:"maxGPUUtilizationPercent,omitempty"`

	// MinUnutilizedGPUNodes is the warm buffer: GPU nodes kept with no GPU requested.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinUnutilizedGPUNodes *int32 `json:"minUnutilizedGPUNodes,omitempty"`

	// ScaleDownDelay is how long a node must be unneeded before it goes.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 90s, 10m or 6h30m"
	// +optional
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`

	// MinNodes and MaxNodes bound the pool's size across its groups.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinNodes *int32 `json:"minNodes,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxNodes *int32 `json:"maxNodes,omitempty"`

	// MaxNodeLifetime rotates nodes: a node older than this is replaced,
	// its successor ordered first and the old node drained only once the
	// successor is Ready, so the pool never has fewer Ready nodes than
	// before. DWS flex-start nodes end at their run duration: set it a
	// margin below that.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 90s, 10m or 6h30m"
	// +optional
	MaxNodeLifetime *metav1.Duration `json:"maxNodeLifetime,omitempty"`

	// Defragmentation moves evictable GPU pods off thinly used nodes onto
	// the pool's other nodes, so that whole nodes free up and go.
	// +optional
	Defragmentation *Defragmentation `json:"defragmentation,omitempty"`

	// MaxHourlyCost caps the pool's hourly spend, a decimal in the clouds'
	// currency ("25", "12.50"); unset, no cap. "0" adds nothing, as a
	// forecast's maxExtraHourlyCost of "0" orders nothing.
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +optional
	MaxHourlyCost string `json:"maxHourlyCost,omitempty"`

	// Forecast orders capacity ahead of the demand the pool's own history
	// predicts (docs/provisioner.md, "Ordering ahead of a forecast"). The
	// pool learns its demand whether or not this is set; unset, nothing is
	// ordered ahead.
	// +optional
	Forecast *Forecast `json:"forecast,omitempty"`
}

// Forecast configures ordering ahead of a pool's learned demand.
type Forecast struct {
	// MaxExtraHourlyCost caps, per hour, the capacity ordered ahead beyond
	// what the pool's pending pods need: a decimal in the clouds' currency
	// ("6", "2.50"). "0" learns and reports without ordering.
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	MaxExtraHourlyCost string `json:"maxExtraHourlyCost"`

	// TrainFor is how long the pool's demand must have been observed
	// before anything is ordered ahead: a week sees every weekday once.
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 24h or 168h"
	// +optional
	TrainFor *metav1.Duration `json:"trainFor,omitempty"`

	// LeadTime is how long a new node of the pool takes from order to
	// running pods (boot, join, GPU drivers, image pull): the forecast
	// orders for the demand expected within it.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="a positive duration such as 5m"
	// +optional
	LeadTime *metav1.Duration `json:"leadTime,omitempty"`

	// StandbyLeadTime is how long an instance started from a node
	// group's standby pool takes to run pods (the start, join and GPU
	// drivers again; images pre-pulled): pods the forecast expects within
	// it are served from the pools, started this far ahead, and those
	// beyond it are left to the pools rather than ordered fresh while the
	// pools hold instances for them. One longer than leadTime counts as
	// leadTime; groups without a pool ignore it.
	// +kubebuilder:default="6m"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="a positive duration such as 6m"
	// +optional
	StandbyLeadTime *metav1.Duration `json:"standbyLeadTime,omitempty"`

	// CoveragePercent is how likely the capacity ordered ahead is to
	// serve every pod that arrives within leadTime. Pods arrive at random
	// around the rate the forecast expects, so capacity for their
	// expected number falls short about half the time; more covers more
	// often, with more idle capacity. A shape whose pods rarely come
	// within leadTime (less likely than this) gets none.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=99
	// +optional
	CoveragePercent *int32 `json:"coveragePercent,omitempty"`

	// ScaleDownDelay replaces the pool's scaleDownDelay, when shorter,
	// while the forecast vouches for the pool: every shape of pod it has
	// seen is forecast within bounds, and all it expects within leadTime
	// fits maxExtraHourlyCost. An idle node it does not expect to need
	// then goes after this: the capacity it keeps covers what comes, as
	// the pool's scaleDownDelay otherwise does by waiting.
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="a duration such as 0s, 2m or 10m"
	// +optional
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`
}

// Defragmentation configures the moving of GPU pods that frees whole
// nodes. A node is emptied only when every pod on it can be evicted (a
// controller owns it, no safe-to-evict "false", not a DaemonSet's or a
// mirror pod) and fits on the pool's other Ready nodes as they are;
// evictions go through the Eviction API, so PodDisruptionBudgets hold.
type Defragmentation struct {
	// Enabled turns defragmentation on.
	Enabled bool `json:"enabled"`
	// MaxEvictionsPerHour caps the pods it evicts per hour across the pool.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxEvictionsPerHour *int32 `json:"maxEvictionsPerHour,omitempty"`
	// MaxUtilizationPercent: only nodes whose GPUs are requested up to
	// this share are emptied.
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxUtilizationPercent *int32 `json:"maxUtilizationPercent,omitempty"`
}

// NodeProvisionerList is a list of NodeProvisioners.
//
// +kubebuilder:object:root=true
type NodeProvisionerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeProvisioner `json:"items"`
}

var _ runtime.Object = (*NodeProvisioner)(nil)
