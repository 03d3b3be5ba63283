package nodegroup

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Delete retries: a delete is tried this many times, backing off from one
// second, before it is reported failed; a later sync asks again after
// deleteRetryAfter while the cloud still lists the instance.
const (
	maxDeleteAttempts = 6
	deleteRetryAfter  = 5 * time.Minute
)

// deleter deletes instances in the background: one delete in flight per
// instance however often it is asked, bounded retries of retryable
// failures only, and a metric and an Event when it gives up.
type deleter struct {
	clients map[string]*client
	clock   clock.Clock
	log     *slog.Logger
	metrics *Metrics
	events  *events
	// done is called after a delete the cloud accepted (the core syncs early).
	done func(cloudName string)
	// outcome hears how each delete ended (err nil: accepted), so that a
	// delete that keeps failing shows on its instance's status.
	outcome func(inst cloud.Instance, err error)
	run     func(func())

	mu       sync.Mutex
	inflight map[string]bool
	// notBefore holds instances whose delete gave up, until a new try.
	notBefore map[string]time.Time
}

func deleteKey(cloudName string, inst cloud.Instance) string {
	if inst.ID != "" {
		return cloudName + "/" + inst.ID
	}
	return cloudName + "/name/" + inst.Name
}

// delete starts deleting an instance unless a delete of it is in flight or
// gave up lately. why is logged.
func (d *deleter) delete(ctx context.Context, cloudName string, inst cloud.Instance, why string) {
	key := deleteKey(cloudName, inst)
	d.mu.Lock()
	if d.inflight[key] || d.clock.Now().Before(d.notBefore[key]) {
		d.mu.Unlock()
		return
	}
	d.inflight[key] = true
	delete(d.notBefore, key)
	d.mu.Unlock()
	d.log.Info("deleting instance", "cloud", cloudName, "instance", inst.Name, "id", inst.ID, "group", inst.Group, "reason", why)
	d.run(func() {
		err := d.attempt(ctx, cloudName, inst)
		d.mu.Lock()
		delete(d.inflight, key)
		if err != nil && ctx.Err() == nil {
			d.notBefore[key] = d.clock.Now().Add(deleteRetryAfter)
		}
		d.mu.Unlock()
		if err == nil && d.outcome != nil {
			d.outcome(inst, nil)
		}
		switch {
		case err == nil:
			d.done(cloudName)
		case ctx.Err() != nil:
		default:
			reason := classLabel(cloud.Class(err))
			d.metrics.deleteFailures.WithLabelValues(cloudName, reason).Inc()
			d.log.Error("delete failed; the next sync after the retry delay tries again", "cloud", cloudName,
				"instance", inst.Name, "retryAfter", deleteRetryAfter.String(), "error", err)
			d.events.warn(inst.Group, inst.Name, inst.ProviderID, "DeleteFailed", "delete of instance "+inst.Name+" failed: "+err.Error())
		}
	})
}

// attempt runs the delete with retries; an instance already gone is
// success, and errors that are not retryable end it at once. A delete
// whose answer was lost is sent again: unlike a create, it is idempotent
// by the cloud contract (a second delete of an instance the first one
// took is success), and giving up would leave an instance billing until
// the retry delay passed.
func (d *deleter) attempt(ctx context.Context, cloudName string, inst cloud.Instance) error {
	c := d.clients[cloudName]
	backoff := time.Second
	var err error
	for i := 0; i < maxDeleteAttempts; i++ {
		err = c.delete(ctx, inst)
		if err == nil || errors.Is(err, cloud.ErrNotFound) {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		if d.outcome != nil {
			d.outcome(inst, err) // on the instance's status while it retries
		}
		if !cloud.Retryable(err) && !errors.Is(err, cloud.ErrOutcomeUnknown) {
			return err
		}
		d.log.Warn("delete failed, retrying", "instance", inst.Name, "attempt", i+1, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.clock.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
	return err
}
