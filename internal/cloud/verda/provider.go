package verda

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Name is Verda's name in provider IDs and config.
const Name = "verda"

// LegacyScheme is the provider-ID scheme the DataCrunch autoscaler wrote.
const LegacyScheme = "datacrunch"

// Keys of a node group's cloudOptions that the Verda backend reads.
const (
	OptionSSHKeyIDs         = "sshKeyIDs"         // comma-separated
	OptionContract          = "contract"          // LONG_TERM, PAY_AS_YOU_GO, SPOT
	OptionPricing           = "pricing"           // FIXED_PRICE, DYNAMIC_PRICE
	OptionStartupScriptID   = "startupScriptID"   // a stored script, used when gpuscaler renders none
	OptionOnSpotDiscontinue = "onSpotDiscontinue" // keep_detached, move_to_trash, delete_permanently
	// OptionStartupScriptBase64 is a static startup script (base64), uploaded
	// per instance and deleted after boot when gpuscaler renders none.
	OptionStartupScriptBase64 = "startupScriptBase64"
)

const (
	catalogTTL     = 10 * time.Minute
	scriptSweepTTL = 10 * time.Minute
	// lostUploadWindow is how long after an upload whose answer was
	// lost every list sweeps the script store: a request the client gave
	// up on (a timeout, a process stopping its core) may still be carried
	// out by the API after the first sweep.
	lostUploadWindow = time.Minute
	defaultImage     = "ubuntu-24.04-cuda-12.8-open-docker"
)

// Options configure the Verda backend.
type Options struct {
	// ClusterName marks the instances this cluster owns.
	ClusterName string
	// Image is used when a group names none.
	Image string
	// SSHKeyIDs are used when a group names none.
	SSHKeyIDs []string
	// LegacyGroups, when set, adopts instances the seed autoscalers made for
	// these groups: description equal to the group name (DataCrunch), or
	// hostname "<group>-<8 hex>" (ca-verda). Names alone say nothing of the
	// cluster, so an instance is adopted only when LegacyInCluster says a
	// Node of this cluster carries one of its provider IDs; without it none
	// is.
	LegacyGroups []string
	// LegacyInCluster reports whether a Node of this cluster carries one of
	// the provider IDs; synced is false while it cannot tell yet.
	LegacyInCluster func(providerIDs ...string) (inCluster, synced bool)
	// ScriptFetchURL, when set, is asked (POST) for a stored startup
	// script's ID before each order that carries no script of its own, as
	// the DataCrunch autoscaler did with DATACRUNCH_STARTUP_SCRIPT_FETCH_URL.
	ScriptFetchURL string
	// HTTPClient calls ScriptFetchURL; default one with a 30 s timeout.
	HTTPClient *http.Client
	// ScriptGrace is how long an order may stay invisible in the instance
	// list before its script is taken for one that never landed; default 1m.
	ScriptGrace time.Duration
	// OfflineGrace is how long an instance may stay offline (a shutdown, a
	// reboot, host maintenance) before it is taken for lost, deleted and
	// replaced; default 10m. A discontinued spot instance is lost at once.
	OfflineGrace time.Duration
	Logger       *slog.Logger
}

// Cloud is a Verda account as a cloud.Provider.
type Cloud struct {
	api  *Client
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	catalog   []cloud.InstanceType
	catalogAt time.Time
	// scripts maps hostnames to the per-instance startup script uploaded
	// for them, deleted once the instance runs or is gone.
	scripts   map[string]trackedScript
	creating  map[string]bool
	lastSweep time.Time
	// sweepUntil: every list sweeps until then (see lostUploadWindow).
	sweepUntil time.Time
	// discontinued are the ids of spot instances the last list showed
	// discontinued: their OS volume has met its on_spot_discontinue fate,
	// which their delete must not override.
	discontinued map[string]bool
	// offlineSince is when each offline instance was first listed so.
	offlineSince map[string]time.Time
}

var _ cloud.Provider = (*Cloud)(nil)

// New returns the backend over a client.
func New(api *Client, opts Options) *Cloud {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Image == "" {
		opts.Image = defaultImage
	}
	if opts.ScriptGrace == 0 {
		opts.ScriptGrace = defaultScriptGrace
	}
	if opts.OfflineGrace == 0 {
		opts.OfflineGrace = defaultOfflineGrace
	}
	// The process before this one may have left uploads in flight that
	// land after the first list: the lists sweep for a while.
	return &Cloud{api: api, opts: opts, log: opts.Logger, scripts: map[string]trackedScript{}, creating: map[string]bool{}, discontinued: map[string]bool{},
		offlineSince: map[string]time.Time{}, sweepUntil: time.Now().Add(lostUploadWindow)}
}

