package scaleway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	block "github.com/scaleway/scaleway-sdk-go/api/block/v1"
	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	marketplace "github.com/scaleway/scaleway-sdk-go/api/marketplace/v2"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Name is Scaleway's name in provider IDs and config.
const Name = "scaleway"

// Tags that mark ownership. Scaleway lists servers by exact tags, so the
// cluster's servers are one filtered list per zone.
const (
	tagCluster = "gpuscaler-cluster="
	tagGroup   = "gpuscaler-group="
	tagOwner   = "gpuscaler-owner="
	// tagInstall records the install ID of the gpuscaler that ordered a
	// server (cloud.CreateSpec.Install).
	tagInstall = "gpuscaler-install="
	// tagStandby marks a server powered off for a standby pool: stopped on
	// purpose, to be started again, not lost.
	tagStandby = "gpuscaler-standby"
)

// blockPricePerGBHour is what Scaleway's Block Storage bills per GB and
// hour in PAR, WAW and AMS (docs-content pages/instances/faq.mdx), the
// whole bill of a powered-off server's boot volume ("When a server is
// powered off, only its volumes and any reserved flexible IP address are
// billed", pages/instances/how-to/power-off-instance.mdx).
const blockPricePerGBHour = 0.000118

// Defaults.
const (
	// DefaultImage is the marketplace label of Scaleway's GPU OS (NVIDIA
	// driver and container toolkit installed).
	DefaultImage           = "ubuntu_noble_gpu_os_12"
	defaultDiskGiB         = 100
	defaultStartGrace      = 10 * time.Minute
	defaultAvailabilityTTL = 2 * time.Minute
	defaultVolumeSweep     = 10 * time.Minute
	catalogTTL             = time.Hour
	// userDataKey is the user data key cloud-init reads.
	userDataKey = "cloud-init"
)

// GPUZones are the zones Scaleway sells GPU servers in, listed when no
// group names a zone (gpuscaler catalog).
var GPUZones = []string{"fr-par-1", "fr-par-2", "nl-ams-1", "pl-waw-2"}

// Options configure the Scaleway backend.
type Options struct {
	// ClusterName marks the servers this cluster owns.
	ClusterName string
	// ProjectID is where servers are made.
	ProjectID string
	// Zones are where the groups order (fr-par-2, nl-ams-1, ...): the
	// catalog, stock and lists cover them.
	Zones []string
	// Image is the marketplace label (or image UUID) of orders that name
	// none; default DefaultImage.
	Image string
	// StartGrace is how long a stopped server gpuscaler is not starting
	// may stay stopped before it is taken for one that will never run (a
	// create whose answer was lost, a start that failed) and deleted;
	// default 10m.
	StartGrace time.Duration
	// AvailabilityTTL is how long a zone's stock is trusted; default 2m.
	AvailabilityTTL time.Duration
	// UserDataGrace is how long a server runs before its cloud-init is
	// deleted from the API (cloud-init reads it at first boot; join
	// secrets must not stay there); default 3m.
	UserDataGrace time.Duration
	// RetryBase is the first backoff of retried calls; default 1 s.
	RetryBase time.Duration
	// Secrets are kept out of errors and logs.
	Secrets []string
	Logger  *slog.Logger
}

// Cloud is a Scaleway project as a cloud.Provider.
type Cloud struct {
	inst   *instance.API
	blk    *block.API
	market *marketplace.API
	opts   Options
	log    *slog.Logger
	redact *cloud.Redactor

	mu        sync.Mutex
	catalog   []cloud.InstanceType
	inZone    map[string][]string // types each zone sells
	catalogAt time.Time
	stock     map[string]map[string]bool // zone → type → available
	stockAt   map[string]time.Time
	images    map[imageKey]string
	// starting are the servers a Create is bringing up, by name.
	starting map[string]bool
	// orphans are block volumes of deleted servers still to delete.
	orphans   map[string]scw.Zone
	lastSweep time.Time
	// runningSince is when each server was first listed running, and
	// wiped the servers whose user data is deleted.
	runningSince map[string]time.Time
	wiped        map[string]bool
}

type imageKey struct{ label, zone, commercialType string }

var (
	_ cloud.Provider       = (*Cloud)(nil)
	_ cloud.IDAssigner     = (*Cloud)(nil)
	_ cloud.RequestLimiter = (*Cloud)(nil)
	_ cloud.Stopper        = (*Cloud)(nil)
)

// New returns the backend over an SDK client (see NewClient).
func New(client *scw.Client, opts Options) *Cloud {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.StartGrace == 0 {
		opts.StartGrace = defaultStartGrace
	}
	if opts.AvailabilityTTL == 0 {
		opts.AvailabilityTTL = defaultAvailabilityTTL
	}
	if opts.RetryBase == 0 {
		opts.RetryBase = time.Second
	}
	if opts.UserDataGrace == 0 {
		opts.UserDataGrace = 3 * time.Minute
	}
	return &Cloud{
		inst: instance.NewAPI(client), blk: block.NewAPI(client), market: marketplace.NewAPI(client),
		opts: opts, log: opts.Logger, redact: cloud.NewRedactor(opts.Secrets...),
		stock: map[string]map[string]bool{}, stockAt: map[string]time.Time{}, images: map[imageKey]string{},
		starting: map[string]bool{}, orphans: map[string]scw.Zone{}, runningSince: map[string]time.Time{}, wiped: map[string]bool{},
	}
}

