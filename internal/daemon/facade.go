package daemon

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// Facade answers every call from the core of the configuration in force,
// so a front end keeps one handle across reloads. It implements the cores
// the front ends declare (externalgrpc.Core, provisioner.Core).
type Facade struct{ r *Runtime }

// Facade returns the Runtime's Facade.
func (r *Runtime) Facade() Facade { return Facade{r: r} }

func (f Facade) core() *nodegroup.Manager { return f.r.Core() }

// write runs a write on the core in force, through the gate: never on a
// core that is handing over to the next (see gate).
func (f Facade) write(ctx context.Context, fn func(*nodegroup.Manager) error) error {
	if err := f.r.gate.enter(ctx); err != nil {
		return err
	}
	defer f.r.gate.leave()
	return fn(f.r.Core())
}

// Groups lists the managed groups.
func (f Facade) Groups() []nodegroup.Info { return f.core().Groups() }

// Group describes one managed group.
func (f Facade) Group(name string) (nodegroup.Info, bool) { return f.core().Group(name) }

// GroupForProviderID finds an instance's group.
func (f Facade) GroupForProviderID(pid string) (string, bool) {
	return f.core().GroupForProviderID(pid)
}

// TargetSize returns a group's target size.
func (f Facade) TargetSize(g string) (int, error) { return f.core().TargetSize(g) }

// IncreaseSize raises a group's target.
func (f Facade) IncreaseSize(ctx context.Context, g string, d int) error {
	return f.write(ctx, func(c *nodegroup.Manager) error { return c.IncreaseSize(ctx, g, d) })
}

// DecreaseTargetSize withdraws unfulfilled orders.
func (f Facade) DecreaseTargetSize(ctx context.Context, g string, d int) error {
	return f.write(ctx, func(c *nodegroup.Manager) error { return c.DecreaseTargetSize(ctx, g, d) })
}

// DeleteNodes deletes instances of a group.
func (f Facade) DeleteNodes(ctx context.Context, g string, ids []string) error {
	return f.write(ctx, func(c *nodegroup.Manager) error { return c.DeleteNodes(ctx, g, ids) })
}

// Instances lists a group's members.
func (f Facade) Instances(g string) ([]nodegroup.Instance, error) { return f.core().Instances(g) }

// EachInstance calls fn with each of a group's members, in no order,
// without their aliases.
func (f Facade) EachInstance(g string, fn func(nodegroup.Instance)) error {
	return f.core().EachInstance(g, fn)
}

// Template returns a group's template node.
func (f Facade) Template(g string) (*corev1.Node, error) { return f.core().Template(g) }

// NodePrice prices a node.
func (f Facade) NodePrice(pid string, labels map[string]string, start, end time.Time) (float64, error) {
	return f.core().NodePrice(pid, labels, start, end)
}

// PodPrice prices a pod.
func (f Facade) PodPrice(pod *corev1.Pod, start, end time.Time) (float64, error) {
	return f.core().PodPrice(pod, start, end)
}

// GPUTypes lists the accelerators of the GPU groups.
func (f Facade) GPUTypes() []string { return f.core().GPUTypes() }

// Refresh asks for an early sync when the last is old.
func (f Facade) Refresh(ctx context.Context) error { return f.core().Refresh(ctx) }

// GroupPrice is the next instance's hourly price.
func (f Facade) GroupPrice(g string) (float64, bool) { return f.core().GroupPrice(g) }

// GroupSpend is a group's hourly spend.
func (f Facade) GroupSpend(g string) float64 { return f.core().GroupSpend(g) }

// Backoff tells whether a group gets no new orders now, and why.
func (f Facade) Backoff(g string) (nodegroup.Backoff, bool) { return f.core().Backoff(g) }

// Launch orders one instance outside any group.
func (f Facade) Launch(ctx context.Context, req nodegroup.LaunchRequest) (nodegroup.Instance, error) {
	var inst nodegroup.Instance
	err := f.write(ctx, func(c *nodegroup.Manager) error {
		var err error
		inst, err = c.Launch(ctx, req)
		return err
	})
	return inst, err
}

// Terminate deletes a launched instance.
func (f Facade) Terminate(ctx context.Context, pid string) error {
	return f.write(ctx, func(c *nodegroup.Manager) error { return c.Terminate(ctx, pid) })
}

// LaunchedInstance finds a launched instance by provider ID.
func (f Facade) LaunchedInstance(pid string) (nodegroup.Instance, bool) {
	return f.core().LaunchedInstance(pid)
}

// LaunchedNamed finds a launched instance by name.
func (f Facade) LaunchedNamed(name string) (nodegroup.Instance, bool) {
	return f.core().LaunchedNamed(name)
}

// Launched lists launched instances.
func (f Facade) Launched(owner string) []nodegroup.Instance { return f.core().Launched(owner) }

// AutoscalingOptions returns a group's cluster-autoscaler option overrides
// from the configuration in force.
func (f Facade) AutoscalingOptions(g string) (*config.AutoscalingOptions, bool) {
	return config.OptionsOf(f.r.Config())(g)
}

// Offers returns a cloud's catalog and offerings from memory.
func (f Facade) Offers(cloudName string, locations []string) (nodegroup.Offers, bool) {
	return f.core().Offers(cloudName, locations)
}