// LimitsRequests implements cloud.RequestLimiter: the client holds the
// request budget (ClientOptions.RequestsPerSecond).
func (c *Cloud) LimitsRequests() bool { return true }

// Name returns "verda".
func (c *Cloud) Name() string { return Name }

// InstanceTypes returns the catalog, cached for ten minutes.
func (c *Cloud) InstanceTypes(ctx context.Context) ([]cloud.InstanceType, error) {
	c.mu.Lock()
	if c.catalog != nil && time.Since(c.catalogAt) < catalogTTL {
		defer c.mu.Unlock()
		return append([]cloud.InstanceType(nil), c.catalog...), nil
	}
	c.mu.Unlock()
	raw, err := c.api.InstanceTypes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cloud.InstanceType, 0, len(raw))
	for _, t := range raw {
		out = append(out, convertType(t))
	}
	c.mu.Lock()
	c.catalog, c.catalogAt = out, time.Now()
	c.mu.Unlock()
	return append([]cloud.InstanceType(nil), out...), nil
}

// convertType maps an API instance type to the catalog entry.
func convertType(t InstanceType) cloud.InstanceType {
	gpus := t.GPU.NumberOfGPUs
	perGPU := 0
	if gpus > 0 {
		perGPU = t.GPUMemory.SizeInGigabytes / gpus
	}
	return cloud.InstanceType{
		Name: t.InstanceType, GPUModel: gpuModel(t.InstanceType, perGPU), GPUCount: gpus, GPUMemoryGiB: perGPU,
		VCPUs: t.CPU.NumberOfCores, MemoryGiB: t.Memory.SizeInGigabytes, DiskGiB: t.Storage.SizeInGigabytes,
		Arch: arch(t.InstanceType), Images: t.SupportedOS,
		OnDemandPrice: float64(t.PricePerHour), SpotPrice: float64(t.SpotPrice),
	}
}

// arch derives a type's CPU architecture, which the API does not report,
// from its GPU family: Grace-Blackwell and Grace-Hopper superchips (GB200,
// GB300, GH200: names with a "GB" or "GH" family) have Arm Neoverse
// (arm64) CPUs; every other type is x86-64. docs/clouds/verda.md keeps the
// table.
func arch(typeName string) string {
	family := strings.SplitN(strings.TrimLeft(typeName, "0123456789"), ".", 2)[0]
	if strings.HasPrefix(family, "GB") || strings.HasPrefix(family, "GH") {
		return "arm64"
	}
	return "amd64"
}

// fallbackImages are tried, in order, when a type does not accept the
// group's image: images with the NVIDIA driver and a container runtime,
// newest first, then plain Ubuntu. docs/clouds/verda.md lists them.
var fallbackImages = []string{
	"ubuntu-24.04-cuda-12.8-open-docker", "ubuntu-24.04-cuda-13.0-open-docker",
	"ubuntu-22.04-cuda-12.8-open-docker", "ubuntu-22.04-cuda-12.0-docker", "ubuntu-24.04", "ubuntu-22.04",
}

// Image implements cloud.ImageChooser with imageFor over the catalog; ""
// asks for the default image (Options.Image).
func (c *Cloud) Image(ctx context.Context, instanceType, image string) (string, bool, error) {
	if image == "" {
		image = c.opts.Image
	}
	types, err := c.InstanceTypes(ctx)
	if err != nil {
		return image, false, err
	}
	for _, t := range types {
		if t.Name == instanceType {
			chosen, changed := imageFor(t, image)
			return chosen, changed, nil
		}
	}
	return image, false, nil
}

// imageFor chooses the image of an order: the wanted one when the type
// accepts it or says nothing (an empty supported_os), else the first of
// fallbackImages it accepts, else the first it lists. changed reports a
// substitution.
func imageFor(t cloud.InstanceType, wanted string) (image string, changed bool) {
	if len(t.Images) == 0 || slices.Contains(t.Images, wanted) {
		return wanted, false
	}
	for _, img := range fallbackImages {
		if slices.Contains(t.Images, img) {
			return img, true
		}
	}
	return t.Images[0], true
}