// Name implements cloud.Provider.
func (c *Cloud) Name() string { return Name }

// LimitsRequests implements cloud.RequestLimiter: the SDK client's
// transport holds the budget.
func (c *Cloud) LimitsRequests() bool { return true }

// AssignsIDs implements cloud.IDAssigner: provider IDs hold the server's
// UUID, known once it is created.
func (c *Cloud) AssignsIDs() bool { return true }

// ProviderID is a server's provider ID, "scaleway://<zone>/<id>".
func ProviderID(zone, id string) string { return Name + "://" + zone + "/" + id }

// aliases are the other provider IDs of a server (Kapsule's form).
func aliases(zone, id string) []string { return []string{Name + "://instance/" + zone + "/" + id} }

func (c *Cloud) retry(ctx context.Context, op string, call func() error) error {
	return retry(ctx, c.log, op, c.redact, 5, c.opts.RetryBase, call)
}

// Keys of a node group's cloudOptions that the Scaleway backend reads.
const (
	OptionSecurityGroupID  = "securityGroupID"  // the servers' security group (firewall); default the project's
	OptionPlacementGroupID = "placementGroupID" // a placement group of the zone
	// OptionPublicIP is "false" for servers without a public address
	// (reached over a private network); default true.
	OptionPublicIP = "publicIP"
)

// CheckOptions implements cloud.Provider.
func (c *Cloud) CheckOptions(opts map[string]string) []*cloud.OptionError {
	errs := cloud.CheckKnownOptions(opts, OptionSecurityGroupID, OptionPlacementGroupID, OptionPublicIP)
	for _, k := range []string{OptionSecurityGroupID, OptionPlacementGroupID} {
		if v, ok := opts[k]; ok && !isUUID(v) {
			errs = append(errs, &cloud.OptionError{Key: k, Detail: "must be a UUID"})
		}
	}
	if v, ok := opts[OptionPublicIP]; ok && v != "true" && v != "false" {
		errs = append(errs, &cloud.OptionError{Key: OptionPublicIP, Detail: "must be true or false"})
	}
	return errs
}

// InstanceTypes returns the commercial types the zones sell, with GPU
// model, count and memory from gpu_info, and the hourly price.
func (c *Cloud) InstanceTypes(ctx context.Context) ([]cloud.InstanceType, error) {
	if err := c.loadCatalog(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.catalog), nil
}

func (c *Cloud) loadCatalog(ctx context.Context) error {
	c.mu.Lock()
	fresh := c.catalog != nil && time.Since(c.catalogAt) < catalogTTL
	c.mu.Unlock()
	if fresh {
		return nil
	}
	types := map[string]cloud.InstanceType{}
	inZone := map[string][]string{}
	for _, zone := range c.opts.Zones {
		var resp *instance.ListServersTypesResponse
		err := c.retry(ctx, "catalog", func() error {
			var err error
			resp, err = c.inst.ListServersTypes(&instance.ListServersTypesRequest{Zone: scw.Zone(zone)}, scw.WithContext(ctx), scw.WithAllPages())
			return err
		})
		if err != nil {
			return fmt.Errorf("zone %s: %w", zone, err)
		}
		for name, st := range resp.Servers {
			if st == nil || st.EndOfService {
				continue
			}
			types[name] = convertType(name, st)
			inZone[zone] = append(inZone[zone], name)
		}
	}
	catalog := make([]cloud.InstanceType, 0, len(types))
	for _, t := range types {
		catalog = append(catalog, t)
	}
	slices.SortFunc(catalog, func(a, b cloud.InstanceType) int { return strings.Compare(a.Name, b.Name) })
	c.mu.Lock()
	c.catalog, c.inZone, c.catalogAt = catalog, inZone, time.Now()
	c.mu.Unlock()
	return nil
}

// gpuModel maps gpu_info.gpu_name to the GPU model table.
func gpuModel(name string) string {
	switch strings.ToUpper(strings.ReplaceAll(name, " ", "")) {
	case "L4":
		return "L4"
	case "L40S":
		return "L40S"
	case "H100", "H100-SXM", "H100-PCIE":
		return "H100-80GB"
	case "RTX3070":
		return "RTX3070"
	case "P100":
		return "P100"
	case "B300", "B300-SXM":
		return "B300"
	}
	return name // unknown to the table: a group using it is refused at start, naming it
}

