package gcp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// The forms of OptionInstanceTemplate.
var (
	templateName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	templateLink = regexp.MustCompile(`^projects/[^/]+/(global|regions/[a-z]+-[a-z]+[0-9]+)/instanceTemplates/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// marker is the description of the MIGs gpuscaler creates for a cluster;
// a MIG is gpuscaler's to delete only when its description starts so.
func (c *Cloud) marker() string {
	return "gpuscaler: cluster " + c.opts.ClusterName + ", node group "
}

// insert creates a group's MIG in a zone from a template, empty, marked as
// gpuscaler's. A MIG already there (a lost answer, another replica) is
// success.
func (c *Cloud) insert(ctx context.Context, group string, m MIG, tmpl string) error {
	if !strings.Contains(tmpl, "/") {
		tmpl = "projects/" + c.opts.Project + "/global/instanceTemplates/" + tmpl
	}
	desc := c.marker() + group + ". Deleted by gpuscaler once the group leaves its config and this group is empty."
	err := c.mutate(ctx, m, "create-group", func(requestID string) (*compute.Operation, error) {
		return c.igm.Insert(ctx, &computepb.InsertInstanceGroupManagerRequest{
			Project: c.opts.Project, Zone: m.Location, RequestId: &requestID,
			InstanceGroupManagerResource: &computepb.InstanceGroupManager{
				Name: &m.Name, BaseInstanceName: &group, InstanceTemplate: &tmpl, TargetSize: new(int32(0)), Description: &desc,
			},
		})
	})
	if err != nil && !alreadyExists(err) {
		return fmt.Errorf("managed instance group %s/%s from template %s: %w", m.Location, m.Name, tmpl, err)
	}
	c.log.Info("managed instance group created from its template", "zone", m.Location, "group", m.Name, "template", tmpl)
	return nil
}

// retire deletes the MIGs gpuscaler created for this cluster that no
// group uses any more, once they are empty (target size 0, no member); a
// MIG with members is left, with a warning, for a later sweep. MIGs it
// did not create are never touched. It runs every SweepInterval, from List,
// and after a restart, since the marker is in the MIG itself.
func (c *Cloud) retire(ctx context.Context, groups map[string]Group) {
	if c.opts.ClusterName == "" || time.Since(c.swept) < c.opts.SweepInterval {
		return
	}
	used := map[MIG]bool{}
	for _, g := range groups {
		for _, m := range g.MIGs {
			used[m] = true
		}
	}
	c.swept = time.Now()
	it := c.igm.AggregatedList(ctx, &computepb.AggregatedListInstanceGroupManagersRequest{Project: c.opts.Project})
	for {
		pair, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return
		}
		if err != nil {
			c.log.Warn("gcp: managed instance groups not swept; the next sweep retries", "error", classify("sweep", err))
			c.swept = time.Time{}
			return
		}
		zone := strings.TrimPrefix(pair.Key, "zones/")
		for _, g := range pair.Value.GetInstanceGroupManagers() {
			m := MIG{Location: zone, Name: g.GetName()}
			if used[m] || !strings.HasPrefix(g.GetDescription(), c.marker()) {
				continue
			}
			insts, err := c.members(ctx, m)
			if err != nil || len(insts) > 0 || g.GetTargetSize() > 0 {
				c.log.Warn("gcp: a managed instance group gpuscaler created is in no group now but not empty; it is deleted once it is",
					"zone", zone, "group", m.Name, "members", len(insts), "error", err)
				continue
			}
			err = c.mutate(ctx, m, "delete-group", func(requestID string) (*compute.Operation, error) {
				return c.igm.Delete(ctx, &computepb.DeleteInstanceGroupManagerRequest{Project: c.opts.Project, Zone: zone, InstanceGroupManager: m.Name, RequestId: &requestID})
			})
			if err != nil && !errors.Is(err, cloud.ErrNotFound) {
				c.log.Warn("gcp: unused managed instance group not deleted; the next sweep retries", "zone", zone, "group", m.Name, "error", err)
				continue
			}
			c.log.Info("gcp: unused managed instance group gpuscaler created deleted", "zone", zone, "group", m.Name)
		}
	}
}