// gpuModel maps a type name ("8H100.80S.176V") and per-GPU memory to a key
// of internal/gpu; "" for CPU types and unknown GPUs.
func gpuModel(typeName string, memGB int) string {
	family := strings.SplitN(strings.TrimLeft(typeName, "0123456789"), ".", 2)[0]
	switch family {
	case "H100":
		return "H100-80GB"
	case "H200":
		return "H200-141GB"
	case "A100":
		if memGB > 0 && memGB <= 40 || strings.Contains(typeName, ".40S.") {
			return "A100-40GB"
		}
		return "A100-80GB"
	case "V100":
		return "V100-16GB"
	case "B200", "B300", "GB300", "L40S", "RTX6000ADA", "A6000", "RTXPRO6000":
		return family
	}
	return ""
}

// Offerings returns every catalog type in every location, available where
// the availability endpoints list it now.
func (c *Cloud) Offerings(ctx context.Context) ([]cloud.Offering, error) {
	types, err := c.InstanceTypes(ctx)
	if err != nil {
		return nil, err
	}
	var out []cloud.Offering
	for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
		avail, err := c.api.Availability(ctx, ct == cloud.Spot)
		if err != nil {
			return nil, err
		}
		for _, loc := range avail {
			now := map[string]bool{}
			for _, t := range loc.Availabilities {
				now[t] = true
			}
			for _, t := range types {
				if ct == cloud.Spot && t.SpotPrice == 0 {
					continue
				}
				out = append(out, cloud.Offering{
					InstanceType: t.Name, Location: loc.LocationCode, CapacityType: ct,
					Available: now[t.Name], Price: t.Price(ct),
				})
			}
		}
	}
	return out, nil
}

// description marks an instance as owned by a cluster and group, or, for
// an instance launched outside any group, by a cluster and owner.
func description(cluster, group, launchOwner string) string {
	if group == "" && launchOwner != "" {
		return fmt.Sprintf("gpuscaler cluster=%s owner=%s", cluster, launchOwner)
	}
	return fmt.Sprintf("gpuscaler cluster=%s group=%s", cluster, group)
}

// owner parses description; ok is false for instances of other clusters.
func owner(desc, cluster string) (group, launchOwner string, ok bool) {
	fields := strings.Fields(desc)
	if len(fields) != 3 || fields[0] != "gpuscaler" || fields[1] != "cluster="+cluster {
		return "", "", false
	}
	if g, found := strings.CutPrefix(fields[2], "group="); found {
		return g, "", true
	}
	if o, found := strings.CutPrefix(fields[2], "owner="); found && o != "" {
		return "", o, true
	}
	return "", "", false
}

// List returns the cluster's instances and deletes the startup scripts of
// instances that run or are gone.
func (c *Cloud) List(ctx context.Context) ([]cloud.Instance, error) {
	start := time.Now()
	raw, err := c.api.ListInstances(ctx)
	if err != nil {
		return nil, err
	}
	var out []cloud.Instance
	states := map[string]cloud.InstanceState{}
	c.mu.Lock()
	offlineBefore := c.offlineSince
	c.mu.Unlock()
	discontinued, offline := map[string]bool{}, map[string]time.Time{}
	for _, in := range raw {
		group, launchOwner, ok := owner(in.Description, c.opts.ClusterName)
		if !ok {
			group, ok = c.legacyOwner(in)
		}
		if !ok {
			continue
		}
		inst := convertInstance(in, group)
		inst.Owner = launchOwner
		for _, t := range in.Tags {
			if t.Key == tagInstall {
				inst.Install = t.Value
			}
		}
		switch in.Status {
		case StatusDiscontinued:
			discontinued[in.ID] = true
		case StatusOffline:
			// Lost only once it stays offline past the grace: a shutdown
			// or a reboot shows offline too.
			since, seen := offlineBefore[in.ID]
			if !seen {
				since = start
			}
			offline[in.ID] = since
			if start.Sub(since) >= c.opts.OfflineGrace {
				inst.State = cloud.StateStopped
			}
		}
		states[in.Hostname] = inst.State
		out = append(out, inst)
	}
	c.mu.Lock()
	c.discontinued, c.offlineSince = discontinued, offline
	c.mu.Unlock()
	c.cleanScripts(ctx, start, states)
	return out, nil
}