func convertType(name string, st *instance.ServerType) cloud.InstanceType {
	// Scaleway prices in euros (the API's hourly_price).
	t := cloud.InstanceType{Name: name, VCPUs: int(st.Ncpus), MemoryGiB: int(st.RAM >> 30), Arch: "amd64", OnDemandPrice: float64(st.HourlyPrice), Currency: "EUR"}
	if st.Arch == instance.ArchArm64 {
		t.Arch = "arm64"
	}
	if st.Gpu != nil && *st.Gpu > 0 {
		t.GPUCount = int(*st.Gpu)
		if gi := st.GpuInfo; gi != nil {
			t.GPUMemoryGiB = int(uint64(gi.GpuMemory) >> 30)
			t.GPUModel = gpuModel(gi.GpuName)
		}
	}
	return t
}

// Offerings returns each type in each zone that sells it, on demand
// (Scaleway has no spot), available unless the zone's stock says
// "shortage". Stock is read per zone at most every AvailabilityTTL.
func (c *Cloud) Offerings(ctx context.Context) ([]cloud.Offering, error) {
	if err := c.loadCatalog(ctx); err != nil {
		return nil, err
	}
	for _, zone := range c.opts.Zones {
		if err := c.loadStock(ctx, zone); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	price := map[string]float64{}
	for _, t := range c.catalog {
		price[t.Name] = t.OnDemandPrice
	}
	var out []cloud.Offering
	for _, zone := range c.opts.Zones {
		for _, name := range c.inZone[zone] {
			out = append(out, cloud.Offering{InstanceType: name, Location: zone, CapacityType: cloud.OnDemand,
				Available: c.stock[zone][name], Price: price[name]})
		}
	}
	return out, nil
}

func (c *Cloud) loadStock(ctx context.Context, zone string) error {
	c.mu.Lock()
	fresh := time.Since(c.stockAt[zone]) < c.opts.AvailabilityTTL
	c.mu.Unlock()
	if fresh {
		return nil
	}
	var resp *instance.GetServerTypesAvailabilityResponse
	err := c.retry(ctx, "availability", func() error {
		var err error
		resp, err = c.inst.GetServerTypesAvailability(&instance.GetServerTypesAvailabilityRequest{Zone: scw.Zone(zone)}, scw.WithContext(ctx), scw.WithAllPages())
		return err
	})
	if err != nil {
		return fmt.Errorf("stock in %s: %w", zone, err)
	}
	now := map[string]bool{}
	for name, a := range resp.Servers {
		now[name] = a != nil && a.Availability != instance.ServerTypesAvailabilityShortage
	}
	c.mu.Lock()
	c.stock[zone], c.stockAt[zone] = now, time.Now()
	c.mu.Unlock()
	return nil
}

// markOutOfStock records a stock-out an order met, until the next read.
func (c *Cloud) markOutOfStock(zone, commercialType string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stock[zone] != nil {
		c.stock[zone][commercialType] = false
	}
}

// ownership reads a server's tags.
func (c *Cloud) ownership(tags []string) (group, owner string) {
	for _, t := range tags {
		if g, ok := strings.CutPrefix(t, tagGroup); ok {
			group = g
		}
		if o, ok := strings.CutPrefix(t, tagOwner); ok {
			owner = o
		}
	}
	if group != "" {
		owner = ""
	}
	return group, owner
}

// List returns the cluster's servers in every zone: one list by the
// cluster's tag per zone (paged by the SDK), plus, now and then, a sweep
// of block volumes left by deleted servers.
func (c *Cloud) List(ctx context.Context) ([]cloud.Instance, error) {
	var out []cloud.Instance
	// names are the listed servers; leaving those being deleted.
	names, leaving := map[string]bool{}, map[string]bool{}
	listed := map[string]*instance.Server{}
	for _, zone := range c.opts.Zones {
		var resp *instance.ListServersResponse
		err := c.retry(ctx, "list", func() error {
			var err error
			resp, err = c.inst.ListServers(&instance.ListServersRequest{Zone: scw.Zone(zone), Tags: []string{tagCluster + c.opts.ClusterName},
				Project: scw.StringPtr(c.opts.ProjectID), PerPage: scw.Uint32Ptr(100)}, scw.WithContext(ctx), scw.WithAllPages())
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("zone %s: %w", zone, err)
		}
		for _, sv := range resp.Servers {
			if sv == nil {
				continue
			}
			group, owner := c.ownership(sv.Tags)
			if group == "" && owner == "" {
				continue
			}
			in := c.instance(sv, group, owner)
			names[sv.Name] = true
			if in.State == cloud.StateDeleting || in.State == cloud.StateStopped && !in.Standby {
				leaving[sv.Name] = true
			}
			out = append(out, in)
			listed[sv.ID] = sv
		}
	}
	c.wipeUserData(ctx, listed)
	attached := map[string]string{}
	for _, sv := range listed {
		for _, v := range sv.Volumes {
			if v != nil {
				attached[v.ID] = sv.Name
			}
		}
	}
	c.sweepVolumes(ctx, names, leaving, attached)
	return out, nil
}

// wipeUserData deletes the cloud-init of servers running for longer than
// UserDataGrace, once each: the API would otherwise keep the join
// secrets it may hold for as long as the server lives.
func (c *Cloud) wipeUserData(ctx context.Context, listed map[string]*instance.Server) {
	now := time.Now()
	var due []*instance.Server
	c.mu.Lock()
	for id := range c.runningSince {
		if listed[id] == nil {
			delete(c.runningSince, id)
			delete(c.wiped, id)
		}
	}
	for id, sv := range listed {
		if sv.State != instance.ServerStateRunning || c.wiped[id] {
			continue
		}
		since, ok := c.runningSince[id]
		if !ok {
			c.runningSince[id] = now
			continue
		}
		if now.Sub(since) >= c.opts.UserDataGrace {
			due = append(due, sv)
		}
	}
	c.mu.Unlock()
	for _, sv := range due {
		err := classify("user-data", sdk(func() error {
			return c.inst.DeleteServerUserData(&instance.DeleteServerUserDataRequest{Zone: sv.Zone, ServerID: sv.ID, Key: userDataKey}, scw.WithContext(ctx))
		}), c.redact)
		if err != nil && !errors.Is(err, cloud.ErrNotFound) {
			c.log.Debug("scaleway: user data not deleted yet", "server", sv.Name, "error", err)
			continue
		}
		c.mu.Lock()
		c.wiped[sv.ID] = true
		c.mu.Unlock()
	}
}

func (c *Cloud) instance(sv *instance.Server, group, owner string) cloud.Instance {
	zone := string(sv.Zone)
	in := cloud.Instance{
		ID: sv.ID, Name: sv.Name, ProviderID: ProviderID(zone, sv.ID), Aliases: aliases(zone, sv.ID),
		Group: group, Owner: owner, InstanceType: sv.CommercialType, Location: zone, CapacityType: cloud.OnDemand,
	}
	for _, t := range sv.Tags {
		if id, ok := strings.CutPrefix(t, tagInstall); ok {
			in.Install = id
		}
	}
	if sv.CreationDate != nil {
		in.CreatedAt = *sv.CreationDate
	}
	for _, ip := range sv.PublicIPs {
		if ip != nil && ip.Address != nil {
			in.IP = ip.Address.String()
			break
		}
	}
	if in.IP == "" && sv.PrivateIP != nil {
		in.IP = *sv.PrivateIP
	}
	c.mu.Lock()
	starting := c.starting[sv.Name]
	c.mu.Unlock()
	switch sv.State {
	case instance.ServerStateRunning:
		in.State = cloud.StateRunning
	case instance.ServerStateStarting:
		in.State = cloud.StatePending
	case instance.ServerStateStopping:
		in.State = cloud.StateDeleting
	case instance.ServerStateLocked:
		in.State, in.Error = cloud.StateFailed, "server locked: "+sv.StateDetail
	case instance.ServerStateStopped:
		if slices.Contains(sv.Tags, tagStandby) {
			in.State, in.Standby = cloud.StateStopped, true // powered off for a standby pool
			break
		}
		fallthrough
	default: // stopped, stopped in place
		in.State = cloud.StatePending
		if !starting && time.Since(in.CreatedAt) > c.opts.StartGrace {
			// Never started (its create's answer was lost, its start
			// failed) or stopped since: it serves nothing and keeps its
			// volume billing.
			in.State, in.Error = cloud.StateStopped, "server "+string(sv.State)+" "+sv.StateDetail
		}
	}
	return in
}

// Create makes a server stopped, uploads its cloud-init (rendered now
// that its provider ID is known), and powers it on. A server that cannot
// be started is deleted with its volume; a create whose answer was lost
// is looked up by name before anything is said.
func (c *Cloud) Create(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error) {
	if spec.CapacityType == cloud.Spot {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "no spot servers on Scaleway")
	}
	zone := scw.Zone(spec.Location)
	image, err := c.image(ctx, spec)
	if err != nil {
		return cloud.Instance{}, err
	}
	size := spec.DiskGiB
	if size == 0 {
		size = defaultDiskGiB
	}
	tags := []string{tagCluster + c.opts.ClusterName}
	if spec.Group == "" && spec.Owner != "" {
		tags = append(tags, tagOwner+spec.Owner)
	} else {
		tags = append(tags, tagGroup+spec.Group)
	}
	if spec.Install != "" {
		tags = append(tags, tagInstall+spec.Install)
	}
	c.mu.Lock()
	c.starting[spec.Name] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.starting, spec.Name)
		c.mu.Unlock()
	}()
	req := &instance.CreateServerRequest{
		Zone: zone, Name: spec.Name, CommercialType: spec.InstanceType, Image: scw.StringPtr(image),
		Project: scw.StringPtr(c.opts.ProjectID), Tags: tags, DynamicIPRequired: scw.BoolPtr(spec.Options[OptionPublicIP] != "false"),
		Volumes: map[string]*instance.VolumeServerTemplate{"0": {
			Boot: scw.BoolPtr(true), Size: scw.SizePtr(scw.Size(size) * scw.GB), VolumeType: instance.VolumeVolumeTypeSbsVolume,
			Name: scw.StringPtr(c.volumeName(spec.Name)),
		}},
	}
	if v := spec.Options[OptionSecurityGroupID]; v != "" {
		req.SecurityGroup = scw.StringPtr(v)
	}
	if v := spec.Options[OptionPlacementGroupID]; v != "" {
		req.PlacementGroup = scw.StringPtr(v)
	}
	var resp *instance.CreateServerResponse
	err = sdk(func() (err error) {
		resp, err = c.inst.CreateServer(req, scw.WithContext(ctx))
		return err
	})
	if err == nil && (resp.Server == nil || resp.Server.ID == "") {
		err = fmt.Errorf("%w: no server in the create's answer", errUnreadable)
	}
	var sv *instance.Server
	switch {
	case err == nil:
		sv = resp.Server
	case sent(err):
		// It may have been made: find it by name before saying anything.
		found, ferr := c.findByName(ctx, zone, spec.Name)
		if ferr != nil || found == nil {
			return cloud.Instance{}, cloud.NewError(cloud.ErrOutcomeUnknown, "create", classify("create", err, c.redact))
		}
		sv = found
	default:
		err = classify("create", err, c.redact)
		if errors.Is(err, cloud.ErrCapacity) {
			c.markOutOfStock(spec.Location, spec.InstanceType)
		}
		return cloud.Instance{}, err
	}
	if err := c.start(ctx, spec, sv); err != nil {
		if derr := c.discard(ctx, sv); derr != nil {
			// The server may be left (and may even start): it must be
			// found by a list, not ordered again.
			return cloud.Instance{}, cloud.NewError(cloud.ErrOutcomeUnknown, "create", fmt.Errorf("%w; and the server could not be deleted: %w", err, derr))
		}
		return cloud.Instance{}, fmt.Errorf("%w (%w: the server was deleted)", err, cloud.ErrRolledBack)
	}
	created := time.Now()
	if sv.CreationDate != nil {
		created = *sv.CreationDate
	}
	return cloud.Instance{
		ID: sv.ID, Name: spec.Name, ProviderID: ProviderID(spec.Location, sv.ID), Aliases: aliases(spec.Location, sv.ID),
		Group: spec.Group, Owner: spec.Owner, InstanceType: spec.InstanceType, Location: spec.Location,
		CapacityType: cloud.OnDemand, State: cloud.StatePending, CreatedAt: created,
	}, nil
}

