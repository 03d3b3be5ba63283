package simulate

import (
	"context"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
)

// provision is one pass of the NodeProvisioner controller over the pool;
// it reports whether it asked the core for anything. The plan is made
// again only when the cluster or the core changed since the last one, or
// pods wait: otherwise it would be the same.
func (r *run) provision(ctx context.Context) (bool, error) {
	ahead, soon, whole := r.ahead()
	maxExtra := math.Inf(1)
	if fc := r.opts.Provisioner.Forecast; fc != nil && fc.MaxExtraHourlyCost != "" {
		maxExtra, _ = provisioner.MaxExtraHourlyCost(fc) // checked by Run
	}
	return r.provisionAhead(ctx, ahead, soon, whole, maxExtra, r.demand != nil)
}

// provisionAhead is one pass of the NodeProvisioner controller that plans
// for the pods ahead as if they were pending (within maxExtra an hour),
// serves those of them expected soon from the standby pools and leaves
// the pools to them (provisioner.OrdersAhead), and lets idle nodes go
// after the forecast's scale-down delay while whole (every shape of pod
// is ordered ahead for). forecasting says the spec has a forecast (as the
// CRD defaults it) though it does not set one.
func (r *run) provisionAhead(ctx context.Context, ahead, soon []*corev1.Pod, whole bool, maxExtra float64, forecasting bool) (bool, error) {
	asked := false
	// A plan made for pods expected is made again once none are: the
	// nodes it kept for them may go.
	aheadBefore := r.aheadBefore
	r.aheadBefore = len(ahead)
	if r.dirty || len(r.cl.pending) > 0 || r.last == nil || len(ahead) > 0 || aheadBefore > 0 {
		pool, snapshot, pending, err := r.view(r.opts.Provisioner)
		if err != nil {
			return false, err
		}
		p, planned := provisioner.PlanAhead(pool, snapshot, pending, ahead, maxExtra)
		r.last, r.lastAhead, r.dirty = &p, planned, false
		orders := provisioner.OrdersAhead(pool, snapshot, pending, soon, maxExtra, p, r.core.StandbyReady)
		if asked = r.order(ctx, pool, orders); asked && p.Reason != provisioner.ReasonForecast {
			return true, nil // as the controller: only orders ahead let scale-down go on
		}
	} else if len(r.last.Add) > 0 && r.last.Reason != provisioner.ReasonForecast {
		return false, nil // the core refused it last time; nothing changed since
	}
	// As the controller: a forecast that vouches for the pool lets its
	// idle nodes go sooner.
	spec := r.opts.Provisioner
	if forecasting && spec.Forecast == nil {
		spec.Forecast = &v1alpha1.Forecast{} // as the CRD defaults it
	}
	delay := provisioner.ScaleDownDelay(spec, whole && maxExtra > 0 && r.lastAhead == len(ahead))
	doomed := map[string]bool{}
	for _, name := range r.last.Remove {
		doomed[name] = true
	}
	// As the controller: as many as a group's standby pool takes back go
	// after its scaleDownAfter.
	down, err := r.scaleDown(ctx, func(n *node) bool { return doomed[n.name] }, delay, true, provisioner.NewPoolReturns(r.core).Take)
	return asked || down, err
}

// ahead feeds the forecast the demand now, by shape of pod, and returns
// the pods it adds to the plan (forecast.Demand.Ahead within one start-up
// time: boot, GPU start-up or a longer pre-pull, a loop; the spec's
// forecast.leadTime when set; for the spec's coverage), those of
// them expected within a standby start's (start, GPU start-up, a loop;
// the spec's forecast.standbyLeadTime when set),
// and whether it ordered ahead for every shape it has seen
// (provisioner.Outlook's Whole). None without a forecast, or before it
// has learned Options.TrainFor.
func (r *run) ahead() (out, soon []*corev1.Pod, whole bool) {
	if r.demand == nil {
		return nil, nil, false
	}
	now := epoch.Add(r.now)
	count := map[forecast.Shape]int{}
	for _, p := range r.cl.pending {
		s := forecast.Shape{GPUs: p.GPUs, MIG: p.MIG}
		count[s]++
		r.exemplar[s] = p.Pod
	}
	for _, p := range r.running {
		if p.node != nil && p.started { // not one a reclaim put back in the queue
			s := forecast.Shape{GPUs: p.GPUs, MIG: p.MIG}
			count[s]++
			if _, ok := r.exemplar[s]; !ok {
				r.exemplar[s] = p.Pod
			}
		}
	}
	r.demand.Observe(now, count)
	if r.demand.Learned(now) < r.opts.TrainFor {
		return nil, nil, false
	}
	whole = r.demand.AllTrusted()
	expected := func(lead time.Duration) []*corev1.Pod {
		var out []*corev1.Pod
		for _, w := range r.demand.Ahead(now, lead, provisioner.Coverage(r.opts.Provisioner.Forecast)) {
			like, seen := r.exemplar[w.Shape]
			if !seen { // as the controller: a pod of the shape tolerating every taint
				like = Pod{GPUs: w.Shape.GPUs, MIG: w.Shape.MIG}
			}
			for i := range w.Pods {
				like.Name = fmt.Sprintf("forecast-%d-%s-%d", w.Shape.GPUs, w.Shape.MIG, i)
				out = append(out, podObject(like))
			}
		}
		return out
	}
	lead := r.bootDelay + r.joined() + r.opts.Loop
	if fc := r.opts.Provisioner.Forecast; fc != nil && fc.LeadTime != nil && fc.LeadTime.Duration > 0 {
		lead = fc.LeadTime.Duration // as the spec says, as the controller does
	}
	soonLead := min(r.startDelay+r.opts.StandbyGPUStartup+r.opts.Loop, lead)
	if fc := r.opts.Provisioner.Forecast; fc != nil && fc.StandbyLeadTime != nil {
		soonLead = provisioner.StandbyLeadTime(fc, lead) // as the spec says, as the controller does
	}
	out, soon = expected(lead), expected(soonLead)
	r.res.ForecastPeak = max(r.res.ForecastPeak, len(out))
	return out, soon, whole
}
