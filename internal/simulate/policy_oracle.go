package simulate

import (
	"context"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
)

// oracle is one loop of the oracle: the NodeProvisioner planning for the
// pods that will arrive within one start-up time (the boot's 95th
// percentile, the GPU start-up or a longer pre-pull of the group's
// images, and a loop), known in advance, as for a
// forecast that is never wrong; it reports whether it asked the core for
// anything. It knows the departures too: an arrival that a running pod's
// end frees a node for needs none ordered (arriving).
//
// Pods that arrive within a standby start's lead time (the start's 95th
// percentile, GPU start-up after it and a loop) are served from the
// standby pools first, as the forecast serves them.
func (r *run) oracle(ctx context.Context) (bool, error) {
	objects := func(ps []*pod) []*corev1.Pod {
		out := make([]*corev1.Pod, len(ps))
		for i, p := range ps {
			out[i] = p.obj
		}
		return out
	}
	spec := r.opts.Provisioner
	if spec.Forecast == nil {
		spec.Forecast = &v1alpha1.Forecast{} // as the CRD defaults it
	}
	hold := provisioner.ScaleDownDelay(spec, true)
	ahead := objects(r.arriving(r.bootLead+r.joined()+r.opts.Loop, hold))
	soon := objects(r.arriving(r.startLead+r.opts.StandbyGPUStartup+r.opts.Loop, hold))
	return r.provisionAhead(ctx, ahead, soon, true, math.Inf(1), true)
}

// arriving are the pods that arrive within d from now, in arrival order,
// but for those a departure serves: an arrival takes the node of a
// running pod of its shape that ends before it, the earliest such first,
// unless it ended more than hold (the idle node's scale-down delay)
// before, when the node may be gone.
func (r *run) arriving(d, hold time.Duration) []*pod {
	leaving := map[forecast.Shape][]time.Duration{}
	for _, p := range r.running { // by end
		if p.done > r.now+d {
			break
		}
		if p.node != nil && p.started {
			s := forecast.Shape{GPUs: p.GPUs, MIG: p.MIG}
			leaving[s] = append(leaving[s], p.done)
		}
	}
	var out []*pod
	for _, p := range r.upcoming(d) {
		s := forecast.Shape{GPUs: p.GPUs, MIG: p.MIG}
		ends := leaving[s]
		for len(ends) > 0 && ends[0] < p.At-hold {
			ends = ends[1:]
		}
		if len(ends) > 0 && ends[0] <= p.At {
			leaving[s] = ends[1:]
			continue
		}
		leaving[s] = ends
		out = append(out, p)
	}
	return out
}

// upcoming are the pods that arrive within d from now, in arrival order.
func (r *run) upcoming(d time.Duration) []*pod {
	end := r.next
	for end < len(r.pods) && r.pods[end].At <= r.now+d {
		end++
	}
	return r.pods[r.next:end]
}
