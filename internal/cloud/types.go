package cloud

import (
	"context"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
)

// CapacityType is how an instance is billed: spot (reclaimable) or on-demand.
type CapacityType string

// Capacity types.
const (
	Spot     CapacityType = "spot"
	OnDemand CapacityType = "on-demand"
)

// InstanceType is one entry of a cloud's catalog.
type InstanceType struct {
	// Name is the cloud's own name for the type, e.g. "1H100.80S.30V".
	Name string
	// NodeLabel is the node.kubernetes.io/instance-type its nodes register
	// with, when that is not Name (a GCP machine type with GPUs attached
	// is one catalog entry per attachment, and its nodes say the machine
	// type).
	NodeLabel string
	// GPUModel is a key of the internal/gpu model table, e.g. "H100-80GB";
	// empty for CPU-only types.
	GPUModel string
	// GPUCount is the number of whole GPUs.
	GPUCount int
	// GPUMemoryGiB is the memory of one GPU.
	GPUMemoryGiB int
	VCPUs        int
	MemoryGiB    int
	// DiskGiB is the default OS disk size; 0 when the disk is sized per order.
	DiskGiB int
	// Arch is the CPU architecture in GOARCH spelling ("amd64", "arm64").
	Arch string
	// Images are the OS images the type accepts, where the cloud says;
	// empty when it does not (any image may be tried).
	Images []string
	// OnDemandPrice and SpotPrice are hourly prices in the cloud's currency;
	// SpotPrice is 0 when the type has no spot offering.
	OnDemandPrice float64
	SpotPrice     float64
	// Currency is the ISO 4217 code of the prices; "" is USD (see
	// PriceCurrency).
	Currency string
}

// PriceCurrency is the ISO 4217 code of the type's prices.
func (t InstanceType) PriceCurrency() string {
	if t.Currency == "" {
		return "USD"
	}
	return t.Currency
}

// Price returns the hourly price of the type for a capacity type.
func (t InstanceType) Price(ct CapacityType) float64 {
	if ct == Spot {
		return t.SpotPrice
	}
	return t.OnDemandPrice
}

// Offering is one instance type in one location under one capacity type,
// and whether it can be ordered now.
type Offering struct {
	InstanceType string
	Location     string
	CapacityType CapacityType
	Available    bool
	// Price is the hourly price of this offering.
	Price float64
}

// Key identifies an offering independent of its availability and price.
func (o Offering) Key() OfferingKey {
	return OfferingKey{InstanceType: o.InstanceType, Location: o.Location, CapacityType: o.CapacityType}
}

// OfferingKey identifies an offering.
type OfferingKey struct {
	InstanceType string
	Location     string
	CapacityType CapacityType
}

// String renders the key as "type/location/capacity".
func (k OfferingKey) String() string {
	return k.InstanceType + "/" + k.Location + "/" + string(k.CapacityType)
}

// InstanceState is the life-cycle state of an instance as the cloud reports it.
type InstanceState string

// Instance states.
const (
	// StatePending covers everything from "ordered" until the machine runs.
	StatePending InstanceState = "pending"
	// StateRunning is a running machine (it may not have joined the cluster yet).
	StateRunning InstanceState = "running"
	// StateDeleting is a machine being torn down.
	StateDeleting InstanceState = "deleting"
	// StateFailed is a machine the cloud gave up on; it must be deleted.
	StateFailed InstanceState = "failed"
	// StateStopped is a machine that stopped for good while still in the
	// account (a spot instance reclaimed, a host lost): it no longer
	// serves, may still bill or hold volumes, and must be deleted and
	// replaced.
	StateStopped InstanceState = "stopped"
)

// Instance is one machine this cluster owns.
type Instance struct {
	// ID is the cloud's own identifier (a UUID, a server name, ...).
	ID string
	// Name is the hostname gpuscaler chose at create time; unique per cluster
	// and the handle by which an outcome-unknown create is looked up.
	Name string
	// ProviderID is the node's spec.providerID, "<cloud>://<name>".
	ProviderID string
	// Aliases are other provider IDs that name the same instance, such as the
	// forms the seed systems wrote ("datacrunch://<id>"), so clusters migrate
	// in place.
	Aliases []string
	// Group is the node group that owns the instance, from the cloud's tags or
	// name convention; empty when the instance is owned by the cluster but by
	// no known group.
	Group string
	// Owner is the front end that launched the instance outside any group
	// (the core's launch API, e.g. "karpenter"); empty for group members.
	Owner        string
	InstanceType string
	Location     string
	CapacityType CapacityType
	State        InstanceState
	CreatedAt    time.Time
	// IP is the instance's primary address, when the cloud reports one.
	IP string
	// Error describes why the cloud failed the instance (State == StateFailed).
	Error string
	// ErrorClass classes that failure as Class does: ErrCapacity (the
	// offering stocked out), ErrQuota, ErrInvalid; nil when the cloud's
	// words say nothing known.
	ErrorClass error
	// Standby marks an instance stopped by Stopper.Stop for a standby pool
	// (StateStopped), as the cloud records it (a tag, a label, a state of
	// its own): it is kept, not replaced, and a restart finds it again.
	Standby bool
	// Install is the install ID of the gpuscaler that ordered the
	// instance, as the cloud recorded it (CreateSpec.Install); empty for
	// one ordered without (by an earlier version, or a seed system).
	Install string
}