// legacyOwner finds the group of an instance a seed autoscaler created for
// this cluster: named like one of its groups, and with its Node here.
func (c *Cloud) legacyOwner(in Instance) (string, bool) {
	if len(c.opts.LegacyGroups) == 0 || c.opts.LegacyInCluster == nil {
		return "", false
	}
	group, ok := c.legacyGroup(in)
	if !ok {
		return "", false
	}
	pids := convertInstance(in, group)
	here, synced := c.opts.LegacyInCluster(append([]string{pids.ProviderID}, pids.Aliases...)...)
	return group, here && synced
}

// legacyGroup matches an instance's name to a legacy group.
func (c *Cloud) legacyGroup(in Instance) (string, bool) {
	for _, g := range c.opts.LegacyGroups {
		if in.Description == g {
			return g, true
		}
		if suffix, ok := strings.CutPrefix(in.Hostname, g+"-"); ok && len(suffix) == 8 && strings.Trim(suffix, "0123456789abcdef") == "" {
			return g, true
		}
	}
	return "", false
}

func convertInstance(in Instance, group string) cloud.Instance {
	ct := cloud.OnDemand
	if in.IsSpot || in.Contract == "SPOT" {
		ct = cloud.Spot
	}
	out := cloud.Instance{
		ID: in.ID, Name: in.Hostname, ProviderID: cloud.ProviderID(Name, in.Hostname),
		Aliases: []string{cloud.ProviderID(Name, in.ID), cloud.ProviderID(LegacyScheme, in.ID)},
		Group:   group, InstanceType: in.InstanceType, Location: in.Location, CapacityType: ct,
		CreatedAt: in.CreatedAt,
	}
	if in.IP != nil {
		out.IP = *in.IP
	}
	switch in.Status {
	case StatusRunning:
		out.State = cloud.StateRunning
	case StatusDeleting:
		out.State = cloud.StateDeleting
	case StatusDiscontinued:
		// A spot instance reclaimed: still in the account, so the core
		// deletes it.
		out.State = cloud.StateStopped
	case StatusOffline:
		// Not serving; List takes it for lost after Options.OfflineGrace.
		out.State = cloud.StatePending
	case StatusNoCapacity:
		// The order was taken and found no host (a status the SDKs
		// define, ../shared/reference/cloud-apis.md 1.8): a stock-out, so
		// the core skips the offering as after a create refused for it.
		out.State, out.Error, out.ErrorClass = cloud.StateFailed, "instance status "+in.Status, cloud.ErrCapacity
	case StatusError, StatusNotFound:
		out.State, out.Error = cloud.StateFailed, "instance status "+in.Status
	default:
		out.State = cloud.StatePending
	}
	return out
}

// scriptName names the per-instance script, so a sweep can find leftovers.
func (c *Cloud) scriptName(hostname string) string {
	return "gpuscaler-" + c.opts.ClusterName + "-" + hostname
}

// trackedScript is a per-instance script and when it was recorded.
type trackedScript struct {
	id    string
	since time.Time
	// seen: a list has shown the instance; its absence now means it is gone.
	seen bool
}

// defaultOfflineGrace is Options.OfflineGrace's default.
const defaultOfflineGrace = 10 * time.Minute

// defaultScriptGrace is Options.ScriptGrace's default.
const defaultScriptGrace = time.Minute

