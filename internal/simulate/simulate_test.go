package simulate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud/catalogs"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/pending"
)

// oneGroup is a pool of one-GPU on-demand nodes (2.29 an hour) that boot
// in 60 s.
const oneGroup = `clusterName: sim
clouds:
  sim: {bootDelay: 60s, defaultCapacity: 20}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 5}
`

func parse(t *testing.T, doc string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func play(t *testing.T, cfg *config.Config, trace Trace, opts Options) *Result {
	t.Helper()
	opts.Config = cfg
	res, err := Run(context.Background(), trace, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// One pod of one GPU for 30 minutes on an empty pool, worked out by hand.
// NodeProvisioner orders at the first loop (t=0); the node boots in 60 s
// and its GPUs come 60 s later, so the pod waits 120 s and runs until
// t=1,920 s; the node is paid from its order to the end: 1,920 s of one
// GPU at 2.29 an hour. The baseline waits until the pod is 30 s old
// before it orders, so the pod waits 150 s and the node is paid from
// t=30 to t=1,950.
func TestHandComputedTrace(t *testing.T) {
	cfg := parse(t, oneGroup)
	trace := Trace{Name: "one", Pods: []Pod{{Name: "a", At: 0, Duration: 30 * time.Minute, GPUs: 1}}}
	for _, tc := range []struct {
		policy    Policy
		wait, end time.Duration
	}{
		{NodeProvisioner, 120 * time.Second, 1920 * time.Second},
		{Baseline, 150 * time.Second, 1950 * time.Second},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			res := play(t, cfg, trace, Options{Policy: tc.policy, GPUStartup: time.Minute})
			paid := (1920 * time.Second).Hours() // from the order to the end, for both
			if res.Wait(1) != tc.wait || res.Wait(0.5) != tc.wait {
				t.Errorf("wait %s (p50 %s), want %s", res.Wait(1), res.Wait(0.5), tc.wait)
			}
			if res.Simulated != tc.end {
				t.Errorf("simulated %s, want %s", res.Simulated, tc.end)
			}
			if !near(res.GPUHoursPaid, paid) {
				t.Errorf("GPU-hours paid %.6f, want %.6f", res.GPUHoursPaid, paid)
			}
			if !near(res.GPUHoursUsed, 0.5) {
				t.Errorf("GPU-hours used %.6f, want 0.5", res.GPUHoursUsed)
			}
			if want := 2.29 * paid; !near(res.Cost, want) {
				t.Errorf("cost %.6f, want %.6f", res.Cost, want)
			}
			if res.NodesAdded != 1 || res.ScaleUps != 1 || res.Finished != 1 || res.Unplaced != 0 {
				t.Errorf("added %d in %d scale-ups, finished %d, unplaced %d; want 1, 1, 1, 0", res.NodesAdded, res.ScaleUps, res.Finished, res.Unplaced)
			}
		})
	}
}

// Two pods 40 minutes apart: the node of the first goes idle and, after
// the NodeProvisioner's scaleDownDelay (5 min here), is deleted; the
// second needs a new node. With a warm buffer of one the pool keeps a
// spare node, so the second pod starts at once.
func TestScaleDownAndWarmBuffer(t *testing.T) {
	cfg := parse(t, oneGroup)
	trace := Trace{Name: "two", Pods: []Pod{
		{Name: "a", At: 0, Duration: 10 * time.Minute, GPUs: 1},
		{Name: "b", At: 40 * time.Minute, Duration: 10 * time.Minute, GPUs: 1},
	}}
	delay := 5 * time.Minute
	spec := v1alpha1.NodeProvisionerSpec{ScaleDownDelay: duration(delay)}
	res := play(t, cfg, trace, Options{Policy: NodeProvisioner, Provisioner: spec, GPUStartup: time.Minute})
	// a: ordered at 0, starts at 120 s, ends at 720 s; the node is idle
	// from then, unneeded at the 720 s loop, deleted at 1,020 s and paid
	// until the next sync (every 30 s) finds it gone, at 1,050 s. b:
	// ordered at 2,400 s, starts at 2,520 s, ends at 3,120 s.
	if res.NodesAdded != 2 || res.NodesRemoved != 1 {
		t.Errorf("added %d, removed %d; want 2, 1", res.NodesAdded, res.NodesRemoved)
	}
	if res.Wait(1) != 120*time.Second {
		t.Errorf("longest wait %s, want 120s", res.Wait(1))
	}
	paid := (1050*time.Second + (3120-2400)*time.Second).Hours()
	if !near(res.GPUHoursPaid, paid) {
		t.Errorf("GPU-hours paid %.6f, want %.6f", res.GPUHoursPaid, paid)
	}

	buffer := int32(1)
	spec.MinUnutilizedGPUNodes = &buffer
	res = play(t, cfg, trace, Options{Policy: NodeProvisioner, Provisioner: spec, GPUStartup: time.Minute})
	if res.Wait(0.5) != 0 {
		t.Errorf("with a warm buffer, median wait %s, want 0 (b starts on the spare node)", res.Wait(0.5))
	}
	if res.Wait(1) != 120*time.Second {
		t.Errorf("with a warm buffer, longest wait %s, want 120s (a, before the buffer is up)", res.Wait(1))
	}
}

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// workedOutStandbyGPUStartup is the GPU start-up after a standby start
// that the mechanics tests were worked out by hand with (beside a minute
// cold): the device plugin alone, with the driver on the image. The runs'
// defaults are facts.go's, which the docs' figures and
// TestNoPolicyBeatsTheFloor use.
const workedOutStandbyGPUStartup = 15 * time.Second

// The same seed gives the same numbers; the built-in traces repeat too.
func TestDeterministic(t *testing.T) {
	cfg := parse(t, `clusterName: sim
clouds:
  sim: {bootDelay: 90s, defaultCapacity: 6, spotReclaimRate: 0.3}
nodeGroups:
  - {name: spot, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], capacityPolicy: prefer-spot, maxSize: 20}
  - {name: big, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 4}
`)
	table := func(seed uint64) string {
		trace, err := Builtin("bursty-batch", 0.3, seed)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		np := play(t, cfg, trace, Options{Policy: NodeProvisioner, Seed: seed})
		ca := play(t, cfg, trace, Options{Policy: Baseline, Seed: seed})
		if err := WriteTable(&out, np, ca); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	first, again, other := table(7), table(7), table(8)
	if first != again {
		t.Fatalf("seed 7 gave two answers:\n%s\n%s", first, again)
	}
	if first == other {
		t.Errorf("seeds 7 and 8 gave the same table:\n%s", first)
	}
	t.Logf("\n%s", first)
}

// A run with standby pools repeats too. Before, which of the pool's
// members ordered at one instant a start took was the map's order, and
// the spot lifetimes of members started at one instant came from one
// sequence in the order their concurrent starts reached the cloud: the
// same seed's cost varied by up to 10 %.
func TestDeterministicWithStandby(t *testing.T) {
	cfg := parse(t, BuiltinPool)
	trace, err := Builtin("diurnal-inference", 0.5, 2)
	if err != nil {
		t.Fatal(err)
	}
	two, err := BuiltinDays("diurnal-inference", 1, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		trace Trace
		opts  Options
	}{
		{trace, Options{Policy: NodeProvisioner, Standby: 2, Seed: 2}},
		// A forecast takes pools and orders fresh in one loop: the starts,
		// creates and deletes meet the cloud's capacity in the order they
		// were asked for (nodegroup.Options.Serial), not as goroutines
		// happen to run. Without, one run in three or so differed.
		{two, Options{Policy: NodeProvisioner, Standby: 2, Seed: 1, Forecast: true, MeasureFrom: 24 * time.Hour}},
	} {
		trace, opts := c.trace, c.opts
		first := play(t, cfg, trace, opts)
		for range 3 {
			again := play(t, cfg, trace, opts)
			if again.Cost != first.Cost || again.Wait(0.95) != first.Wait(0.95) || again.StandbyStartFailed != first.StandbyStartFailed {
				t.Fatalf("%s, seed 2 gave cost %.2f, p95 %s, %d failed starts, then %.2f, %s, %d", first.Name(),
					first.Cost, first.Wait(0.95), first.StandbyStartFailed, again.Cost, again.Wait(0.95), again.StandbyStartFailed)
			}
		}
	}
}

// A malformed line is refused with its line number.
func TestMalformedTraceLine(t *testing.T) {
	for _, tc := range []struct {
		format, doc string
		line        int
	}{
		{"csv", "at,duration,gpus\n0s,10m,1\n# comment\n5m,ten minutes,1\n", 4},
		{"csv", "at,duration,gpus\n0s,10m,1\n1m,10m,0\n", 3},
		{"csv", "at,duration,gpus,color\n", 1},
		{"jsonl", `{"at":"0s","duration":"10m","gpus":1}` + "\n\n" + `{"at":"1m","duration":"10m","mig":"1g.10gb","gpus":2}` + "\n", 3},
		{"jsonl", `{"at":"0s","duration":"10m","gpu":1}` + "\n", 1},
		{"jsonl", `{"at":"-5s","duration":"10m"}` + "\n", 1},
		{"csv", "at,duration\n0s,10m\n1\"0s,10m\n", 3},
		{"csv", "at,duration\n\"0s,10m\n", 2},
		{"csv", "# a comment\n\nat,color\n", 3},
		{"csv", "at,duration\nNaN,10m\n", 2},
		{"csv", "at,duration,priority\n0s,10m,3000000000\n", 2},
		{"jsonl", `{"at":"1e30","duration":"10m"}` + "\n", 1},
		{"jsonl", `{"at":"0s","duration":"9000h"}` + "\n", 1},
	} {
		_, err := Read(strings.NewReader(tc.doc), "t", tc.format)
		var le *LineError
		if !errors.As(err, &le) || le.Line != tc.line {
			t.Errorf("%s %q: error %v, want one on line %d", tc.format, tc.doc, err, tc.line)
		}
	}
	tr, err := Read(strings.NewReader("name,at,duration,mig,priority\nx,90,1h,1g.10gb,3\ny,30s,5m,,\n"), "ok", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Pods) != 2 || tr.Pods[0].Name != "y" || tr.Pods[0].GPUs != 1 || tr.Pods[1].MIG != "1g.10gb" || tr.Pods[1].At != 90*time.Second || tr.Pods[1].Priority != 3 {
		t.Errorf("read %+v", tr.Pods)
	}
}

// The HTML report is well-formed and self-contained: it loads nothing
// (no src, href, url() or @import), and its tags balance. Its headline
// chart overlays every policy's waits in the buckets of the real metric;
// each result has a section of its own, titled apart even when two runs
// share a policy; every chart's axes have ticks and units, the cost its
// currency.
func TestHTMLReportIsSelfContained(t *testing.T) {
	cfg := parse(t, oneGroup)
	trace := Trace{Name: "three", Pods: []Pod{
		{At: 0, Duration: 30 * time.Minute, GPUs: 1}, {At: time.Hour, Duration: 30 * time.Minute, GPUs: 1},
		{At: 2 * time.Hour, Duration: 30 * time.Minute, GPUs: 1},
	}}
	res := play(t, cfg, trace, Options{Policy: NodeProvisioner, Sample: 10 * time.Minute})
	again := play(t, cfg, trace, Options{Policy: NodeProvisioner, Sample: 10 * time.Minute})
	var out bytes.Buffer
	if err := WriteHTML(&out, res, again, FloorOf(res)); err != nil {
		t.Fatal(err)
	}
	doc := out.String()
	for _, banned := range []string{"src=", "href=", "url(", "@import", "http://", "https://", "<script"} {
		if strings.Contains(doc, banned) {
			t.Errorf("report contains %q", banned)
		}
	}
	r := parseReport(t, doc)
	if len(r.headings) != 3 || r.headings[0] != "Time to GPU: the share of pods that waited at most each time" {
		t.Fatalf("sections %q, want the wait chart's, then one per played result", r.headings)
	}
	if r.headings[1] == r.headings[2] {
		t.Errorf("two sections titled %q", r.headings[1])
	}
	// The wait chart: a line per played result (not the floor), one
	// tick per bucket of gpuscaler_gpu_pod_wait_seconds and 0.
	if r.charts[0].lines != 2 || r.charts[0].xTicks != len(pending.WaitBuckets())+1 {
		t.Errorf("wait chart: %d lines, %d ticks; want 2 and %d", r.charts[0].lines, r.charts[0].xTicks, len(pending.WaitBuckets())+1)
	}
	// Then per result: demand, total capacity and the group's capacity;
	// pending; spend; cumulative cost.
	if len(r.charts) != 1+2*4 {
		t.Fatalf("%d charts, want the wait chart and 4 per result", len(r.charts))
	}
	for i, c := range r.charts {
		if c.xTicks < 2 || c.yTicks != 5 || len(c.units) != 2 {
			t.Errorf("chart %d (%s): %d x ticks, %d y ticks, units %q; want ticks on both axes and both units", i, c.label, c.xTicks, c.yTicks, c.units)
		}
	}
	if c := r.charts[4]; c.label != "Cumulative cost" || !slices.Contains(c.units, "USD") {
		t.Errorf("chart %q with units %q, want the cumulative cost in USD", c.label, c.units)
	}
	if lines := r.charts[1].lines + r.charts[2].lines + r.charts[3].lines + r.charts[4].lines; lines != 6 {
		t.Errorf("%d lines on a result's charts, want 6", lines)
	}
}

// The terminal table fits TableWidth: seven columns of long names wrap
// into parts, each with the row labels, and every policy appears once.
func TestTableWrapsByPolicy(t *testing.T) {
	var results []*Result
	for _, c := range []struct {
		p        Policy
		standby  int
		forecast bool
	}{{NodeProvisioner, 0, false}, {NodeProvisioner, 2, false}, {NodeProvisioner, 0, true}, {NodeProvisioner, 2, true}, {Baseline, 0, false}, {Oracle, 2, false}} {
		results = append(results, &Result{Policy: c.p, Standby: c.standby, Forecast: c.forecast, Trace: "diurnal-inference ×28 days", Floor: 100,
			waits: []time.Duration{time.Minute}})
	}
	var out bytes.Buffer
	if err := WriteTable(&out, results...); err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(out.String(), "\n") {
		if n := len([]rune(line)); n > TableWidth {
			t.Errorf("a line of %d characters: %q", n, line)
		}
	}
	// Each part opens with a line of its columns' names.
	var names []string
	for part := range strings.SplitSeq(out.String(), "\n\n") {
		header, _, _ := strings.Cut(part, "\n")
		names = append(names, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(header), -1)...)
	}
	var want []string
	for _, r := range append(results, FloorOf(results[0])) {
		want = append(want, r.Name())
	}
	if !slices.Equal(names, want) {
		t.Errorf("columns %q, want %q", names, want)
	}
	if parts := strings.Count(out.String(), "pending p95"); parts < 2 {
		t.Errorf("%d parts, want the table wrapped", parts)
	}
}

// report is what parseReport reads of an HTML report.
type report struct {
	headings []string
	charts   []reportChart
}

type reportChart struct {
	label                 string
	lines, xTicks, yTicks int
	units                 []string
}

// parseReport reads an HTML report's h2 headings and its charts (an svg:
// its polylines, the tick labels under it and left of it, and the units
// on its axes), and fails the test if its tags do not balance.
func parseReport(t *testing.T, doc string) report {
	t.Helper()
	var r report
	z := html.NewTokenizer(strings.NewReader(doc))
	var open []string
	var text *string
	var textAttr map[string]string
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if !errors.Is(z.Err(), io.EOF) {
				t.Fatal(z.Err())
			}
			break
		}
		name, _ := z.TagName()
		tag := string(name)
		attrs := map[string]string{}
		if tt == html.StartTagToken || tt == html.SelfClosingTagToken {
			for {
				k, v, more := z.TagAttr()
				attrs[string(k)] = string(v)
				if !more {
					break
				}
			}
		}
		switch tt {
		case html.StartTagToken:
			switch tag {
			case "meta", "line", "polyline", "br":
				if tag == "polyline" && len(r.charts) > 0 {
					r.charts[len(r.charts)-1].lines++
				}
			default:
				open = append(open, tag)
			}
			switch tag {
			case "svg":
				r.charts = append(r.charts, reportChart{label: attrs["aria-label"]})
			case "h2", "text":
				s := ""
				text, textAttr = &s, attrs
			}
		case html.SelfClosingTagToken:
			if tag == "polyline" && len(r.charts) > 0 {
				r.charts[len(r.charts)-1].lines++
			}
		case html.TextToken:
			if text != nil {
				*text += string(z.Text())
			}
		case html.EndTagToken:
			if len(open) == 0 || open[len(open)-1] != tag {
				t.Fatalf("</%s> closes %v", tag, open)
			}
			open = open[:len(open)-1]
			switch {
			case tag == "h2" && text != nil:
				r.headings = append(r.headings, *text)
			case tag == "text" && text != nil && len(r.charts) > 0:
				c := &r.charts[len(r.charts)-1]
				switch {
				case textAttr["transform"] != "" || textAttr["y"] == "240":
					c.units = append(c.units, *text)
				case textAttr["y"] == "218":
					c.xTicks++
				case textAttr["text-anchor"] == "end":
					c.yTicks++
				}
			}
			text = nil
		}
	}
	if len(open) != 0 {
		t.Errorf("unclosed tags %v", open)
	}
	return r
}

