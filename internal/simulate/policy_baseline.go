package simulate

import (
	"context"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
)

// baseline is one loop of the cluster-autoscaler-like baseline; it reports
// whether it asked the core for anything.
func (r *run) baseline(ctx context.Context) (bool, error) {
	oldest := r.now
	for _, p := range r.cl.pending {
		oldest = min(oldest, p.since)
	}
	if len(r.cl.pending) > 0 && r.now-oldest >= r.gpuBatchWait {
		// Bin-packing onto new nodes, with the capacity on the way counted:
		// the planner with no buffer and no utilization band.
		pool, p, err := r.plan(v1alpha1.NodeProvisionerSpec{})
		if err != nil {
			return false, err
		}
		if r.scaleUp(ctx, pool, p) {
			return true, nil
		}
	}
	// Unneeded nodes are timed all along; none goes within
	// scaleDownDelayAfterAdd of a scale-up.
	cooling := r.res.ScaleUps > 0 && r.now-r.lastAdd < caDelayAfterAdd
	return r.scaleDown(ctx, func(n *node) bool { return n.ready && len(n.pods) == 0 }, caUnneededTime, !cooling, nil)
}
