// Package nodegroup is the node-group core: it keeps each group's target
// size and instances in memory, creates and deletes instances in the
// background against a cloud.Provider, falls back across offerings when one
// stocks out, builds scale-from-zero node templates, enforces cost limits and
// cleans up leaked instances. Every front end (the cluster-autoscaler gRPC
// provider, the NodeProvisioner controller, Karpenter) drives groups through
// a Manager; no front end holds scaling state of its own.
package nodegroup

import (
	"errors"
	"time"
)

// Errors returned by Manager. Test them with errors.Is.
var (
	// ErrGroupNotFound is a group name not in the configuration.
	ErrGroupNotFound = errors.New("node group not found")
	// ErrNotInGroup is an instance that does not belong to the group named.
	ErrNotInGroup = errors.New("instance does not belong to node group")
	// ErrSizeLimit is a resize past the group's minimum or maximum size.
	ErrSizeLimit = errors.New("size limit")
	// ErrCostLimit is a scale-up refused by a group or global hourly cost cap.
	ErrCostLimit = errors.New("hourly cost limit")
	// ErrInvalidDelta is a resize with a delta of the wrong sign or zero.
	ErrInvalidDelta = errors.New("invalid delta")
)

// Info describes one group as configured.
type Info struct {
	Name         string
	Cloud        string
	InstanceType string
	MinSize      int
	MaxSize      int
	// Debug is a one-line human description for cluster-autoscaler's status.
	Debug string
}

// State is an instance's state as autoscalers see it.
type State int

// Instance states, numbered as cluster-autoscaler numbers them.
const (
	StateRunning  State = 1
	StateCreating State = 2
	StateDeleting State = 3
)

// ErrorClass classifies why an instance failed to come up.
type ErrorClass int

// Error classes, numbered as cluster-autoscaler numbers them.
const (
	ErrorClassNone           ErrorClass = 0
	ErrorClassOutOfResources ErrorClass = 1
	ErrorClassOther          ErrorClass = 99
)

// Instance is one member of a group: a cloud instance, or a slot of the
// target size whose create is in flight or failed.
type Instance struct {
	// ProviderID equals the Node's spec.providerID once it registers. For a
	// slot whose create failed before the cloud knew of it, it is a
	// placeholder "<cloud>://<name>" that no Node will ever carry.
	ProviderID   string
	Name         string
	State        State
	InstanceType string
	Location     string
	CapacityType string
	CreatedAt    time.Time
	// ErrorCode, ErrorMessage and ErrorClass are set when the instance could
	// not be created (for example every offering stocked out).
	ErrorCode    string
	ErrorMessage string
	ErrorClass   ErrorClass
}