// A 28-day report of every policy stays under 1 MB: each line keeps at
// most maxPoints points, and marks one per unit of width.
func TestLongReportStaysSmall(t *testing.T) {
	timeline := make([]Sample, 0, 28*24*60)
	for m := range 28 * 24 * 60 {
		timeline = append(timeline, Sample{At: time.Duration(m) * time.Minute, Pending: m % 7, Demand: float64(m % 50), Spend: float64(m % 90),
			Capacity:  map[string]float64{"a": float64(m % 40), "b": float64(m % 30), "c": float64(m % 20)},
			StockOuts: m / 3, Reclaims: m / 5, StandbyStarts: m / 2})
	}
	var results []*Result
	for _, p := range []Policy{NodeProvisioner, NodeProvisioner, NodeProvisioner, NodeProvisioner, Baseline, Oracle} {
		results = append(results, &Result{Policy: p, Trace: "diurnal-inference ×28 days", Timeline: timeline, waits: []time.Duration{0, time.Minute}})
	}
	var out bytes.Buffer
	if err := WriteHTML(&out, results...); err != nil {
		t.Fatal(err)
	}
	if out.Len() >= 1<<20 {
		t.Errorf("a 28-day report of %d policies is %d bytes, want under 1 MB", len(results), out.Len())
	}
	r := parseReport(t, out.String())
	if len(r.headings) != 1+len(results) {
		t.Errorf("%d sections, want the wait chart's and %d", len(r.headings), len(results))
	}
}

