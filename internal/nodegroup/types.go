// Package nodegroup is the node-group core: it keeps each group's target
// size and instances in memory, creates and deletes instances in the
// background against a cloud.Provider, falls back across offerings when one
// stocks out, builds scale-from-zero node templates, enforces cost limits and
// cleans up leaked instances. Every front end (the cluster-autoscaler gRPC
// provider, the NodeProvisioner controller, Karpenter) drives groups through
// a Manager; no front end holds scaling state of its own.
package nodegroup

import (
	"context"
	"errors"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
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
	// ErrNoStandbyForecast is a standby size asked of a group whose pool
	// no forecast sizes.
	ErrNoStandbyForecast = errors.New("no standby forecast")
	// ErrBackingOff is a scale-up refused while the group backs off after
	// orders that failed (quota, invalid configuration, nodes that never
	// register); Backoff tells why and until when.
	ErrBackingOff = errors.New("node group backing off")
	// ErrNoStandby is a launch that may only take from a standby pool
	// (LaunchRequest.Standby) and found nothing there to take: the
	// caller orders instead.
	ErrNoStandby = errors.New("no standby instance to take")
	// ErrNotLaunched is a provider ID the launch API does not know.
	ErrNotLaunched = errors.New("instance not launched by gpuscaler")
	// ErrUnavailable is a write to a core that does not take writes: not
	// started yet, stopped, or handing over to the next configuration's
	// core. The write did nothing; the caller may send it again.
	ErrUnavailable = errors.New("node-group core unavailable")
)

// Bootstrapper renders the user data an instance boots with.
type Bootstrapper interface {
	UserData(ctx context.Context, spec cloud.CreateSpec) (string, error)
}

// Releaser is implemented by Bootstrappers that hold something per
// instance (a minted join token, a script on the script server); Release is
// called when an order for the instance did not go through.
type Releaser interface {
	Release(ctx context.Context, name string)
}

// Reissuer is implemented by Bootstrappers whose scripts live in this
// process (the script server): after a restart, the core asks it to put
// back the script of each instance that was ordered before and has no
// Node yet, with the time it was ordered (the script's deadline runs from
// there).
type Reissuer interface {
	Reissue(ctx context.Context, spec cloud.CreateSpec, ordered time.Time) error
}

// Nodes is what the core knows of the cluster's Node objects.
type Nodes interface {
	// Registered reports whether a Node carries one of the provider IDs;
	// synced is false while the answer cannot be trusted yet (an empty
	// cache just after start).
	Registered(providerIDs ...string) (registered, synced bool)
	// Delete deletes the Node that carries one of the provider IDs; no such
	// Node is success.
	Delete(ctx context.Context, providerIDs ...string) error
	// Untaint removes a taint (by key) from the Node that carries one of
	// the provider IDs; no such Node, or no such taint, is success.
	Untaint(ctx context.Context, key string, providerIDs ...string) error
	// Startup tells how far the Node that carries one of the provider IDs
	// has come; ok is false when there is no such Node.
	Startup(providerIDs ...string) (s Startup, ok bool)
	// Workloads returns the pods that run work on the Node that carries
	// one of the provider IDs: every pod bound to it but a DaemonSet's, a
	// static (mirror) pod, or one that finished. No such Node is none.
	Workloads(ctx context.Context, providerIDs ...string) ([]string, error)
}

// Lifter is implemented by Nodes that lift a taint the moment a Node
// shows it, rather than at the next sync. A standby instance started for
// demand registers its Node again with TaintStandby; until it is lifted,
// the pod it was started for cannot land (a sync is 30 s by default, the
// start a few), and a front end's scheduling simulation sees a Ready node
// the pod does not fit.
type Lifter interface {
	// LiftOnSight lifts the taint of key from the Node that carries one
	// of the provider IDs as soon as it shows it, now if it does; it
	// returns at once (the write is made in the background, the sync's
	// Untaint lifts what it missed).
	LiftOnSight(key string, providerIDs ...string)
}

