// Package gcp is gpuscaler's backend for GCP managed instance groups, on
// the official client (google.golang.org/api/compute/v1, REST): each node group
// orders into one managed instance group per zone, by name, so that every
// instance's provider ID (gce://<project>/<zone>/<name>) is known before it
// boots and a lost answer is resolved by name, never by a second order.
package gcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Name is GCP's name in config; provider IDs use the "gce" scheme, as the
// kubelet and cluster-autoscaler's GCE provider write them.
const Name = "gcp"

// MIG is one managed instance group: zonal, or regional when Location is
// a region (us-central1), where GCP picks each instance's zone.
type MIG struct {
	Location, Name string
}

// Regional reports whether the MIG is a regional one.
func (m MIG) Regional() bool { return IsRegion(m.Location) }

// region is the form of a GCP region; zones add "-<letter>".
var region = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)

// IsRegion reports whether a location names a region rather than a zone.
func IsRegion(location string) bool { return region.MatchString(location) }

// Topology implements cloud.Topology: a zone's region is its name without
// the "-<letter>"; a region (a regional MIG's location) has no zone until
// GCP places the instance.
func (c *Cloud) Topology(location string) (string, string) {
	if IsRegion(location) {
		return location, ""
	}
	return location[:strings.LastIndex(location, "-")], location
}

// Group is a node group's managed instance groups: one per zone (the
// group's locations), all of one instance type.
type Group struct {
	// InstanceType is a name of the catalog: a machine type of the table,
	// or one DescribeGroup learned (a machine type with GPUs attached).
	InstanceType string
	MIGs         []MIG
	// Template, when set, is the instance template a MIG of the group is
	// created from when it does not exist yet (OptionInstanceTemplate).
	Template string
}

// NewGroup returns a node group's MIGs: the MIG named by its
// instanceGroup option (default the group's name) in each of its zones.
func NewGroup(name, instanceType string, zones []string, options map[string]string) Group {
	mig := options[OptionInstanceGroup]
	if mig == "" {
		mig = name
	}
	g := Group{InstanceType: instanceType, Template: options[OptionInstanceTemplate]}
	for _, z := range zones {
		g.MIGs = append(g.MIGs, MIG{Location: z, Name: mig})
	}
	return g
}

// Options configure the GCP backend.
type Options struct {
	Project string
	// Groups are the node groups' managed instance groups, by group name.
	Groups map[string]Group
	// PollInterval spaces the polls of an operation; default 2 s.
	PollInterval time.Duration
	// CreateWatch is how long a create watches its new instance for a
	// stock-out or quota error (a MIG reports them only on the instance,
	// in lastAttempt); default 60 s.
	CreateWatch time.Duration
	// OperationTimeout bounds the wait for one operation; default 10m.
	OperationTimeout time.Duration
	// ClusterName marks the MIGs gpuscaler creates (their description),
	// so that it deletes those and no other.
	ClusterName string
	// SweepInterval spaces the checks for MIGs gpuscaler created that no
	// group uses any more; default 10 min.
	SweepInterval time.Duration
	Logger        *slog.Logger
}

// Cloud is a GCP project's managed instance groups as a cloud.Provider.
type Cloud struct {
	api  *compute.Service
	opts Options
	log  *slog.Logger

	// locks serialise the operations on each MIG (GCP answers 409 while
	// another runs); a channel, so that a wait for one heeds its context.
	mu    sync.Mutex
	locks map[MIG]chan struct{}
	// ips are the instances' internal addresses, by zone/name, read once.
	ips map[string]string
	// groups are the node groups' MIGs (opts.Groups until SetGroups);
	// learned are the instance types read from MIGs' templates
	// (DescribeGroup), by name. Both are replaced, never changed in place.
	groups  map[string]Group
	learned map[string]cloud.InstanceType
	// swept is when the MIGs gpuscaler created were last checked for
	// ones no group uses (retire).
	swept time.Time
}

var (
	_ cloud.Provider       = (*Cloud)(nil)
	_ cloud.IDAssigner     = (*Cloud)(nil)
	_ cloud.GroupDescriber = (*Cloud)(nil)
)

// Clients are the API clients the backend uses: the Compute API's
// service (managed instance groups zonal and regional, their operations,
// instances, instance templates).
type Clients struct {
	Compute *compute.Service
}

// ClientOptions say how to reach the API: Application Default Credentials
// (workload identity in GKE, gcloud's login elsewhere) unless a
// credentials file is named; Endpoint points the client elsewhere (a
// fake, with no authentication).
type ClientOptions struct {
	CredentialsFile string
	Endpoint        string
	// NoAuth sends no credentials (a fake, or a client that is built to
	// be checked and never called).
	NoAuth     bool
	HTTPClient *http.Client
}

