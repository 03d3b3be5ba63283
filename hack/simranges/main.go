// Command simranges plays every built-in trace of `gpuscaler simulate`
// on its built-in pool over seeds 1 to 5 under each policy, and writes
// the figures docs/benchmarks.md gives, as ranges over the seeds (median
// and worst), between its "simranges" markers; then, over three days
// each on Scaleway's catalog, the forecast's columns, standby pools
// sized for bursts against their own starts' p95, and the forecast's
// settings on the diurnal days, a row each:
//
//	go run ./hack/simranges            # rewrites docs/benchmarks.md
//	go run ./hack/simranges -o -       # prints the section instead
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/simulate"
)

const (
	begin = "<!-- simranges: begin (go run ./hack/simranges) -->"
	end   = "<!-- simranges: end -->"
)

// column is one policy a table shows: coverage sets the forecast's
// coveragePercent (0: the CRD's default); prePull gives the groups the
// trace's images to pull as their nodes join (simulate --pre-pull);
// refill is the standby pools' refillAfter (simulate
// --standby-refill-after); pools, when set, replace standby with a pool
// of each size on the groups named (none on the others); standbyLead
// sets the forecast's standbyLeadTime (0: its default).
type column struct {
	name        string
	policy      simulate.Policy
	standby     int
	forecast    bool
	coverage    int32
	prePull     bool
	refill      time.Duration
	pools       map[string]int
	standbyLead time.Duration
}

// table is one table of the section: its columns over days of each
// trace on a built-in pool, measured from the second when days > 1 (a
// forecast learns on the first). startGap adds, for each column with
// standby pools, its p95 wait less its own standby starts' p95. A
// frontier table plays one trace and gives each column a row of its
// own.
type table struct {
	days     int
	pool     string
	columns  []column
	startGap bool
	frontier string
}

var tables = []table{
	{1, simulate.PoolSim, []column{
		{"NodeProvisioner", simulate.NodeProvisioner, 0, false, 0, false, 0, nil, 0},
		{"NP + standby 2", simulate.NodeProvisioner, 2, false, 0, false, 0, nil, 0},
		{"cluster-autoscaler", simulate.Baseline, 0, false, 0, false, 0, nil, 0},
		{"NP, pre-pull", simulate.NodeProvisioner, 0, false, 0, true, 0, nil, 0},
		{"NP + standby 2, pre-pull", simulate.NodeProvisioner, 2, false, 0, true, 0, nil, 0},
		{"oracle + standby 2, pre-pull", simulate.Oracle, 2, false, 0, true, 0, nil, 0},
	}, false, ""},
	{3, simulate.PoolScaleway, []column{
		{"NodeProvisioner", simulate.NodeProvisioner, 0, false, 0, true, 0, nil, 0},
		{"NP + forecast", simulate.NodeProvisioner, 0, true, 0, true, 0, nil, 0},
		{"NP + forecast + standby 2", simulate.NodeProvisioner, 2, true, 0, true, 0, nil, 0},
		{"NP + forecast 95 % + standby 2", simulate.NodeProvisioner, 2, true, 95, true, 0, nil, 0},
		{"oracle + standby 2", simulate.Oracle, 2, false, 0, true, 0, nil, 0},
	}, false, ""},
	{3, simulate.PoolScaleway, []column{
		{"NodeProvisioner", simulate.NodeProvisioner, 0, false, 0, true, 0, nil, 0},
		{"NP + standby 6, refill 1h", simulate.NodeProvisioner, 6, false, 0, true, time.Hour, nil, 0},
		{"NP + standby 40, refill 3h", simulate.NodeProvisioner, 40, false, 0, true, 3 * time.Hour, nil, 0},
		{"NP + forecast + standby 40, refill 3h", simulate.NodeProvisioner, 40, true, 0, true, 3 * time.Hour, nil, 0},
	}, true, ""},
	{3, simulate.PoolScaleway, frontier(), false, "diurnal-inference"},
}

// frontierPools are the frontier table's standby pools, on the built-in
// pool's one-GPU and MIG groups, each refilled after frontierRefill.
var frontierPools = map[string]int{"h100": 20, "h100-mig": 4}

const frontierRefill = 3 * time.Hour

