// Command simranges plays every built-in trace of `gpuscaler simulate`
// on its built-in pool over seeds 1 to 5 under each policy, and writes
// the figures docs/benchmarks.md gives, as ranges over the seeds (median
// and worst), between its "simranges" markers:
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

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/simulate"
)

const (
	begin = "<!-- simranges: begin (go run ./hack/simranges) -->"
	end   = "<!-- simranges: end -->"
)

// column is one policy the table shows.
type column struct {
	name    string
	policy  simulate.Policy
	standby int
}

var columns = []column{
	{"NodeProvisioner", simulate.NodeProvisioner, 0},
	{"NP + standby 2", simulate.NodeProvisioner, 2},
	{"cluster-autoscaler", simulate.Baseline, 0},
	{"oracle + standby 2", simulate.Oracle, 2},
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
	cfg, err := config.Parse([]byte(simulate.BuiltinPool))
	if err != nil {
		return err
	}
	var section bytes.Buffer
	fmt.Fprintf(&section, "%s\n", begin)
	fmt.Fprintf(&section, "Built-in pool and its fact-based timings (docs/simulate.md), seeds 1-%d, one day each; each cell is the median over\n"+
		"the seeds and, in brackets, the worst. Cost is against the floor no policy beats (its own median and worst in the last column).\n\n", seeds)
	fmt.Fprintf(&section, "| trace | p95 wait: %s | cost over the floor: %s | floor |\n", names(" / "), names(" / "))
	fmt.Fprintf(&section, "|---|---|---|---|\n")
	for _, trace := range simulate.Builtins {
		waits := make([][]time.Duration, len(columns))
		over := make([][]float64, len(columns))
		var floors []float64
		results, err := playAll(cfg, trace, seeds)
		if err != nil {
			return err
		}
		for seed := range seeds {
			for c := range columns {
				r := results[seed][c]
				waits[c] = append(waits[c], r.Wait(0.95))
				over[c] = append(over[c], 100*(r.Cost/r.Floor-1))
			}
			floors = append(floors, results[seed][0].Floor)
		}
		var w, o []string
		for c := range columns {
			mw, xw := medianWorst(waits[c], func(a, b time.Duration) bool { return a > b })
			w = append(w, fmt.Sprintf("%s (%s)", fmtDuration(mw), fmtDuration(xw)))
			mo, xo := medianWorst(over[c], func(a, b float64) bool { return a > b })
			o = append(o, fmt.Sprintf("+%.1f %% (+%.1f %%)", mo, xo))
		}
		mf, xf := medianWorst(floors, func(a, b float64) bool { return a > b })
		fmt.Fprintf(&section, "| %s | %s | %s | %.0f (%.0f) |\n", trace, strings.Join(w, " / "), strings.Join(o, " / "), mf, xf)
	}
	fmt.Fprintf(&section, "\n%s\n", end)
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

// playAll plays trace on each seed under each column, two runs at a time.
func playAll(cfg *config.Config, trace string, seeds int) ([][]*simulate.Result, error) {
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
				tr, err := simulate.Builtin(trace, 1, seed)
				if err == nil {
					var r *simulate.Result
					r, err = simulate.Run(context.Background(), tr, simulate.Options{Config: cfg, Policy: col.policy, Standby: col.standby, Seed: seed})
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

func names(sep string) string {
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
