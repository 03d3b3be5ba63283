package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUNodeClassSpec says where and how the machines of the NodePools that
// name the class are launched. The clouds, their credentials and the
// bootstrap settings live in gpuscaler's config file; the class picks one
// cloud, optionally one of the file's node groups as a template, and
// overrides what differs per class.
//
// +kubebuilder:validation:XValidation:rule="!has(self.sshKeyIDs) || self.cloud == 'verda'",message="sshKeyIDs are read on verda only; other clouds take SSH keys from cloudOptions"
type GPUNodeClassSpec struct {
	// Cloud is a cloud of the config file: sim, verda, kamatera, scaleway
	// or gcp.
	// +kubebuilder:validation:Enum=sim;verda;kamatera;scaleway;gcp
	Cloud string `json:"cloud"`
	// Template names a node group of the config file (managedBy: karpenter)
	// whose bootstrap, image, disk, cloud options, labels and taints the
	// machines take; the fields below replace or add to them.
	// +optional
	Template string `json:"template,omitempty"`
	// Locations restrict the offerings to these zones or regions of the
	// cloud (the NodePool's topology.kubernetes.io/zone requirement narrows
	// further); empty means every location the cloud offers.
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:MinLength=1
	Locations []string `json:"locations,omitempty"`
	// Image is the cloud's OS image name or ID.
	// +optional
	Image string `json:"image,omitempty"`
	// DiskSizeGiB is the OS disk size; large model images want room.
	// +optional
	// +kubebuilder:validation:Minimum=10
	DiskSizeGiB int `json:"diskSizeGiB,omitempty"`
	// SSHKeyIDs are the cloud's IDs of SSH keys put on the machines, for
	// clouds that take them (verda).
	// +optional
	// +listType=set
	// +kubebuilder:validation:items:MinLength=1
	SSHKeyIDs []string `json:"sshKeyIDs,omitempty"`
	// CloudOptions are cloud-specific settings, as nodeGroups[*].cloudOptions
	// of the config file.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) > 0)",message="an option's key must not be empty"
	CloudOptions map[string]string `json:"cloudOptions,omitempty"`
	// MIG partitions every GPU of the machines: their instance types offer
	// the profile's devices (nvidia.com/mig-1g.10gb, ...) instead of whole
	// GPUs, and only types whose GPU supports the profile are offered.
	// +optional
	MIG *MIG `json:"mig,omitempty"`
}

// MIG is a MIG partitioning, as mig-manager's mig-parted configurations
// name them.
type MIG struct {
	// Profile is a mig-parted configuration, e.g. all-1g.10gb.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9.+-]*[a-z0-9])?$`
	Profile string `json:"profile"`
	// Strategy is the device plugin's MIG strategy.
	// +kubebuilder:validation:Enum=single;mixed
	// +kubebuilder:default=mixed
	// +optional
	Strategy string `json:"strategy,omitempty"`
}

// GPUNodeClass is a class of GPU machines for Karpenter NodePools.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=gpunodeclasses,scope=Cluster,categories=karpenter,shortName={gpunc,gpuncs}
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cloud",type=string,JSONPath=`.spec.cloud`
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.spec.template`
// +kubebuilder:printcolumn:name="Types",type=integer,JSONPath=`.status.instanceTypes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUNodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUNodeClassSpec   `json:"spec"`
	Status GPUNodeClassStatus `json:"status,omitempty"`
}

// GPUNodeClassList is a list of GPUNodeClasses.
//
// +kubebuilder:object:root=true
type GPUNodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUNodeClass `json:"items"`
}
