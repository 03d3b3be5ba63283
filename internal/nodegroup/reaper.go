package nodegroup

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Never-registered instances: a running member past the grace period is
// taken for one only after this many syncs in a row found no Node under any
// of its provider IDs; after this many such instances of a group in a row,
// the group backs off (a broken bootstrap must not buy a GPU every grace
// period). Such a group waits up to neverRegisteredBackoff, or until one of
// its nodes registers, or a restart or reload.
const (
	unregisteredMisses     = 3
	unregisteredInARow     = 3
	neverRegisteredBackoff = 24 * time.Hour
)

// reaper decides which instances the core deletes, or only reports, though
// no front end asked: instances of managed groups whose Node never
// registered, and second instances under one name (an order that landed
// twice). Ownership is read from the instance: an instance of a group this
// configuration does not know belongs to someone else (another process,
// a newer config) and is reported, never deleted. Launched instances are
// their owner's to collect.
type reaper struct {
	cfg       *config.Config
	store     *store
	offerings *offerings
	deleter   *deleter
	nodes     Nodes
	clock     clock.Clock
	log       *slog.Logger
	metrics   *Metrics
	events    *events

	// duplicates are second instances under a member's name, by cloud/ID.
	duplicates map[string]*duplicate
	// unknown are reported instances of groups unknown to this config, by
	// cloud/ID, with the sync generation that last saw them.
	unknown map[string]int
	// streak counts each group's never-registered instances in a row,
	// gpuStreak its nodes whose GPUs never appeared.
	streak    map[string]int
	gpuStreak map[string]int
	gen       map[string]int
	// since is when the core started.
	since time.Time
}

// duplicate is what is known of one duplicate instance.
type duplicate struct {
	first    time.Time
	reported bool
	gen      int
}

func (r *reaper) key(cloudName string, in cloud.Instance) string {
	return deleteKey(cloudName, in)
}

// duplicatesLocked handles instances listed under a member's name beside
// the one the member stands for: after the grace period they are deleted
// (or reported once).
func (r *reaper) duplicatesLocked(cloudName string, dups []cloud.Instance) {
	now := r.clock.Now()
	for _, in := range dups {
		k := r.key(cloudName, in)
		d, ok := r.duplicates[k]
		if !ok {
			d = &duplicate{first: now}
			r.duplicates[k] = d
			r.log.Warn("second instance under one name (an order that landed twice)", "cloud", cloudName, "instance", in.Name, "id", in.ID, "group", in.Group)
		}
		d.gen = r.gen[cloudName]
		if d.reported || now.Sub(d.first) < r.cfg.LeakedInstances.GracePeriod.Duration || in.State == cloud.StateDeleting {
			continue
		}
		action := r.cfg.LeakedInstances.Action
		r.metrics.leaked.WithLabelValues(cloudName, action).Inc()
		msg := fmt.Sprintf("instance %s (id %s) duplicates a member's name", in.Name, in.ID)
		if action == config.LeakActionReport {
			d.reported = true
			r.events.warn(in.Group, in.Name, "", "DuplicateInstance", msg+"; report only")
			continue
		}
		r.events.warn(in.Group, in.Name, "", "DuplicateInstance", msg+"; deleting it")
		r.deleter.delete(context.Background(), cloudName, in, "duplicate of a member")
	}
}

// unknownLocked reports, once, an instance of this cluster whose group the
// configuration does not know.
func (r *reaper) unknownLocked(cloudName string, in cloud.Instance) {
	k := r.key(cloudName, in)
	if _, seen := r.unknown[k]; !seen {
		r.log.Warn("instance of this cluster belongs to a group this configuration does not know; leaving it alone",
			"cloud", cloudName, "instance", in.Name, "group", in.Group, "owner", in.Owner)
		r.events.warn(in.Group, in.Name, in.ProviderID, "UnknownGroup",
			fmt.Sprintf("instance %s belongs to group %q, which this configuration does not have; it is left alone", in.Name, in.Group))
	}
	r.unknown[k] = r.gen[cloudName]
}

// beginLocked starts a sync generation for one cloud.
func (r *reaper) beginLocked(cloudName string) {
	r.gen[cloudName]++
}