// A sweep runs each value and marks the settings no other beats on both
// p95 wait and cost.
func TestSweep(t *testing.T) {
	if _, err := ParseSweep("buffer=0..3"); err == nil {
		t.Error("unknown field accepted")
	}
	if _, err := ParseSweep("minUnutilizedGPUNodes=3..1"); err == nil {
		t.Error("empty range accepted")
	}
	sw, err := ParseSweep("minunutilizedgpunodes=0..1")
	if err != nil || sw.Field != "minUnutilizedGPUNodes" || len(sw.Values) != 2 {
		t.Fatalf("ParseSweep: %+v, %v", sw, err)
	}
	// A pod every 40 minutes, each for 10.
	trace := Trace{Name: "spaced"}
	for i := range 20 {
		trace.Pods = append(trace.Pods, Pod{At: time.Duration(i) * 40 * time.Minute, Duration: 10 * time.Minute, GPUs: 1})
	}
	results, err := sw.Run(context.Background(), trace, Options{Config: parse(t, oneGroup), GPUStartup: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Without a buffer every pod waits 120 s for a node and the pool
	// costs less; with one, all but the first start at once on the spare
	// node, which costs more: both are on the frontier.
	if results[0].Wait(0.95) != 120*time.Second || results[1].Wait(0.95) != 0 || results[1].Cost <= results[0].Cost {
		t.Errorf("buffer 0: p95 %s cost %.3f; buffer 1: p95 %s cost %.3f", results[0].Wait(0.95), results[0].Cost, results[1].Wait(0.95), results[1].Cost)
	}
	var out bytes.Buffer
	if err := sw.WriteFrontier(&out, results); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "*") != 2 {
		t.Errorf("frontier:\n%s", out.String())
	}
}

// A stock-out is the core's: the second order finds FIN-01 full, the core
// falls back to FIN-02 (counted in gpuscaler_stockouts_total, which the
// report reads), and both pods still start 120 s after they arrive.
func TestStockOutFallbackIsTheCores(t *testing.T) {
	cfg := parse(t, `clusterName: sim
clouds:
  sim:
    bootDelay: 60s
    defaultCapacity: 5
    capacity: [{instanceType: 1H100.80S.30V, location: FIN-01, count: 1}]
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], maxSize: 5}
`)
	trace := Trace{Name: "two", Pods: []Pod{
		{At: 0, Duration: 10 * time.Minute, GPUs: 1}, {At: 0, Duration: 10 * time.Minute, GPUs: 1},
	}}
	res := play(t, cfg, trace, Options{Policy: NodeProvisioner, GPUStartup: time.Minute})
	if res.StockOuts != 1 || res.NodesAdded != 2 || res.Wait(1) != 120*time.Second {
		t.Errorf("stock-outs %d, nodes added %d, longest wait %s; want 1, 2, 120s", res.StockOuts, res.NodesAdded, res.Wait(1))
	}
}

// A built-in trace refuses a scale it cannot honour.
func TestBuiltinScale(t *testing.T) {
	for _, scale := range []float64{0, -1, math.NaN(), math.Inf(1), 1e6} {
		if _, err := Builtin("bursty-batch", scale, 1); err == nil {
			t.Errorf("scale %v accepted", scale)
		}
	}
	if _, err := Builtin("no-such-trace", 1, 1); err == nil {
		t.Error("an unknown trace accepted")
	}
}

// The oracle on two pods worked out by hand. The start-up time it looks
// ahead is boot (60 s), GPU start-up (60 s) and a loop (10 s): 130 s. a
// arrives at 600 s: the loop at 470 s plans for it and orders its node,
// Ready at 590 s, so a waits nothing and runs until 1,200 s. b arrives at
// 2,400 s, more than 130 s later, so the empty node is unneeded from the
// 1,200 s loop, deleted once the forecast's scale-down delay (2 min) has
// passed, at the 1,320 s loop, and paid until the sync that finds it gone
// (every 30 s: 1,350 s). b's node is ordered at 2,270 s and b runs from
// 2,400 s to 3,000 s, when the run ends.
func TestOracleOnAHandComputedTrace(t *testing.T) {
	cfg := parse(t, oneGroup)
	trace := Trace{Name: "two", Pods: []Pod{
		{Name: "a", At: 10 * time.Minute, Duration: 10 * time.Minute, GPUs: 1},
		{Name: "b", At: 40 * time.Minute, Duration: 10 * time.Minute, GPUs: 1},
	}}
	res := play(t, cfg, trace, Options{Policy: Oracle, GPUStartup: time.Minute})
	if res.Wait(1) != 0 {
		t.Errorf("longest wait %s, want 0: each node is Ready when its pod arrives", res.Wait(1))
	}
	if res.NodesAdded != 2 || res.NodesRemoved != 1 {
		t.Errorf("added %d, removed %d; want 2, 1", res.NodesAdded, res.NodesRemoved)
	}
	paid := ((1350-470)*time.Second + (3000-2270)*time.Second).Hours()
	if !near(res.GPUHoursPaid, paid) {
		t.Errorf("GPU-hours paid %.6f, want %.6f", res.GPUHoursPaid, paid)
	}
	if res.Simulated != 3000*time.Second {
		t.Errorf("simulated %s, want 50m", res.Simulated)
	}
	// The others react: each pod waits its node's whole start-up.
	for _, p := range []Policy{NodeProvisioner, Baseline} {
		other := play(t, cfg, trace, Options{Policy: p, GPUStartup: time.Minute})
		if other.Wait(1) <= res.Wait(1) || other.Wait(0.5) < 120*time.Second {
			t.Errorf("%s: longest wait %s, median %s; want at least the 120 s start-up", p, other.Wait(1), other.Wait(0.5))
		}
	}
}

// A pod that arrives as the trace begins does not wait under the oracle:
// it knows that pod too, and orders its node one start-up time before.
// Before, the run began at the first arrival and every burst at the
// start of a trace (bursty-batch's first) waited a cold start.
func TestOracleOrdersBeforeTheTraceBegins(t *testing.T) {
	cfg := parse(t, oneGroup)
	trace := Trace{Name: "at-once", Pods: []Pod{{Name: "a", At: 0, Duration: 10 * time.Minute, GPUs: 1}}}
	res := play(t, cfg, trace, Options{Policy: Oracle, GPUStartup: time.Minute})
	if res.Wait(1) != 0 {
		t.Errorf("wait %s, want 0: the node is ordered before the trace begins", res.Wait(1))
	}
	if other := play(t, cfg, trace, Options{Policy: Baseline, GPUStartup: time.Minute}); other.Wait(1) < 120*time.Second {
		t.Errorf("the baseline waited %s, want its whole start-up: it reacts", other.Wait(1))
	}
}

// The table puts every policy against the oracle, and against the floor,
// which it prints as a column of its own.
func TestTableAgainstOracleAndFloor(t *testing.T) {
	oracle := &Result{Policy: Oracle, Trace: "t", waits: []time.Duration{0, 0}, GPUHoursPaid: 10, Cost: 20, Floor: 16, FloorGPUHours: 8, Pods: 2}
	np := &Result{Policy: NodeProvisioner, Trace: "t", waits: []time.Duration{0, 90 * time.Second}, GPUHoursPaid: 11, Cost: 23, Floor: 16, FloorGPUHours: 8, Pods: 2}
	var b bytes.Buffer
	if err := WriteTable(&b, np, oracle); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"+1m30s, +15%", "(reference)", "floor", "16.00", "+44%", "+25%", "(the bound)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

// amplePool is a pool of the built-in traces' shapes that never runs out.
const amplePool = `clusterName: sim
clouds:
  sim: {bootDelay: 90s, defaultCapacity: 200}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 60}
  - {name: h100x8, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-01], maxSize: 10}
  - {name: a100-mig, cloud: sim, instanceType: 1A100.22V, locations: [FIN-01], maxSize: 20, mig: {profile: all-1g.10gb, strategy: mixed}}
`

// No policy costs less than the floor, on any built-in trace and seed,
// with or without a standby pool, on the built-in pool (spot with
// fallback, stock-outs, reclaims): the floor is a bound. The oracle is
// only a reference, but one that knows what the others do: on a pool that
// never runs out, it never waits longer at p95 than the policies that
// react (beyond a loop, the noise of when a loop falls).
func TestNoPolicyBeatsTheFloor(t *testing.T) {
	builtin := parse(t, BuiltinPool)
	ample := parse(t, amplePool)
	for _, name := range Builtins {
		for seed := uint64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprintf("%s/seed-%d", name, seed), func(t *testing.T) {
				t.Parallel()
				trace, err := Builtin(name, 0.25, seed)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					policy  Policy
					standby int
				}{{NodeProvisioner, 0}, {NodeProvisioner, 2}, {Baseline, 0}, {Oracle, 2}} {
					res := play(t, builtin, trace, Options{Policy: c.policy, Standby: c.standby, Seed: seed})
					if res.Floor <= 0 || res.Unfit > 0 {
						t.Fatalf("floor %.2f with %d pods no group fits", res.Floor, res.Unfit)
					}
					if res.Unplaced == 0 && res.Cost < res.Floor {
						t.Errorf("%s: cost %.2f under the floor %.2f", res.Name(), res.Cost, res.Floor)
					}
				}
				oracle := play(t, ample, trace, Options{Policy: Oracle, Seed: seed})
				for _, p := range []Policy{NodeProvisioner, Baseline} {
					other := play(t, ample, trace, Options{Policy: p, Seed: seed})
					if oracle.Wait(0.95) > other.Wait(0.95)+defaultLoop {
						t.Errorf("%s: p95 wait %s, under the oracle's %s", p, other.Wait(0.95), oracle.Wait(0.95))
					}
				}
			})
		}
	}
}