// Stop powers a running server off for a standby pool (cloud.Stopper):
// tagged first, so that a list never shows it stopped without the mark
// (a stopped server without it is one lost, deleted and replaced), then
// `poweroff`, which releases its hypervisor slot and leaves its volumes
// billing only; `stop_in_place` would bill it in full.
func (c *Cloud) Stop(ctx context.Context, inst cloud.Instance) error {
	zone := scw.Zone(inst.Location)
	sv, err := c.server(ctx, zone, inst.ID)
	if err != nil {
		return err
	}
	if err := c.setStandbyTag(ctx, sv, true); err != nil {
		return err
	}
	if sv.State == instance.ServerStateStopped {
		return nil
	}
	return c.retry(ctx, "poweroff", func() error {
		_, err := c.inst.ServerAction(&instance.ServerActionRequest{Zone: zone, ServerID: sv.ID, Action: instance.ServerActionPoweroff}, scw.WithContext(ctx))
		if err != nil {
			if now, gerr := c.server(ctx, zone, sv.ID); gerr == nil && (now.State == instance.ServerStateStopped || now.State == instance.ServerStateStopping) {
				return nil // an earlier poweroff whose answer was lost
			}
		}
		return err
	})
}

// Start powers a standby server on (cloud.Stopper) and takes its standby
// tag off. It needs a hypervisor slot again: a shortage answers
// ErrCapacity.
func (c *Cloud) Start(ctx context.Context, inst cloud.Instance) error {
	zone := scw.Zone(inst.Location)
	sv, err := c.server(ctx, zone, inst.ID)
	if err != nil {
		return err
	}
	if sv.State == instance.ServerStateStopped {
		err = c.retry(ctx, "poweron", func() error {
			_, err := c.inst.ServerAction(&instance.ServerActionRequest{Zone: zone, ServerID: sv.ID, Action: instance.ServerActionPoweron}, scw.WithContext(ctx))
			if err != nil && c.started(ctx, sv) {
				return nil
			}
			return err
		})
		if err != nil {
			if errors.Is(err, cloud.ErrCapacity) {
				c.markOutOfStock(string(zone), sv.CommercialType)
			}
			return err
		}
	}
	if err := c.setStandbyTag(ctx, sv, false); err != nil {
		// Harmless while it runs (the mark counts only on a stopped
		// server); the next Stop sets it again anyway.
		c.log.Warn("scaleway: standby tag not removed from a started server", "server", sv.Name, "error", err)
	}
	return nil
}

