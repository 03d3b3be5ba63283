package nodegroup

import (
	"context"
	"errors"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// client wraps one cloud.Provider with the core's client-side rate limit,
// a bound on concurrent creates, and metrics. Every cloud call of the core
// goes through it.
type client struct {
	p       cloud.Provider
	limiter *rate.Limiter
	creates chan struct{}
	clock   clock.Clock
	metrics *Metrics
	// install is recorded with every order (cloud.CreateSpec.Install).
	install string
}

func newClient(p cloud.Provider, rps float64, maxCreates int, clk clock.Clock, m *Metrics) *client {
	limiter := cloud.NewRequestLimiter(rps)
	if l, ok := p.(cloud.RequestLimiter); ok && l.LimitsRequests() {
		limiter = rate.NewLimiter(rate.Inf, 0) // the cloud's client holds the budget
	}
	return &client{
		p:       p,
		limiter: limiter,
		creates: make(chan struct{}, maxCreates),
		clock:   clk,
		metrics: m,
	}
}

func (c *client) observe(op string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
		if class := cloud.Class(err); class != nil {
			result = classLabel(class)
		}
	}
	c.metrics.apiCalls.WithLabelValues(c.p.Name(), op, result).Inc()
	c.metrics.apiLatency.WithLabelValues(c.p.Name(), op).Observe(c.clock.Since(start).Seconds())
}

func classLabel(class error) string {
	switch {
	case errors.Is(class, cloud.ErrCapacity):
		return "capacity"
	case errors.Is(class, cloud.ErrQuota):
		return "quota"
	case errors.Is(class, cloud.ErrNotFound):
		return "not_found"
	case errors.Is(class, cloud.ErrInvalid):
		return "invalid"
	case errors.Is(class, cloud.ErrOutcomeUnknown):
		return "outcome_unknown"
	default:
		return "transient"
	}
}

func (c *client) wait(ctx context.Context) error {
	return c.limiter.Wait(ctx)
}

func (c *client) instanceTypes(ctx context.Context) ([]cloud.InstanceType, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	start := c.clock.Now()
	out, err := c.p.InstanceTypes(ctx)
	c.observe("instance_types", start, err)
	return out, err
}

func (c *client) offerings(ctx context.Context) ([]cloud.Offering, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	start := c.clock.Now()
	out, err := c.p.Offerings(ctx)
	c.observe("offerings", start, err)
	return out, err
}

func (c *client) list(ctx context.Context) ([]cloud.Instance, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	start := c.clock.Now()
	out, err := c.p.List(ctx)
	c.observe("list", start, err)
	return out, err
}

// create orders one instance, holding one of the cloud's create slots.
func (c *client) create(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error) {
	select {
	case c.creates <- struct{}{}:
	case <-ctx.Done():
		return cloud.Instance{}, ctx.Err()
	}
	defer func() { <-c.creates }()
	if err := c.wait(ctx); err != nil {
		return cloud.Instance{}, err
	}
	spec.Install = c.install
	start := c.clock.Now()
	out, err := c.p.Create(ctx, spec)
	c.observe("create", start, err)
	return out, err
}

func (c *client) delete(ctx context.Context, inst cloud.Instance) error {
	if err := c.wait(ctx); err != nil {
		return err
	}
	start := c.clock.Now()
	err := c.p.Delete(ctx, inst)
	c.observe("delete", start, err)
	return err
}

// stopper is the cloud's cloud.Stopper; ok is false for a cloud that
// cannot stop instances.
func (c *client) stopper() (cloud.Stopper, bool) {
	s, ok := c.p.(cloud.Stopper)
	return s, ok
}

// refusedStaysStopped reports whether a stopped instance whose start the
// cloud refused for capacity stays stopped (cloud.Stopper).
func (c *client) refusedStaysStopped() bool {
	s, ok := c.stopper()
	return ok && s.RefusedStaysStopped()
}

// stoppedPrice is what a stopped instance of the offering bills per hour;
// 0 for a cloud that cannot stop instances.
func (c *client) stoppedPrice(k cloud.OfferingKey) float64 {
	if s, ok := c.stopper(); ok {
		return s.StoppedPrice(k)
	}
	return 0
}

// stop powers an instance off for a standby pool.
func (c *client) stop(ctx context.Context, inst cloud.Instance) error {
	s, ok := c.stopper()
	if !ok {
		return cloud.Errorf(cloud.ErrInvalid, "stop", "cloud %s cannot stop instances", c.p.Name())
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	start := c.clock.Now()
	err := s.Stop(ctx, inst)
	c.observe("stop", start, err)
	return err
}

// start powers a standby instance on.
func (c *client) start(ctx context.Context, inst cloud.Instance) error {
	s, ok := c.stopper()
	if !ok {
		return cloud.Errorf(cloud.ErrInvalid, "start", "cloud %s cannot start instances", c.p.Name())
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	begin := c.clock.Now()
	err := s.Start(ctx, inst)
	c.observe("start", begin, err)
	return err
}

// transfer renames a stopped instance and hands it to owner
// (cloud.Transferer).
func (c *client) transfer(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
	t, ok := c.p.(cloud.Transferer)
	if !ok {
		return cloud.Instance{}, cloud.Errorf(cloud.ErrInvalid, "transfer", "cloud %s cannot hand an instance over", c.p.Name())
	}
	if err := c.wait(ctx); err != nil {
		return cloud.Instance{}, err
	}
	begin := c.clock.Now()
	out, err := t.Transfer(ctx, inst, name, owner)
	c.observe("transfer", begin, err)
	return out, err
}