// A pod that arrives once the pool's standby instance has warmed and
// stopped (a pool of one, ordered at the start) waits the instance's start
// instead of a cold boot: the NodeProvisioner's loop at its arrival
// (t=2,400 s) starts it, it runs the cloud's start delay (15 s) later and
// its GPUs come after the standby GPU start-up (15 s): 30 s, against
// 120 s cold (TestHandComputedTrace).
func TestStandbyStartOnAHandComputedTrace(t *testing.T) {
	cfg := parse(t, oneGroup)
	trace := Trace{Name: "one", Pods: []Pod{{Name: "a", At: 40 * time.Minute, Duration: 30 * time.Minute, GPUs: 1}}}
	res := play(t, cfg, trace, Options{Policy: NodeProvisioner, GPUStartup: time.Minute, StandbyGPUStartup: workedOutStandbyGPUStartup, Standby: 1})
	if res.Wait(1) != 30*time.Second {
		t.Errorf("wait %s, want 30s", res.Wait(1))
	}
	if res.StandbyStarts != 1 || res.StandbyStartFailed != 0 {
		t.Errorf("standby starts %d (failed %d), want 1 (0)", res.StandbyStarts, res.StandbyStartFailed)
	}
	if res.Name() != "nodeprovisioner +standby 1" {
		t.Errorf("column %q", res.Name())
	}
}

// The baseline with a standby pool runs as the chart runs
// cluster-autoscaler then (--bypassed-scheduler-names): without its 30 s
// wait for more GPU pods, so the same pod waits what it does under the
// NodeProvisioner, the start and the GPUs coming back.
func TestBaselineWithStandbySkipsTheGPUWait(t *testing.T) {
	cfg := parse(t, oneGroup)
	trace := Trace{Name: "one", Pods: []Pod{{Name: "a", At: 40 * time.Minute, Duration: 30 * time.Minute, GPUs: 1}}}
	res := play(t, cfg, trace, Options{Policy: Baseline, GPUStartup: time.Minute, StandbyGPUStartup: workedOutStandbyGPUStartup, Standby: 1})
	if res.Wait(1) != 30*time.Second || res.StandbyStarts != 1 {
		t.Errorf("wait %s, standby starts %d; want 30s, 1", res.Wait(1), res.StandbyStarts)
	}
}