// Transfer renames a standby server and moves it from its group to owner
// (cloud.Transferer): one PATCH of its name and tags, which Scaleway
// applies whole, so a list shows the server either as it was or as it now
// is. Its provider ID holds the server's ID and stays. The PATCH sets
// values, so it is sent again after a lost answer.
func (c *Cloud) Transfer(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
	if name == "" || owner == "" {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "transfer", "a name and an owner are required")
	}
	zone := scw.Zone(inst.Location)
	sv, err := c.server(ctx, zone, inst.ID)
	if err != nil {
		return cloud.Instance{}, err
	}
	if sv.State != instance.ServerStateStopped {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "transfer", "server %s is %s, not stopped", sv.Name, sv.State)
	}
	tags := slices.DeleteFunc(slices.Clone(sv.Tags), func(t string) bool {
		return strings.HasPrefix(t, tagGroup) || strings.HasPrefix(t, tagOwner)
	})
	tags = append(tags, tagOwner+owner)
	var out *instance.Server
	err = c.retry(ctx, "transfer", func() error {
		resp, err := c.inst.UpdateServer(&instance.UpdateServerRequest{Zone: zone, ServerID: sv.ID, Name: &name, Tags: &tags}, scw.WithContext(ctx))
		if err == nil {
			out = resp.Server
		}
		return err
	})
	if err != nil {
		return cloud.Instance{}, err
	}
	return c.instance(out, "", owner), nil
}