// NewClients returns the Compute API client. The API's path
// (/compute/v1/) is added to an Endpoint that has none.
func NewClients(ctx context.Context, opts ClientOptions) (Clients, error) {
	var o []option.ClientOption
	if opts.Endpoint != "" {
		o = append(o, option.WithEndpoint(apiBase(opts.Endpoint)))
	}
	switch {
	case opts.NoAuth:
		o = append(o, option.WithoutAuthentication())
	case opts.CredentialsFile != "":
		o = append(o, option.WithAuthCredentialsFile(option.ServiceAccount, opts.CredentialsFile))
	}
	if opts.HTTPClient != nil {
		o = append(o, option.WithHTTPClient(opts.HTTPClient))
	}
	svc, err := compute.NewService(ctx, o...)
	if err != nil {
		return Clients{}, fmt.Errorf("gcp: %w", err)
	}
	return Clients{Compute: svc}, nil
}

// apiBase is the Compute API's base URL at an endpoint: /compute/v1/ is
// added to the endpoint's path, as the Cloud client library did, unless
// the path already ends so.
func apiBase(endpoint string) string {
	base := strings.TrimSuffix(endpoint, "/")
	if strings.HasSuffix(base, "/compute/v1") {
		return base + "/"
	}
	return base + "/compute/v1/"
}

// New returns the backend over its clients.
func New(clients Clients, opts Options) *Cloud {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 2 * time.Second
	}
	if opts.CreateWatch == 0 {
		opts.CreateWatch = time.Minute
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 10 * time.Minute
	}
	if opts.OperationTimeout == 0 {
		opts.OperationTimeout = 10 * time.Minute
	}
	return &Cloud{api: clients.Compute,
		opts: opts, log: opts.Logger, locks: map[MIG]chan struct{}{}, ips: map[string]string{}, groups: opts.Groups, learned: map[string]cloud.InstanceType{}}
}

// SetGroups replaces the node groups' MIGs (a configuration reload, or
// node groups made from existing MIGs). Call it while no core runs on the
// cloud: a list under the old groups would miss the new ones' instances.
func (c *Cloud) SetGroups(groups map[string]Group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.groups = groups
}

// groupsNow returns the groups in force; the map is never changed in place.
func (c *Cloud) groupsNow() map[string]Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups
}

// AssignsIDs implements cloud.IDAssigner: a provider ID holds the zone,
// known only when the order is sent, so the startup script is rendered
// then.
func (c *Cloud) AssignsIDs() bool { return true }

// Name implements cloud.Provider.
func (c *Cloud) Name() string { return Name }

// ProviderID is an instance's provider ID.
func (c *Cloud) ProviderID(zone, name string) string {
	return "gce://" + c.opts.Project + "/" + zone + "/" + name
}

func (c *Cloud) lock(m MIG) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.locks[m]
	if !ok {
		l = make(chan struct{}, 1)
		c.locks[m] = l
	}
	return l
}

// mig is the group's MIG in a zone.
func (c *Cloud) mig(group, zone string) (MIG, bool) {
	for _, m := range c.groupsNow()[group].MIGs {
		if m.Location == zone {
			return m, true
		}
	}
	return MIG{}, false
}

// OptionInstanceGroup names a group's managed instance groups: the MIG of
// that name in each of the group's zones; default the group's name.
const OptionInstanceGroup = "instanceGroup"

// OptionInstanceTemplate names the instance template a group's MIGs are
// created from when they do not exist yet: a global template's name, or a
// link (projects/<p>/global/instanceTemplates/<t>,
// projects/<p>/regions/<r>/instanceTemplates/<t>). gpuscaler deletes the
// MIGs it created once the group leaves its config and they are empty.
const OptionInstanceTemplate = "instanceTemplate"

// CheckOptions implements cloud.Provider.
func (c *Cloud) CheckOptions(opts map[string]string) []*cloud.OptionError {
	errs := cloud.CheckKnownOptions(opts, OptionInstanceGroup, OptionInstanceTemplate)
	if t, ok := opts[OptionInstanceTemplate]; ok && !templateName.MatchString(t) && !templateLink.MatchString(t) {
		errs = append(errs, &cloud.OptionError{Key: OptionInstanceTemplate, Detail: "a template name, or projects/<p>/global/instanceTemplates/<t> or projects/<p>/regions/<r>/instanceTemplates/<t>"})
	}
	return errs
}

// InstanceTypes returns the machine types of the documented table, and
// those DescribeGroup read from MIGs' templates (a general-purpose machine
// type with GPUs attached).
func (c *Cloud) InstanceTypes(context.Context) ([]cloud.InstanceType, error) {
	out := MachineTypes()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.learned {
		out = append(out, t)
	}
	return out, nil
}

