package gcp

import (
	"context"
	"time"

	compute "google.golang.org/api/compute/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Standby pools on GCP are a MIG's stopped members, through the MIG API as
// GCP documents it for external autoscalers: stopInstances lowers the
// group's targetSize and raises its targetStoppedSize, startInstances the
// reverse, and a member the group keeps stopped has targetStatus STOPPED.
// A stopped VM bills its disks and static addresses, not its machine or
// GPUs (compute v1 instances.stop). GCP's suspend is not used: it is not
// offered for VMs with GPUs. docs/clouds/gcp.md has the sources.

var _ cloud.Stopper = (*Cloud)(nil)

// stoppedDiskGiB is the boot disk a stopped member keeps, GKE's node pool
// default (a MIG's template may say otherwise; it is not read here).
const stoppedDiskGiB = 100

// ssdPerGBHour is SSD persistent disk's price per GB and hour: $0.17 a GB
// and month (the disk pricing page's US example, 200 GB for $34.00) over
// 730 hours. The dearest of the persistent disk types a node boots from,
// so that a cost cap never counts a stopped member low.
const ssdPerGBHour = 0.17 / 730

// RefusedStaysStopped is false: a member whose start met
// ZONE_RESOURCE_POOL_EXHAUSTED keeps RUNNING as its target status, and the
// MIG goes on trying it (stopInstances takes only running members), so
// the core deletes it (cloud.Stopper).
func (c *Cloud) RefusedStaysStopped() bool { return false }

// StoppedPrice is a stopped member's hourly bill: its boot disk.
func (c *Cloud) StoppedPrice(cloud.OfferingKey) float64 {
	return stoppedDiskGiB * ssdPerGBHour
}

// Stop stops a running member for its group's standby pool (stopInstances)
// and waits for the operation; the MIG then keeps it stopped, and List
// shows it StateStopped and Standby. A member the group keeps stopped
// already (an earlier Stop whose answer was lost) is success.
func (c *Cloud) Stop(ctx context.Context, inst cloud.Instance) error {
	m, ref, mi, err := c.member(ctx, inst, "stop")
	if err != nil {
		return err
	}
	if mi == nil {
		// Not a member (abandoned, or gone): nothing the MIG can stop,
		// and nothing to bill at the stopped price.
		return cloud.Errorf(cloud.ErrNotFound, "stop", "instance %s is not a member of %s/%s", inst.Name, m.Location, m.Name)
	}
	if mi.TargetStatus == "STOPPED" {
		return nil
	}
	return c.mutate(ctx, m, "stop", func(requestID string) (*compute.Operation, error) {
		if m.Regional() {
			return c.api.RegionInstanceGroupManagers.StopInstances(c.opts.Project, m.Location, m.Name,
				&compute.RegionInstanceGroupManagersStopInstancesRequest{Instances: []string{ref}}).
				RequestId(requestID).Context(ctx).Do()
		}
		return c.api.InstanceGroupManagers.StopInstances(c.opts.Project, m.Location, m.Name,
			&compute.InstanceGroupManagersStopInstancesRequest{Instances: []string{ref}}).
			RequestId(requestID).Context(ctx).Do()
	})
}

// Start starts a stopped member again (startInstances) and follows it as
// Create follows a new one: the operation is DONE once the MIG accepted
// it, and a zone without the machine's resources any more shows only in
// the member's lastAttempt. Such a start is ErrCapacity (the core deletes
// the member, which the MIG would go on starting, and starts another or
// orders elsewhere); one still under way after CreateWatch is success, and
// the lists follow it.
func (c *Cloud) Start(ctx context.Context, inst cloud.Instance) error {
	m, ref, mi, err := c.member(ctx, inst, "start")
	if err != nil {
		return err
	}
	if mi == nil {
		return cloud.Errorf(cloud.ErrNotFound, "start", "instance %s is not a member of %s/%s", inst.Name, m.Location, m.Name)
	}
	if mi.TargetStatus != "STOPPED" && mi.TargetStatus != "SUSPENDED" {
		return nil // started already: an earlier Start whose answer was lost
	}
	// A stop's operation is done once the MIG accepted it; the VM may
	// still be stopping (a graceful shutdown), and startInstances takes
	// only stopped ones: wait, as long as an operation may take.
	for deadline := time.Now().Add(c.opts.OperationTimeout); mi.CurrentAction == "STOPPING" || mi.CurrentAction == "SUSPENDING"; {
		if time.Now().After(deadline) {
			return cloud.Errorf(cloud.ErrTransient, "start", "instance %s is still stopping", inst.Name)
		}
		select {
		case <-ctx.Done():
			return cloud.NewError(cloud.ErrTransient, "start", ctx.Err())
		case <-time.After(c.opts.PollInterval):
		}
		if mi, err = c.find(ctx, m, inst.Name); err != nil {
			return err
		}
		if mi == nil {
			return cloud.Errorf(cloud.ErrNotFound, "start", "instance %s left %s/%s while it stopped", inst.Name, m.Location, m.Name)
		}
	}
	err = c.mutate(ctx, m, "start", func(requestID string) (*compute.Operation, error) {
		if m.Regional() {
			return c.api.RegionInstanceGroupManagers.StartInstances(c.opts.Project, m.Location, m.Name,
				&compute.RegionInstanceGroupManagersStartInstancesRequest{Instances: []string{ref}}).
				RequestId(requestID).Context(ctx).Do()
		}
		return c.api.InstanceGroupManagers.StartInstances(c.opts.Project, m.Location, m.Name,
			&compute.InstanceGroupManagersStartInstancesRequest{Instances: []string{ref}}).
			RequestId(requestID).Context(ctx).Do()
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(c.opts.CreateWatch)
	for {
		mi, err := c.find(ctx, m, inst.Name)
		switch {
		case err != nil:
			return err
		case mi == nil:
			return cloud.Errorf(cloud.ErrNotFound, "start", "instance %s left %s/%s while it started", inst.Name, m.Location, m.Name)
		}
		if code, msg, class := lastAttempt(mi); mi.CurrentAction == "STARTING" && capacityOrQuota(class) {
			return cloud.Errorf(class, "start", "%s: %s", code, msg)
		}
		if mi.CurrentAction != "STARTING" || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.opts.PollInterval):
		}
	}
}

// member finds an instance's MIG, its reference for the MIG API
// (zones/<zone>/instances/<name>) and its managed instance (nil when it
// is no member).
func (c *Cloud) member(ctx context.Context, inst cloud.Instance, op string) (MIG, string, *compute.ManagedInstance, error) {
	m, ok := c.mig(inst.Group, inst.Location)
	if !ok {
		return MIG{}, "", nil, cloud.Errorf(cloud.ErrInvalid, op, "group %q has no managed instance group in %s", inst.Group, inst.Location)
	}
	mi, err := c.find(ctx, m, inst.Name)
	if err != nil || mi == nil {
		return m, "", nil, err
	}
	zone := memberZone(m, mi)
	if zone == "" {
		return m, "", nil, cloud.Errorf(cloud.ErrTransient, op, "instance %s of regional group %s has no zone yet", inst.Name, m.Name)
	}
	return m, "zones/" + zone + "/instances/" + inst.Name, mi, nil
}