// RefusedStaysStopped is true: a power-on refused for want of a
// hypervisor slot leaves the server stopped (cloud.Stopper).
func (c *Cloud) RefusedStaysStopped() bool { return true }

// StoppedPrice is a powered-off server's hourly bill: its boot volume
// (the default size; a group's diskSizeGiB is not known here).
func (c *Cloud) StoppedPrice(cloud.OfferingKey) float64 {
	return defaultDiskGiB * blockPricePerGBHour
}

// setStandbyTag adds or removes tagStandby on a server, keeping its
// other tags (PATCH replaces the list whole).
func (c *Cloud) setStandbyTag(ctx context.Context, sv *instance.Server, on bool) error {
	if slices.Contains(sv.Tags, tagStandby) == on {
		return nil
	}
	tags := slices.DeleteFunc(slices.Clone(sv.Tags), func(t string) bool { return t == tagStandby })
	if on {
		tags = append(tags, tagStandby)
	}
	return c.retry(ctx, "tags", func() error {
		_, err := c.inst.UpdateServer(&instance.UpdateServerRequest{Zone: sv.Zone, ServerID: sv.ID, Tags: &tags}, scw.WithContext(ctx))
		return err
	})
}

// start uploads a made server's cloud-init and powers it on.
func (c *Cloud) start(ctx context.Context, spec cloud.CreateSpec, sv *instance.Server) error {
	ud := spec.UserData
	if spec.RenderUserData != nil {
		var err error
		if ud, err = spec.RenderUserData(ctx, ProviderID(spec.Location, sv.ID)); err != nil {
			return cloud.NewError(cloud.ErrInvalid, "create", err)
		}
	}
	if ud != "" {
		err := c.retry(ctx, "user-data", func() error {
			return c.inst.SetServerUserData(&instance.SetServerUserDataRequest{Zone: sv.Zone, ServerID: sv.ID, Key: userDataKey,
				Content: strings.NewReader(ud)}, scw.WithContext(ctx))
		})
		if err != nil {
			return err
		}
	}
	err := c.retry(ctx, "poweron", func() error {
		_, err := c.inst.ServerAction(&instance.ServerActionRequest{Zone: sv.Zone, ServerID: sv.ID, Action: instance.ServerActionPoweron}, scw.WithContext(ctx))
		if err != nil && c.started(ctx, sv) {
			// An earlier power-on whose answer was lost took effect: a
			// second is refused, and is no failure.
			return nil
		}
		return err
	})
	if errors.Is(err, cloud.ErrCapacity) {
		c.markOutOfStock(spec.Location, spec.InstanceType)
	}
	return err
}

// started reports whether a server is starting or running, read with the
// calls' retries: a power-on refused because an earlier one whose answer
// was lost took effect is no failure, and one read that fails must not
// make it one.
func (c *Cloud) started(ctx context.Context, sv *instance.Server) bool {
	now, err := c.server(ctx, sv.Zone, sv.ID)
	return err == nil && (now.State == instance.ServerStateStarting || now.State == instance.ServerStateRunning)
}

// discard deletes a server that could not be started, and its volume, on
// a context of its own: the order's may be spent. It returns once the
// server is gone: the core sends a rolled-back order again under the same
// name, and a server still terminating beside the new one (a power-on that
// took effect after all) would be two of one name, both billing. It does
// not wait when the order's context has ended (its core is stopping, and a
// reload waits for it): a server still there then is an error, and Create
// says the order's outcome is unknown, for the next core's list to settle.
func (c *Cloud) discard(order context.Context, sv *instance.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Delete(ctx, cloud.Instance{ID: sv.ID, Name: sv.Name, Location: string(sv.Zone), State: cloud.StateStopped}); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		_, err := c.server(ctx, sv.Zone, sv.ID)
		if errors.Is(err, cloud.ErrNotFound) {
			return nil
		}
		if order.Err() != nil {
			return fmt.Errorf("server %s is still being deleted as its order stops: %w", sv.Name, order.Err())
		}
		if err := cloud.Backoff(ctx, c.opts.RetryBase, attempt); err != nil {
			return fmt.Errorf("server %s still there after its delete: %w", sv.Name, err)
		}
	}
}