// CreateSpec is one order for one instance.
type CreateSpec struct {
	// Name is the instance's hostname; unique within the cluster. The
	// provider ID is derived from it, so it is known before boot.
	Name string
	// Group is the node group the instance is ordered for; empty for an
	// instance launched outside any group, which names its Owner instead.
	Group string
	// Owner is recorded on launched instances (see Instance.Owner).
	Owner string
	// Install, when set, is recorded with the cluster's mark and listed
	// as Instance.Install: it tells two installs that share a cluster
	// name on one account apart. Always set once known; empty orders
	// without.
	Install      string
	InstanceType string
	Location     string
	CapacityType CapacityType
	// Image is the cloud's image name or ID; empty means the cloud's default.
	Image string
	// DiskGiB is the OS disk size; 0 means the cloud's default.
	DiskGiB int
	// ProviderID is what the node registers as spec.providerID, known
	// before the order (see Namer); empty means ProviderID(cloud, Name).
	ProviderID string
	// Labels and Taints are what the node must register with. A real cloud
	// delivers them through UserData; the simulated cloud registers the Node
	// with them directly. Both may be shared between orders: neither the
	// caller nor the cloud changes them.
	Labels map[string]string
	Taints []corev1.Taint
	// UserData is the rendered startup script or cloud-init document.
	UserData string
	// RenderUserData, set instead of UserData for clouds that assign the
	// provider ID at create (IDAssigner), renders the startup script for
	// the provider ID; the cloud calls it once it knows the ID, before
	// the instance boots. Nil when the order has no script.
	RenderUserData func(ctx context.Context, providerID string) (string, error)
	// Options carries cloud-specific settings from the node group's config
	// (for example Verda's contract or SSH key IDs). Keys are documented by
	// each cloud package.
	Options map[string]string
}

// Provider is one cloud account as gpuscaler sees it. Implementations must be
// safe for concurrent use.
type Provider interface {
	// Name is the cloud's name as used in provider IDs and config ("sim", "verda").
	Name() string
	// InstanceTypes returns the catalog.
	InstanceTypes(ctx context.Context) ([]InstanceType, error)
	// Offerings returns what can be ordered now.
	Offerings(ctx context.Context) ([]Offering, error)
	// List returns every instance this cluster owns, in any state.
	List(ctx context.Context) ([]Instance, error)
	// Create orders one instance and returns once the cloud accepted it. The
	// instance may still be pending. Errors carry a class (see errors.go).
	Create(ctx context.Context, spec CreateSpec) (Instance, error)
	// Delete removes an instance. An instance already gone is success.
	Delete(ctx context.Context, inst Instance) error
	// CheckOptions returns one *OptionError per key of a node group's
	// cloudOptions the cloud does not read or value it would refuse, so
	// that a bad setting stops start-up (and validate) instead of failing
	// each order; nil when all are good. A cloud that reads none returns
	// CheckKnownOptions(opts).
	CheckOptions(opts map[string]string) []*OptionError
}

// RequestLimiter is implemented by clouds whose client limits its own
// request rate at the wire (every HTTP request, retries, sign-ins and
// script uploads included). The core then adds no limiter of its own, so a
// cloud has one request budget, not two stacked.
type RequestLimiter interface {
	LimitsRequests() bool
}

// Namer is implemented by clouds whose instances are named, or whose
// nodes register provider IDs, by rules of their own (a seed autoscaler's
// name prefix or provider-ID prefix, kept so its nodes stay recognised).
// Clouds without it get names "<group>-<hex>" and provider IDs
// ProviderID(Name(), name).
type Namer interface {
	// NamePrefix returns what the names of a group's instances start
	// with, before "-<hex>"; options are the group's cloud options.
	NamePrefix(group string, options map[string]string) string
	// ProviderID returns the provider ID the node of the instance named
	// name registers with; List reports the same.
	ProviderID(name string) string
}

// IDAssigner is implemented by clouds whose provider IDs hold an ID the
// cloud assigns when it creates the instance (Scaleway's server UUID), so
// no name-based provider ID can be known before the order: the core hands
// such clouds CreateSpec.RenderUserData instead of UserData, and takes the
// provider ID from the Instance Create returns.
type IDAssigner interface {
	AssignsIDs() bool
}

// ListLagger is implemented by clouds that know how long after accepting
// a create their list may still leave the instance out. A core that
// starts holds its first orders that long, so that the orders of the
// process before it (a restart, a new leader) are counted first; clouds
// without it are given the core's ResolveAfter.
type ListLagger interface {
	ListLag() time.Duration
}

