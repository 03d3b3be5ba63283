package kamatera

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Name is Kamatera's name in provider IDs and config.
const Name = "kamatera"

// Keys of a node group's cloudOptions that the Kamatera backend reads.
// Lists are space-separated, as the API takes them.
const (
	// OptionDisks are the cloudcli disk specs ("size=100 size=200");
	// default "size=<diskSizeGiB>" (100 when unset).
	OptionDisks = "disks"
	// OptionNetworks are the cloudcli network specs; default
	// "name=wan,ip=auto".
	OptionNetworks       = "networks"
	OptionBillingCycle   = "billingCycle"   // hourly (default) or monthly
	OptionMonthlyPackage = "monthlyPackage" // monthly billing's traffic package, e.g. t5000
	OptionDailyBackup    = "dailyBackup"    // true or false (default)
	OptionManaged        = "managed"        // true or false (default)
	// OptionNamePrefix starts the names of the group's servers
	// ("<prefix>-<hex>"), as the seed autoscaler's name-prefix.
	OptionNamePrefix = "namePrefix"
	// OptionSSHKey is a public key put in root's authorized keys.
	OptionSSHKey = "sshKey"
	// OptionScriptBase64 is a static startup script, base64, sent as the
	// server's script when gpuscaler renders none (the seed's
	// script-base64).
	OptionScriptBase64 = "scriptBase64"
	// OptionScriptFile names a file holding the static startup script
	// (a Secret mounted into the pod): a script that carries a join token
	// stays out of the config, which usually lands in a ConfigMap. Read
	// at start-up and at every config reload.
	OptionScriptFile = "scriptFile"
)

// Tag prefixes that mark ownership, as the Kamatera cluster-autoscaler
// wrote them, so the servers it made are recognised.
const (
	tagCluster = "k8sca-"
	tagGroup   = "k8scang-"
	// tagOwner marks a server launched outside any group (the core's
	// launch API) by its front end.
	tagOwner = "k8scao-"
	// tagInstall records the install ID of the gpuscaler that ordered a
	// server (cloud.CreateSpec.Install).
	tagInstall = "k8scai-"
)

// MaxNameLength is the longest cluster or group name: a tag holds at most
// 24 characters, "k8scang-" included.
const MaxNameLength = 15