// Offerings returns each group's machine types in each zone it has a MIG
// in, on demand; a stock-out shows when an order meets it.
func (c *Cloud) Offerings(context.Context) ([]cloud.Offering, error) {
	types, _ := c.InstanceTypes(context.Background())
	seen := map[cloud.OfferingKey]bool{}
	var out []cloud.Offering
	for _, t := range types {
		for _, g := range c.groupsNow() {
			for _, m := range g.MIGs {
				k := cloud.OfferingKey{InstanceType: t.Name, Location: m.Location, CapacityType: cloud.OnDemand}
				if !seen[k] {
					seen[k] = true
					out = append(out, cloud.Offering{InstanceType: t.Name, Location: m.Location, CapacityType: cloud.OnDemand, Available: true, Price: t.OnDemandPrice})
				}
			}
		}
	}
	return out, nil
}

// List returns the members of every configured MIG.
func (c *Cloud) List(ctx context.Context) ([]cloud.Instance, error) {
	var out []cloud.Instance
	vms := map[string]bool{} // zone/name of the VMs that run (whatever the MIG still does)
	groups := c.groupsNow()
	for group, g := range groups {
		for _, m := range g.MIGs {
			insts, err := c.members(ctx, m)
			if errors.Is(err, cloud.ErrNotFound) && g.Template != "" {
				continue // made from its template on the first order
			}
			if err != nil {
				return nil, err
			}
			for _, mi := range insts {
				out = append(out, c.instance(group, g, m, mi))
				if mi.InstanceStatus == "RUNNING" {
					vms[memberZone(m, mi)+"/"+mi.Name] = true
				}
			}
		}
	}
	c.addresses(ctx, out, vms)
	c.retire(ctx, groups)
	return out, nil
}

