package provisioner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// LabelProvisionerName is the label Baseten's NodeProvisioner puts on a
// pool's nodes (set in the node pool's template): nodes carrying it
// belong to the pool of that name. The node groups made from a pool's
// existing instance groups give their templates this label.
const LabelProvisionerName = "nodeprovisioner.compute.baseten.co/provisioner-name"

// ExistingGroups turns the existing instance groups NodeProvisioners name
// (existingInstanceGroupNames) into node groups of the core: each MIG is
// read once (its template gives the instance type, the node labels and
// taints) and again after Refresh, and the groups of every pool are put
// in force together through Apply whenever they change.
type ExistingGroups struct {
	// Describer reads a MIG; nil when the config has no GCP cloud, and
	// every pool that names an instance group then says so.
	Describer cloud.GroupDescriber
	// Zone is the zone of bare instance group names (clouds.gcp.zone).
	Zone string
	// ClusterName is the config's clusterName: a MIG whose description
	// carries "gpuscaler.dev/cluster=<ClusterName>" is handed over.
	ClusterName string
	// Adopt returns the MIGs the config in force hands over besides
	// (clouds.gcp.adoptInstanceGroups); nil: none.
	Adopt func() []string
	// GPULabel is the config's provider.gpuLabel: gpuscaler sets it.
	GPULabel string
	// MaxGroupSize is each group's maxSize (the config's
	// sync.maxGroupSize). The pool's maxNodes bounds the pool through the
	// planner, never through a group's maxSize: the core deletes a group's
	// instances beyond its maxSize, and a MIG's are the user's live nodes.
	MaxGroupSize int
	// FileGroups returns the configuration file's node groups, whose
	// names and MIGs existing groups must not take.
	FileGroups func() []config.NodeGroup
	// Apply puts the groups in force (daemon.SetExtraGroups).
	Apply func(ctx context.Context, groups []config.NodeGroup) error
	// Refresh is how long a MIG's description is kept; default 10 min.
	Refresh time.Duration
	Logger  *slog.Logger

	mu      sync.Mutex
	cache   map[string]described // by zone/name
	applied []config.NodeGroup
}

type described struct {
	at    time.Time
	group cloud.ExistingGroup
	err   error
}

// Sync resolves every pool's existing instance groups and puts their node
// groups in force. It returns each pool's group names (in its order), and
// the error of each pool whose groups could not be read or put in force.
func (e *ExistingGroups) Sync(ctx context.Context, nps []v1alpha1.NodeProvisioner) (map[string][]string, map[string]error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	names, errs := map[string][]string{}, map[string]error{}
	fileNames, fileMIGs := e.fileGroups()
	wants := e.claims(nps, fileMIGs, errs)
	migNames := map[string]int{}
	for _, w := range wants {
		migNames[w.mig]++
	}
	var groups []config.NodeGroup
	for _, w := range wants {
		if errs[w.pool] != nil {
			continue
		}
		d, err := e.describe(ctx, w.zone, w.mig)
		if err == nil && !e.handedOver(w.zone, w.mig, d.Description) {
			err = fmt.Errorf("%w: list it in clouds.gcp.adoptInstanceGroups, or put %q in its description", ErrNotHandedOver, MarkerPrefix+e.ClusterName)
		}
		if err != nil {
			errs[w.pool] = fmt.Errorf("managed instance group zones/%s/instanceGroupManagers/%s: %w", w.zone, w.mig, err)
			continue
		}
		name := groupName(w.zone, w.mig, migNames[w.mig] > 1 || fileNames[w.mig])
		labels := map[string]string{}
		for k, v := range d.Labels {
			if config.ReservedLabel(k, &config.NodeGroup{}, e.GPULabel) == "" {
				labels[k] = v
			}
		}
		labels[LabelProvisionerName] = w.pool
		groups = append(groups, config.NodeGroup{
			Name: name, Cloud: config.CloudGCP, InstanceType: d.InstanceType, Locations: []string{w.zone},
			MaxSize: e.MaxGroupSize, Labels: labels, Taints: d.Taints, ManagedBy: config.ManagedByNodeProvisioner,
			CloudOptions: map[string]string{"instanceGroup": w.mig},
		})
		names[w.pool] = append(names[w.pool], name)
	}
	// A pool with an error has none of its groups in force.
	kept := groups[:0]
	for _, g := range groups {
		if errs[g.Labels[LabelProvisionerName]] == nil {
			kept = append(kept, g)
		}
	}
	for pool := range errs {
		delete(names, pool)
	}
	if !reflect.DeepEqual(kept, e.applied) && !(len(kept) == 0 && len(e.applied) == 0) {
		if err := e.Apply(ctx, kept); err != nil {
			for pool := range names {
				errs[pool] = fmt.Errorf("node groups of the existing instance groups not put in force: %w", err)
			}
			return nil, errs
		}
		e.applied = kept
		e.Logger.Info("node groups of existing instance groups in force", "groups", len(kept))
	}
	return names, errs
}