// tagPattern is what the API accepts as a tag.
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9\-_\s.]{3,24}$`)

const (
	catalogTTL = time.Hour
	// untaggedTTL is how long a server without tags is taken for one
	// that is not the cluster's before its tags are read again.
	untaggedTTL = 10 * time.Minute
	// tagFailureLimit is how many lists in a row a server's unreadable
	// tags fail before that server is skipped (it is then most likely not
	// the cluster's, and must not stop every sync).
	tagFailureLimit = 3
	// defaultLostCreateWindow is Options.LostCreateWindow's default.
	defaultLostCreateWindow = 15 * time.Minute
	defaultDiskGiB          = 100
	defaultNetwork          = "name=wan,ip=auto"
	// generatePassword asks the API to make up a root password, which
	// gpuscaler neither logs nor keeps.
	generatePassword = "__generate__"
)

// Options configure the Kamatera backend.
type Options struct {
	// ClusterName marks the servers this cluster owns (tag k8sca-<name>).
	ClusterName string
	// Image is used when an order names none.
	Image string
	// Datacenters are the ones the catalog is read from; empty means all
	// the account can order in.
	Datacenters []string
	// FilterNamePrefix limits List to servers whose names start with it
	// (the seed's filter-name-prefix): other servers cost no tag lookup.
	FilterNamePrefix string
	// ProviderIDPrefix is what nodes' provider IDs put before the server
	// name (the seed's provider-id-prefix); default "kamatera://".
	ProviderIDPrefix string
	// Passwords are root passwords by group (from an imported INI file or
	// a passwordFile); groups without one get a generated password that
	// nobody keeps, so log in with an SSH key.
	Passwords map[string]string
	// Scripts are the static startup scripts of the groups whose
	// cloudOptions.scriptFile names one, by group, as read at start.
	Scripts map[string]string
	// LostCreateWindow is how long a create whose answer was lost is
	// reported as pending while it may still land (Kamatera shows a
	// server only once its create command has run); default 15m.
	LostCreateWindow time.Duration
	Logger           *slog.Logger
}

// Cloud is a Kamatera account as a cloud.Provider.
type Cloud struct {
	api  *Client
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	catalog   []cloud.InstanceType
	offerings []cloud.Offering
	catalogAt time.Time
	// known caches what List learnt of each server once: its ownership
	// (tags) and, for the cluster's, its type and address. Keyed by name.
	known map[string]*server
	// limbo holds creates whose outcome is unknown, by name.
	limbo map[string]*lostCreate
	// stopping are servers gpuscaler is powering off to delete them.
	stopping map[string]bool
	// tagFailures counts the lists in a row a new server's tags could
	// not be read.
	tagFailures map[string]int
}

// server is what List knows of one server.
type server struct {
	id           string
	ours         bool
	group, owner string
	install      string
	instanceType string
	ip           string
	// detailed: info has been read (type and address).
	detailed   bool
	datacenter string
	firstSeen  time.Time
	// untaggedAt is when a server with no tags at all was looked at: it
	// may be a server whose tags are still being applied, so it is
	// looked at again after untaggedTTL.
	untaggedAt time.Time
}

// lostCreate is an order that may still land.
type lostCreate struct {
	spec  cloud.CreateSpec
	since time.Time
	// command is the create's queue command, when its id came back.
	command string
	// completedAt is when the queue said the command completed: the
	// server shows in a list from then on.
	completedAt time.Time
	// failure is the command's error once the queue said it failed, at
	// failedAt: no server was made.
	failure  error
	failedAt time.Time
}

var _ cloud.Provider = (*Cloud)(nil)

// New returns the backend over a client.
func New(api *Client, opts Options) *Cloud {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ProviderIDPrefix == "" {
		opts.ProviderIDPrefix = Name + "://"
	}
	if opts.LostCreateWindow == 0 {
		opts.LostCreateWindow = defaultLostCreateWindow
	}
	return &Cloud{api: api, opts: opts, log: opts.Logger, known: map[string]*server{}, limbo: map[string]*lostCreate{}, stopping: map[string]bool{},
		tagFailures: map[string]int{}}
}

// Name implements cloud.Provider.
func (c *Cloud) Name() string { return Name }

// LimitsRequests implements cloud.RequestLimiter: the client holds the
// request budget.
func (c *Cloud) LimitsRequests() bool { return true }

// NamePrefix implements cloud.Namer: a group's namePrefix option, else
// its name.
func (c *Cloud) NamePrefix(group string, options map[string]string) string {
	if p := options[OptionNamePrefix]; p != "" {
		return p
	}
	return group
}

// ProviderID implements cloud.Namer.
func (c *Cloud) ProviderID(name string) string { return c.opts.ProviderIDPrefix + name }

// aliases are the other provider IDs of a server.
func (c *Cloud) aliases(name string) []string {
	if canonical := cloud.ProviderID(Name, name); canonical != c.ProviderID(name) {
		return []string{canonical}
	}
	return nil
}

// CheckOptions implements cloud.Provider.
func (c *Cloud) CheckOptions(opts map[string]string) []*cloud.OptionError {
	errs := cloud.CheckKnownOptions(opts, OptionDisks, OptionNetworks, OptionBillingCycle, OptionMonthlyPackage,
		OptionDailyBackup, OptionManaged, OptionNamePrefix, OptionSSHKey, OptionScriptBase64, OptionScriptFile)
	bad := func(k, detail string) { errs = append(errs, &cloud.OptionError{Key: k, Detail: detail}) }
	if v, ok := opts[OptionBillingCycle]; ok && v != "hourly" && v != "monthly" {
		bad(OptionBillingCycle, "must be hourly or monthly")
	}
	for _, k := range []string{OptionDailyBackup, OptionManaged} {
		if v, ok := opts[k]; ok {
			if _, err := strconv.ParseBool(v); err != nil {
				bad(k, "must be true or false")
			}
		}
	}
	for _, k := range []string{OptionDisks, OptionNetworks} {
		if v, ok := opts[k]; ok && strings.TrimSpace(v) == "" {
			bad(k, "must list at least one spec")
		}
	}
	if v, ok := opts[OptionNamePrefix]; ok && (len(v) > MaxNameLength || !namePattern.MatchString(v)) {
		bad(OptionNamePrefix, fmt.Sprintf("must be at most %d letters, digits and dashes, starting with a letter", MaxNameLength))
	}
	if v, ok := opts[OptionScriptBase64]; ok {
		if _, err := base64.StdEncoding.DecodeString(v); err != nil {
			bad(OptionScriptBase64, "is not base64: "+err.Error())
		}
	}
	if v, ok := opts[OptionScriptFile]; ok {
		switch {
		case !filepath.IsAbs(v):
			bad(OptionScriptFile, "must be an absolute path")
		case opts[OptionScriptBase64] != "":
			bad(OptionScriptFile, "give the script once: scriptFile or scriptBase64")
		}
	}
	return errs
}

var namePattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*$`)