// addresses fills in the internal address of instances whose VM runs
// (vms; the script server serves a node's script to its address only),
// reading a zone's instances only when one of them has none known yet: a
// steady state costs nothing.
func (c *Cloud) addresses(ctx context.Context, insts []cloud.Instance, vms map[string]bool) {
	if c.api == nil {
		return
	}
	c.mu.Lock()
	want := map[string]bool{}
	live := map[string]bool{}
	for _, in := range insts {
		if zoneOf(in) == "" {
			continue // a regional MIG's instance whose zone is not chosen yet
		}
		key := zoneOf(in) + "/" + in.Name
		live[key] = true
		if vms[key] && c.ips[key] == "" {
			want[zoneOf(in)] = true
		}
	}
	for key := range c.ips {
		if !live[key] {
			delete(c.ips, key)
		}
	}
	c.mu.Unlock()
	for zone := range want {
		err := c.read(ctx, "addresses", func() error {
			return c.api.Instances.List(c.opts.Project, zone).Pages(ctx, func(page *compute.InstanceList) error {
				if page == nil {
					return errNull
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, vm := range page.Items {
					if vm != nil && len(vm.NetworkInterfaces) > 0 && vm.NetworkInterfaces[0] != nil && vm.NetworkInterfaces[0].NetworkIP != "" {
						c.ips[zone+"/"+vm.Name] = vm.NetworkInterfaces[0].NetworkIP
					}
				}
				return nil
			})
		})
		if err != nil {
			c.log.Warn("gcp: instance addresses unavailable (nodes cannot fetch their scripts until they are known); the next list retries",
				"zone", zone, "error", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range insts {
		insts[i].IP = c.ips[zoneOf(insts[i])+"/"+insts[i].Name]
	}
}

// members lists a MIG's managed instances, every page.
func (c *Cloud) members(ctx context.Context, m MIG) ([]*compute.ManagedInstance, error) {
	var out []*compute.ManagedInstance
	err := c.read(ctx, "list", func() error {
		out = out[:0] // every page again
		if m.Regional() {
			return c.api.RegionInstanceGroupManagers.ListManagedInstances(c.opts.Project, m.Location, m.Name).Pages(ctx,
				func(page *compute.RegionInstanceGroupManagersListInstancesResponse) error {
					if page == nil {
						return errNull
					}
					out = append(out, page.ManagedInstances...)
					return nil
				})
		}
		return c.api.InstanceGroupManagers.ListManagedInstances(c.opts.Project, m.Location, m.Name).Pages(ctx,
			func(page *compute.InstanceGroupManagersListManagedInstancesResponse) error {
				if page == nil {
					return errNull
				}
				out = append(out, page.ManagedInstances...)
				return nil
			})
	})
	if err != nil {
		return nil, err
	}
	for _, mi := range out {
		if mi != nil && mi.Name == "" && mi.Instance != "" {
			// Older answers (and cluster-autoscaler's recorded ones) carry
			// only the instance's URL, which ends in its name.
			mi.Name = lastSegment(mi.Instance)
		}
		if mi == nil || mi.Name == "" {
			// A member with neither is garbled, and a member left out of
			// the list would look gone.
			return nil, cloud.Errorf(cloud.ErrTransient, "list", "%s/%s: a managed instance without a name or URL in the answer", m.Location, m.Name)
		}
	}
	return out, nil
}

// lastAttempt reads every error of a managed instance's last attempt, as
// cluster-autoscaler's GCE provider does, and returns the most telling:
// out of capacity before quota before any other code; the message joins
// every error's. A code no class knows is reported as it is (class
// errOther): a VM that never started with such an error is a failed order.
func lastAttempt(mi *compute.ManagedInstance) (code, message string, class error) {
	a := mi.LastAttempt
	if a == nil || a.Errors == nil {
		return "", "", nil
	}
	errs := make([]codeMessage, 0, len(a.Errors.Errors))
	for _, e := range a.Errors.Errors {
		if e != nil {
			errs = append(errs, codeMessage{e.Code, e.Message})
		}
	}
	return mostTelling(errs)
}

// codeMessage is one error of a GCP answer: its code and its message.
type codeMessage struct{ code, message string }

// capacityOrQuota reports whether a class (from lastAttempt, mostTelling)
// is a stock-out or a quota.
func capacityOrQuota(class error) bool {
	return errors.Is(class, cloud.ErrCapacity) || errors.Is(class, cloud.ErrQuota)
}

// mostTelling picks, of an answer's errors, the code that says most (a
// stock-out over quota over any other; GCP lists them in no set order) and
// joins every message.
func mostTelling(errs []codeMessage) (code, message string, class error) {
	rank := func(c error) int {
		switch {
		case errors.Is(c, cloud.ErrCapacity):
			return 3
		case errors.Is(c, cloud.ErrQuota):
			return 2
		case errors.Is(c, errOther):
			return 1
		}
		return 0
	}
	var msgs []string
	for _, e := range errs {
		if e.code == "" {
			continue
		}
		if e.message != "" {
			msgs = append(msgs, e.message)
		}
		if c := attemptClass(e.code); rank(c) > rank(class) {
			code, class = e.code, c
		}
	}
	return code, strings.Join(msgs, "; "), class
}

// errOther classes a lastAttempt code that is neither a stock-out nor
// quota (IP_SPACE_EXHAUSTED, PERMISSIONS_ERROR, a reservation's
// CONDITION_NOT_MET, a code unknown today): cluster-autoscaler's
// OtherErrorClass.
var errOther = cloud.ErrInvalid

// attemptClass classes a lastAttempt code as the GCE cluster-autoscaler
// provider does: the resource pools exhausted and INSUFFICIENT_CAPACITY
// are a stock-out, any quota is quota, anything else another error.
func attemptClass(code string) error {
	switch {
	case code == "":
		return nil
	case strings.Contains(code, "RESOURCE_POOL_EXHAUSTED"), code == "INSUFFICIENT_CAPACITY":
		return cloud.ErrCapacity
	case strings.Contains(code, "QUOTA"):
		return cloud.ErrQuota
	}
	return errOther
}

// notStartedYet reports whether a managed instance's VM has not run yet
// (cluster-autoscaler's isInstanceStatusNotRunningYet): only then is an
// unclassed lastAttempt error a failed order.
func notStartedYet(mi *compute.ManagedInstance) bool {
	switch mi.InstanceStatus {
	case "", "PROVISIONING", "STAGING":
		return true
	}
	return false
}

func (c *Cloud) instance(group string, g Group, m MIG, mi *compute.ManagedInstance) cloud.Instance {
	in := cloud.Instance{
		Name: mi.Name, ProviderID: c.ProviderID(memberZone(m, mi), mi.Name),
		Group: group, Location: m.Location, CapacityType: cloud.OnDemand, InstanceType: g.InstanceType,
	}
	if m.Regional() && memberZone(m, mi) == "" {
		in.ProviderID = "" // its zone is not chosen yet
	}
	if mi.Id != 0 {
		in.ID = strconv.FormatUint(mi.Id, 10) // none until the VM exists
	}
	if ps := mi.PreservedStateFromConfig; ps != nil {
		in.Install = ps.Metadata[metadataInstall]
	}
	// As cluster-autoscaler's getInstanceState: only the create actions
	// make a member pending and the delete actions deleting; any other
	// action (VERIFYING, REFRESHING, RESTARTING, ...) runs on a VM whose
	// own status says whether it serves.
	switch mi.CurrentAction {
	case "CREATING", "CREATING_WITHOUT_RETRIES", "RECREATING":
		in.State = cloud.StatePending
		if code, msg, class := lastAttempt(mi); capacityOrQuota(class) || errors.Is(class, errOther) && notStartedYet(mi) {
			// The MIG keeps retrying for ever; the core reports the order
			// failed, deletes the member and orders elsewhere.
			in.State, in.Error, in.ErrorClass = cloud.StateFailed, code+": "+msg, class
		}
	case "DELETING", "ABANDONING":
		in.State = cloud.StateDeleting
	default:
		switch mi.InstanceStatus {
		case "RUNNING":
			in.State = cloud.StateRunning
		case "STOPPED", "TERMINATED", "SUSPENDED":
			in.State, in.Error = cloud.StateStopped, "instance "+mi.InstanceStatus
			if mi.CurrentAction == "STARTING" || mi.CurrentAction == "RESUMING" {
				in.State, in.Error = cloud.StatePending, "" // the MIG is starting it again
			}
		default:
			in.State = cloud.StatePending
		}
	}
	// A member the group keeps stopped (stopInstances) is in a standby
	// pool: the MIG's own record, which a restart reads again.
	if mi.TargetStatus == "STOPPED" || mi.TargetStatus == "SUSPENDED" {
		if in.State != cloud.StateDeleting {
			in.State, in.Error = cloud.StateStopped, ""
		}
		in.Standby = true
	}
	return in
}

// metadataInstall is the per-instance metadata key that records the
// install ID of the gpuscaler that ordered an instance
// (cloud.CreateSpec.Install); listManagedInstances answers it in the
// member's preservedStateFromConfig.
const metadataInstall = "gpuscaler-install"

// Create adds one named instance to the group's MIG in the order's zone
// (createInstances, which raises the target size by one) and waits for the
// operation. A MIG reports a stock-out or quota only on the instance, in
// lastAttempt: the create watches the new instance for CreateWatch, and on
// such an error takes the instance out again and says so, so the core
// orders in the next zone. A lost answer is looked up by name first.
func (c *Cloud) Create(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error) {
	if spec.CapacityType == cloud.Spot {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "spot MIGs are not supported yet")
	}
	m, ok := c.mig(spec.Group, spec.Location)
	if !ok {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "group %q has no managed instance group in %s", spec.Group, spec.Location)
	}
	config := &compute.PerInstanceConfig{Name: spec.Name}
	if spec.RenderUserData != nil && m.Regional() {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "group %q: a regional MIG picks each instance's zone, so its provider ID is not known before the order: nodes join with the template's own startup script", spec.Group)
	}
	if spec.RenderUserData != nil {
		// The node's own script (with delivery: server, a stub holding a
		// one-time token) as the instance's startup-script metadata.
		ud, err := spec.RenderUserData(ctx, c.ProviderID(m.Location, spec.Name))
		if err != nil {
			return cloud.Instance{}, cloud.NewError(cloud.ErrInvalid, "create", err)
		}
		config.PreservedState = &compute.PreservedState{Metadata: map[string]string{"startup-script": ud}}
	}
	if spec.Install != "" {
		if config.PreservedState == nil {
			config.PreservedState = &compute.PreservedState{Metadata: map[string]string{}}
		}
		config.PreservedState.Metadata[metadataInstall] = spec.Install
	}
	order := func() error {
		return c.mutate(ctx, m, "create", func(requestID string) (*compute.Operation, error) {
			if m.Regional() {
				return c.api.RegionInstanceGroupManagers.CreateInstances(c.opts.Project, m.Location, m.Name,
					&compute.RegionInstanceGroupManagersCreateInstancesRequest{Instances: []*compute.PerInstanceConfig{config}}).
					RequestId(requestID).Context(ctx).Do()
			}
			return c.api.InstanceGroupManagers.CreateInstances(c.opts.Project, m.Location, m.Name,
				&compute.InstanceGroupManagersCreateInstancesRequest{Instances: []*compute.PerInstanceConfig{config}}).
				RequestId(requestID).Context(ctx).Do()
		})
	}
	err := order()
	if tmpl := c.groupsNow()[spec.Group].Template; errors.Is(err, cloud.ErrNotFound) && tmpl != "" && !m.Regional() {
		// The MIG does not exist yet: make it from the group's template.
		if ierr := c.insert(ctx, spec.Group, m, tmpl); ierr != nil {
			return cloud.Instance{}, ierr
		}
		err = order()
	}
	if err != nil {
		if !errors.Is(err, cloud.ErrOutcomeUnknown) && !alreadyExists(err) {
			return cloud.Instance{}, err
		}
		// The order may have landed: is the instance there?
		if mi, ferr := c.find(ctx, m, spec.Name); ferr != nil || mi == nil {
			return cloud.Instance{}, err
		}
	}
	mi, err := c.watch(ctx, m, spec.Name)
	if err != nil {
		return cloud.Instance{}, err
	}
	in := c.instance(spec.Group, c.groupsNow()[spec.Group], m, mi)
	in.State = cloud.StatePending
	return in, nil
}

// watch follows a new instance until it is made, a stock-out or quota
// error shows (the instance is then taken out), or CreateWatch passes.
func (c *Cloud) watch(ctx context.Context, m MIG, name string) (*compute.ManagedInstance, error) {
	deadline := time.Now().Add(c.opts.CreateWatch)
	for {
		mi, err := c.find(ctx, m, name)
		switch {
		case err != nil:
			return nil, cloud.NewError(cloud.ErrOutcomeUnknown, "create", err)
		case mi == nil:
			return nil, cloud.Errorf(cloud.ErrOutcomeUnknown, "create", "instance %s is not in %s/%s after its create", name, m.Location, m.Name)
		}
		code, msg, class := lastAttempt(mi)
		if creating(mi) && (capacityOrQuota(class) || errors.Is(class, errOther) && notStartedYet(mi)) {
			if derr := c.remove(ctx, m, mi); derr != nil {
				return nil, cloud.NewError(cloud.ErrOutcomeUnknown, "create", fmt.Errorf("%s: %s; and the instance could not be taken out: %w", code, msg, derr))
			}
			c.awaitGone(ctx, m, name)
			return nil, cloud.Errorf(class, "create", "%s: %s", code, msg)
		}
		if mi.CurrentAction == "NONE" || time.Now().After(deadline) {
			return mi, nil
		}
		select {
		case <-ctx.Done():
			return mi, nil
		case <-time.After(c.opts.PollInterval):
		}
	}
}

// awaitGone waits, until ctx ends, for a member taken out to leave its
// MIG. The MIG retries a member's creation on its own, so a VM may have
// been made between the list that showed the failure and the delete, and
// it bills until its deletion ends: the caller, told of the failure, tries
// the next offering at once, and a cost cap must not count one VM where
// two run. A failed read ends the wait early: the next list shows the
// member as deleting, and the core counts it until it is gone.
func (c *Cloud) awaitGone(ctx context.Context, m MIG, name string) {
	for {
		mi, err := c.find(ctx, m, name)
		if err != nil || mi == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.opts.PollInterval):
		}
	}
}

