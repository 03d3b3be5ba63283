package daemon

import (
	"context"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// Write runs fn, a write, on the core in force, through the gate: never
// on a core that is handing over to the next (see gate).
func (r *Runtime) Write(ctx context.Context, fn func(*nodegroup.Manager) error) error {
	if err := r.gate.enter(ctx); err != nil {
		return err
	}
	defer r.gate.leave()
	return fn(r.Core())
}

// InForce returns a handle on the Runtime's core in force, seen as the
// interface C a front end declares; as converts the core (a
// *nodegroup.Manager implements every front end's interface). A front end
// keeps the one handle across configuration reloads.
func InForce[C any](r *Runtime, as func(*nodegroup.Manager) C) inforce.Core[C] {
	return inforce.New(
		func() C { return as(r.Core()) },
		func(ctx context.Context, fn func(C) error) error {
			return r.Write(ctx, func(m *nodegroup.Manager) error { return fn(as(m)) })
		})
}

// AutoscalingOptions returns a group's cluster-autoscaler option overrides
// from the configuration in force.
func (r *Runtime) AutoscalingOptions(group string) (*config.AutoscalingOptions, bool) {
	return config.OptionsOf(r.Config())(group)
}