// cleanScripts deletes the scripts of instances that left the pending
// state (the script has been handed to the machine) or that a list started
// well after the order does not show; and every few minutes it sweeps the
// account for scripts this cluster left behind (after a restart, say): the
// account holds at most 100.
func (c *Cloud) cleanScripts(ctx context.Context, listStart time.Time, states map[string]cloud.InstanceState) {
	c.mu.Lock()
	done := map[string]string{}
	for host, ts := range c.scripts {
		st, listed := states[host]
		switch {
		case c.creating[host]:
		case listed && st == cloud.StatePending:
			ts.seen = true
			c.scripts[host] = ts
		case listed, ts.seen, ts.since.Before(listStart.Add(-c.opts.ScriptGrace)):
			done[host] = ts.id
		}
	}
	sweep := time.Since(c.lastSweep) > scriptSweepTTL || time.Now().Before(c.sweepUntil)
	if sweep {
		c.lastSweep = time.Now()
	}
	c.mu.Unlock()
	for host, id := range done {
		if err := c.api.DeleteScript(ctx, id); err != nil {
			c.log.Warn("verda: could not delete a startup script; will retry", "hostname", host, "error", err)
			continue
		}
		c.mu.Lock()
		delete(c.scripts, host)
		c.mu.Unlock()
	}
	if !sweep {
		return
	}
	scripts, err := c.api.ListScripts(ctx)
	if err != nil {
		c.log.Warn("verda: script sweep failed; will retry", "error", err)
		c.sweepSoon()
		return
	}
	prefix := c.scriptName("")
	for _, s := range scripts {
		host, ours := strings.CutPrefix(s.Name, prefix)
		c.mu.Lock()
		_, tracked := c.scripts[host]
		creating := c.creating[host]
		c.mu.Unlock()
		if !ours || tracked || creating {
			continue
		}
		if states[host] == cloud.StatePending {
			// Still to boot, and nothing here tracks its script (another
			// process ordered it): the next list looks again rather than
			// one a sweep period later.
			c.sweepSoon()
			continue
		}
		if err := c.api.DeleteScript(ctx, s.ID); err != nil {
			c.log.Warn("verda: could not delete a leftover startup script; will retry", "script", s.Name, "error", err)
			c.sweepSoon()
		}
	}
}

// sweepSoon makes the next list sweep the script store: a script may be
// there that nothing tracks (an upload whose answer was lost, a delete
// that failed), and it holds a join token.
func (c *Cloud) sweepSoon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastSweep = time.Time{}
}

// sweepWhileLost makes every list sweep for lostUploadWindow: an upload
// whose answer was lost may still land after the next one.
func (c *Cloud) sweepWhileLost() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastSweep, c.sweepUntil = time.Time{}, time.Now().Add(lostUploadWindow)
}

// Create uploads the instance's startup script (if it has one) and orders
// the instance. The script is deleted once the instance runs, or at once if
// the order fails.
func (c *Cloud) Create(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error) {
	req := CreateRequest{
		InstanceType: spec.InstanceType, Image: spec.Image, Hostname: spec.Name,
		Description: description(c.opts.ClusterName, spec.Group, spec.Owner), LocationCode: spec.Location,
		SSHKeyIDs: c.opts.SSHKeyIDs, IsSpot: spec.CapacityType == cloud.Spot,
		Contract: spec.Options[OptionContract], Pricing: spec.Options[OptionPricing],
		Tags: ownerTags(c.opts.ClusterName, spec),
	}
	if req.Image == "" {
		req.Image = c.opts.Image
	}
	if img, changed, err := c.Image(ctx, spec.InstanceType, req.Image); err == nil && changed {
		c.log.Debug("verda: the type does not accept the image; ordering a supported one", "type", spec.InstanceType, "image", req.Image, "instead", img)
		req.Image = img
	}
	if ids := spec.Options[OptionSSHKeyIDs]; ids != "" {
		req.SSHKeyIDs = strings.Split(ids, ",")
	}
	if req.SSHKeyIDs == nil {
		req.SSHKeyIDs = []string{}
	}
	if req.IsSpot && req.Contract == "" {
		req.Contract = "SPOT"
	}
	if spec.DiskGiB > 0 || req.IsSpot {
		req.OSVolume = &OSVolume{Name: spec.Name + "-os", Size: spec.DiskGiB}
		if req.OSVolume.Size == 0 {
			req.OSVolume.Size = 100
		}
		if req.IsSpot {
			req.OSVolume.OnSpotDiscontinue = "delete_permanently"
			if v := spec.Options[OptionOnSpotDiscontinue]; v != "" {
				req.OSVolume.OnSpotDiscontinue = v
			}
		}
	}
	c.mu.Lock()
	c.creating[spec.Name] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.creating, spec.Name)
		c.mu.Unlock()
	}()
	var scriptID string
	userData := spec.UserData
	if userData == "" && spec.Options[OptionStartupScriptBase64] != "" {
		b, err := base64.StdEncoding.DecodeString(spec.Options[OptionStartupScriptBase64])
		if err != nil {
			return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "create", "%s is not base64", OptionStartupScriptBase64)
		}
		userData = string(b)
	}
	switch {
	case userData != "":
		id, err := c.api.CreateScript(ctx, c.scriptName(spec.Name), userData)
		if err != nil {
			if errors.Is(err, cloud.ErrOutcomeUnknown) {
				// The script may be in the store, with its join token, or
				// land there later: the lists sweep it out from now on,
				// rather than the one a period on.
				c.sweepWhileLost()
			}
			return cloud.Instance{}, fmt.Errorf("upload startup script: %w", err)
		}
		scriptID = id
		req.StartupScriptID = &id
	case spec.Options[OptionStartupScriptID] != "":
		id := spec.Options[OptionStartupScriptID]
		req.StartupScriptID = &id
	case c.opts.ScriptFetchURL != "":
		id, minted, err := c.fetchScriptID(ctx)
		if err != nil {
			return cloud.Instance{}, err
		}
		if minted {
			scriptID = id // the server made it for this order: deleted as gpuscaler's own
		}
		req.StartupScriptID = &id
	}
	id, err := c.api.CreateInstance(ctx, req)
	if err != nil {
		if scriptID != "" && !errors.Is(err, cloud.ErrOutcomeUnknown) {
			if derr := c.api.DeleteScript(context.WithoutCancel(ctx), scriptID); derr != nil {
				c.log.Warn("verda: could not delete the script of a failed order; the next list's sweep will", "error", derr)
				c.sweepSoon()
			}
		} else if scriptID != "" {
			c.trackScript(spec.Name, scriptID)
		}
		return cloud.Instance{}, err
	}
	if scriptID != "" {
		c.trackScript(spec.Name, scriptID)
	}
	return cloud.Instance{
		ID: id, Name: spec.Name, ProviderID: cloud.ProviderID(Name, spec.Name),
		Aliases: []string{cloud.ProviderID(Name, id), cloud.ProviderID(LegacyScheme, id)},
		Group:   spec.Group, Owner: spec.Owner, InstanceType: spec.InstanceType, Location: spec.Location, CapacityType: spec.CapacityType,
		State: cloud.StatePending, CreatedAt: time.Now(), Install: spec.Install,
	}, nil
}