// PrePuller is implemented by Nodes that can pull images onto a Node:
// before its instance joins a standby pool (config.Standby.PrePullImages),
// or as it joins its group (config.NodeGroup.PrePullImages).
type PrePuller interface {
	// PrePull starts pulling images onto the Node that carries one of the
	// provider IDs; one under way already is success.
	PrePull(ctx context.Context, images []string, providerIDs ...string) error
	// PrePulled reports how far that pull has come, from memory.
	PrePulled(images []string, providerIDs ...string) Pull
	// EndPrePull ends it (a stop, the instance serves, the pull is done);
	// none is success.
	EndPrePull(ctx context.Context, providerIDs ...string) error
}

// Pull is how far the pull of a standby instance's images has come.
type Pull struct {
	// Started: the pull was asked for; Done: every image is on the Node.
	Started, Done bool
	// Failed names an image the Node cannot pull and why (a wrong name, a
	// registry that refuses it), "" while none failed.
	Failed string
}

// Startup is how far a Node has come since it registered, with when it got
// there; a zero time is a step not reached, or reached at a time nobody
// saw (before the process started watching).
type Startup struct {
	// Registered is when the Node object was created.
	Registered time.Time
	// Ready is when its Ready condition last turned True; zero while it is
	// not Ready.
	Ready time.Time
	// GPUs is when it was first seen with GPUs or MIG devices allocatable
	// (the device plugin's start-up); zero when they were there before the
	// process watched.
	GPUs time.Time
	// GPUsSeen: the Node has shown GPUs or MIG devices allocatable at some
	// point (they may be gone for now, while the device plugin restarts).
	GPUsSeen bool
	// GPUsNow: the Node shows GPUs or MIG devices allocatable now.
	GPUsNow bool
	// Standby: the Node carries TaintStandby (registered by an order of a
	// standby pool).
	Standby bool
	// Claimed: the front end that launched the machine registered the Node
	// as its own, its own labels and taints synced onto it (Karpenter's
	// karpenter.sh/registered label). A launched machine handed over from
	// a standby pool keeps TaintStandby until then: its kubelet registers
	// it with the pool's taints, not its owner's.
	Claimed bool
	// Leaving: a front end marked the Node for deletion (the taint
	// cluster-autoscaler, Karpenter or the NodeProvisioner puts on a node
	// before deleting it). Its instance, if it vanishes, is not replaced.
	Leaving bool
}

// Event is something an operator should see beside the log line and the
// metric: the commands record it as a Kubernetes Event.
type Event struct {
	// Type is "Normal" or "Warning".
	Type       string
	Reason     string
	Message    string
	Group      string
	Instance   string
	ProviderID string
}

// EventSink receives the core's Events; it must not block.
type EventSink interface {
	Event(Event)
}

// Backoff is why and until when a group gets no new orders.
type Backoff struct {
	Reason  string
	Message string
	Until   time.Time
}

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
	ProviderID string
	// Aliases are other provider IDs of the same instance (the forms the
	// seed systems wrote).
	Aliases      []string
	Name         string
	State        State
	InstanceType string
	Location     string
	CapacityType string
	CreatedAt    time.Time
	// StartedAt is when the instance was last started from its group's
	// standby pool; zero for one that booted from its order.
	StartedAt time.Time
	// ErrorCode, ErrorMessage and ErrorClass are set when the instance could
	// not be created (for example every offering stocked out).
	ErrorCode    string
	ErrorMessage string
	ErrorClass   ErrorClass
	// Owner is the launch API's caller; empty for group members.
	Owner string
	// Price is the hourly price of the instance's offering, when known.
	Price float64
	// Unresolved: the create is in flight or its answer was lost, and no
	// list has shown the instance yet; ProviderID may then not be the one
	// its Node will carry (clouds that assign IDs at create).
	Unresolved bool
}

// Failed reports whether the instance is an order that failed: the cloud
// refused it or failed it after taking it. (An error on an instance being
// deleted is its delete's, not a failed order.)
func (in Instance) Failed() bool { return in.State == StateCreating && in.ErrorCode != "" }