// forgetUnknownLocked forgets what one cloud's last list no longer showed.
func (r *reaper) forgetUnknownLocked(cloudName string) {
	gen := r.gen[cloudName]
	prefix := cloudName + "/"
	for k, g := range r.unknown {
		if g != gen && len(k) > len(prefix) && k[:len(prefix)] == prefix {
			delete(r.unknown, k)
		}
	}
	for k, d := range r.duplicates {
		if d.gen != gen && len(k) > len(prefix) && k[:len(prefix)] == prefix {
			delete(r.duplicates, k)
		}
	}
}

// unregisteredLocked deletes (or reports once) the running members whose
// Node never registered under any of their provider IDs within the grace
// period, after several syncs in a row agree. A deleted one leaves its
// group's target; several in a row back the group off.
func (r *reaper) unregisteredLocked(ctx context.Context, cloudName string) {
	if r.nodes == nil {
		return
	}
	now := r.clock.Now()
	grace := r.cfg.LeakedInstances.GracePeriod.Duration
	for _, g := range r.store.groupsOn(cloudName) {
		for _, mem := range g.members {
			if !mem.running() || mem.returning() {
				continue // a returned node's Node may be gone: it stops at the next sync
			}
			registered, synced := r.nodes.Registered(mem.providerIDs()...)
			if !synced {
				return // never judge on an empty cache
			}
			if registered {
				mem.unseen = 0
				// A streak ends when a new member registers, not on
				// every sync that finds the old ones registered.
				if !mem.joined && r.streak[g.cfg.Name] > 0 {
					r.streak[g.cfg.Name] = 0
					if b, ok := r.offerings.backedOff(g.cfg.Name); ok && b.reason == CodeNeverRegistered {
						r.offerings.succeed(g.cfg.Name)
					}
				}
				mem.joined = true
				r.gpuStartupLocked(ctx, g, mem, now)
				continue
			}
			if now.Sub(mem.since()) < grace {
				continue
			}
			mem.unseen++
			if mem.unseen == 1 {
				mem.extras().firstMiss = now
			}
			// Act once: after several syncs in a row, over two sync periods.
			if mem.unseen < unregisteredMisses || now.Sub(mem.peek().firstMiss) < 2*r.cfg.Sync.Period.Duration || mem.phase == phaseDeleting || mem.reported {
				continue
			}
			mem.reported = true
			r.neverRegisteredLocked(ctx, g, mem, now)
		}
	}
}

// gpuStartupLocked acts on a running member of a GPU group whose Node
// registered but has shown no GPUs for the group's gpuStartupTimeout (the
// driver or the device plugin failed): it is reported and, unless
// leakedInstances.action is report, deleted, leaving the group's target so
// that the front end orders a replacement for the pods still waiting.
// Several in a row back the group off, as never-registered instances do.
func (r *reaper) gpuStartupLocked(ctx context.Context, g *group, mem *member, now time.Time) {
	if g.itype.GPUCount == 0 || g.cfg.GPUStartupTimeout == nil || mem.reported || mem.phase == phaseDeleting {
		return
	}
	if mem.gpusUp {
		return
	}
	s, ok := r.nodes.Startup(mem.providerIDs()...)
	if !ok {
		return
	}
	name := g.cfg.Name
	if s.GPUsSeen {
		// Its GPUs came (GPUs that go later, while the device plugin
		// restarts, are not a start-up that failed).
		mem.gpusUp = true
		if r.gpuStreak[name] > 0 {
			r.gpuStreak[name] = 0
			if b, ok := r.offerings.backedOff(name); ok && b.reason == CodeGPUsNeverAppeared {
				r.offerings.succeed(name)
			}
		}
		return
	}
	timeout := g.cfg.GPUStartupTimeout.Duration
	// A Node from before this core may have had GPUs the index never saw.
	if s.Registered.IsZero() || s.Registered.Before(r.since) || now.Sub(s.Registered) < timeout {
		return
	}
	mem.reported = true
	r.metrics.gpuTimeouts.WithLabelValues(name).Inc()
	r.gpuStreak[name]++
	msg := fmt.Sprintf("the Node of instance %s registered %s ago and shows no GPUs (gpuStartupTimeout %s): the NVIDIA driver or device plugin did not start",
		mem.name, now.Sub(s.Registered).Round(time.Second), timeout)
	if r.gpuStreak[name] >= unregisteredInARow {
		until := r.offerings.fail(name, CodeGPUsNeverAppeared,
			fmt.Sprintf("%d nodes in a row never showed their GPUs; check the group's image and drivers", r.gpuStreak[name]),
			max(4*timeout, time.Hour), neverRegisteredBackoff)
		r.log.Error("node group backs off: its nodes never show their GPUs", "group", name, "inARow", r.gpuStreak[name], "until", until.Format(time.RFC3339))
		r.events.warn(name, mem.name, mem.providerID, "GPUStartupFailing",
			fmt.Sprintf("%d nodes in a row of group %s never showed their GPUs; no new orders until %s", r.gpuStreak[name], name, until.Format(time.RFC3339)))
	}
	if r.cfg.LeakedInstances.Action == config.LeakActionReport {
		r.log.Warn("GPU node never showed its GPUs (report only)", "group", name, "instance", mem.name)
		r.events.warn(name, mem.name, mem.providerID, "GPUsNeverAppeared", msg+"; report only")
		return
	}
	r.log.Warn("deleting a GPU node that never showed its GPUs; it will be replaced", "group", name, "instance", mem.name)
	r.events.warn(name, mem.name, mem.providerID, "GPUsNeverAppeared", msg+"; deleting its instance")
	r.dropLocked(ctx, g, mem, "GPUs never appeared")
}

