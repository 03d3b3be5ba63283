package simulate

import (
	"context"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// oracle is one loop of the oracle: the NodeProvisioner planning for the
// pods that will arrive within one start-up time (the boot's 95th
// percentile, GPU start-up and a loop), known in advance, as
// for a forecast that is never wrong; it reports whether it asked the core
// for anything.
func (r *run) oracle(ctx context.Context) (bool, error) {
	soon := r.upcoming(r.bootLead + r.opts.GPUStartup + r.opts.Loop)
	ahead := make([]*corev1.Pod, len(soon))
	for i, p := range soon {
		ahead[i] = p.obj
	}
	return r.provisionAhead(ctx, ahead, true, math.Inf(1), true)
}

// upcoming are the pods that arrive within d from now, in arrival order.
func (r *run) upcoming(d time.Duration) []*pod {
	end := r.next
	for end < len(r.pods) && r.pods[end].At <= r.now+d {
		end++
	}
	return r.pods[r.next:end]
}