// ProviderIDOf returns the provider ID of the instance named name on p.
func ProviderIDOf(p Provider, name string) string {
	if n, ok := p.(Namer); ok {
		return n.ProviderID(name)
	}
	return ProviderID(p.Name(), name)
}

// ImageChooser is implemented by clouds that choose each order's image per
// instance type (a type may not accept every image).
type ImageChooser interface {
	// Image returns the image an order of instanceType asking for image
	// ("" for the cloud's default) will use, and whether that differs
	// from the image asked for.
	Image(ctx context.Context, instanceType, image string) (chosen string, changed bool, err error)
}

// OptionError is one bad node-group option.
type OptionError struct {
	Key    string
	Detail string
}

func (e *OptionError) Error() string { return e.Key + ": " + e.Detail }

// CheckKnownOptions reports the keys of opts that known lacks, naming the
// ones it has: the common part of CheckOptions.
func CheckKnownOptions(opts map[string]string, known ...string) []*OptionError {
	var errs []*OptionError
	reads := "this cloud reads " + strings.Join(known, ", ")
	if len(known) == 0 {
		reads = "this cloud reads none"
	}
	for k := range opts {
		if !slices.Contains(known, k) {
			errs = append(errs, &OptionError{Key: k, Detail: "unknown option; " + reads})
		}
	}
	slices.SortFunc(errs, func(a, b *OptionError) int { return strings.Compare(a.Key, b.Key) })
	return errs
}

// NewRequestLimiter is a cloud's request budget: rps requests a second,
// with a burst of as many (at least one).
func NewRequestLimiter(rps float64) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(rps), max(1, int(rps)))
}

// ExistingGroup is what a cloud says of an instance group it already runs
// (a GKE node pool's managed instance group, say), for a node group made
// from it rather than from gpuscaler's config.
type ExistingGroup struct {
	// Location is the group's zone; Name its name there.
	Location, Name string
	// InstanceType is a name in the cloud's catalog (InstanceTypes),
	// with the GPUs the group's template gives its instances.
	InstanceType string
	// Labels and Taints are what the group's nodes register with, as its
	// template sets them.
	Labels map[string]string
	Taints []corev1.Taint
	// Size is the group's current target size.
	Size int
	// Description is the group's description at the cloud, where an
	// operator marks the group as handed over to a cluster.
	Description string
}

// Stopper is a cloud whose instances can be stopped, billing less than
// running (their disks only, as a rule), and started again as they were:
// joined once, GPU drivers loaded, images pulled. Standby pools need it.
type Stopper interface {
	// Stop powers a running instance off into the cloud's cheapest state
	// it can be started from; List then shows it StateStopped with
	// Standby set. One already stopped is success.
	Stop(ctx context.Context, inst Instance) error
	// Start powers a stopped instance on; List shows it pending, then
	// running. ErrCapacity: the cloud has no room for it now (a stopped
	// instance may have given its host up).
	Start(ctx context.Context, inst Instance) error
	// StoppedPrice is what a stopped instance of the offering costs per
	// hour, in the catalog's currency.
	StoppedPrice(k OfferingKey) float64
	// RefusedStaysStopped reports whether an instance whose Start the
	// cloud refused for capacity stays stopped, to be started later (a
	// refused power-on); false where the cloud goes on trying the start
	// behind the refusal (a GCE MIG, whose target status is then
	// RUNNING), so that the instance is deleted instead.
	RefusedStaysStopped() bool
}

// Transferer is a cloud whose instances can change name and owner in one
// write: a standby pool's stopped instance handed to a front end that
// names its machines itself (Karpenter's NodeClaims), so that a call the
// front end repeats after a crash finds the machine by its name.
type Transferer interface {
	// Transfer renames a stopped instance of a group to name and records
	// it as launched by owner, outside any group, in one write; a List
	// after it shows the instance under its new name, with Owner set and
	// Group empty. It returns the instance as it now is (a cloud whose
	// provider IDs follow names gives it a new one). Repeating a transfer
	// that took effect is success, so a lost answer may be sent again.
	Transfer(ctx context.Context, inst Instance, name, owner string) (Instance, error)
}

// GroupDescriber is implemented by clouds whose existing instance groups
// can become node groups: DescribeGroup reads one (its template included)
// and adds its instance type to the catalog; a group that is not there is
// ErrNotFound.
type GroupDescriber interface {
	DescribeGroup(ctx context.Context, location, name string) (ExistingGroup, error)
}

// Advisor is implemented by clouds that can tell, online, where a node
// group's configuration disagrees with what the cloud has (a managed
// instance group missing, or its template of another machine type than
// the group's instanceType). Each string is one finding, without the
// group's config path; preflight (validate --online) shows them.
type Advisor interface {
	Advise(ctx context.Context, group, instanceType string, locations []string, options map[string]string) []string
}

// Topology is implemented by clouds whose locations nest, so that a node's
// topology.kubernetes.io labels are not both the location: a GCP zone is
// in its region (us-central1-a in us-central1), and a regional location
// has no zone until an instance is placed ("" then).
type Topology interface {
	Topology(location string) (region, zone string)
}
