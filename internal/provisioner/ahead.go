package provisioner

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// ReasonForecast is the plan reason of nodes ordered ahead of a forecast.
const ReasonForecast = "forecast"

// PlanAhead plans a pool for its pending pods and, within maxExtra of
// hourly cost (math.Inf(1): no cap), for as many of the pods a forecast
// expects (expected, in the order to serve them) as that buys. ahead is
// how many of them it planned for.
//
// Capacity for expected pods is, first, nodes with nothing on them that
// stay (on their way: perhaps ordered ahead before), then idle nodes the
// plan without them would remove (keeping one costs what ordering it
// would, and deleting a node to buy its twin minutes later costs both),
// then new nodes; all of them count against maxExtra. Nothing else
// changes: the pending pods get what they would get without a forecast,
// and every other idle node goes as it would.
func PlanAhead(pool plan.Pool, snapshot []plan.Node, pending, expected []*corev1.Pod, maxExtra float64) (p plan.Plan, ahead int) {
	base := plan.Compute(pool, snapshot, pending)
	if len(expected) == 0 || maxExtra <= 0 {
		return base, 0
	}
	// The pool as it is once the reactive plan's idle nodes are gone: the
	// expected pods are planned on what stays, and what they add is
	// theirs.
	doomed := make(map[string]string, len(base.Remove)) // the reactive plan's idle nodes: name to group
	for _, name := range base.Remove {
		doomed[name] = ""
	}
	for _, n := range snapshot {
		if _, ok := doomed[n.Name]; ok {
			doomed[n.Name] = n.Group
		}
	}
	doomedIn := map[string]int{}
	for _, g := range doomed {
		doomedIn[g]++
	}
	rest := slices.DeleteFunc(slices.Clone(snapshot), func(n plan.Node) bool { _, ok := doomed[n.Name]; return ok })
	after := pool
	after.Groups = slices.Clone(pool.Groups)
	for i := range after.Groups {
		g := &after.Groups[i]
		g.Nodes -= doomedIn[g.Name]
		g.Spend -= float64(doomedIn[g.Name]) * g.Price
	}
	try := func(k int) plan.Plan {
		return plan.Compute(after, rest, append(slices.Clip(pending), expected[:k]...))
	}
	// What the expected pods hold: the nodes they add, and the empty ones
	// (idle, or on their way) they take, which would otherwise go. Nodes
	// ordered ahead earlier count here until pods come to them.
	ref := try(0)
	cost := func(q plan.Plan) float64 {
		c := 0.0
		for _, g := range pool.Groups {
			c += float64(q.Add[g.Name]-ref.Add[g.Name]+q.Filled[g.Name]-ref.Filled[g.Name]) * g.Price
		}
		return c
	}
	// The most expected pods whose capacity fits maxExtra: the cost grows
	// with the pods planned for.
	var best plan.Plan
	if q := try(len(expected)); cost(q) <= maxExtra+1e-9 {
		best, ahead = q, len(expected)
	} else {
		lo, hi := 0, len(expected) // lo fits, hi does not
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if q := try(mid); cost(q) <= maxExtra+1e-9 {
				best, lo = q, mid
			} else {
				hi = mid
			}
		}
		ahead = lo
	}
	if ahead == 0 || !adds(best, ref) {
		return base, ahead
	}
	// What the expected pods add is taken from the doomed nodes of each
	// group first, then ordered.
	p = base
	p.Add = map[string]int{}
	kept := map[string]int{}
	for _, g := range pool.Groups {
		extra := best.Add[g.Name] - ref.Add[g.Name]
		if extra <= 0 {
			if base.Add[g.Name] > 0 {
				p.Add[g.Name] = base.Add[g.Name]
			}
			continue
		}
		kept[g.Name] = min(extra, doomedIn[g.Name])
		if n := base.Add[g.Name] + extra - kept[g.Name]; n > 0 {
			p.Add[g.Name] = n
		}
	}
	// The nodes kept are the last the reactive plan would remove of
	// their groups: it removes in the order it prefers.
	p.Remove = nil
	for i := len(base.Remove) - 1; i >= 0; i-- {
		name := base.Remove[i]
		if g := doomed[name]; kept[g] > 0 {
			kept[g]--
			continue
		}
		p.Remove = append(p.Remove, name)
	}
	slices.Reverse(p.Remove)
	if p.Reason == "" {
		p.Reason = ReasonForecast
	}
	return p, ahead
}

// Orders is what a pass asks of the core, by group: Take nodes an
// IncreaseSize serves (from the group's standby pool first), Fresh ones
// an IncreaseSizeFresh orders anew.
type Orders struct {
	Take, Fresh map[string]int
}

// Step is one call to the core for a group: N nodes, by IncreaseSizeFresh
// when Fresh, else IncreaseSize.
type Step struct {
	N     int
	Fresh bool
}

// Steps are a group's orders as calls to the core: those taken first, so
// that the standby pool serves the nearest pods.
func (o Orders) Steps(group string) []Step {
	var out []Step
	if n := o.Take[group]; n > 0 {
		out = append(out, Step{N: n})
	}
	if n := o.Fresh[group]; n > 0 {
		out = append(out, Step{N: n, Fresh: true})
	}
	return out
}