// On demand that comes and goes with the day, or at random (diurnal
// inference, training jobs), a standby pool of two per group shortens the
// NodeProvisioner's p95 wait for at most 3 % more cost: by what a start
// saves over a boot, since the GPUs start again after a start (facts.go).
// The 45 s it showed before assumed 15 s starts and GPU start-ups, which
// no cloud documents.
func TestStandbyShortensTheWait(t *testing.T) {
	cfg := parse(t, BuiltinPool)
	for _, name := range []string{"diurnal-inference", "training-jobs"} {
		t.Run(name, func(t *testing.T) {
			trace, err := Builtin(name, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			cold := play(t, cfg, trace, Options{Policy: NodeProvisioner, Seed: 1})
			warm := play(t, cfg, trace, Options{Policy: NodeProvisioner, Seed: 1, Standby: 2})
			if w := warm.Wait(0.95); w >= cold.Wait(0.95) {
				t.Errorf("p95 wait %s with standby, %s without: want it shorter", w, cold.Wait(0.95))
			}
			// Each instance a start takes is replaced by one that warms
			// up through its GPUs' start-up and the trace's image pull at
			// the full price before it stops.
			if warm.Cost > 1.05*cold.Cost {
				t.Errorf("cost %.2f with standby, %.2f without: more than 5%% more", warm.Cost, cold.Cost)
			}
		})
	}
}

// dailyAtNine is three days on which four one-GPU pods arrive at 9:00
// for an hour: what a forecast learns on the first day and orders ahead
// for on the others.
func dailyAtNine() Trace {
	tr := Trace{Name: "nine"}
	for d := range 3 {
		for i := range 4 {
			tr.Pods = append(tr.Pods, Pod{Name: fmt.Sprintf("d%d-%d", d, i), At: time.Duration(d)*24*time.Hour + 9*time.Hour, Duration: time.Hour, GPUs: 1})
		}
	}
	return tr
}

// With a forecast trained on the first day, the pods of the next days do
// not wait: their nodes are ordered one start-up time before 9:00. The
// NodeProvisioner without one waits each morning's cold start (60 s boot,
// 60 s GPU start-up). Only the days after the training are measured.
// The forecast vouches for the pool, so its idle nodes go after
// forecast.scaleDownDelay, 2 minutes, not the pool's 10: 8 minutes less
// of the four nodes after 10:00 on the second day (the run ends with the
// third day's last pod), and of the fifth node it orders at 9:00 on the
// days its margin for chance rounds up to one (the level's rise of four,
// and a Poisson count of the arrivals within a start-up time above their
// mean, by as much as the arrivals were random on the days learned):
// 40 to 48 GPU-minutes.
func TestForecastOrdersAheadOfADailyPattern(t *testing.T) {
	cfg := parse(t, oneGroup)
	opts := Options{Policy: NodeProvisioner, GPUStartup: time.Minute, MeasureFrom: 24 * time.Hour}
	without := play(t, cfg, dailyAtNine(), opts)
	opts.Forecast, opts.TrainFor = true, 24*time.Hour
	fast := play(t, cfg, dailyAtNine(), opts)
	// The same forecast, its idle nodes waiting the pool's 10 minutes.
	opts.Provisioner.Forecast = &v1alpha1.Forecast{ScaleDownDelay: &metav1.Duration{Duration: 10 * time.Minute}}
	with := play(t, cfg, dailyAtNine(), opts)
	if saved := with.GPUHoursPaid - fast.GPUHoursPaid; saved < (4*8)/60.0+8/60.0-0.05 || saved > (4*8+2*8)/60.0+0.05 {
		t.Errorf("the forecast's scaleDownDelay saved %.2f GPU-hours, want 40 to 48 GPU-minutes", saved)
	}
	if fast.Wait(1) != 0 {
		t.Errorf("with a forecast and its scaleDownDelay the longest wait is %s, want 0", fast.Wait(1))
	}
	if with.Pods != 8 || without.Pods != 8 {
		t.Fatalf("%d and %d pods measured, want the 8 of the last two days", with.Pods, without.Pods)
	}
	if without.Wait(0.5) < 2*time.Minute {
		t.Errorf("without a forecast the median wait is %s, want the 2 min cold start", without.Wait(0.5))
	}
	if with.Wait(1) != 0 {
		t.Errorf("with a forecast the longest wait is %s, want 0", with.Wait(1))
	}
	if with.Name() != "nodeprovisioner +forecast" || with.ForecastPeak < 4 {
		t.Errorf("%q planned ahead for at most %d GPUs, want the 4 of 9:00", with.Name(), with.ForecastPeak)
	}
	// What it buys: the nodes ahead of 9:00, a few minutes a day.
	if extra := with.GPUHoursPaid - without.GPUHoursPaid; extra <= 0 || extra > 2 {
		t.Errorf("%.2f GPU-hours more with a forecast, want a few minutes of 4 GPUs on each of 2 days", extra)
	}
}

// A sweep over a forecast setting changes that setting only, on top of
// the spec's other forecast settings; a coverage the CRD would refuse is
// refused.
func TestSweepSetsForecastFields(t *testing.T) {
	base := v1alpha1.NodeProvisionerSpec{Forecast: &v1alpha1.Forecast{MaxExtraHourlyCost: "4"}}
	for field, check := range map[string]func(*v1alpha1.Forecast) bool{
		"forecast.scaleDownDelay":     func(f *v1alpha1.Forecast) bool { return f.ScaleDownDelay.Duration == 3*time.Minute },
		"forecast.coveragePercent":    func(f *v1alpha1.Forecast) bool { return *f.CoveragePercent == 3 },
		"forecast.maxExtraHourlyCost": func(f *v1alpha1.Forecast) bool { return f.MaxExtraHourlyCost == "3" },
	} {
		sw, err := ParseSweep(field + "=3")
		if err != nil {
			t.Fatal(err)
		}
		got := sw.apply(base, 3)
		if !check(got.Forecast) || (field != "forecast.maxExtraHourlyCost" && got.Forecast.MaxExtraHourlyCost != "4") {
			t.Errorf("%s=3: %+v", field, *got.Forecast)
		}
	}
	if base.Forecast.ScaleDownDelay != nil || base.Forecast.CoveragePercent != nil {
		t.Error("the sweep changed the spec it started from")
	}
	hundred := int32(100)
	opts := Options{Config: parse(t, oneGroup), Policy: NodeProvisioner, Forecast: true,
		Provisioner: v1alpha1.NodeProvisionerSpec{Forecast: &v1alpha1.Forecast{CoveragePercent: &hundred}}}
	if _, err := Run(context.Background(), dailyAtNine(), opts); err == nil || !strings.Contains(err.Error(), "coveragePercent") {
		t.Errorf("coverage 100 %%: %v", err)
	}
}

// Only the NodeProvisioner orders ahead of a forecast.
func TestForecastIsTheNodeProvisioners(t *testing.T) {
	cfg := parse(t, oneGroup)
	if _, err := Run(context.Background(), dailyAtNine(), Options{Config: cfg, Policy: Baseline, Forecast: true}); err == nil {
		t.Fatal("the baseline ran with a forecast")
	}
}

// A built-in trace of several days begins with the day Builtin draws.
func TestBuiltinDays(t *testing.T) {
	one, err := Builtin("diurnal-inference", 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	three, err := BuiltinDays("diurnal-inference", 1, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(three.Pods); n < 2*len(one.Pods) || three.End() < 47*time.Hour {
		t.Fatalf("%d pods over %s for 3 days, against %d for one", n, three.End(), len(one.Pods))
	}
	for i, p := range one.Pods {
		if q := three.Pods[i]; q.At != p.At || q.Duration != p.Duration || q.GPUs != p.GPUs {
			t.Fatalf("pod %d: %+v, want the first day's %+v", i, q, p)
		}
	}
	if _, err := BuiltinDays("diurnal-inference", 1, 7, 0); err == nil {
		t.Error("0 days was drawn")
	}
	if _, err := BuiltinDays("diurnal-inference", 1, 7, MaxDays+1); err == nil {
		t.Errorf("%d days were drawn", MaxDays+1)
	}
	month, err := BuiltinDays("diurnal-inference", 1, 7, 30) // a month, past the 28 days of before
	if err != nil || month.End() < 29*24*time.Hour {
		t.Errorf("30 days: %v, ending at %s", err, month.End())
	}
}

// A forecast starts standby instances ahead of the pods it expects, one
// standby start-up time before them (15 s start, 1 min GPU start-up, a
// loop: 85 s), not a cold one (60 s boot, 1 min GPU start-up, a loop:
// 130 s): its orders a boot's lead ahead are fresh and leave the pool's
// four stopped instances to the 9:00 pods. The pods wait nothing either
// way; started at the boot's lead, as when standbyLeadTime is leadTime,
// the four run at least 45 s longer each morning.
func TestForecastStartsStandbyAheadOfDemand(t *testing.T) {
	cfg := parse(t, `clusterName: sim
clouds:
  sim: {bootDelay: 60s, defaultCapacity: 20, startDelay: 15s, stoppedPrice: 0.05}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10, standby: {size: 4, warmFor: 30s}}
`)
	opts := Options{Policy: NodeProvisioner, GPUStartup: time.Minute, StandbyGPUStartup: time.Minute, MeasureFrom: 24 * time.Hour,
		Forecast: true, TrainFor: 24 * time.Hour}
	soon := play(t, cfg, dailyAtNine(), opts)
	opts.Provisioner.Forecast = &v1alpha1.Forecast{StandbyLeadTime: &metav1.Duration{Duration: time.Hour}} // the boot's lead: every order at once
	early := play(t, cfg, dailyAtNine(), opts)
	for name, r := range map[string]*Result{"ahead of a start": soon, "ahead of a boot": early} {
		if r.Wait(1) != 0 {
			t.Errorf("%s: the longest wait is %s, want 0", name, r.Wait(1))
		}
		if r.StandbyStarts < 8 {
			t.Errorf("%s: %d standby starts, want the 4 of each measured day", name, r.StandbyStarts)
		}
	}
	// At least 45 s of four nodes on two days, 6 GPU-minutes; the
	// forecast's margin for chance, ordered a boot ahead, may be taken
	// from the pool too when everything is.
	if saved := early.GPUHoursPaid - soon.GPUHoursPaid; saved < 5.0/60 || saved > 12.0/60 {
		t.Errorf("starting the pool a start's lead ahead saved %.1f GPU-minutes over a boot's, want 6 to 12", saved*60)
	}
}

// Demand that comes at random (training jobs: a Poisson stream of
// eight-GPU jobs, one every 45 minutes, and two-GPU ones) is forecast no
// better than its rate. Within a start-up time a job comes with a chance
// of some 6 %, short of the 80 % the forecast covers, so next to nothing
// is ordered ahead for it (a pod or two, now and then, of the two-GPU
// jobs that come more often), and the run waits and costs what the
// NodeProvisioner alone does: a forecast that ordered an eight-GPU node
// ahead whenever one might come would pay some 15 % more.
func TestForecastLeavesRandomDemandAlone(t *testing.T) {
	cfg := parse(t, amplePool)
	trace, err := BuiltinDays("training-jobs", 1, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Policy: NodeProvisioner, GPUStartup: time.Minute, MeasureFrom: 24 * time.Hour}
	without := play(t, cfg, trace, opts)
	opts.Forecast = true
	with := play(t, cfg, trace, opts)
	if with.ForecastPeak > 2 || math.Abs(with.GPUHoursPaid/without.GPUHoursPaid-1) > 0.01 {
		t.Errorf("planned ahead for up to %d pods; GPU-hours %.1f against %.1f without: want next to nothing ordered ahead", with.ForecastPeak, with.GPUHoursPaid, without.GPUHoursPaid)
	}
	if w, w0 := with.Wait(0.95), without.Wait(0.95); w > w0+10*time.Second {
		t.Errorf("p95 wait %s with a forecast, %s without", w, w0)
	}
}

// A standby pool that a forecast sizes (standby.forecast, no pool
// otherwise: size 0) holds the four nodes 9:00 asks for once it has
// learned the first day, so under the cluster-autoscaler-like baseline,
// which orders nothing ahead, the pods of the next days start from
// standby (its 30 s batching, then 15 s start and 15 s GPU start-up)
// instead of also waiting the 60 s boot and 1 min GPU start-up.
func TestForecastSizesTheStandbyPool(t *testing.T) {
	doc := func(standby string) *config.Config {
		return parse(t, `clusterName: sim
clouds:
  sim: {bootDelay: 60s, startDelay: 15s, defaultCapacity: 20}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 8`+standby+`}
`)
	}
	opts := Options{Policy: Baseline, GPUStartup: time.Minute, StandbyGPUStartup: workedOutStandbyGPUStartup, MeasureFrom: 24 * time.Hour}
	opts.Config = doc("")
	without := play(t, opts.Config, dailyAtNine(), opts)
	opts.Config = doc(", standby: {size: 0, warmFor: 30s, forecast: {maxSize: 4, trainFor: 24h, leadTime: 10m}}")
	with := play(t, opts.Config, dailyAtNine(), opts)
	if without.Wait(0.5) < 2*time.Minute {
		t.Errorf("without a pool the median wait is %s, want at least the 2 min cold start", without.Wait(0.5))
	}
	if w := with.Wait(1); w > caGPUBatchWait+30*time.Second {
		t.Errorf("with a pool sized by the forecast the longest wait is %s, want the batching and a standby start (1 min)", w)
	}
	if with.StandbyStarts < 8 {
		t.Errorf("%d standby starts, want the 8 pods of the last two days started from the pool", with.StandbyStarts)
	}
}

// A standby pool stands ready before the trace begins, as in a cluster
// that kept one: pods that arrive at the very start take its instances
// (the start delay and the standby GPU start-up, a loop at most), not a
// cold boot the pool had no time to spare them.
func TestStandbyPoolIsReadyWhenTheTraceBegins(t *testing.T) {
	cfg := parse(t, `clusterName: simulate
clouds:
  sim: {locations: [FIN-01], bootDelay: 90s}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 8, standby: {size: 4}}
`)
	tr := Trace{Name: "opening-burst"}
	for i := range 4 {
		tr.Pods = append(tr.Pods, Pod{Name: fmt.Sprintf("p%d", i), At: 0, Duration: 30 * time.Minute, GPUs: 1})
	}
	res := play(t, cfg, tr, Options{Policy: NodeProvisioner, Seed: 1, GPUStartup: time.Minute, StandbyGPUStartup: workedOutStandbyGPUStartup})
	if w := res.Wait(1); w > 45*time.Second {
		t.Fatalf("the slowest of four pods at the trace's start waited %s with a pool of four: a cold boot, not a standby start", w)
	}
	if res.StandbyStarts != 4 {
		t.Fatalf("%d standby starts, want 4", res.StandbyStarts)
	}
}

// A pool's standby starts are timed from the start to the node's GPUs,
// worked out by hand: a 1 min start (no spread) and 2 min of GPU start-up
// make every start 3 min, its p95 too, in the table and in -o json.
func TestStandbyStartIsTimed(t *testing.T) {
	cfg := parse(t, `clusterName: simulate
clouds:
  sim: {locations: [FIN-01], bootDelay: 90s, startDelay: 1m}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 8, standby: {size: 4}}
`)
	tr := Trace{Name: "opening-burst"}
	for i := range 4 {
		tr.Pods = append(tr.Pods, Pod{Name: fmt.Sprintf("p%d", i), At: 0, Duration: 30 * time.Minute, GPUs: 1})
	}
	res := play(t, cfg, tr, Options{Policy: NodeProvisioner, Seed: 1, GPUStartup: time.Minute, StandbyGPUStartup: 2 * time.Minute})
	if res.StandbyStarts != 4 {
		t.Fatalf("%d standby starts, want 4", res.StandbyStarts)
	}
	if got := res.StandbyStart(0.95); got != 3*time.Minute {
		t.Errorf("standby start p95 %s, want 3m0s", got)
	}
	if got := Summarize(res)[0].StandbyStartP95Seconds; got != 180 {
		t.Errorf("standbyStartP95Seconds %v, want 180", got)
	}
	var table strings.Builder
	if err := WriteTable(&table, res); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`standby start to GPUs p95 +3m00s`).MatchString(table.String()) {
		t.Errorf("the table has no standby start p95 of 3m00s:\n%s", table.String())
	}
	table.Reset()
	if err := WriteTable(&table, res, &Result{Policy: Baseline, Trace: tr.Name}); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`standby start to GPUs p95 +3m00s +- `).MatchString(table.String()) {
		t.Errorf("a column without starts shows a standby start p95, want -:\n%s", table.String())
	}
}

// A start refused for capacity costs its pod an API call, not a cold
// boot: the pool's next stopped instance starts at once (nodegroup's
// refusedLocked). Three starts in ten are refused here; every pod still waits
// one start and its GPU start-up, within a loop.
func TestRefusedStartsAreServedFromThePool(t *testing.T) {
	cfg := parse(t, `clusterName: simulate
clouds:
  sim: {locations: [FIN-01, FIN-02], bootDelay: 10m, startDelay: 1m, startFailureRate: 0.3}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], maxSize: 24, standby: {size: 16}}
`)
	tr := Trace{Name: "opening-burst"}
	for i := range 6 {
		tr.Pods = append(tr.Pods, Pod{Name: fmt.Sprintf("p%d", i), At: time.Minute, Duration: 30 * time.Minute, GPUs: 1})
	}
	res := play(t, cfg, tr, Options{Policy: NodeProvisioner, Seed: 1, GPUStartup: time.Minute, StandbyGPUStartup: 2 * time.Minute})
	if res.StandbyStartFailed == 0 {
		t.Fatalf("no start refused out of %d: the test needs a seed that refuses some", res.StandbyStarts)
	}
	if w := res.Wait(1); w > 3*time.Minute+defaultLoop {
		t.Errorf("the slowest pod waited %s with %d starts refused, want a start's 3m0s within a loop: a refusal cost a cold boot", w, res.StandbyStartFailed)
	}
}

// Bursts of dozens of jobs at once (bursty-batch) are served from pools
// where they land (examples/sim-standby-bursty.yaml): the nodes a burst
// brings up go back to the pools as they go idle (refillAfter), two
// minutes after their work (scaleDownAfter), so the p95 wait is shorter
// than without pools, for no more than 3 % more cost, on each of three
// seeds.
func TestStandbyServesBursts(t *testing.T) {
	pooled, err := config.Load("../../examples/sim-standby-bursty.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bare := *pooled
	bare.NodeGroups = slices.Clone(pooled.NodeGroups)
	for i := range bare.NodeGroups {
		bare.NodeGroups[i].Standby = nil
	}
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			trace, err := Builtin("bursty-batch", 1, seed)
			if err != nil {
				t.Fatal(err)
			}
			cold := play(t, &bare, trace, Options{Policy: NodeProvisioner, Seed: seed})
			warm := play(t, pooled, trace, Options{Policy: NodeProvisioner, Seed: seed})
			if w := warm.Wait(0.95); w >= cold.Wait(0.95) {
				t.Errorf("p95 wait %s with the pools, %s without: want it shorter", w, cold.Wait(0.95))
			}
			if warm.Cost > 1.03*cold.Cost {
				t.Errorf("cost %.2f with the pools, %.2f without: more than 3%% more", warm.Cost, cold.Cost)
			}
		})
	}
}

