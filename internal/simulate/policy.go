package simulate

import "context"

// Policy is the autoscaler a run puts in front of the core.
type Policy string

// Policies.
const (
	// NodeProvisioner is gpuscaler's own controller: its planner
	// (utilization band, warm buffer, pending pods on capacity on the
	// way) every loop, and idle nodes beyond the buffer removed after the
	// spec's scaleDownDelay.
	NodeProvisioner Policy = "nodeprovisioner"
	// Baseline behaves as cluster-autoscaler does with its defaults: a
	// loop every 10 s that waits until the oldest pending GPU pod is 30 s
	// old (not with a standby pool: the chart then runs it with
	// --bypassed-scheduler-names, which skips the wait), bin-packs the
	// pending pods onto new nodes (no buffer, no utilization target), removes nodes empty for scaleDownUnneededTime
	// (10 min), and none within scaleDownDelayAfterAdd (10 min) of a
	// scale-up.
	Baseline Policy = "cluster-autoscaler"
	// Oracle is a reference, not a bound: the NodeProvisioner (its spec,
	// and the run's standby pools) told every arrival in advance. Each
	// loop it plans for the pods that will arrive within one start-up
	// time (boot, GPU start-up and a loop) as the controller plans for
	// the pods its forecast expects, and lets idle nodes go after the
	// forecast's scale-down delay, as while a forecast vouches for the
	// pool. What a forecast can win is at most the distance to it. The
	// true bound is the floor (Result.Floor).
	Oracle Policy = "oracle"
)

// step is one loop of a policy: what it asks the core for; it reports
// whether it asked for anything. Each policy's is in a file of its own
// (policy_*.go).
type step func(r *run, ctx context.Context) (bool, error)

// step returns the policy's loop; false for no such policy.
func (p Policy) step() (step, bool) {
	switch p {
	case NodeProvisioner:
		return (*run).provision, true
	case Baseline:
		return (*run).baseline, true
	case Oracle:
		return (*run).oracle, true
	}
	return nil, false
}

// Policies are the policies a run may play, in the table's order.
func Policies() []Policy { return []Policy{NodeProvisioner, Baseline, Oracle} }