// findByName looks a server of this cluster up by its exact name.
func (c *Cloud) findByName(ctx context.Context, zone scw.Zone, name string) (*instance.Server, error) {
	var resp *instance.ListServersResponse
	err := c.retry(ctx, "lookup", func() error {
		var err error
		resp, err = c.inst.ListServers(&instance.ListServersRequest{Zone: zone, Name: scw.StringPtr(name), Tags: []string{tagCluster + c.opts.ClusterName},
			Project: scw.StringPtr(c.opts.ProjectID)}, scw.WithContext(ctx), scw.WithAllPages())
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, sv := range resp.Servers {
		if sv != nil && sv.Name == name {
			return sv, nil
		}
	}
	return nil, nil
}

// image resolves an order's image to a UUID, once per label, zone and
// type.
func (c *Cloud) image(ctx context.Context, spec cloud.CreateSpec) (string, error) {
	label := spec.Image
	if label == "" {
		label = c.opts.Image
	}
	if isUUID(label) {
		return label, nil
	}
	k := imageKey{label, spec.Location, spec.InstanceType}
	c.mu.Lock()
	id, ok := c.images[k]
	c.mu.Unlock()
	if ok {
		return id, nil
	}
	var img *marketplace.LocalImage
	err := c.retry(ctx, "image", func() error {
		var err error
		img, err = c.market.GetLocalImageByLabel(&marketplace.GetLocalImageByLabelRequest{ImageLabel: label, Zone: scw.Zone(spec.Location),
			CommercialType: spec.InstanceType, Type: marketplace.LocalImageTypeInstanceSbs}, scw.WithContext(ctx))
		return err
	})
	if err != nil {
		if cloud.IsClass(err, cloud.ErrTransient) && strings.Contains(err.Error(), "couldn't find a local image") {
			err = cloud.Errorf(cloud.ErrInvalid, "image", "no image %q for %s in %s", label, spec.InstanceType, spec.Location)
		}
		return "", err
	}
	c.mu.Lock()
	c.images[k] = img.ID
	c.mu.Unlock()
	return img.ID, nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if r != '-' {
				return false
			}
		case !strings.ContainsRune("0123456789abcdefABCDEF", r):
			return false
		}
	}
	return true
}

// volumeName names a server's boot volume, so a sweep finds those left
// behind: "gpuscaler.<cluster>.<server>" (cluster and server names are
// DNS labels, so the dots keep cluster "a" from matching cluster "a-b").
func (c *Cloud) volumeName(server string) string {
	return "gpuscaler." + c.opts.ClusterName + "." + server
}

// Delete terminates a running server (sbs volumes are only detached) or
// deletes a stopped one (volumes kept), then deletes its block volumes
// through the Block API, so nothing keeps billing. A server already gone
// is success; its volumes are left to the sweep.
func (c *Cloud) Delete(ctx context.Context, inst cloud.Instance) error {
	zone := scw.Zone(inst.Location)
	id := inst.ID
	if id == "" {
		sv, err := c.findByName(ctx, zone, inst.Name)
		if err != nil {
			return err
		}
		if sv == nil {
			c.sweepSoon()
			return nil
		}
		id = sv.ID
	}
	// The action a delete takes depends on the server's state, which may
	// move between the read and the action (a power-on accepted before
	// the read is carried out after it): a refused action reads again.
	var volumes []string
	for attempt := 1; ; attempt++ {
		sv, err := c.server(ctx, zone, id)
		if errors.Is(err, cloud.ErrNotFound) {
			c.sweepSoon() // its volumes, if any, are the sweep's
			return nil
		}
		if err != nil {
			return err
		}
		volumes = c.recordVolumes(zone, sv)
		err = c.deleteIn(ctx, zone, sv)
		if err == nil || errors.Is(err, cloud.ErrNotFound) {
			break
		}
		if !errors.Is(err, cloud.ErrInvalid) || attempt == 3 {
			return err
		}
		c.log.Info("delete refused in the state read; reading it again", "instance", inst.Name, "state", sv.State, "error", err)
	}
	// A deleted (stopped) server's volumes are free now; a terminating
	// one's once it is gone: the syncs' sweeps take those.
	c.deleteOrphans(ctx, volumes)
	return nil
}

// server reads one server.
func (c *Cloud) server(ctx context.Context, zone scw.Zone, id string) (*instance.Server, error) {
	var sv *instance.Server
	err := c.retry(ctx, "get", func() error {
		resp, err := c.inst.GetServer(&instance.GetServerRequest{Zone: zone, ServerID: id}, scw.WithContext(ctx))
		if err == nil && resp.Server == nil {
			return fmt.Errorf("%w: no server in the answer", errUnreadable)
		}
		if err == nil {
			sv = resp.Server
		}
		return err
	})
	return sv, err
}