// frontier is the diurnal days' table of the forecast's settings: pools
// on the two groups the trace's pods run on (its one-GPU pods' and its
// MIG slices'), the coverage from 70 % to 90 %, and a standby lead of
// the starts' p95 rather than their median.
func frontier() []column {
	pools := frontierPools
	cols := []column{
		{"NodeProvisioner", simulate.NodeProvisioner, 0, false, 0, true, 0, nil, 0},
		{fmt.Sprintf("NP + standby %d and %d, refill %gh", pools["h100"], pools["h100-mig"], frontierRefill.Hours()),
			simulate.NodeProvisioner, 0, false, 0, true, frontierRefill, pools, 0},
	}
	for _, c := range []int32{70, 75, 80, 85, 90} {
		cols = append(cols, column{fmt.Sprintf("the same + forecast %d %%", c), simulate.NodeProvisioner, 0, true, c, true, frontierRefill, pools, 0})
	}
	return append(cols,
		column{"the same + forecast 80 %, standby lead 9m", simulate.NodeProvisioner, 0, true, 80, true, frontierRefill, pools, 9 * time.Minute},
		column{"oracle + standby 2", simulate.Oracle, 2, false, 0, true, 0, nil, 0})
}

func main() {
	out := flag.String("o", "docs/benchmarks.md", "the file whose simranges section is rewritten, or - for standard output")
	seeds := flag.Int("seeds", 5, "seeds 1 to this")
	flag.Parse()
	if err := run(*out, *seeds); err != nil {
		fmt.Fprintln(os.Stderr, "simranges:", err)
		os.Exit(1)
	}
}

func run(out string, seeds int) error {
	var section bytes.Buffer
	fmt.Fprintf(&section, "%s\n", begin)
	for _, tb := range tables {
		pool, err := simulate.Pool(tb.pool)
		if err != nil {
			return err
		}
		cfg, err := config.Parse([]byte(pool))
		if err != nil {
			return err
		}
		if err := writeTable(&section, cfg, tb, seeds); err != nil {
			return err
		}
	}
	fmt.Fprintf(&section, "%s\n", end)
	if out == "-" {
		_, err := io.Copy(os.Stdout, &section)
		return err
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q ... %q section", out, begin, end)
	}
	doc = slices.Concat(doc[:i], bytes.TrimSuffix(section.Bytes(), []byte("\n")), doc[j+len(end):])
	return os.WriteFile(out, doc, 0o644)
}