// On the diurnal trace, on a pool with room above its afternoon peak
// (examples/sim-forecast.yaml), the oracle, which knows every arrival and
// departure, waits 0 s at p95 for at most 3 % more than the
// NodeProvisioner alone, which waits over a minute and a half: a wait of
// nothing need not cost much. The forecast with the CRD's defaults
// (coverage 80 %) knows only rates: it orders for the level's rise and
// chance's margin, not for every arrival (departures free nodes for most
// of them), and halves the NodeProvisioner's p95 wait for at most 5 %
// more. Four days: the forecast learns on the first.
func TestForecastNearsTheBoundOnDiurnalDemand(t *testing.T) {
	cfg, err := config.Load("../../examples/sim-forecast.yaml")
	if err != nil {
		t.Fatal(err)
	}
	trace, err := BuiltinDays("diurnal-inference", 1, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Without the image: a node ordered ahead pulls it only once a pod is
	// bound there (TestImagePullOnAHandComputedTrace), which no order
	// ahead hides; what is asked of the forecast is the boot and the GPUs.
	trace = withoutImages(trace)
	opts := Options{Policy: NodeProvisioner, Forecast: true, MeasureFrom: 24 * time.Hour, Seed: 1}
	fc := play(t, cfg, trace, opts)
	opts.Forecast, opts.Policy = false, Oracle
	oracle := play(t, cfg, trace, opts)
	opts.Policy = NodeProvisioner
	alone := play(t, cfg, trace, opts)
	t.Logf("p95 wait and cost: forecast %s %.2f, oracle %s %.2f, alone %s %.2f",
		fc.Wait(0.95), fc.Cost, oracle.Wait(0.95), oracle.Cost, alone.Wait(0.95), alone.Cost)
	if w := alone.Wait(0.95); w < 90*time.Second {
		t.Errorf("the NodeProvisioner alone waits %s at p95: the trace no longer asks anything of the forecast", w)
	}
	if w := oracle.Wait(0.95); w != 0 || oracle.Cost > 1.03*alone.Cost {
		t.Errorf("the oracle waits %s at p95 for %.2f, the NodeProvisioner alone %.2f: want 0 s for at most 3 %% more", w, oracle.Cost, alone.Cost)
	}
	if w, w0 := fc.Wait(0.95), alone.Wait(0.95); w > w0/2+w0/10 {
		t.Errorf("p95 wait %s with a forecast, %s without: want about half or less", w, w0)
	}
	if fc.Cost > 1.05*alone.Cost {
		t.Errorf("cost %.2f with a forecast, %.2f without: more than 5%% more", fc.Cost, alone.Cost)
	}
}

// withoutImages is the trace with no image to pull.
func withoutImages(tr Trace) Trace {
	tr.Pods = slices.Clone(tr.Pods)
	for i := range tr.Pods {
		tr.Pods[i].Image, tr.Pods[i].ImageGB = "", 0
	}
	return tr
}

// The built-in pool plays the cloud's part of facts.go: what the docs cite
// is what runs.
func TestBuiltinPoolPlaysTheFacts(t *testing.T) {
	for _, pool := range []string{PoolSim, PoolVerda, PoolGCP, PoolScaleway} {
		s := parse(t, mustPool(pool)).Clouds.Sim
		for name, c := range map[string]struct{ got, want time.Duration }{
			"bootDelay":     {s.BootDelay.Duration, FactBootDelay},
			"bootDelayP95":  {s.BootDelayP95.Duration, FactBootDelayP95},
			"startDelay":    {s.StartDelay.Duration, FactStartDelay},
			"startDelayP95": {s.StartDelayP95.Duration, FactStartDelayP95},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s %s, facts.go says %s", pool, name, c.got, c.want)
			}
		}
		if s.StartFailureRate != FactStartFailureRate || math.Abs(*s.StoppedPrice-FactStoppedPrice) > 0.0005 {
			t.Errorf("%s: startFailureRate %v, stoppedPrice %v; facts.go says %v, %.4f", pool, s.StartFailureRate, *s.StoppedPrice, FactStartFailureRate, FactStoppedPrice)
		}
	}
}

