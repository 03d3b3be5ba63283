package nodegroup

import (
	"context"
	"strings"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// UnreadyNodes is implemented by Nodes that can name the Nodes of a cloud
// that are not Ready. The syncs find among them the Nodes of instances
// gone while no core knew (a crash between the cloud's delete and the
// Node's, an instance deleted at the cloud's console), which nothing else
// deletes on clouds without a cloud controller manager: each holds
// cluster-autoscaler's cluster-health gate closer to shut (past 3 nodes
// and 45 % NotReady it stops scaling), and the NodeProvisioner counts it.
type UnreadyNodes interface {
	// Unready returns the provider IDs of the Nodes labelled
	// LabelCloud=cloudName whose Ready condition is False or Unknown, from
	// memory. Nodes with no Ready condition yet (just registered) are left
	// out.
	Unready(cloudName string) []string
	// DeleteUnready deletes the Node that carries the provider ID if it is
	// still not Ready, conditional on the object it read (a Node that came
	// back meanwhile is left). deleted is false when there was nothing to
	// delete.
	DeleteUnready(ctx context.Context, providerID string) (deleted bool, err error)
}

// orphansLocked returns the provider IDs of cloudName's NotReady Nodes
// whose instances are gone: no member carries them, the cloud's list does
// not name their instance under any provider ID, alias, ID or name, and a
// list that started at least resolveAfter after the first that left them
// out leaves them out still (a cloud's list may lag behind a fresh order).
// A cloud controller manager's node lifecycle controller deletes the same
// Nodes, asking the cloud for each; gpuscaler's lists hold every instance
// of the cluster, so a list that leaves an instance out twice is its
// answer. all is the list whole, another install's instances with it.
// Callers hold the store's lock.
func (y *syncer) orphansLocked(cloudName string, all []cloud.Instance, start time.Time) []string {
	un, ok := y.nodes.(UnreadyNodes)
	if !ok {
		return nil
	}
	var unknown []string
	for _, pid := range un.Unready(cloudName) {
		if _, member := y.store.pids.get(pid); !member {
			unknown = append(unknown, pid)
		}
	}
	if len(unknown) == 0 {
		delete(y.orphanSince, cloudName)
		return nil
	}
	listed := listedNames(all)
	since := y.orphanSince[cloudName]
	next := make(map[string]time.Time, len(unknown))
	var out []string
	for _, pid := range unknown {
		if listed.names(pid) {
			continue
		}
		first, seen := since[pid]
		if !seen {
			first = start
		}
		next[pid] = first
		if start.Sub(first) >= y.resolveAfter {
			out = append(out, pid)
		}
	}
	y.orphanSince[cloudName] = next
	return out
}

// listedSet is every name a list gives its instances: provider IDs and
// aliases whole, IDs and names alone.
type listedSet map[string]bool

func listedNames(insts []cloud.Instance) listedSet {
	l := make(listedSet, 3*len(insts))
	for _, in := range insts {
		l[in.ProviderID] = true
		for _, a := range in.Aliases {
			l[a] = true
		}
		if in.ID != "" {
			l[in.ID] = true
		}
		l[in.Name] = true
	}
	return l
}

// names reports whether a provider ID names a listed instance, whole or
// by its last segment ("scaleway://instance/fr-par-2/<id>" by the ID): a
// Node whose instance may be listed under another form is never taken for
// an orphan.
func (l listedSet) names(pid string) bool {
	return l[pid] || l[pid[strings.LastIndexByte(pid, '/')+1:]]
}

// deleteOrphans deletes the Nodes orphansLocked found, each only while it
// is still not Ready; one that fails is found again by the next sync.
func (y *syncer) deleteOrphans(ctx context.Context, cloudName string, pids []string) {
	un, ok := y.nodes.(UnreadyNodes)
	if !ok {
		return
	}
	for _, pid := range pids {
		deleted, err := un.DeleteUnready(ctx, pid)
		switch {
		case err != nil:
			y.log.Warn("could not delete the NotReady Node of an instance its cloud no longer has; the next sync tries again",
				"cloud", cloudName, "providerID", pid, "error", err)
		case deleted:
			y.metrics.orphans.WithLabelValues(cloudName).Inc()
			y.log.Info("deleted the NotReady Node of an instance its cloud no longer has", "cloud", cloudName, "providerID", pid)
		}
	}
}