// claim is a pool's claim on one managed instance group.
type claim struct {
	pool      string
	zone, mig string
}

// fileGroups returns the names of the config file's node groups, and for
// each zone/MIG a GCP group of the file manages, where the file says so.
func (e *ExistingGroups) fileGroups() (names map[string]bool, migs map[string]string) {
	names, migs = map[string]bool{}, map[string]string{}
	if e.FileGroups != nil {
		for i, g := range e.FileGroups() {
			names[g.Name] = true
			if g.Cloud != config.CloudGCP {
				continue
			}
			mig := g.CloudOptions["instanceGroup"]
			if mig == "" {
				mig = g.Name
			}
			for _, z := range g.Locations {
				migs[z+"/"+mig] = fmt.Sprintf("nodeGroups[%d] (%s) of the config", i, g.Name)
			}
		}
	}
	return names, migs
}

// claims returns the MIGs the pools name, first claim first, and records
// in errs each pool whose names cannot be taken (all of its claims then
// drop): malformed, twice, another pool's, or the file's own. A MIG goes
// to the pool that holds it now, else to the pool created first (then by
// name): a pool, whatever its name or age, never takes a MIG from the
// pool that has it.
func (e *ExistingGroups) claims(nps []v1alpha1.NodeProvisioner, fileMIGs map[string]string, errs map[string]error) []claim {
	var wants []claim
	owner := e.holders(nps) // zone/name -> pool
	sorted := append([]v1alpha1.NodeProvisioner(nil), nps...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	for _, np := range sorted {
		if len(np.Spec.ExistingInstanceGroupNames) == 0 || np.DeletionTimestamp != nil {
			continue
		}
		if e.Describer == nil {
			errs[np.Name] = errors.New("existingInstanceGroupNames name GCP managed instance groups: configure clouds.gcp")
			continue
		}
		if msgs := validation.IsValidLabelValue(np.Name); len(msgs) > 0 {
			errs[np.Name] = fmt.Errorf("the pool's name is the value of its nodes' %s label: %s", LabelProvisionerName, strings.Join(msgs, "; "))
			continue
		}
		var pool []claim
		mine := map[string]int{}
		for i, ref := range np.Spec.ExistingInstanceGroupNames {
			zone, mig, err := config.ParseInstanceGroup(ref, e.Zone)
			key := zone + "/" + mig
			switch j, twice := mine[key]; {
			case err != nil:
			case twice:
				err = fmt.Errorf("the same managed instance group as existingInstanceGroupNames[%d]", j)
			case owner[key] != "" && owner[key] != np.Name:
				err = fmt.Errorf("it belongs to NodeProvisioner %q already", owner[key])
			case fileMIGs[key] != "":
				err = fmt.Errorf("it is %s", fileMIGs[key])
			}
			if err != nil {
				errs[np.Name] = fmt.Errorf("existingInstanceGroupNames[%d] %q: %w", i, ref, err)
				pool = nil
				break
			}
			mine[key] = i
			pool = append(pool, claim{pool: np.Name, zone: zone, mig: mig})
		}
		for _, w := range pool {
			owner[w.zone+"/"+w.mig] = np.Name
		}
		wants = append(wants, pool...)
	}
	return wants
}

// holders are the MIGs in force now, by zone/name, with the pool that
// holds each, among the pools that are not being deleted and still name
// it: a MIG stays with its holder whatever pools come after.
func (e *ExistingGroups) holders(nps []v1alpha1.NodeProvisioner) map[string]string {
	live := map[string]bool{}
	for _, np := range nps {
		if np.DeletionTimestamp != nil {
			continue
		}
		for _, ref := range np.Spec.ExistingInstanceGroupNames {
			if zone, mig, err := config.ParseInstanceGroup(ref, e.Zone); err == nil {
				live[np.Name+"/"+zone+"/"+mig] = true
			}
		}
	}
	out := map[string]string{}
	for _, g := range e.applied {
		if len(g.Locations) == 0 {
			continue
		}
		pool, key := g.Labels[LabelProvisionerName], g.Locations[0]+"/"+g.CloudOptions["instanceGroup"]
		if live[pool+"/"+key] {
			out[key] = pool
		}
	}
	return out
}

// MarkerPrefix starts the mark an operator puts in a MIG's description
// to hand it over to the cluster named after it.
const MarkerPrefix = "gpuscaler.dev/cluster="

// ErrNotHandedOver is why a pool may not adopt a MIG: nothing in the
// config or the MIG itself hands it over to this cluster.
var ErrNotHandedOver = errors.New("not handed over to this cluster")

// handedOver reports whether the config lists the MIG or its description
// carries this cluster's mark (a word of its own).
func (e *ExistingGroups) handedOver(zone, mig, description string) bool {
	if e.Adopt != nil {
		for _, ref := range e.Adopt() {
			if z, m, err := config.ParseInstanceGroup(ref, e.Zone); err == nil && z == zone && m == mig {
				return true
			}
		}
	}
	if e.ClusterName == "" {
		return false
	}
	return slices.Contains(strings.FieldsFunc(description, func(r rune) bool {
		return r == ' ' || r == '\n' || r == '\t' || r == ',' || r == ';'
	}), MarkerPrefix+e.ClusterName)
}

// describe reads a MIG, or returns what was read within Refresh (a
// failure is kept for a tenth of that, so a pool in error asks again soon).
func (e *ExistingGroups) describe(ctx context.Context, zone, mig string) (cloud.ExistingGroup, error) {
	if e.cache == nil {
		e.cache = map[string]described{}
	}
	refresh := e.Refresh
	if refresh == 0 {
		refresh = 10 * time.Minute
	}
	key := zone + "/" + mig
	if c, ok := e.cache[key]; ok && (time.Since(c.at) < refresh && c.err == nil || time.Since(c.at) < refresh/10) {
		return c.group, c.err
	}
	d, err := e.Describer.DescribeGroup(ctx, zone, mig)
	if err != nil {
		if c, ok := e.cache[key]; ok && c.err == nil && !errors.Is(err, cloud.ErrNotFound) {
			// Keep the group as last read: a passing API failure must not
			// take a pool's groups out of the core.
			e.Logger.Warn("managed instance group not read again; keeping its last description", "group", key, "error", err)
			c.at = time.Now().Add(-refresh + refresh/10)
			e.cache[key] = c
			return c.group, nil
		}
	} else {
		d.Labels = maps.Clone(d.Labels)
	}
	e.cache[key] = described{at: time.Now(), group: d, err: err}
	return d, err
}

// Names returns the node groups of a pool's existing instance groups, as
// the last Sync put them in force.
func (e *ExistingGroups) Names(pool string) []string {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, g := range e.applied {
		if g.Labels[LabelProvisionerName] == pool {
			out = append(out, g.Name)
		}
	}
	return out
}

// groupName is the node group of a MIG: its own name when that is short
// enough and unique among the MIGs, else a prefix and a hash of zone/name.
func groupName(zone, mig string, shared bool) string {
	const max = 40 // config's limit on group names
	if len(mig) <= max && !shared && validation.IsDNS1123Label(mig) == nil && mig[0] >= 'a' && mig[0] <= 'z' {
		return mig
	}
	sum := sha256.Sum256([]byte(zone + "/" + mig))
	prefix := strings.TrimRight(mig[:min(len(mig), max-7)], "-")
	if prefix == "" || prefix[0] < 'a' || prefix[0] > 'z' {
		prefix = "mig" + prefix
		prefix = strings.TrimRight(prefix[:min(len(prefix), max-7)], "-")
	}
	return prefix + "-" + hex.EncodeToString(sum[:3])
}