// tagInstall is the tag that records the install ID of the gpuscaler
// that ordered an instance (cloud.CreateSpec.Install).
const tagInstall = "gpuscaler-install"

// ownerTags are the tags that mark an order's cluster and group (or owner).
func ownerTags(cluster string, spec cloud.CreateSpec) []Tag {
	tags := []Tag{{Key: "gpuscaler-cluster", Value: cluster}}
	if spec.Install != "" {
		tags = append(tags, Tag{Key: tagInstall, Value: spec.Install})
	}
	if spec.Group == "" && spec.Owner != "" {
		return append(tags, Tag{Key: "gpuscaler-owner", Value: spec.Owner})
	}
	return append(tags, Tag{Key: "gpuscaler-group", Value: spec.Group})
}

// fetchScriptID asks the DataCrunch-style script server to store a fresh
// script and answer its ID. minted says the script was not in the account
// before the request (the server made it for this order), so it is this
// order's to delete once the instance has it; a script that was there
// already is someone else's, used and never deleted.
func (c *Cloud) fetchScriptID(ctx context.Context) (id string, minted bool, err error) {
	before, err := c.api.ListScripts(ctx)
	if err != nil {
		return "", false, fmt.Errorf("list startup scripts before asking the script server: %w", err)
	}
	hc := c.opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second, CheckRedirect: httpsRedirectsOnly}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.opts.ScriptFetchURL, nil)
	if err != nil {
		return "", false, cloud.NewError(cloud.ErrInvalid, "fetch_script", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", false, cloud.NewError(cloud.ErrTransient, "fetch_script", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", false, cloud.NewError(cloud.ErrTransient, "fetch_script", err)
	}
	id = strings.Trim(strings.TrimSpace(string(body)), `"`)
	if resp.StatusCode != http.StatusOK || id == "" {
		return "", false, cloud.Errorf(cloud.ErrTransient, "fetch_script", "script server answered %s", resp.Status)
	}
	minted = true
	for _, s := range before {
		if s.ID == id {
			minted = false
			c.log.Warn("verda: the script server answered a startup script that was in the account already; "+
				"nodes run it, and gpuscaler will not delete it", "script", id)
		}
	}
	return id, minted, nil
}