// writeTable writes one table: every built-in trace under its columns.
// A one-day table gives cost over the floor; a longer one also against
// the NodeProvisioner alone, its first column.
func writeTable(w io.Writer, cfg *config.Config, tb table, seeds int) error {
	if tb.frontier != "" {
		return writeFrontier(w, cfg, tb, seeds)
	}
	if tb.days == 1 {
		fmt.Fprintf(w, "Built-in pool (`--pool %s`) and its fact-based timings, 10 GB images included (docs/simulate.md), seeds 1-%d, one day\n"+
			"each; each cell is the median over the seeds and, in brackets, the worst. Cost is against the floor no policy beats (its own\n"+
			"median and worst in the last column). \"pre-pull\": the groups pull the trace's image as their nodes join (`--pre-pull`).\n\n", tb.pool, seeds)
		fmt.Fprintf(w, "| trace | p95 wait: %s | cost over the floor: %s | floor |\n", names(tb.columns, " / "), names(tb.columns, " / "))
		fmt.Fprintf(w, "|---|---|---|---|\n")
	} else if !tb.startGap {
		fmt.Fprintf(w, "The forecast, on Scaleway's catalog (`--pool %s`), every group pulling the trace's image as its nodes join (`--pre-pull`):\n"+
			"the same timings and seeds, %d days each, measured from the second (the forecast learns on the first); the coverage is the\n"+
			"CRD's 80 %% unless named. Cost is against the NodeProvisioner alone, then the floor.\n\n", tb.pool, tb.days)
		fmt.Fprintf(w, "| trace | p95 wait: %s | cost over the NodeProvisioner: %s | cost over the floor: %s |\n",
			names(tb.columns, " / "), names(tb.columns[1:], " / "), names(tb.columns, " / "))
		fmt.Fprintf(w, "|---|---|---|---|\n")
	} else {
		fmt.Fprintf(w, "Standby pools sized for bursts, on the same catalog, timings and seeds, pre-pull, %d days each, measured from the second:\n"+
			"every group keeps a pool of 6 (the training jobs' eight-GPU nodes) or of 40 (a burst's one-GPU pods; the eight-GPU group's is\n"+
			"its maxSize, 20), and waits `--standby-refill-after` for the nodes scaled down to come back before it orders fresh ones; the\n"+
			"last column adds the forecast, with the CRD's defaults. The last cell is each column's p95 wait less the p95 of its own\n"+
			"standby starts (start to the node's GPUs), seed by seed: the wait a pod the pools serve cannot beat.\n\n", tb.days)
		fmt.Fprintf(w, "| trace | p95 wait: %s | cost over the NodeProvisioner: %s | p95 wait less the standby start's: %s |\n",
			names(tb.columns, " / "), names(tb.columns[1:], " / "), names(tb.columns[1:], " / "))
		fmt.Fprintf(w, "|---|---|---|---|\n")
	}
	for _, trace := range simulate.Builtins {
		cols := tb.columns
		waits := make([][]time.Duration, len(cols))
		gap := make([][]time.Duration, len(cols))
		over := make([][]float64, len(cols))
		vsNP := make([][]float64, len(cols))
		var floors []float64
		results, err := playAll(cfg, trace, tb, seeds)
		if err != nil {
			return err
		}
		for seed := range seeds {
			for c := range cols {
				r := results[seed][c]
				waits[c] = append(waits[c], r.Wait(0.95))
				gap[c] = append(gap[c], r.Wait(0.95)-r.StandbyStart(0.95))
				over[c] = append(over[c], 100*(r.Cost/r.Floor-1))
				vsNP[c] = append(vsNP[c], 100*(r.Cost/results[seed][0].Cost-1))
			}
			floors = append(floors, results[seed][0].Floor)
		}
		percents := func(vs [][]float64) string {
			var out []string
			for _, v := range vs {
				m, x := medianWorst(v, func(a, b float64) bool { return a > b })
				out = append(out, fmt.Sprintf("%+.1f %% (%+.1f %%)", m, x))
			}
			return strings.Join(out, " / ")
		}
		var wait, gaps []string
		for c := range cols {
			mw, xw := medianWorst(waits[c], func(a, b time.Duration) bool { return a > b })
			wait = append(wait, fmt.Sprintf("%s (%s)", fmtDuration(mw), fmtDuration(xw)))
			mg, xg := medianWorst(gap[c], func(a, b time.Duration) bool { return a > b })
			gaps = append(gaps, fmt.Sprintf("%s (%s)", signed(mg), signed(xg)))
		}
		switch {
		case tb.days == 1:
			mf, xf := medianWorst(floors, func(a, b float64) bool { return a > b })
			fmt.Fprintf(w, "| %s | %s | %s | %.0f (%.0f) |\n", trace, strings.Join(wait, " / "), percents(over), mf, xf)
		case tb.startGap:
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", trace, strings.Join(wait, " / "), percents(vsNP[1:]), strings.Join(gaps[1:], " / "))
		default:
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", trace, strings.Join(wait, " / "), percents(vsNP[1:]), percents(over))
		}
	}
	fmt.Fprintln(w)
	return nil
}