// find returns a MIG's member by name; nil when it has none.
func (c *Cloud) find(ctx context.Context, m MIG, name string) (*compute.ManagedInstance, error) {
	insts, err := c.members(ctx, m)
	if err != nil {
		return nil, err
	}
	for _, mi := range insts {
		if mi.Name == name {
			return mi, nil
		}
	}
	return nil, nil
}

// Delete takes an instance out of its MIG (deleteInstances, which lowers
// the target size by one) and waits for the operation; an instance already
// gone is success.
func (c *Cloud) Delete(ctx context.Context, inst cloud.Instance) error {
	m, ok := c.mig(inst.Group, inst.Location)
	if !ok {
		return cloud.Errorf(cloud.ErrInvalid, "delete", "group %q has no managed instance group in %s", inst.Group, inst.Location)
	}
	zone := m.Location
	if m.Regional() {
		// From its provider ID; without one, the member says.
		if zone = zoneOf(inst); zone == "" {
			mi, err := c.find(ctx, m, inst.Name)
			if err != nil {
				return err
			}
			if mi == nil {
				return nil // not a member: gone
			}
			if zone = memberZone(m, mi); zone == "" {
				return cloud.Errorf(cloud.ErrTransient, "delete", "instance %s of regional group %s has no zone yet", inst.Name, m.Name)
			}
		}
	}
	return c.removeIn(ctx, m, zone, inst.Name)
}

