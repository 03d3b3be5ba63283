package simulate

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscaler/gpuscaler/internal/pending"
)

// Result is what one run measured.
type Result struct {
	Policy Policy
	Trace  string
	// Standby is the standby pool size the run gave each group (0: none
	// beyond the config's); StandbyStarts how many standby instances
	// started for demand, and failed to.
	Standby                           int
	StandbyStarts, StandbyStartFailed int
	// Forecast: the run ordered ahead of a forecast; ForecastPeak is the
	// most pods it ever planned ahead for in one loop.
	Forecast     bool
	ForecastPeak int
	// Simulated is the virtual time the run covered; MeasuredFrom when its
	// figures begin (Options.MeasureFrom).
	Simulated, MeasuredFrom time.Duration
	// Pods is how many the trace had; Finished how many ran to the end;
	// Unplaced how many never started (their wait runs to the end).
	Pods, Finished, Unplaced int
	// GPUHoursPaid integrates the GPUs of every instance held (ordered,
	// booting, running, idle, being deleted); GPUHoursUsed the GPUs pods
	// held; Cost the core's hourly spend over time.
	GPUHoursPaid, GPUHoursUsed, Cost float64
	// ScaleUps counts the policy's scale-up decisions; NodesAdded,
	// NodesRemoved the instances it asked for and gave back; NodesLost
	// the instances that went away under it (spot reclaims).
	ScaleUps, NodesAdded, NodesRemoved, NodesLost int
	// PodsRequeued counts pods put back to pending by a lost node.
	PodsRequeued int
	// StockOuts are the orders the simulated cloud refused for capacity
	// (each one a fallback to the next offering), from the core's
	// gpuscaler_stockouts_total; Reclaims the instances it lost, from
	// gpuscaler_instances_vanished_total.
	StockOuts, Reclaims int
	// Timeline is sampled every Options.Sample.
	Timeline []Sample
	// Floor is the cost no policy can beat on the trace over the pool, and
	// FloorGPUHours the GPU-hours its measured pods use (run.floor); Unfit
	// how many pods no group of the pool fits. The same for every policy.
	Floor, FloorGPUHours float64
	Unfit                int
	// Currency is what the pool's prices, and so Cost and Floor, are in.
	Currency string

	waits, requeueWaits []time.Duration
	// standbyStarts are the measured standby starts' times from the start
	// to the node's GPUs (StandbyStart).
	standbyStarts []time.Duration
	// parts sum the measured pods' time to GPU by part (TimeToGPU).
	parts waitParts
	// isFloor marks the floor's column (FloorOf).
	isFloor bool
}

// FloorOf is the floor's column beside a result of the same trace and
// pool: every measured pod starts as it arrives, and only what pods hold
// is paid, at the pool's cheapest price (run.floor).
func FloorOf(r *Result) *Result {
	return &Result{Policy: "floor", Trace: r.Trace, Simulated: r.Simulated, MeasuredFrom: r.MeasuredFrom,
		Pods: r.Pods - r.Unfit, Finished: r.Pods - r.Unfit, GPUHoursPaid: r.FloorGPUHours, GPUHoursUsed: r.FloorGPUHours,
		Cost: r.Floor, Floor: r.Floor, FloorGPUHours: r.FloorGPUHours, Currency: r.Currency, isFloor: true}
}

// Sample is the pool at one moment.
type Sample struct {
	At time.Duration
	// Pending pods; Demand the GPU-equivalents pods run on or wait for.
	Pending int
	Demand  float64
	// Capacity is the GPU-equivalents of each group's Nodes, Ready or
	// not, by group.
	Capacity map[string]float64
	// Spend is the pool's cost per hour.
	Spend float64
	// StockOuts, Reclaims and StandbyStarts count, since the run began,
	// the creates the cloud refused for capacity, the nodes lost under
	// pods' feet (spot reclaims) and the nodes started from standby: the
	// report marks where they rose.
	StockOuts, Reclaims, StandbyStarts int
}