// OrdersAhead splits what p (PlanAhead's plan for the pods expected
// within the forecast's leadTime) adds to each group between its standby
// pool and fresh orders. soon are the expected pods within the
// forecast's standbyLeadTime, planned as PlanAhead plans them; ready is
// how many instances a group's pool could start now.
//
// A group takes what the plan adds for its pending pods and the pods
// expected soon: a pool's instances first. Of the rest, as many as its
// pool still holds wait until they are expected soon, since a start
// serves sooner than a boot and costs less lead; the others are ordered
// fresh now, and leave the pool to them. Without pools, everything is
// taken, as IncreaseSize always did.
func OrdersAhead(pool plan.Pool, snapshot []plan.Node, pending, soon []*corev1.Pod, maxExtra float64, p plan.Plan, ready func(group string) int) Orders {
	o := Orders{Take: map[string]int{}, Fresh: map[string]int{}}
	held, pooled := map[string]int{}, false
	for _, g := range pool.Groups {
		if p.Add[g.Name] > 0 {
			held[g.Name] = ready(g.Name)
			pooled = pooled || held[g.Name] > 0
		}
	}
	var near plan.Plan
	if pooled {
		near, _ = PlanAhead(pool, snapshot, pending, soon, maxExtra)
	}
	for _, g := range pool.Groups {
		total := p.Add[g.Name]
		if total <= 0 {
			continue
		}
		if held[g.Name] == 0 {
			o.Take[g.Name] = total
			continue
		}
		take := min(near.Add[g.Name], total)
		rest := total - take
		fresh := rest - min(rest, max(held[g.Name]-take, 0))
		if take > 0 {
			o.Take[g.Name] = take
		}
		if fresh > 0 {
			o.Fresh[g.Name] = fresh
		}
	}
	return o
}

// adds reports whether q adds nodes ref does not.
func adds(q, ref plan.Plan) bool {
	for g, n := range q.Add {
		if n > ref.Add[g] {
			return true
		}
	}
	return false
}

// Defaults of a forecast, as the CRD sets them.
const (
	DefaultCoveragePercent        = 80
	DefaultForecastScaleDownDelay = 2 * time.Minute
	// DefaultScaleDownDelay is a pool's scaleDownDelay when unset.
	DefaultScaleDownDelay = 10 * time.Minute
	// DefaultStandbyLeadTime is a forecast's standbyLeadTime when unset:
	// a start's minute and the GPU start-up's 4m30s after it
	// (docs/simulate.md's facts), rounded up.
	DefaultStandbyLeadTime = 6 * time.Minute
)

// StandbyLeadTime is a forecast's standbyLeadTime, or its default, at
// most lead (its leadTime).
func StandbyLeadTime(spec *v1alpha1.Forecast, lead time.Duration) time.Duration {
	d := DefaultStandbyLeadTime
	if spec != nil && spec.StandbyLeadTime != nil && spec.StandbyLeadTime.Duration > 0 {
		d = spec.StandbyLeadTime.Duration
	}
	return min(d, lead)
}

// Coverage is how likely what a pool orders ahead is to serve every pod
// that arrives within the lead time (forecast.coveragePercent): 0.8 by
// default, and within the CRD's 0.5 to 0.99 whatever an object written
// around its validation says.
func Coverage(spec *v1alpha1.Forecast) float64 {
	if spec == nil || spec.CoveragePercent == nil {
		return DefaultCoveragePercent / 100.0
	}
	return min(max(float64(*spec.CoveragePercent), 50), 99) / 100
}

// ScaleDownDelay is how long a pool's idle node stays before it goes: the
// pool's scaleDownDelay, or, while its forecast vouches for it, the
// forecast's scaleDownDelay when shorter. A forecast vouches for a pool
// when it orders ahead for every shape of pod the pool has seen
// (Outlook.Whole) and the plan took all it expects (PlanAhead's ahead is
// all of Outlook.Ahead): the nodes it keeps cover the arrivals a wait
// would have, so the rest need not wait. A forecast that misses, or a cap
// that cuts what it orders, leaves the pool's own delay.
func ScaleDownDelay(spec v1alpha1.NodeProvisionerSpec, vouched bool) time.Duration {
	delay := DefaultScaleDownDelay
	if spec.ScaleDownDelay != nil {
		delay = spec.ScaleDownDelay.Duration
	}
	if !vouched || spec.Forecast == nil {
		return delay
	}
	fast := DefaultForecastScaleDownDelay
	if spec.Forecast.ScaleDownDelay != nil {
		fast = spec.Forecast.ScaleDownDelay.Duration
	}
	return min(delay, max(fast, 0))
}

// MaxExtraHourlyCost is a forecast spec's cap, 0 when unset.
func MaxExtraHourlyCost(spec *v1alpha1.Forecast) (float64, error) {
	if spec == nil || spec.MaxExtraHourlyCost == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(spec.MaxExtraHourlyCost, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("forecast.maxExtraHourlyCost %q: want a decimal of at least 0", spec.MaxExtraHourlyCost)
	}
	return v, nil
}