// Every built-in pool plays its cloud's catalog: its groups' types are
// that catalog's, sold where the groups order them, and a pod of each
// kind the built-in traces hold (one GPU, eight, a MIG slice) is placed
// and paid in the catalog's currency. Standby is refused where the cloud
// refuses it, and a cloud that sells no GPUs has no pool.
func TestEveryPoolPlaysItsCatalog(t *testing.T) {
	trace := Trace{Name: "kinds", Pods: []Pod{
		{Name: "one", Duration: 30 * time.Minute, GPUs: 1},
		{Name: "eight", Duration: 30 * time.Minute, GPUs: 8},
		{Name: "slice", Duration: 30 * time.Minute, MIG: "1g.10gb"},
	}}
	currency := map[string]string{PoolSim: "USD", PoolVerda: "USD", PoolGCP: "USD", PoolScaleway: "EUR"}
	for pool, cur := range currency {
		cfg := parse(t, mustPool(pool))
		cat, err := catalogs.Named(cfg.Clouds.Sim.Catalog)
		if err != nil || cat.Name != pool {
			t.Fatalf("%s: catalog %q (%v)", pool, cfg.Clouds.Sim.Catalog, err)
		}
		for _, g := range cfg.NodeGroups {
			if _, ok := cat.Type(g.InstanceType); !ok {
				t.Errorf("%s: group %s's type %s is not in the catalog", pool, g.Name, g.InstanceType)
			}
			for _, loc := range g.Locations {
				if !slices.Contains(cat.Locations, loc) {
					t.Errorf("%s: group %s orders in %s; the catalog sells in %v", pool, g.Name, loc, cat.Locations)
				}
			}
		}
		r := play(t, cfg, trace, Options{Policy: NodeProvisioner, Seed: 1})
		if r.Unplaced != 0 || r.Finished != 3 || r.Currency != cur || r.Cost < r.Floor || r.Floor <= 0 {
			t.Errorf("%s: %d unplaced, %d finished, cost %.2f %s against the floor %.2f", pool, r.Unplaced, r.Finished, r.Cost, r.Currency, r.Floor)
		}
	}
	_, err := Run(context.Background(), trace, Options{Config: parse(t, mustPool(PoolVerda)), Policy: NodeProvisioner, Standby: 2})
	if err == nil || !strings.Contains(err.Error(), "bills a shut-down instance in full") {
		t.Errorf("standby on Verda's catalog: %v, want it refused with the reason", err)
	}
	if _, err := Pool(PoolKamatera); !errors.Is(err, ErrNoPool) || !strings.Contains(err.Error(), "no GPU") {
		t.Errorf("kamatera: %v, want ErrNoPool, for want of GPU types", err)
	}
}

// A node pulls a pod's image once it is bound there, and keeps it. Pod a
// (a 6 GB image at 100 MB/s: a 60 s pull) waits the 60 s boot, the 60 s
// GPU start-up and the pull: 180 s, and runs until 780 s. Pod b, on the
// same image at 13 min, takes the idle node, which holds the image: it
// waits nothing. The mean time to GPU splits a's 180 s over the two pods:
// 30 s of boot, GPUs and pull each.
func TestImagePullOnAHandComputedTrace(t *testing.T) {
	trace := Trace{Name: "pulls", Pods: []Pod{
		{Name: "a", Duration: 10 * time.Minute, GPUs: 1, Image: "model", ImageGB: 6},
		{Name: "b", At: 13 * time.Minute, Duration: 10 * time.Minute, GPUs: 1, Image: "model", ImageGB: 6},
	}}
	res := play(t, parse(t, oneGroup), trace, Options{Policy: NodeProvisioner, GPUStartup: time.Minute, PullRate: 100})
	if res.Wait(1) != 180*time.Second || res.Wait(0) != 0 || res.NodesAdded != 1 {
		t.Errorf("waits %s and %s on %d nodes, want 180s and 0s on 1", res.Wait(1), res.Wait(0), res.NodesAdded)
	}
	if got, want := res.TimeToGPU(), (TimeToGPU{Boot: 30 * time.Second, GPUs: 30 * time.Second, Pull: 30 * time.Second}); got != want {
		t.Errorf("time to GPU %+v, want %+v", got, want)
	}
	if res.Simulated != 23*time.Minute {
		t.Errorf("simulated %s, want b's end at 23m", res.Simulated)
	}
	// The same pods with no images wait the boot and the GPUs alone.
	if res := play(t, parse(t, oneGroup), withoutImages(trace), Options{Policy: NodeProvisioner, GPUStartup: time.Minute, PullRate: 100}); res.Wait(1) != 120*time.Second {
		t.Errorf("without images: wait %s, want 120s", res.Wait(1))
	}
}

// A standby instance pulls the trace's images while it warms (the pools
// --standby gives list them in prePullImages), so a pod started from it
// waits the start and the GPUs alone, 30 s; from a pool of the config's
// own that lists none, it waits the 60 s pull as well. Its warm-up runs
// until its GPUs and its pulls, made beside each other, are done.
func TestStandbyPrePullsTheTracesImages(t *testing.T) {
	trace := Trace{Name: "one", Pods: []Pod{{Name: "a", At: 40 * time.Minute, Duration: 30 * time.Minute, GPUs: 1, Image: "model", ImageGB: 6}}}
	opts := Options{Policy: NodeProvisioner, GPUStartup: time.Minute, StandbyGPUStartup: workedOutStandbyGPUStartup, PullRate: 100}
	withPool := opts
	withPool.Standby = 1
	if res := play(t, parse(t, oneGroup), trace, withPool); res.Wait(1) != 30*time.Second || res.StandbyStarts != 1 || res.TimeToGPU().Pull != 0 {
		t.Errorf("pre-pulled: wait %s (%+v), standby starts %d; want 30s, no pull, 1", res.Wait(1), res.TimeToGPU(), res.StandbyStarts)
	}
	own := parse(t, strings.Replace(oneGroup, "maxSize: 5}", "maxSize: 5, standby: {size: 1}}", 1))
	if res := play(t, own, trace, opts); res.Wait(1) != 90*time.Second || res.TimeToGPU().Pull != time.Minute {
		t.Errorf("no prePullImages: wait %s (%+v), want 90s with a 60 s pull", res.Wait(1), res.TimeToGPU())
	}
	cfg := runConfig(Options{Config: parse(t, oneGroup), Standby: 1, GPUStartup: time.Minute, PullRate: 100}, trace)
	if s := cfg.NodeGroups[0].Standby; s.StandbyWarmFor() != 2*time.Minute || !slices.Equal(s.PrePullImages, []string{"model"}) {
		t.Errorf("warm-up %s, prePullImages %v; want warmFor's 2m, longer than the GPUs' 1m and the pull's 1m, and the trace's image", s.StandbyWarmFor(), s.PrePullImages)
	}
	cfg = runConfig(Options{Config: parse(t, oneGroup), Standby: 1, GPUStartup: 4 * time.Minute, PullRate: 100}, trace)
	if w := cfg.NodeGroups[0].Standby.StandbyWarmFor(); w != 4*time.Minute {
		t.Errorf("warm-up %s, want 4m: the GPUs' 4m, the 1m pull beside them", w)
	}
	cfg = runConfig(Options{Config: parse(t, oneGroup), Standby: 1, GPUStartup: time.Minute, PullRate: 20}, trace)
	if w := cfg.NodeGroups[0].Standby.StandbyWarmFor(); w != 5*time.Minute {
		t.Errorf("warm-up %s, want 5m: the 5m pull, the GPUs' 1m beside it", w)
	}
}

// A trace names each pod's image and its size; one without the other is
// refused with its line.
func TestTraceImages(t *testing.T) {
	tr, err := Read(strings.NewReader("at,duration,image,image_gb\n0s,10m,vllm/vllm-openai:v0.6,9.5\n1m,10m,,\n"), "ok", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Pods[0]; p.Image != "vllm/vllm-openai:v0.6" || p.ImageGB != 9.5 || tr.Pods[1].Image != "" {
		t.Errorf("read %+v", tr.Pods)
	}
	tr, err = Read(strings.NewReader(`{"at":"0s","duration":"10m","image":"triton","image_gb":15.5}`+"\n"), "ok", "jsonl")
	if err != nil || tr.Pods[0].Image != "triton" || tr.Pods[0].ImageGB != 15.5 {
		t.Errorf("jsonl: %+v, %v", tr.Pods, err)
	}
	for _, doc := range []string{"at,duration,image\n0s,10m,triton\n", "at,duration,image_gb\n0s,10m,3\n", "at,duration,image,image_gb\n0s,10m,triton,-1\n"} {
		var le *LineError
		if _, err := Read(strings.NewReader(doc), "bad", "csv"); !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), "image") {
			t.Errorf("%q: %v, want an error on line 2 about the image", doc, err)
		}
	}
	b, err := Builtin("diurnal-inference", 1, 1)
	if err != nil || b.Pods[0].Image != BuiltinImage("diurnal-inference") || b.Pods[0].ImageGB != FactImageGB {
		t.Errorf("a built-in trace's pods run %q of %v GB (%v), want %q of %v", b.Pods[0].Image, b.Pods[0].ImageGB, err, BuiltinImage("diurnal-inference"), FactImageGB)
	}
}