// playAll plays trace on each seed under each of the table's columns,
// as many runs at a time as there are CPUs.
func playAll(cfg *config.Config, trace string, tb table, seeds int) ([][]*simulate.Result, error) {
	columns := tb.columns
	results := make([][]*simulate.Result, seeds)
	for s := range results {
		results[s] = make([]*simulate.Result, len(columns))
	}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, max(1, runtime.NumCPU()))
	var wg sync.WaitGroup
	for s := range seeds {
		for c, col := range columns {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				seed := uint64(s + 1)
				tr, err := simulate.BuiltinDays(trace, 1, seed, tb.days)
				var colCfg *config.Config
				if err == nil {
					colCfg, err = withPools(cfg, col)
				}
				if err == nil {
					opts := simulate.Options{Config: colCfg, Policy: col.policy, Standby: col.standby, Seed: seed, Forecast: col.forecast, PrePull: col.prePull,
						StandbyRefillAfter: col.refill}
					if tb.days > 1 {
						opts.MeasureFrom = 24 * time.Hour
					}
					if col.coverage > 0 || col.standbyLead > 0 {
						opts.Provisioner.Forecast = &v1alpha1.Forecast{}
					}
					if col.coverage > 0 {
						opts.Provisioner.Forecast.CoveragePercent = &col.coverage
					}
					if col.standbyLead > 0 {
						opts.Provisioner.Forecast.StandbyLeadTime = &metav1.Duration{Duration: col.standbyLead}
					}
					var r *simulate.Result
					r, err = simulate.Run(context.Background(), tr, opts)
					results[s][c] = r
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s seed %d %s: %w", trace, seed, col.name, err))
					mu.Unlock()
				}
				fmt.Fprintf(os.Stderr, "simranges: %s seed %d %s done\n", trace, seed, col.name)
			}()
		}
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// withPools is cfg with the column's pools on the groups it names, each
// refilled after the column's refill; cfg itself when it names none.
func withPools(cfg *config.Config, col column) (*config.Config, error) {
	if col.pools == nil {
		return cfg, nil
	}
	c := *cfg
	c.NodeGroups = slices.Clone(cfg.NodeGroups)
	found := 0
	for i := range c.NodeGroups {
		g := &c.NodeGroups[i]
		if n, ok := col.pools[g.Name]; ok {
			g.Standby = &config.Standby{Size: n, RefillAfter: &metav1.Duration{Duration: col.refill}}
			found++
		}
	}
	if found != len(col.pools) {
		return nil, fmt.Errorf("%s: pools on %v, but the pool's groups are not all of them", col.name, col.pools)
	}
	return &c, nil
}

// writeFrontier writes a frontier table: a row for each column on the
// table's one trace, its p95 wait and cost against the first column's
// and the floor.
func writeFrontier(w io.Writer, cfg *config.Config, tb table, seeds int) error {
	fmt.Fprintf(w, "The forecast's settings on the %s days, on the same catalog, timings and seeds, pre-pull, %d days each, measured\n"+
		"from the second: pools only on the two groups the trace's pods run on (%d one-GPU instances, %d for MIG slices, refilled\n"+
		"after %gh), the forecast's coverage from 70 %% to 90 %%, and its standby lead at the starts' p95 rather than the default.\n\n",
		tb.frontier, tb.days, frontierPools["h100"], frontierPools["h100-mig"], frontierRefill.Hours())
	fmt.Fprintf(w, "| %s, setting | p95 wait | cost over the NodeProvisioner | cost over the floor |\n|---|---|---|---|\n", tb.frontier)
	results, err := playAll(cfg, tb.frontier, tb, seeds)
	if err != nil {
		return err
	}
	for c, col := range tb.columns {
		var waits []time.Duration
		var vsNP, over []float64
		for seed := range seeds {
			r := results[seed][c]
			waits = append(waits, r.Wait(0.95))
			vsNP = append(vsNP, 100*(r.Cost/results[seed][0].Cost-1))
			over = append(over, 100*(r.Cost/r.Floor-1))
		}
		mw, xw := medianWorst(waits, func(a, b time.Duration) bool { return a > b })
		mn, xn := medianWorst(vsNP, func(a, b float64) bool { return a > b })
		mf, xf := medianWorst(over, func(a, b float64) bool { return a > b })
		vs := fmt.Sprintf("%+.1f %% (%+.1f %%)", mn, xn)
		if c == 0 {
			vs = "-"
		}
		fmt.Fprintf(w, "| %s | %s (%s) | %s | %+.1f %% (%+.1f %%) |\n", col.name, fmtDuration(mw), fmtDuration(xw), vs, mf, xf)
	}
	fmt.Fprintln(w)
	return nil
}

func names(columns []column, sep string) string {
	var n []string
	for _, c := range columns {
		n = append(n, c.name)
	}
	return strings.Join(n, sep)
}

// medianWorst returns the median of vs and the worst by worse.
func medianWorst[T any](vs []T, worse func(a, b T) bool) (median, worst T) {
	s := slices.Clone(vs)
	slices.SortFunc(s, func(a, b T) int {
		switch {
		case worse(a, b):
			return 1
		case worse(b, a):
			return -1
		}
		return 0
	})
	return s[(len(s)-1)/2], s[len(s)-1]
}

// fmtDuration prints a duration to the second, as the simulate table does.
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return d.String()
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// signed prints a duration difference with its sign.
func signed(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	return "+" + fmtDuration(d)
}