// zoneOf is an instance's zone, from its provider ID
// (gce://<project>/<zone>/<name>); "" when it has none yet.
func zoneOf(in cloud.Instance) string {
	parts := strings.Split(in.ProviderID, "/")
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}

// memberZone is a member's zone: its MIG's, or for a regional MIG the one
// in its instance link ("" while GCP has not chosen one).
func memberZone(m MIG, mi *compute.ManagedInstance) string {
	if !m.Regional() {
		return m.Location
	}
	_, rest, ok := strings.Cut(mi.Instance, "/zones/")
	if !ok {
		return ""
	}
	zone, _, _ := strings.Cut(rest, "/")
	return zone
}

func (c *Cloud) remove(ctx context.Context, m MIG, mi *compute.ManagedInstance) error {
	zone := memberZone(m, mi)
	if zone == "" {
		// A reference without a zone is malformed, which fails the
		// operation whatever skipInstancesOnValidationError says.
		return cloud.Errorf(cloud.ErrTransient, "delete", "instance %s of regional group %s has no zone yet", mi.Name, m.Name)
	}
	return c.removeIn(ctx, m, zone, mi.Name)
}

// removeIn deletes the member name, in zone, of a MIG.
func (c *Cloud) removeIn(ctx context.Context, m MIG, zone, name string) error {
	ref := "zones/" + zone + "/instances/" + name
	err := c.mutate(ctx, m, "delete", func(requestID string) (*compute.Operation, error) {
		if m.Regional() {
			return c.api.RegionInstanceGroupManagers.DeleteInstances(c.opts.Project, m.Location, m.Name,
				&compute.RegionInstanceGroupManagersDeleteInstancesRequest{Instances: []string{ref}, SkipInstancesOnValidationError: true}).
				RequestId(requestID).Context(ctx).Do()
		}
		return c.api.InstanceGroupManagers.DeleteInstances(c.opts.Project, m.Location, m.Name,
			&compute.InstanceGroupManagersDeleteInstancesRequest{Instances: []string{ref}, SkipInstancesOnValidationError: true}).
			RequestId(requestID).Context(ctx).Do()
	})
	if errors.Is(err, cloud.ErrNotFound) {
		return nil
	}
	return err
}