// A GPU start-up by GPU count applies to the nodes of that count: the
// one-GPU pool's pod waits its 60 s boot and 3 min for 1=3m, and the
// plain minute when only eight-GPU nodes are named.
func TestGPUStartupByGPUCount(t *testing.T) {
	trace := Trace{Name: "one", Pods: []Pod{{Name: "a", Duration: 30 * time.Minute, GPUs: 1}}}
	for _, c := range []struct {
		by   map[int]time.Duration
		wait time.Duration
	}{
		{map[int]time.Duration{1: 3 * time.Minute}, 240 * time.Second},
		{map[int]time.Duration{8: 3 * time.Minute}, 120 * time.Second},
	} {
		res := play(t, parse(t, oneGroup), trace, Options{Policy: NodeProvisioner, GPUStartup: time.Minute, GPUStartupByGPUs: c.by})
		if res.Wait(1) != c.wait || res.TimeToGPU().GPUs != c.wait-time.Minute {
			t.Errorf("%v: wait %s (%+v), want %s", c.by, res.Wait(1), res.TimeToGPU(), c.wait)
		}
	}
}

// A group with prePullImages (--pre-pull) pulls them onto a node from its
// registration, while its GPUs start: pod a's node registers at 60 s and
// pulls the 60 s image by 120 s, when a 1-minute GPU start-up ends too,
// so a waits 120 s, not 180 s; with a 30 s GPU start-up it waits the same
// 120 s, 30 s of it for the pull.
func TestPrePullOnJoinOverlapsTheGPUStartup(t *testing.T) {
	trace := Trace{Name: "one", Pods: []Pod{{Name: "a", Duration: 10 * time.Minute, GPUs: 1, Image: "model", ImageGB: 6}}}
	for _, c := range []struct {
		gpus, wait, pull time.Duration
	}{
		{time.Minute, 120 * time.Second, 0},
		{30 * time.Second, 120 * time.Second, 30 * time.Second},
	} {
		res := play(t, parse(t, oneGroup), trace, Options{Policy: NodeProvisioner, GPUStartup: c.gpus, PullRate: 100, PrePull: true})
		if res.Wait(1) != c.wait || res.TimeToGPU().Pull != c.pull {
			t.Errorf("GPU start-up %s: wait %s (%+v), want %s with %s of pull", c.gpus, res.Wait(1), res.TimeToGPU(), c.wait, c.pull)
		}
	}
}

// A trace names the taints each pod tolerates: a list of keys, "-" for
// none, nothing for every taint; a key that is not one is refused with
// its line.
func TestTraceTolerates(t *testing.T) {
	tr, err := Read(strings.NewReader("at,duration,tolerates\n0s,10m,\n1m,10m,-\n2m,10m,nvidia.com/gpu|gpuscaler.dev/multi-gpu\n"), "ok", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Pods; p[0].Tolerates != nil || p[1].Tolerates == nil || len(p[1].Tolerates) != 0 ||
		!slices.Equal(p[2].Tolerates, []string{GPUTaint, MultiGPUTaint}) {
		t.Errorf("csv: read %q, %q, %q; want nil (every taint), none, and both keys", p[0].Tolerates, p[1].Tolerates, p[2].Tolerates)
	}
	tr, err = Read(strings.NewReader(`{"at":"0s","duration":"10m"}`+"\n"+`{"at":"0s","duration":"10m","tolerates":[]}`+"\n"+
		`{"at":"0s","duration":"10m","tolerates":["nvidia.com/gpu"]}`+"\n"), "ok", "jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Pods; p[0].Tolerates != nil || p[1].Tolerates == nil || len(p[1].Tolerates) != 0 || !slices.Equal(p[2].Tolerates, []string{GPUTaint}) {
		t.Errorf("jsonl: read %q, %q, %q; want nil (every taint), none, and nvidia.com/gpu", p[0].Tolerates, p[1].Tolerates, p[2].Tolerates)
	}
	var le *LineError
	if _, err := Read(strings.NewReader("at,duration,tolerates\n0s,10m,nvidia.com/gpu|not a key\n"), "bad", "csv"); !errors.As(err, &le) || le.Line != 2 ||
		!strings.Contains(err.Error(), `tolerates: "not a key"`) {
		t.Errorf("a bad key: %v, want an error on line 2 naming it", err)
	}
	if pods := podObject(Pod{GPUs: 1, Tolerates: []string{}}).Spec.Tolerations; len(pods) != 0 {
		t.Errorf("a pod that tolerates none has tolerations %v", pods)
	}
	b, err := Builtin("bursty-batch", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range b.Pods {
		if slices.Contains(p.Tolerates, MultiGPUTaint) != (p.GPUs > 1) || !slices.Contains(p.Tolerates, GPUTaint) {
			t.Fatalf("built-in pod of %d GPUs tolerates %q: want nvidia.com/gpu, and the eight-GPU groups' taint for several GPUs only", p.GPUs, p.Tolerates)
		}
	}
	if got := BuiltinTolerates(Pod{MIG: "1g.10gb"}); !slices.Equal(got, []string{"nvidia.com/mig-1g.10gb"}) {
		t.Errorf("a MIG pod tolerates %q, want its resource's taint alone", got)
	}
	for _, line := range []string{`"tolerates":[""]`, `"tolerates":["a|b"]`, `"tolerates":["-"]`} {
		if _, err := Read(strings.NewReader(`{"at":"0s","duration":"10m",`+line+"}\n"), "bad", "jsonl"); !errors.As(err, &le) || le.Line != 1 {
			t.Errorf("jsonl %s: %v, want an error on line 1", line, err)
		}
	}
}

// An eight-GPU group tainted for jobs of several GPUs, whose nodes show
// their GPUs first (30 s against 2 minutes): a one-GPU pod that does not
// tolerate the taint waits for its own node (60 s boot, 2 minutes of GPUs:
// 180 s) though the eight-GPU node that came up at 90 s for the two-GPU
// job beside it has room; one that tolerates every taint takes that room.
func TestTaintKeepsSmallPodsOffTheEightGPUNodes(t *testing.T) {
	cfg := parse(t, `clusterName: sim
clouds:
  sim: {bootDelay: 60s, defaultCapacity: 20}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 5}
  - {name: h100x8, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 2, `+multiGPUTaints+`}
`)
	opts := Options{Policy: NodeProvisioner, GPUStartup: 2 * time.Minute, GPUStartupByGPUs: map[int]time.Duration{8: 30 * time.Second}}
	pods := func(small []string) Trace {
		return Trace{Name: "two", Pods: []Pod{
			{Name: "big", Duration: 30 * time.Minute, GPUs: 2, Tolerates: BuiltinTolerates(Pod{GPUs: 2})},
			{Name: "small", Duration: 30 * time.Minute, GPUs: 1, Tolerates: small},
		}}
	}
	if res := play(t, cfg, pods(BuiltinTolerates(Pod{GPUs: 1})), opts); res.Wait(0) != 90*time.Second || res.Wait(1) != 180*time.Second || res.NodesAdded != 2 {
		t.Errorf("tainted: waits %s and %s on %d nodes, want 90s (the job) and 180s (its own node) on 2", res.Wait(0), res.Wait(1), res.NodesAdded)
	}
	if res := play(t, cfg, pods(nil), opts); res.Wait(1) != 90*time.Second {
		t.Errorf("tolerating every taint: waits %s, want 90s on the eight-GPU node", res.Wait(1))
	}
}

// The pods a forecast expects are made in the likeness of those it saw,
// as the controller makes them: eight one-GPU pods at 9:00 that do not
// tolerate the eight-GPU group's taint are ordered for on the one-GPU
// group, where they then run without a wait, though one eight-GPU node
// would hold all eight at the same price.
func TestForecastOrdersForThePodsItSaw(t *testing.T) {
	cfg := parse(t, `clusterName: sim
clouds:
  sim: {bootDelay: 60s, defaultCapacity: 20}
nodeGroups:
  - {name: h100x8, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 2, `+multiGPUTaints+`}
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}
`)
	tr := Trace{Name: "eight at nine"}
	for d := range 3 {
		for i := range 8 {
			tr.Pods = append(tr.Pods, Pod{Name: fmt.Sprintf("d%d-%d", d, i), At: time.Duration(d)*24*time.Hour + 9*time.Hour, Duration: time.Hour,
				GPUs: 1, Tolerates: BuiltinTolerates(Pod{GPUs: 1})})
		}
	}
	res := play(t, cfg, tr, Options{Policy: NodeProvisioner, GPUStartup: time.Minute, MeasureFrom: 24 * time.Hour, Forecast: true, TrainFor: 24 * time.Hour})
	eight := 0.0
	for _, s := range res.Timeline {
		eight = max(eight, s.Capacity["h100x8"])
	}
	if res.Wait(1) != 0 || eight != 0 {
		t.Errorf("longest wait %s, eight-GPU capacity up to %v; want 0 and none: the pods it expects tolerate what those it saw did", res.Wait(1), eight)
	}
}