// ParseType splits an instance type "<cores><cpu type>-<ram MB>" (as
// "4B-8192") into the API's cpu and ram values.
func ParseType(name string) (cpu string, ramMB int, err error) {
	cpu, ram, ok := strings.Cut(name, "-")
	n, perr := strconv.Atoi(ram)
	if !ok || perr != nil || n <= 0 || len(cpu) < 2 || strings.Trim(cpu[:len(cpu)-1], "0123456789") != "" || cpu[len(cpu)-1] < 'A' || cpu[len(cpu)-1] > 'Z' {
		return "", 0, fmt.Errorf("instance type %q: want <cores><cpu type>-<ram MB>, e.g. 4B-8192", name)
	}
	return cpu, n, nil
}

// TypeName is the instance type of a cpu and ram configuration.
func TypeName(cpu string, ramMB int) string { return cpu + "-" + strconv.Itoa(ramMB) }

// InstanceTypes returns every CPU and RAM combination the datacenters
// sell. Kamatera publishes no prices through its API: types are priced 0.
func (c *Cloud) InstanceTypes(ctx context.Context) ([]cloud.InstanceType, error) {
	if err := c.loadCatalog(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.catalog), nil
}

// Offerings returns each type in each datacenter that sells it, on demand
// (Kamatera has no spot), all available: a stock-out shows only when an
// order fails.
func (c *Cloud) Offerings(ctx context.Context) ([]cloud.Offering, error) {
	if err := c.loadCatalog(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.offerings), nil
}

func (c *Cloud) loadCatalog(ctx context.Context) error {
	c.mu.Lock()
	fresh := c.catalog != nil && time.Since(c.catalogAt) < catalogTTL
	c.mu.Unlock()
	if fresh {
		return nil
	}
	dcs := c.opts.Datacenters
	if len(dcs) == 0 {
		all, err := c.api.Datacenters(ctx)
		if err != nil {
			return err
		}
		for _, d := range all {
			dcs = append(dcs, d.ID)
		}
	}
	types := map[string]cloud.InstanceType{}
	var offerings []cloud.Offering
	for _, dc := range dcs {
		caps, err := c.api.Capabilities(ctx, dc)
		if err != nil {
			return fmt.Errorf("datacenter %s: %w", dc, err)
		}
		for _, ct := range caps.CPUTypes {
			for _, cores := range ct.CPUCores {
				for _, ram := range ct.RAMMB {
					if ram < 1024 || ram%1024 != 0 {
						continue // below a GiB, or not whole GiBs: no use to a node
					}
					name := TypeName(strconv.Itoa(cores)+ct.ID, ram)
					types[name] = cloud.InstanceType{Name: name, VCPUs: cores, MemoryGiB: ram / 1024, Arch: "amd64"}
					offerings = append(offerings, cloud.Offering{InstanceType: name, Location: dc, CapacityType: cloud.OnDemand, Available: true})
				}
			}
		}
	}
	catalog := make([]cloud.InstanceType, 0, len(types))
	for _, t := range types {
		catalog = append(catalog, t)
	}
	slices.SortFunc(catalog, func(a, b cloud.InstanceType) int { return strings.Compare(a.Name, b.Name) })
	c.mu.Lock()
	c.catalog, c.offerings, c.catalogAt = catalog, offerings, time.Now()
	c.mu.Unlock()
	return nil
}

