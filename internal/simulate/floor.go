package simulate

import (
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// floor is what no policy can beat on the run's trace over its pool, and
// what every result is measured against: each measured pod starts as it
// arrives (no wait), and only its share of an instance is paid, while it
// runs, at the cheapest hourly price any offering of a group that fits it
// asks. Its share is the least, over the GPU resources it requests (whole
// GPUs, MIG slices), of what it takes of the instance's: pods that run on
// one instance at once hold at most all of any one resource, so their
// shares add up to at most one instance. A policy pays for whole
// instances, from order to deletion, at the price of the offering it got,
// idle ones too: it can only pay more, for a run in which every pod runs
// to its end. Pods no group fits are left out (no policy runs them), and
// counted.
func (r *run) floor() (cost, gpuHours float64, unfit int) {
	type offer struct {
		tmpl  *corev1.Node
		price float64
	}
	var offers []offer
	for _, g := range r.groups {
		tmpl, err := r.core.Template(g)
		if err != nil {
			continue
		}
		if price, ok := r.core.CheapestPrice(g); ok {
			offers = append(offers, offer{tmpl: tmpl, price: price})
		}
	}
	for _, p := range r.pods {
		if p.At < r.opts.MeasureFrom {
			continue
		}
		best := math.Inf(1)
		for _, o := range offers {
			if !plan.Fits(p.obj, o.tmpl) {
				continue
			}
			share := math.Inf(1)
			for name, q := range p.req {
				if _, ok := gpu.GPUFraction(name); !ok {
					continue
				}
				if all := o.tmpl.Status.Allocatable[name]; all.AsApproximateFloat64() > 0 {
					share = math.Min(share, q.AsApproximateFloat64()/all.AsApproximateFloat64())
				}
			}
			best = math.Min(best, share*o.price)
		}
		if math.IsInf(best, 1) {
			unfit++
			continue
		}
		h := p.Duration.Hours()
		cost += best * h
		gpuHours += p.gpu * h
	}
	return cost, gpuHours, unfit
}