// httpsRedirectsOnly refuses a redirect off https (loopback aside): the
// script server's answer picks what new nodes run as root.
func httpsRedirectsOnly(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	if req.URL.Scheme != "https" && !cloud.IsLoopbackHost(req.URL.Hostname()) {
		return fmt.Errorf("refused a redirect to %s: the script server must be https", req.URL.Redacted())
	}
	return nil
}

func (c *Cloud) trackScript(host, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scripts[host] = trackedScript{id: id, since: time.Now()}
}

// Delete deletes an instance and its OS volume; gone is success.
func (c *Cloud) Delete(ctx context.Context, inst cloud.Instance) error {
	id := inst.ID
	if id == "" {
		insts, err := c.api.ListInstances(ctx)
		if err != nil {
			return err
		}
		for _, in := range insts {
			if in.Hostname != inst.Name {
				continue
			}
			// Only this cluster's, as List takes them: another cluster's
			// instance of the same hostname is not ours to delete.
			if _, _, ok := owner(in.Description, c.opts.ClusterName); !ok {
				if _, ok = c.legacyOwner(in); !ok {
					continue
				}
			}
			id = in.ID
		}
		if id == "" {
			return nil
		}
	}
	// The API's default deletes the OS volume. A discontinued spot
	// instance's volume was already kept, trashed or deleted as its group's
	// onSpotDiscontinue asked (set on the volume at create): delete no
	// volume then.
	var volumes []string
	c.mu.Lock()
	if c.discontinued[id] {
		volumes = []string{}
	}
	c.mu.Unlock()
	err := c.api.DeleteInstances(ctx, []string{id}, volumes)
	if err != nil && !errors.Is(err, cloud.ErrNotFound) {
		return err
	}
	c.dropScript(ctx, inst.Name)
	return nil
}

// dropScript deletes the script of an instance that is gone; a failure is
// left to the next list or sweep.
func (c *Cloud) dropScript(ctx context.Context, host string) {
	c.mu.Lock()
	ts, ok := c.scripts[host]
	c.mu.Unlock()
	if !ok {
		return
	}
	if err := c.api.DeleteScript(ctx, ts.id); err != nil {
		c.log.Warn("verda: could not delete the startup script of a deleted instance; will retry", "hostname", host, "error", err)
		return
	}
	c.mu.Lock()
	delete(c.scripts, host)
	c.mu.Unlock()
}

// Values of the options that take one of a few.
var (
	contracts           = []string{"LONG_TERM", "PAY_AS_YOU_GO", "SPOT"}
	pricings            = []string{"FIXED_PRICE", "DYNAMIC_PRICE"}
	onSpotDiscontinueds = []string{"keep_detached", "move_to_trash", "delete_permanently"}
)

// CheckOptions implements cloud.Provider: the keys Verda reads, each
// value checked as Create would use it.
func (c *Cloud) CheckOptions(opts map[string]string) []*cloud.OptionError {
	errs := cloud.CheckKnownOptions(opts, OptionContract, OptionOnSpotDiscontinue, OptionPricing,
		OptionSSHKeyIDs, OptionStartupScriptBase64, OptionStartupScriptID)
	oneOf := func(key string, values []string) {
		if v, ok := opts[key]; ok && !slices.Contains(values, v) {
			errs = append(errs, &cloud.OptionError{Key: key, Detail: fmt.Sprintf("%q is not one of %s", v, strings.Join(values, ", "))})
		}
	}
	oneOf(OptionContract, contracts)
	oneOf(OptionPricing, pricings)
	oneOf(OptionOnSpotDiscontinue, onSpotDiscontinueds)
	if v, ok := opts[OptionStartupScriptBase64]; ok {
		if _, err := base64.StdEncoding.DecodeString(v); err != nil || v == "" {
			errs = append(errs, &cloud.OptionError{Key: OptionStartupScriptBase64, Detail: "not base64 (standard encoding, with padding)"})
		}
	}
	if v, ok := opts[OptionSSHKeyIDs]; ok {
		for _, id := range strings.Split(v, ",") {
			if strings.TrimSpace(id) == "" {
				errs = append(errs, &cloud.OptionError{Key: OptionSSHKeyIDs, Detail: "a comma-separated list of SSH key IDs, with no empty item"})
				break
			}
		}
	}
	if v, ok := opts[OptionStartupScriptID]; ok && strings.TrimSpace(v) == "" {
		errs = append(errs, &cloud.OptionError{Key: OptionStartupScriptID, Detail: "empty; leave the option out instead"})
	}
	return errs
}
