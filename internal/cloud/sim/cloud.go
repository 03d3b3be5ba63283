package sim

import (
	"context"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Name is the simulated cloud's name in provider IDs and config.
const Name = "sim"

// Cloud is one cluster's account on a simulated Engine. It implements
// cloud.Provider.
type Cloud struct {
	engine  *Engine
	cluster string
}

var (
	_ cloud.Provider = (*Cloud)(nil)
	_ cloud.Stopper  = (*Cloud)(nil)
)

// New builds an engine and returns the cluster's account on it.
func New(cfg Config, cluster string, opts Options) (*Cloud, error) {
	e, err := NewEngine(cfg, opts)
	if err != nil {
		return nil, err
	}
	return e.Account(cluster), nil
}

// Account returns a cluster's view of the engine; several clusters may
// share one engine, and each lists only its own instances.
func (e *Engine) Account(cluster string) *Cloud {
	return &Cloud{engine: e, cluster: cluster}
}

// Engine returns the engine behind the account, for tests and the registrar.
func (c *Cloud) Engine() *Engine { return c.engine }

// Cluster returns the cluster the account belongs to.
func (c *Cloud) Cluster() string { return c.cluster }

// ListLag is how long the engine's list leaves out a new instance
// (Options.ListLag): none unless a test asks for it.
func (c *Cloud) ListLag() time.Duration { return c.engine.listLag }

// Name returns "sim".
func (c *Cloud) Name() string { return Name }

// CheckOptions implements cloud.Provider: the simulated cloud reads no
// cloudOptions.
func (c *Cloud) CheckOptions(opts map[string]string) []*cloud.OptionError {
	return cloud.CheckKnownOptions(opts)
}

// InstanceTypes returns the catalog.
func (c *Cloud) InstanceTypes(ctx context.Context) ([]cloud.InstanceType, error) {
	return c.engine.InstanceTypes(ctx)
}

// Offerings returns what can be ordered now.
func (c *Cloud) Offerings(ctx context.Context) ([]cloud.Offering, error) {
	return c.engine.Offerings(ctx)
}

// List returns the cluster's instances.
func (c *Cloud) List(ctx context.Context) ([]cloud.Instance, error) {
	return c.engine.List(ctx, c.cluster)
}

// Create orders one instance.
func (c *Cloud) Create(ctx context.Context, spec cloud.CreateSpec) (cloud.Instance, error) {
	return c.engine.Create(ctx, c.cluster, spec)
}

// Delete deletes one instance; gone is success.
func (c *Cloud) Delete(ctx context.Context, inst cloud.Instance) error {
	return c.engine.Delete(ctx, c.cluster, inst)
}

// Stop implements cloud.Stopper.
func (c *Cloud) Stop(ctx context.Context, inst cloud.Instance) error {
	return c.engine.Stop(ctx, c.cluster, inst)
}

// Start implements cloud.Stopper.
func (c *Cloud) Start(ctx context.Context, inst cloud.Instance) error {
	return c.engine.Start(ctx, c.cluster, inst)
}

// Transfer implements cloud.Transferer.
func (c *Cloud) Transfer(ctx context.Context, inst cloud.Instance, name, owner string) (cloud.Instance, error) {
	return c.engine.Transfer(ctx, c.cluster, inst, name, owner)
}

// RefusedStaysStopped implements cloud.Stopper.
func (c *Cloud) RefusedStaysStopped() bool { return c.engine.RefusedStaysStopped() }

// StoppedPrice implements cloud.Stopper.
func (c *Cloud) StoppedPrice(k cloud.OfferingKey) float64 { return c.engine.StoppedPrice(k) }