// recordVolumes notes a server's block volumes as orphans to delete once
// they are detached, and returns their IDs.
func (c *Cloud) recordVolumes(zone scw.Zone, sv *instance.Server) []string {
	var volumes []string
	for _, v := range sv.Volumes {
		if v != nil && v.VolumeType == instance.VolumeServerVolumeTypeSbsVolume {
			volumes = append(volumes, v.ID)
			c.mu.Lock()
			c.orphans[v.ID] = zone
			c.mu.Unlock()
		}
	}
	return volumes
}

// deleteIn deletes a server as its state allows: a stopped one is
// deleted, a running or starting one terminated, a stopping one left to
// finish.
func (c *Cloud) deleteIn(ctx context.Context, zone scw.Zone, sv *instance.Server) error {
	switch sv.State {
	case instance.ServerStateStopped, instance.ServerStateStoppedInPlace:
		return c.retry(ctx, "delete", func() error {
			return c.inst.DeleteServer(&instance.DeleteServerRequest{Zone: zone, ServerID: sv.ID}, scw.WithContext(ctx))
		})
	case instance.ServerStateStopping:
		return nil // on its way out
	default:
		return c.retry(ctx, "terminate", func() error {
			_, err := c.inst.ServerAction(&instance.ServerActionRequest{Zone: zone, ServerID: sv.ID, Action: instance.ServerActionTerminate}, scw.WithContext(ctx))
			return err
		})
	}
}

// deleteOrphans deletes recorded volumes that are detached (ids, or all
// recorded when ids is nil); those still attached (a server terminating)
// wait for a later call.
func (c *Cloud) deleteOrphans(ctx context.Context, ids []string) {
	c.mu.Lock()
	pending := make(map[string]scw.Zone, len(c.orphans))
	for id, z := range c.orphans {
		if ids == nil || slices.Contains(ids, id) {
			pending[id] = z
		}
	}
	c.mu.Unlock()
	for id, zone := range pending {
		err := classify("volume", sdk(func() error {
			return c.blk.DeleteVolume(&block.DeleteVolumeRequest{Zone: zone, VolumeID: id}, scw.WithContext(ctx))
		}), c.redact)
		if err == nil || errors.Is(err, cloud.ErrNotFound) {
			c.mu.Lock()
			delete(c.orphans, id)
			c.mu.Unlock()
			continue
		}
		c.log.Debug("scaleway: volume not deleted yet", "volume", id, "error", err)
	}
}

// sweepVolumes deletes the recorded volumes, and now and then every
// detached volume named for a server of this cluster that is gone (left
// by a restart in the middle of a delete, or a delete whose answer was
// lost). While a sweep finds a volume whose server is on its way out, or
// gone but the volume not detached yet, or a zone cannot be read, the
// next list sweeps again rather than a period on: the volume bills. A
// volume named for a listed server but attached to none of them (attached
// names the listed server of each of their volumes) is a twin's: an
// order that landed twice made two servers of one name, and the one
// deleted left it.
func (c *Cloud) sweepVolumes(ctx context.Context, live, leaving map[string]bool, attached map[string]string) {
	c.deleteOrphans(ctx, nil)
	c.mu.Lock()
	due := time.Since(c.lastSweep) >= defaultVolumeSweep || len(leaving) > 0
	if due {
		c.lastSweep = time.Now()
	}
	c.mu.Unlock()
	if !due {
		return
	}
	again := false
	prefix := c.volumeName("")
	for _, zone := range c.opts.Zones {
		var resp *block.ListVolumesResponse
		err := sdk(func() (err error) {
			resp, err = c.blk.ListVolumes(&block.ListVolumesRequest{Zone: scw.Zone(zone), Name: scw.StringPtr(prefix), ProjectID: scw.StringPtr(c.opts.ProjectID)},
				scw.WithContext(ctx), scw.WithAllPages())
			return err
		})
		if err != nil {
			c.log.Debug("scaleway: volume sweep skipped", "zone", zone, "error", classify("volumes", err, c.redact))
			again = true
			continue
		}
		for _, v := range resp.Volumes {
			if v == nil {
				continue
			}
			server, ok := strings.CutPrefix(v.Name, prefix)
			switch {
			case !ok:
			case attached[v.ID] != "" || live[server] && len(v.References) > 0:
				// Its server's: attached to a listed server, whatever its
				// name (a standby server handed to Karpenter keeps its
				// volume's first name), or named for one and referenced.
				// One on its way out is swept again at the next list, by
				// the name it has now.
				again = again || leaving[server] || leaving[attached[v.ID]]
			case len(v.References) > 0 || v.Status != block.VolumeStatusAvailable:
				again = true // its server gone, the volume not free yet
			default:
				c.mu.Lock()
				c.orphans[v.ID] = scw.Zone(zone)
				c.mu.Unlock()
			}
		}
	}
	if again {
		c.sweepSoon()
	}
	c.deleteOrphans(ctx, nil)
}

// sweepSoon makes the next list sweep the volumes.
func (c *Cloud) sweepSoon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastSweep = time.Time{}
}