// Wait returns the q-quantile (0..1) of the time pods waited from arrival
// to start; 0 for no pods.
func (r *Result) Wait(q float64) time.Duration { return quantile(r.waits, q) }

// RequeueWait returns the q-quantile of the time pods put back by a lost
// node waited to start again.
func (r *Result) RequeueWait(q float64) time.Duration { return quantile(r.requeueWaits, q) }

// StandbyStart returns the q-quantile of the time a standby instance took
// from its start to its node's GPUs, over the measured starts: the wait a
// pod served by the pool cannot beat. 0 for none.
func (r *Result) StandbyStart(q float64) time.Duration { return quantile(r.standbyStarts, q) }

// IdleShare is the share of the GPU-hours paid that no pod used.
func (r *Result) IdleShare() float64 {
	if r.GPUHoursPaid == 0 {
		return 0
	}
	return 1 - r.GPUHoursUsed/r.GPUHoursPaid
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// sample records the pool now.
func (r *run) sample() {
	s := Sample{At: r.now, Pending: len(r.cl.pending), Capacity: map[string]float64{}, Spend: r.spend, Demand: r.cl.used,
		StockOuts: r.engine.StockOuts(), Reclaims: r.res.NodesLost, StandbyStarts: r.standbyJoins}
	for _, p := range r.cl.pending {
		s.Demand += p.gpu
	}
	for _, n := range r.cl.nodes {
		s.Capacity[n.group] += n.gpus
	}
	r.res.Timeline = append(r.res.Timeline, s)
}

// result completes the run's figures with the core's metrics.
func (r *run) result() *Result {
	res := r.res
	res.Pods, res.MeasuredFrom = 0, r.opts.MeasureFrom
	for _, p := range r.pods {
		if p.At >= r.opts.MeasureFrom {
			res.Pods++
		}
	}
	families, err := r.reg.Gather()
	if err == nil {
		res.StockOuts = int(sum(families, "gpuscaler_stockouts_total"))
		res.Reclaims = int(sum(families, "gpuscaler_instances_vanished_total"))
		res.StandbyStarts = int(sumWhere(families, "gpuscaler_standby_starts_total", "result", "ok"))
		res.StandbyStartFailed = int(sumWhere(families, "gpuscaler_standby_starts_total", "result", "failed"))
	}
	return res
}

// sum adds up a counter's series.
func sum(families []*dto.MetricFamily, name string) float64 {
	return sumWhere(families, name, "", "")
}

// sumWhere adds up a counter's series whose label is value (every series
// for an empty label).
func sumWhere(families []*dto.MetricFamily, name, label, value string) float64 {
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if label != "" && lp.GetName() == label && lp.GetValue() != value {
					continue next
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// TableWidth is the terminal width WriteTable fits its table to.
const TableWidth = 120

// WriteTable prints results side by side, one column each, and the
// floor's column after them (the first result's: every result of one
// trace and pool has the same). Columns that would make the table wider
// than TableWidth wrap: the table goes on below with the next policies,
// each part with the row labels.
func WriteTable(w io.Writer, results ...*Result) error {
	if len(results) > 0 && results[0].Floor > 0 {
		results = append(slices.Clip(results), FloorOf(results[0]))
	}
	var part bytes.Buffer
	for rest := results; len(rest) > 0; {
		n := len(rest)
		for ; n > 0; n-- {
			part.Reset()
			if err := writeColumns(&part, results, rest[:n]); err != nil {
				return err
			}
			if n == 1 || widest(part.String()) <= TableWidth {
				break
			}
		}
		if len(rest) < len(results) {
			fmt.Fprintln(w)
		}
		if _, err := part.WriteTo(w); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// widest is the longest line of text, in characters.
func widest(text string) int {
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		n = max(n, utf8.RuneCountInString(line))
	}
	return n
}

// writeColumns prints the table's rows for some of the results (cols);
// all are every result, which the comparisons refer to.
func writeColumns(w io.Writer, all, cols []*Result) error {
	results := cols
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, cell func(*Result) string) {
		cells := make([]string, 0, len(results)+1)
		cells = append(cells, label)
		for _, r := range results {
			cells = append(cells, cell(r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	// played is a cell only a policy that ran has: the floor's is "-".
	played := func(cell func(*Result) string) func(*Result) string {
		return func(r *Result) string {
			if r.isFloor {
				return "-"
			}
			return cell(r)
		}
	}
	dur := func(q float64) func(*Result) string {
		return func(r *Result) string { return fmtDuration(r.Wait(q)) }
	}
	row("", func(r *Result) string { return r.Name() })
	row("trace", func(r *Result) string { return r.Trace })
	row("simulated", func(r *Result) string { return fmtDuration(r.Simulated) })
	if slices.ContainsFunc(all, func(r *Result) bool { return r.MeasuredFrom > 0 }) {
		row("measured from", func(r *Result) string { return fmtDuration(r.MeasuredFrom) })
	}
	row("pods (unplaced)", func(r *Result) string { return fmt.Sprintf("%d (%d)", r.Pods, r.Unplaced) })
	row("pending p50", dur(0.5))
	row("pending p95", dur(0.95))
	row("pending p99", dur(0.99))
	row("pending max", dur(1))
	row("mean: node+boot+GPUs+pull", played(func(r *Result) string {
		t := r.TimeToGPU()
		return fmt.Sprintf("%s+%s+%s+%s", fmtDuration(t.Node), fmtDuration(t.Boot), fmtDuration(t.GPUs), fmtDuration(t.Pull))
	}))
	row("GPU-hours paid", func(r *Result) string { return fmt.Sprintf("%.1f", r.GPUHoursPaid) })
	row("GPU-hours used", func(r *Result) string { return fmt.Sprintf("%.1f", r.GPUHoursUsed) })
	row("idle share", func(r *Result) string { return fmt.Sprintf("%.1f%%", 100*r.IdleShare()) })
	row("cost", func(r *Result) string { return fmt.Sprintf("%.2f %s", r.Cost, r.Currency) })
	row("nodes added / removed", played(func(r *Result) string { return fmt.Sprintf("%d / %d", r.NodesAdded, r.NodesRemoved) }))
	row("stock-out fallbacks", played(func(r *Result) string { return fmt.Sprint(r.StockOuts) }))
	row("spot reclaims (pods requeued)", played(func(r *Result) string { return fmt.Sprintf("%d (%d)", r.Reclaims, r.PodsRequeued) }))
	row("requeued pods' wait p95", played(func(r *Result) string { return fmtDuration(r.RequeueWait(0.95)) }))
	if slices.ContainsFunc(all, func(r *Result) bool { return r.StandbyStarts+r.StandbyStartFailed > 0 }) {
		row("standby starts (failed)", played(func(r *Result) string { return fmt.Sprintf("%d (%d)", r.StandbyStarts, r.StandbyStartFailed) }))
		row("standby start to GPUs p95", played(func(r *Result) string {
			if len(r.standbyStarts) == 0 {
				return "-" // no start measured
			}
			return fmtDuration(r.StandbyStart(0.95))
		}))
	}
	if oracle := oracleOf(all); oracle != nil {
		row("vs oracle: p95 wait, cost", played(func(r *Result) string {
			if r == oracle {
				return "(reference)"
			}
			return fmt.Sprintf("%s, %s", signed(r.Wait(0.95)-oracle.Wait(0.95)), percent(r.Cost, oracle.Cost))
		}))
	}
	if all[len(all)-1].isFloor {
		row("distance to the floor: cost", func(r *Result) string {
			if r.isFloor {
				return "(the bound)"
			}
			return percent(r.Cost, r.Floor)
		})
	}
	return tw.Flush()
}

// Name is the run's column header: its policy, and its standby pool.
func (r *Result) Name() string {
	name := string(r.Policy)
	if r.Forecast {
		name += " +forecast"
	}
	if r.Standby > 0 {
		name += fmt.Sprintf(" +standby %d", r.Standby)
	}
	return name
}

// oracleOf is the oracle's result among results, if any.
func oracleOf(results []*Result) *Result {
	for _, r := range results {
		if r.Policy == Oracle {
			return r
		}
	}
	return nil
}

// signed prints a duration difference with its sign.
func signed(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	return "+" + fmtDuration(d)
}

// percent prints how much more (or less) v is than of, in percent.
func percent(v, of float64) string {
	if of == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.0f%%", 100*(v/of-1))
}

// fmtDuration prints a duration to the second, in its largest units.
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d == 0:
		return "0s"
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// Summary is a result's figures as `simulate -o json|yaml` prints them:
// waits in seconds, money in the catalog's currency.
type Summary struct {
	Name  string `json:"name"`
	Trace string `json:"trace"`
	// Floor marks the floor's column (FloorOf).
	Floor               bool    `json:"floor,omitempty"`
	SimulatedHours      float64 `json:"simulatedHours"`
	MeasuredFromHours   float64 `json:"measuredFromHours,omitempty"`
	Pods                int     `json:"pods"`
	Unplaced            int     `json:"unplaced"`
	WaitP50Seconds      float64 `json:"waitP50Seconds"`
	WaitP95Seconds      float64 `json:"waitP95Seconds"`
	WaitP99Seconds      float64 `json:"waitP99Seconds"`
	WaitMaxSeconds      float64 `json:"waitMaxSeconds"`
	GPUHoursPaid        float64 `json:"gpuHoursPaid"`
	GPUHoursUsed        float64 `json:"gpuHoursUsed"`
	IdleShare           float64 `json:"idleShare"`
	Cost                float64 `json:"cost"`
	Currency            string  `json:"currency"`
	FloorCost           float64 `json:"floorCost"`
	NodesAdded          int     `json:"nodesAdded"`
	NodesRemoved        int     `json:"nodesRemoved"`
	StockOuts           int     `json:"stockOuts"`
	Reclaims            int     `json:"spotReclaims"`
	PodsRequeued        int     `json:"podsRequeued"`
	StandbyStarts       int     `json:"standbyStarts"`
	StandbyStartsFailed int     `json:"standbyStartsFailed"`
	// StandbyStartP95Seconds is the 95th percentile of the measured
	// standby starts' time from the start to the node's GPUs.
	StandbyStartP95Seconds float64 `json:"standbyStartP95Seconds,omitempty"`
	// TimeToGPU is the mean time from a measured pod's arrival to its
	// containers' start, by part; none for the floor.
	TimeToGPU *TimeToGPUSeconds `json:"timeToGPU,omitempty"`
	// WaitBuckets count the measured pods that waited at most each bound,
	// in the buckets of gpuscaler_gpu_pod_wait_seconds (cumulative, as
	// Prometheus's): a simulation compares with production's histogram.
	WaitBuckets []WaitBucket `json:"waitBuckets,omitempty"`
}

// WaitBucket is one bucket of a wait histogram: the pods that waited at
// most LeSeconds.
type WaitBucket struct {
	LeSeconds float64 `json:"le"`
	Pods      int     `json:"pods"`
}

// WaitHistogram counts the result's measured waits in the buckets of
// gpuscaler_gpu_pod_wait_seconds, cumulative; nil for the floor.
func (r *Result) WaitHistogram() []WaitBucket {
	if r.isFloor {
		return nil
	}
	waits := slices.Clone(r.waits)
	slices.Sort(waits)
	var out []WaitBucket
	for _, le := range pending.WaitBuckets() {
		n, _ := slices.BinarySearch(waits, time.Duration(le*float64(time.Second))+1)
		out = append(out, WaitBucket{LeSeconds: le, Pods: n})
	}
	return out
}

// Summarize is what WriteTable prints, for scripts: each result, and the
// floor after them.
func Summarize(results ...*Result) []Summary {
	if len(results) > 0 && results[0].Floor > 0 {
		results = append(slices.Clip(results), FloorOf(results[0]))
	}
	out := make([]Summary, 0, len(results))
	for _, r := range results {
		out = append(out, Summary{Name: r.Name(), Trace: r.Trace, Floor: r.isFloor, SimulatedHours: r.Simulated.Hours(),
			MeasuredFromHours: r.MeasuredFrom.Hours(), Pods: r.Pods, Unplaced: r.Unplaced,
			WaitP50Seconds: r.Wait(0.5).Seconds(), WaitP95Seconds: r.Wait(0.95).Seconds(), WaitP99Seconds: r.Wait(0.99).Seconds(),
			WaitMaxSeconds: r.Wait(1).Seconds(), GPUHoursPaid: r.GPUHoursPaid, GPUHoursUsed: r.GPUHoursUsed, IdleShare: r.IdleShare(),
			Cost: r.Cost, Currency: r.Currency, FloorCost: r.Floor, NodesAdded: r.NodesAdded, NodesRemoved: r.NodesRemoved, StockOuts: r.StockOuts,
			Reclaims: r.Reclaims, PodsRequeued: r.PodsRequeued, StandbyStarts: r.StandbyStarts, StandbyStartsFailed: r.StandbyStartFailed,
			StandbyStartP95Seconds: r.StandbyStart(0.95).Seconds(),
			WaitBuckets:            r.WaitHistogram(), TimeToGPU: r.TimeToGPU().seconds(r.isFloor)})
	}
	return out
}

// TimeToGPUSeconds is TimeToGPU in seconds, for scripts.
type TimeToGPUSeconds struct {
	Node float64 `json:"nodeSeconds"`
	Boot float64 `json:"bootSeconds"`
	GPUs float64 `json:"gpusSeconds"`
	Pull float64 `json:"pullSeconds"`
}

func (t TimeToGPU) seconds(floor bool) *TimeToGPUSeconds {
	if floor {
		return nil
	}
	return &TimeToGPUSeconds{Node: t.Node.Seconds(), Boot: t.Boot.Seconds(), GPUs: t.GPUs.Seconds(), Pull: t.Pull.Seconds()}
}

// TimeToGPU is the mean time from a pod's arrival to its containers'
// start, split in the parts it waited on: Node, for a node to be ordered
// or to have room (a loop, a stock-out, capacity on its way for other
// pods); Boot, while the node it landed on booted (or started from
// standby) until its Node registered; GPUs, while that node's GPUs came
// up; Pull, while its image was pulled onto the node. The parts add up
// to the mean wait.
type TimeToGPU struct {
	Node, Boot, GPUs, Pull time.Duration
}

// Total is the mean time to GPU.
func (t TimeToGPU) Total() time.Duration { return t.Node + t.Boot + t.GPUs + t.Pull }

// TimeToGPU is the measured pods' mean time to GPU, by part; pods never
// placed, and pods a reclaim put back, are left out.
func (r *Result) TimeToGPU() TimeToGPU {
	w := r.parts
	if w.pods == 0 {
		return TimeToGPU{}
	}
	n := time.Duration(w.pods)
	return TimeToGPU{Node: (w.node / n).Round(time.Second), Boot: (w.boot / n).Round(time.Second),
		GPUs: (w.gpus / n).Round(time.Second), Pull: (w.pull / n).Round(time.Second)}
}

// waitParts sums pods' time to GPU by part.
type waitParts struct {
	pods                   int
	node, boot, gpus, pull time.Duration
}

// add splits a pod's wait, from its arrival to its start on p.node: the
// part of it before the pod was bound that overlaps the node's boot, its
// GPU start-up, and what is left (Node); after it was bound, the pull.
func (w *waitParts) add(p *pod) {
	n := p.node
	overlap := func(from, to time.Duration) time.Duration {
		return max(0, min(to, p.placed)-max(from, p.At))
	}
	boot, gpus := overlap(n.orderedAt, n.registeredAt), overlap(n.registeredAt, n.readyAt)
	w.pods++
	w.boot += boot
	w.gpus += gpus
	w.node += p.placed - p.At - boot - gpus
	w.pull += p.start - p.placed
}