// mutate runs one operation on a MIG (one at a time per MIG) and waits for
// it, checking the errors a DONE operation may carry. A mutation whose
// answer or wait was lost is ErrOutcomeUnknown.
func (c *Cloud) mutate(ctx context.Context, m MIG, op string, call func(requestID string) (*compute.Operation, error)) error {
	l := c.lock(m)
	// One request id for every attempt: GCP carries a repeated request out
	// once, so a retry after a 5xx cannot order twice.
	requestID := uuid.NewString()
	for attempt := 0; ; attempt++ {
		select {
		case l <- struct{}{}:
		case <-ctx.Done():
			return cloud.NewError(cloud.ErrTransient, op, ctx.Err())
		}
		err := c.run(ctx, op, func() (*compute.Operation, error) { return call(requestID) })
		<-l
		if !cloud.Retryable(err) || attempt >= 4 {
			return err
		}
		// Not under the lock: the group's other orders go on meanwhile.
		// A conflict (another operation, perhaps a lost answer's, still
		// runs on the group) is asked again soon.
		base := time.Second
		var ce *cloud.Error
		if errors.As(err, &ce) && (strings.Contains(ce.Error(), "409") || strings.Contains(ce.Error(), "resourceNotReady")) {
			base = c.opts.PollInterval
		}
		if berr := cloud.Backoff(ctx, base, attempt); berr != nil {
			return cloud.NewError(cloud.ErrTransient, op, berr)
		}
	}
}

