package gcp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	compute "google.golang.org/api/compute/v1"

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
		return c.api.InstanceGroupManagers.Insert(c.opts.Project, m.Location, &compute.InstanceGroupManager{
			Name: m.Name, BaseInstanceName: group, InstanceTemplate: tmpl, TargetSize: 0, Description: desc,
			ForceSendFields: []string{"TargetSize"}, // empty, said so
		}).RequestId(requestID).Context(ctx).Do()
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
	// The zonal MIGs gpuscaler created that no group uses, by zone.
	type mig struct {
		zone string
		g    *compute.InstanceGroupManager
	}
	var unused []mig
	err := c.read(ctx, "sweep", func() error {
		unused = unused[:0] // every page again
		return c.api.InstanceGroupManagers.AggregatedList(c.opts.Project).Pages(ctx, func(page *compute.InstanceGroupManagerAggregatedList) error {
			if page == nil {
				return errNull
			}
			for scope, scoped := range page.Items {
				zone, zonal := strings.CutPrefix(scope, "zones/")
				for _, g := range scoped.InstanceGroupManagers {
					if g != nil && zonal && strings.HasPrefix(g.Description, c.marker()) && !used[MIG{Location: zone, Name: g.Name}] {
						unused = append(unused, mig{zone, g})
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		c.log.Warn("gcp: managed instance groups not swept; the next sweep retries", "error", err)
		c.swept = time.Time{}
		return
	}
	sort.Slice(unused, func(i, j int) bool { return unused[i].zone+"/"+unused[i].g.Name < unused[j].zone+"/"+unused[j].g.Name })
	for _, u := range unused {
		zone, g := u.zone, u.g
		m := MIG{Location: zone, Name: g.Name}
		insts, err := c.members(ctx, m)
		if err != nil || len(insts) > 0 || g.TargetSize > 0 {
			c.log.Warn("gcp: a managed instance group gpuscaler created is in no group now but not empty; it is deleted once it is",
				"zone", zone, "group", m.Name, "members", len(insts), "error", err)
			continue
		}
		err = c.mutate(ctx, m, "delete-group", func(requestID string) (*compute.Operation, error) {
			return c.api.InstanceGroupManagers.Delete(c.opts.Project, zone, m.Name).RequestId(requestID).Context(ctx).Do()
		})
		if err != nil && !errors.Is(err, cloud.ErrNotFound) {
			c.log.Warn("gcp: unused managed instance group not deleted; the next sweep retries", "zone", zone, "group", m.Name, "error", err)
			continue
		}
		c.log.Info("gcp: unused managed instance group gpuscaler created deleted", "zone", zone, "group", m.Name)
	}
}