// ownership reads a server's tags: whether it is this cluster's, its
// group or launch owner, and the install that ordered it.
func (c *Cloud) ownership(tags []string) (ours bool, group, owner, install string) {
	for _, t := range tags {
		switch {
		case t == tagCluster+c.opts.ClusterName:
			ours = true
		case strings.HasPrefix(t, tagInstall):
			install = strings.TrimPrefix(t, tagInstall)
		case strings.HasPrefix(t, tagGroup):
			group = strings.TrimPrefix(t, tagGroup)
		case strings.HasPrefix(t, tagOwner):
			owner = strings.TrimPrefix(t, tagOwner)
		}
	}
	if group != "" {
		owner = ""
	}
	return ours && (group != "" || owner != ""), group, owner, install
}

// tags returns the tags an order puts on its server.
func (c *Cloud) tags(spec cloud.CreateSpec) []string {
	tags := []string{tagCluster + c.opts.ClusterName, tagGroup + spec.Group}
	if spec.Group == "" && spec.Owner != "" {
		tags[1] = tagOwner + spec.Owner
	}
	if spec.Install != "" {
		tags = append(tags, tagInstall+spec.Install)
	}
	return tags
}

// List returns the cluster's servers. Each server's tags are read once
// and cached (servers are never re-tagged), and each of the cluster's
// servers' details once, so a steady state costs one call per list
// whatever the number of servers.
func (c *Cloud) List(ctx context.Context) ([]cloud.Instance, error) {
	rows, err := c.api.ListServers(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	listed, ours := map[string]bool{}, map[string]bool{}
	var out []cloud.Instance
	for _, row := range rows {
		if c.opts.FilterNamePrefix != "" && !strings.HasPrefix(row.Name, c.opts.FilterNamePrefix) {
			continue
		}
		listed[row.Name] = true
		sv, err := c.learn(ctx, row, now)
		if err != nil {
			return nil, err
		}
		if sv == nil || !sv.ours {
			continue
		}
		ours[row.Name] = true
		out = append(out, c.instance(row, sv))
	}
	c.mu.Lock()
	for name := range c.known {
		if !listed[name] {
			delete(c.known, name)
			delete(c.stopping, name)
		}
	}
	c.mu.Unlock()
	out = append(out, c.pendingCreates(ctx, ours, now)...)
	return out, nil
}

// learn returns what is known of a listed server, reading its tags (once)
// and, for the cluster's servers, its details (once); nil when the
// server went away meanwhile.
func (c *Cloud) learn(ctx context.Context, row Server, now time.Time) (*server, error) {
	c.mu.Lock()
	sv, ok := c.known[row.Name]
	if ok && row.ID != "" && sv.id != "" && sv.id != row.ID {
		ok = false // a new server under an old name
	}
	if ok && !sv.untaggedAt.IsZero() && (now.Sub(sv.untaggedAt) >= untaggedTTL || c.limbo[row.Name] != nil) {
		ok = false // no tags then: perhaps they were still being applied
	}
	c.mu.Unlock()
	if !ok {
		tags, err := c.api.ServerTags(ctx, row.Name)
		if err != nil {
			// A server deleted since the list fails its tag lookup.
			if _, ierr := c.api.ServerInfo(ctx, row.Name); errors.Is(ierr, cloud.ErrNotFound) {
				return nil, nil
			}
			// Any other failure fails the list, or an owned server would
			// look vanished and be ordered again; but a server whose tags
			// stay unreadable list after list is skipped, so that one
			// broken server (most likely not ours) cannot stop every sync.
			c.mu.Lock()
			c.tagFailures[row.Name]++
			n, inLimbo := c.tagFailures[row.Name], c.limbo[row.Name] != nil
			c.mu.Unlock()
			if n >= tagFailureLimit && !inLimbo {
				c.log.Warn("kamatera: the tags of a server stay unreadable; skipping it", "server", row.Name, "lists", n, "error", err)
				return nil, nil
			}
			return nil, fmt.Errorf("tags of server %s: %w", row.Name, err)
		}
		sv = &server{id: row.ID, firstSeen: now, datacenter: row.Datacenter}
		sv.ours, sv.group, sv.owner, sv.install = c.ownership(tags)
		if len(tags) == 0 {
			sv.untaggedAt = now
		}
		c.mu.Lock()
		delete(c.tagFailures, row.Name)
		c.known[row.Name] = sv
		c.mu.Unlock()
	}
	if sv.ours && !sv.detailed {
		info, err := c.api.ServerInfo(ctx, row.Name)
		switch {
		case errors.Is(err, cloud.ErrNotFound):
			return nil, nil
		case err != nil:
			// Details only add the type and address: try again next list.
			c.log.Debug("kamatera: server details unavailable", "server", row.Name, "error", err)
		default:
			c.mu.Lock()
			sv.detailed, sv.id = true, info.ID
			if info.Datacenter != "" {
				sv.datacenter = info.Datacenter
			}
			if info.CPU != "" && info.RAM > 0 {
				sv.instanceType = TypeName(info.CPU, info.RAM)
			}
			sv.ip = publicIP(info)
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := *sv
	return &cp, nil
}

// publicIP is the first address of a WAN network, else the first address.
func publicIP(info ServerInfo) string {
	var first string
	for _, n := range info.Networks {
		for _, ip := range n.IPs {
			if strings.HasPrefix(n.Network, "wan") {
				return ip
			}
			if first == "" {
				first = ip
			}
		}
	}
	return first
}

func (c *Cloud) instance(row Server, sv *server) cloud.Instance {
	inst := cloud.Instance{
		ID: sv.id, Name: row.Name, ProviderID: c.ProviderID(row.Name), Aliases: c.aliases(row.Name),
		Group: sv.group, Owner: sv.owner, InstanceType: sv.instanceType, Location: row.Datacenter,
		CapacityType: cloud.OnDemand, CreatedAt: sv.firstSeen, IP: sv.ip, State: cloud.StateRunning, Install: sv.install,
	}
	if inst.ID == "" {
		inst.ID = row.ID
	}
	if inst.Location == "" {
		inst.Location = sv.datacenter // list rows may lack it; the details have it
	}
	if row.Power != "on" {
		c.mu.Lock()
		stopping := c.stopping[row.Name]
		c.mu.Unlock()
		// Powered off by gpuscaler on its way out, or by someone else:
		// either way it serves no more and is deleted (and replaced).
		inst.State = cloud.StateStopped
		if stopping {
			inst.State = cloud.StateDeleting
		}
	}
	return inst
}

// pendingCreates reports the creates whose answer was lost and that may
// still land as pending instances, until a list shows the server as the
// cluster's. It follows the queue for each: a create whose own answer was
// lost (no command id) is looked up in the account's queue by server
// name, as Kamatera's own cluster tool does; a failed command never made
// its server and is reported as a failed instance (its log classed) for
// LostCreateWindow, so the core fails the order, not re-sends it; a
// complete one did make it, and the server stays pending here until it
// is listed. Creates whose command is never found are given
// LostCreateWindow, and any at most CommandTimeout plus that window.
func (c *Cloud) pendingCreates(ctx context.Context, ours map[string]bool, now time.Time) []cloud.Instance {
	c.mu.Lock()
	lost := make(map[string]lostCreate, len(c.limbo))
	for name, l := range c.limbo {
		lost[name] = *l
	}
	c.mu.Unlock()
	c.findCommands(ctx, lost, ours)
	var out []cloud.Instance
	for name, l := range lost {
		done := ours[name]
		switch {
		case done:
		case l.failure != nil:
			done = now.Sub(l.failedAt) > c.opts.LostCreateWindow
		case !l.completedAt.IsZero():
			done = now.Sub(l.completedAt) > c.opts.LostCreateWindow
		case l.command == "":
			done = now.Sub(l.since) > c.opts.LostCreateWindow
		default:
			done = now.Sub(l.since) > c.api.opts.CommandTimeout+c.opts.LostCreateWindow
			if cmd, err := c.api.Command(ctx, l.command); err == nil {
				switch cmd.Status {
				case "error":
					l.failure, l.failedAt, done = c.api.commandFailure(l.command, cmd), now, false
				case "complete":
					l.completedAt = now
				}
				c.update(name, l)
			}
		}
		if done {
			c.mu.Lock()
			delete(c.limbo, name)
			c.mu.Unlock()
			continue
		}
		in := cloud.Instance{
			Name: name, ProviderID: c.ProviderID(name), Aliases: c.aliases(name), Group: l.spec.Group, Owner: l.spec.Owner,
			InstanceType: l.spec.InstanceType, Location: l.spec.Location, CapacityType: cloud.OnDemand,
			State: cloud.StatePending, CreatedAt: l.since, Install: l.spec.Install,
		}
		if l.failure != nil {
			in.State, in.Error, in.ErrorClass = cloud.StateFailed, l.failure.Error(), createFailureClass(l.failure)
		}
		out = append(out, in)
	}
	return out
}

// findCommands looks up, in one read of the account's queue, the create
// commands of lost creates whose id never came back.
func (c *Cloud) findCommands(ctx context.Context, lost map[string]lostCreate, ours map[string]bool) {
	var unknown []string
	for name, l := range lost {
		if l.command == "" && !ours[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return
	}
	entries, err := c.api.ListQueue(ctx)
	if err != nil {
		c.log.Warn("kamatera: could not read the queue for lost creates; trying again at the next list", "error", err)
		return
	}
	for _, name := range unknown {
		for _, e := range entries {
			if strings.EqualFold(e.CommandInfo, "Create Server") && strings.HasPrefix(e.ServiceName, name) {
				l := lost[name]
				l.command = e.IDString()
				lost[name] = l
				c.update(name, l)
				break
			}
		}
	}
}

// update writes back what a list learnt of a lost create.
func (c *Cloud) update(name string, l lostCreate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.limbo[name]; e != nil {
		*e = l
	}
}

// createFailureClass classes a failed create command as Create does: a
// log that says nothing known is taken for a stock-out, so the next
// datacenter is tried rather than this one again.
func createFailureClass(err error) error {
	if class := cloud.Class(err); !errors.Is(class, cloud.ErrTransient) {
		return class
	}
	return cloud.ErrCapacity
}

// Create orders one server and waits for its queue command: Kamatera
// shows a server only once it is made, and a failed order's class
// (capacity, quota, invalid) is known only from the command's log. A
// failed command leaves nothing: a half-made server is terminated.
func (c *Cloud) Create(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error) {
	req, err := c.request(spec)
	if err != nil {
		return cloud.Instance{}, cloud.NewError(cloud.ErrInvalid, "create", err)
	}
	start := time.Now()
	cmd, generated, err := c.api.CreateServer(ctx, req)
	if errors.Is(err, cloud.ErrOutcomeUnknown) {
		c.remember(spec, "")
		return cloud.Instance{}, err
	}
	if err != nil {
		return cloud.Instance{}, err
	}
	if _, err := c.api.WaitCommand(ctx, cmd, generated, req.Password); err != nil {
		if !errors.Is(err, ErrCommandFailed) {
			// The command may still run: the server is looked up by name.
			c.remember(spec, cmd)
			return cloud.Instance{}, cloud.NewError(cloud.ErrOutcomeUnknown, "create", err)
		}
		if err := c.cleanUp(spec.Name); err != nil {
			// A server may be left: it must be found, not ordered again.
			c.remember(spec, "")
			return cloud.Instance{}, cloud.NewError(cloud.ErrOutcomeUnknown, "create", err)
		}
		var ce *cloud.Error
		if !cloud.IsClass(err, createFailureClass(err)) && errors.As(err, &ce) {
			return cloud.Instance{}, cloud.Errorf(cloud.ErrCapacity, "create", "unexplained failure, taken for a stock-out: %w", ce.Err)
		}
		return cloud.Instance{}, err
	}
	// The tags are the order's: the server's first list needs no lookup.
	c.mu.Lock()
	c.known[spec.Name] = &server{ours: true, group: spec.Group, owner: spec.Owner, install: spec.Install, instanceType: spec.InstanceType, firstSeen: start}
	c.mu.Unlock()
	return cloud.Instance{
		Name: spec.Name, ProviderID: c.ProviderID(spec.Name), Aliases: c.aliases(spec.Name),
		Group: spec.Group, Owner: spec.Owner, InstanceType: spec.InstanceType, Location: spec.Location,
		CapacityType: cloud.OnDemand, State: cloud.StatePending, CreatedAt: start, Install: spec.Install,
	}, nil
}

func (c *Cloud) remember(spec cloud.CreateSpec, command string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limbo[spec.Name] = &lostCreate{spec: spec, since: time.Now(), command: command}
}

// cleanUp terminates what a failed create command may have left; an
// error says a server may be left.
func (c *Cloud) cleanUp(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := c.api.ServerInfo(ctx, name)
	switch {
	case errors.Is(err, cloud.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("after a failed create, could not tell whether it left server %s: %w", name, err)
	}
	c.log.Warn("kamatera: a failed create left a server; terminating it", "server", name)
	if err := c.api.Terminate(ctx, name); err != nil {
		return fmt.Errorf("could not terminate server %s a failed create left: %w", name, err)
	}
	return nil
}

// request builds the API's create body from an order.
func (c *Cloud) request(spec cloud.CreateSpec) (CreateRequest, error) {
	if spec.CapacityType == cloud.Spot {
		return CreateRequest{}, errors.New("no spot servers on Kamatera")
	}
	cpu, ram, err := ParseType(spec.InstanceType)
	if err != nil {
		return CreateRequest{}, err
	}
	o := spec.Options
	image := spec.Image
	if image == "" {
		image = c.opts.Image
	}
	if image == "" {
		return CreateRequest{}, errors.New("no image: set the group's image or clouds.kamatera.image")
	}
	disks := o[OptionDisks]
	if disks == "" {
		size := spec.DiskGiB
		if size == 0 {
			size = defaultDiskGiB
		}
		disks = "size=" + strconv.Itoa(size)
	}
	networks := o[OptionNetworks]
	if networks == "" {
		networks = defaultNetwork
	}
	billing := o[OptionBillingCycle]
	if billing == "" {
		billing = "hourly"
	}
	script := spec.UserData
	if script == "" && o[OptionScriptFile] != "" {
		if script = c.opts.Scripts[spec.Group]; script == "" {
			return CreateRequest{}, fmt.Errorf("%s %s was not read at start-up", OptionScriptFile, o[OptionScriptFile])
		}
	}
	if script == "" && o[OptionScriptBase64] != "" {
		b, err := base64.StdEncoding.DecodeString(o[OptionScriptBase64])
		if err != nil {
			return CreateRequest{}, fmt.Errorf("%s: %w", OptionScriptBase64, err)
		}
		script = string(b)
	}
	if f := c.opts.FilterNamePrefix; f != "" && !strings.HasPrefix(spec.Name, f) {
		// List would never see the server: it would be ordered again and again.
		return CreateRequest{}, fmt.Errorf("server name %q does not start with the filter name prefix %q", spec.Name, f)
	}
	tags := c.tags(spec)
	for _, t := range tags {
		if !tagPattern.MatchString(t) {
			return CreateRequest{}, fmt.Errorf("tag %q is not a valid Kamatera tag (at most %d characters in cluster and group names)", t, MaxNameLength)
		}
	}
	password := c.opts.Passwords[spec.Group]
	if password == "" {
		password = generatePassword
	}
	return CreateRequest{
		Name: spec.Name, Password: password, PasswordValidate: password, SSHKey: o[OptionSSHKey],
		Datacenter: spec.Location, Image: image, CPU: cpu, RAM: strconv.Itoa(ram),
		Disk: strings.Join(strings.Fields(disks), " "), Network: strings.Join(strings.Fields(networks), " "),
		DailyBackup: yesNo(o[OptionDailyBackup]), Managed: yesNo(o[OptionManaged]),
		BillingCycle: billing, MonthlyPackage: o[OptionMonthlyPackage], PowerOnAfter: "yes",
		ScriptFile: script, Tag: strings.Join(tags, " "),
	}, nil
}

func yesNo(v string) string {
	if b, _ := strconv.ParseBool(v); b {
		return "yes"
	}
	return "no"
}

// Delete powers a server off, then terminates it, as the seed autoscaler
// did; a server already gone is success. A create still in doubt is
// forgotten, and its server, should it land, is a leftover the core
// deletes.
func (c *Cloud) Delete(ctx context.Context, inst cloud.Instance) (err error) {
	c.mu.Lock()
	delete(c.limbo, inst.Name)
	c.stopping[inst.Name] = true
	c.mu.Unlock()
	defer func() {
		if err != nil {
			// Not on its way out after all: listed powered off, it is
			// stopped, and deleted again.
			c.mu.Lock()
			delete(c.stopping, inst.Name)
			c.mu.Unlock()
		}
	}()
	if inst.State != cloud.StateStopped {
		cmd, err := c.api.PowerOff(ctx, inst.Name)
		if err == nil {
			_, err = c.api.WaitCommand(ctx, cmd)
		}
		if err != nil && !errors.Is(err, cloud.ErrNotFound) {
			c.log.Info("kamatera: power-off failed; terminating anyway", "server", inst.Name, "error", err)
		}
	}
	return c.api.Terminate(ctx, inst.Name)
}