func (r *reaper) neverRegisteredLocked(ctx context.Context, g *group, mem *member, now time.Time) {
	age := now.Sub(mem.createdAt.Time()).Round(time.Second).String()
	action := r.cfg.LeakedInstances.Action
	r.metrics.leaked.WithLabelValues(g.cfg.Cloud, action).Inc()
	r.streak[g.cfg.Name]++
	msg := fmt.Sprintf("instance %s runs for %s and no Node registered under %v", mem.name, age, mem.providerIDs())
	if r.streak[g.cfg.Name] >= unregisteredInARow {
		until := r.offerings.fail(g.cfg.Name, CodeNeverRegistered,
			fmt.Sprintf("%d instances in a row never registered as nodes; check the group's bootstrap", r.streak[g.cfg.Name]),
			max(4*r.cfg.LeakedInstances.GracePeriod.Duration, time.Hour), neverRegisteredBackoff)
		r.log.Error("node group backs off: its instances never register", "group", g.cfg.Name, "inARow", r.streak[g.cfg.Name], "until", until.Format(time.RFC3339))
		r.events.warn(g.cfg.Name, mem.name, mem.providerID, "BootstrapFailing",
			fmt.Sprintf("%d instances in a row of group %s never registered; no new orders until %s", r.streak[g.cfg.Name], g.cfg.Name, until.Format(time.RFC3339)))
	}
	if action == config.LeakActionReport {
		r.log.Warn("instance never registered as a node (report only)", "group", g.cfg.Name, "instance", mem.name, "age", age)
		r.events.warn(g.cfg.Name, mem.name, mem.providerID, "NeverRegistered", msg+"; report only")
		return
	}
	r.log.Warn("deleting instance that never registered as a node", "group", g.cfg.Name, "instance", mem.name, "age", age)
	r.events.warn(g.cfg.Name, mem.name, mem.providerID, "NeverRegistered", msg+"; deleting it")
	r.dropLocked(ctx, g, mem, "never registered as a node")
}

// dropLocked deletes a member the reaper gave up on. A member that served
// leaves the target one lower; a standby pool's member never counted in
// it, and lowering the target for it would lose one of the front end's
// scale-ups (cluster-autoscaler never raises a target that is too low).
func (r *reaper) dropLocked(ctx context.Context, g *group, mem *member, why string) {
	pooled := mem.pooled()
	r.store.change(g, mem, func() { r.store.to(mem, phaseDeleting) })
	if !pooled {
		g.target = max(g.target-1, 0)
	}
	r.deleter.delete(ctx, g.cfg.Cloud, mem.instance(), why)
}