// run sends one mutation and waits for its operation, polling it where
// it runs (its zone, or its region).
func (c *Cloud) run(ctx context.Context, op string, call func() (*compute.Operation, error)) error {
	o, err := answer(call())
	if err != nil {
		return classify(op, err)
	}
	deadline := time.Now().Add(c.opts.OperationTimeout)
	// Most MIG operations end within seconds and hold the MIG's lock
	// meanwhile: ask soon, then less often, up to PollInterval.
	wait := min(100*time.Millisecond, c.opts.PollInterval)
	for o.Status != "DONE" {
		if time.Now().After(deadline) {
			return cloud.Errorf(cloud.ErrOutcomeUnknown, op, "operation %s not done after %s", o.Name, c.opts.OperationTimeout)
		}
		select {
		case <-ctx.Done():
			return cloud.NewError(cloud.ErrOutcomeUnknown, op, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, c.opts.PollInterval)
		next, err := answer(c.poll(ctx, o))
		if err != nil {
			if cloud.IsClass(classify(op, err), cloud.ErrTransient) {
				continue // the operation runs on; ask again
			}
			return classify(op, err)
		}
		o = next
	}
	return doneError(op, o)
}

// poll reads an operation again, from its zone or its region.
func (c *Cloud) poll(ctx context.Context, o *compute.Operation) (*compute.Operation, error) {
	if o.Zone != "" {
		return c.api.ZoneOperations.Get(c.opts.Project, lastSegment(o.Zone), o.Name).Context(ctx).Do()
	}
	if o.Region != "" {
		return c.api.RegionOperations.Get(c.opts.Project, lastSegment(o.Region), o.Name).Context(ctx).Do()
	}
	return c.api.GlobalOperations.Get(c.opts.Project, o.Name).Context(ctx).Do()
}

// doneError classes a finished operation's failure: by its errors' codes
// (stock-out, quota, not found), else by its HTTP status (409, 429 and 5xx
// transient, 403 quota when the message says so), else as a configuration
// error.
func doneError(op string, p *compute.Operation) error {
	var errs []*compute.OperationErrorErrors
	if p.Error != nil {
		errs = p.Error.Errors
	}
	status := int(p.HttpErrorStatusCode)
	if len(errs) == 0 && (status == 0 || status/100 == 2) {
		return nil
	}
	all := make([]codeMessage, 0, len(errs))
	notFound := status == http.StatusNotFound
	for _, e := range errs {
		if e != nil {
			all = append(all, codeMessage{e.Code, e.Message})
			notFound = notFound || strings.HasSuffix(e.Code, "NOT_FOUND")
		}
	}
	code, msg, class := mostTelling(all)
	if msg == "" {
		msg = p.HttpErrorMessage
	}
	switch {
	case notFound && !capacityOrQuota(class):
		class = cloud.ErrNotFound
	case capacityOrQuota(class):
	case status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500:
		class = cloud.ErrTransient
	case status == http.StatusForbidden && strings.Contains(strings.ToLower(msg), "quota"):
		class = cloud.ErrQuota
	default:
		class = cloud.ErrInvalid
	}
	return cloud.Errorf(class, op, "operation %s: %d %s: %s", p.Name, status, code, cloud.NewRedactor().Text(msg))
}

// creating reports whether a managed instance is still being made.
func creating(mi *compute.ManagedInstance) bool {
	switch mi.CurrentAction {
	case "CREATING", "CREATING_WITHOUT_RETRIES", "RECREATING":
		return true
	}
	return false
}

// readAttempts bounds the tries of one read: the compute client does not
// retry on its own, and a 503 must not fail a sync or a start-up.
const readAttempts = 4

// read runs an idempotent read, and again after a transient failure (429,
// 5xx, no answer) with backoff, spaced from PollInterval; the error is
// classified.
func (c *Cloud) read(ctx context.Context, op string, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		err = classify(op, err)
		if !errors.Is(err, cloud.ErrTransient) || attempt+1 >= readAttempts || ctx.Err() != nil {
			return err
		}
		if cloud.Backoff(ctx, c.opts.PollInterval, attempt) != nil {
			return err
		}
	}
}

// errNull is a null answer, which the client library decodes as no value
// and no error.
var errNull = errors.New("the API answered null")

// answer is a call's result, with errNull for a null answer: no caller
// has to dereference one.
func answer[T any](v *T, err error) (*T, error) {
	if err == nil && v == nil {
		return nil, errNull
	}
	return v, err
}

// classify turns a client error into a classed cloud error: googleapi
// codes and reasons; no answer at all is an unknown outcome for callers
// that mutate (their caller decides).
func classify(op string, err error) error {
	var ge *googleapi.Error
	code, reason := 0, ""
	switch {
	case errors.As(err, &ge):
		code = ge.Code
		if len(ge.Errors) > 0 {
			reason = ge.Errors[0].Reason
		}
		err = &errorAnswer{ge: ge}
	default:
		if op == "create" || op == "delete" {
			return cloud.NewError(cloud.ErrOutcomeUnknown, op, err)
		}
		return cloud.NewError(cloud.ErrTransient, op, err)
	}
	switch {
	case code == http.StatusNotFound:
		return cloud.NewError(cloud.ErrNotFound, op, err)
	case strings.Contains(strings.ToLower(reason), "quota") && code != http.StatusTooManyRequests:
		return cloud.NewError(cloud.ErrQuota, op, err)
	case code == http.StatusConflict, code == http.StatusTooManyRequests, code >= 500, reason == "rateLimitExceeded", reason == "resourceNotReady":
		return cloud.NewError(cloud.ErrTransient, op, err)
	}
	return cloud.NewError(cloud.ErrInvalid, op, err)
}

// errorAnswer is an error answer of the API: its text is the answer's,
// one line cut to cloud.MaxErrorText (a proxy's page or an echoed request
// must not fill the logs), while errors.As still finds the googleapi.Error.
type errorAnswer struct {
	ge *googleapi.Error
}

func (a *errorAnswer) Error() string { return cloud.NewRedactor().Text(a.ge.Error()) }

func (a *errorAnswer) Unwrap() error { return a.ge }

// alreadyExists reports a create refused because the instance is there: an
// earlier attempt landed; the instance is looked up by name.
func alreadyExists(err error) bool {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		for _, e := range ge.Errors {
			if e.Reason == "alreadyExists" {
				return true
			}
		}
	}
	return strings.Contains(err.Error(), "alreadyExists")
}
