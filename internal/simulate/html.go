package simulate

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/pending"
)

// chart is one line chart of a report: series over the run's samples, or
// the wait distribution over its buckets.
type chart struct {
	Title string
	// YUnit names the vertical axis; XUnit the horizontal one.
	YUnit, XUnit string
	Series       []series
	// XTicks and YTicks are the axes' labelled ticks, in the chart's
	// 800x200 box.
	XTicks, YTicks []tick
	// Marks are events on the timeline (stock-outs, spot reclaims,
	// standby starts), a kind each, drawn under the box.
	Marks []marks
}

type series struct {
	Name  string
	Color string
	// Points are the SVG polyline's, in the chart's box (render).
	Points string
	x, y   []float64
}

type tick struct {
	Pos   float64
	Label string
}

// marks are one kind of event on a timeline: Path draws a short tick
// under the box at each, one per unit of width.
type marks struct {
	Name, Color, Path string
}

// Chart geometry, in SVG user units; maxPoints bounds each line's points
// (about one per two units of width), so that a report of many days of
// several policies stays small.
const (
	chartW, chartH = 800.0, 200.0
	maxPoints      = 400
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// WriteHTML writes a self-contained page: the comparison table, the
// distribution of every policy's waits on one chart (in the buckets of
// gpuscaler_gpu_pod_wait_seconds), and, for each result, charts over time
// of demand against each group's capacity (with its stock-outs, spot
// reclaims and standby starts marked), pending pods, spend and the
// cumulative cost. It loads nothing from the network.
func WriteHTML(w io.Writer, results ...*Result) error {
	var table bytes.Buffer
	if err := WriteTable(&table, results...); err != nil {
		return err
	}
	type section struct {
		Title  string
		Charts []chart
	}
	names := distinctNames(results)
	var sections []section
	var played []*Result
	var playedNames []string
	for i, r := range results {
		if r.isFloor {
			continue
		}
		played, playedNames = append(played, r), append(playedNames, names[i])
		sections = append(sections, section{Title: fmt.Sprintf("%s on %s", names[i], r.Trace), Charts: charts(r)})
	}
	return page.Execute(w, struct {
		Table    string
		Waits    chart
		Sections []section
	}{table.String(), waitChart(played, playedNames), sections})
}

// distinctNames are the results' column names, a number added to those
// that repeat ("nodeprovisioner (2)"), so that every section's title is
// its own.
func distinctNames(results []*Result) []string {
	seen := map[string]int{}
	out := make([]string, len(results))
	for i, r := range results {
		name := r.Name()
		seen[name]++
		if n := seen[name]; n > 1 {
			name = fmt.Sprintf("%s (%d)", name, n)
		}
		out[i] = name
	}
	return out
}

// waitChart is the headline: for each policy, the share of its measured
// pods that waited at most each bucket's bound, the buckets of the real
// metric's histogram, evenly spaced.
func waitChart(results []*Result, names []string) chart {
	bounds := append([]float64{0}, pending.WaitBuckets()...)
	c := chart{Title: "Time to GPU: the share of pods that waited at most each time", YUnit: "% of pods", XUnit: "wait"}
	for i, b := range bounds {
		c.XTicks = append(c.XTicks, tick{Pos: float64(i) / float64(len(bounds)-1) * chartW, Label: shortDuration(time.Duration(b * float64(time.Second)))})
	}
	for i, r := range results {
		s := series{Name: names[i], Color: palette[i%len(palette)]}
		waited := r.WaitHistogram()
		none := 0 // the pods that did not wait: the line's start
		for _, d := range r.waits {
			if d == 0 {
				none++
			}
		}
		for j := range bounds {
			share := 100.0
			switch {
			case len(r.waits) == 0:
			case j == 0:
				share = 100 * float64(none) / float64(len(r.waits))
			default:
				share = 100 * float64(waited[j-1].Pods) / float64(len(r.waits))
			}
			s.x, s.y = append(s.x, float64(j)), append(s.y, share)
		}
		c.Series = append(c.Series, s)
	}
	c.render(0, float64(len(bounds)-1), 100)
	return c
}

// charts draws one result's timeline.
func charts(r *Result) []chart {
	if len(r.Timeline) == 0 {
		return nil
	}
	hours := r.Timeline[len(r.Timeline)-1].At.Hours()
	var groups []string
	for _, s := range r.Timeline {
		for g := range s.Capacity {
			if !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
	}
	slices.Sort(groups)
	line := func(name string, i int, value func(Sample) float64) series {
		l := series{Name: name, Color: palette[i%len(palette)]}
		for _, s := range r.Timeline {
			l.x, l.y = append(l.x, s.At.Hours()), append(l.y, value(s))
		}
		return l
	}
	total := func(s Sample) float64 {
		t := 0.0
		for _, c := range s.Capacity {
			t += c
		}
		return t
	}
	capacity := chart{Title: "GPU demand and capacity", YUnit: "GPUs", XUnit: "hours", Series: []series{
		line("demand (running and pending)", 1, func(s Sample) float64 { return s.Demand }),
		line("capacity, all groups", 0, total),
	}}
	for i, g := range groups {
		capacity.Series = append(capacity.Series, line("capacity, "+g, i+2, func(s Sample) float64 { return s.Capacity[g] }))
	}
	capacity.mark(r.Timeline, hours)
	// The cost so far, from the spend of each sample until the next.
	spent, cost := 0.0, make([]float64, len(r.Timeline))
	for i, s := range r.Timeline {
		if i > 0 {
			prev := r.Timeline[i-1]
			spent += prev.Spend * (s.At - prev.At).Hours()
		}
		cost[i] = spent
	}
	cumulative := series{Name: "cost since the run began", Color: palette[4]}
	for i, s := range r.Timeline {
		cumulative.x, cumulative.y = append(cumulative.x, s.At.Hours()), append(cumulative.y, cost[i])
	}
	out := []chart{
		capacity,
		{Title: "Pending pods", YUnit: "pods", XUnit: "hours", Series: []series{line("pending", 1, func(s Sample) float64 { return float64(s.Pending) })}},
		{Title: "Spend", YUnit: r.Currency + " per hour", XUnit: "hours", Series: []series{line("spend", 4, func(s Sample) float64 { return s.Spend })}},
		{Title: "Cumulative cost", YUnit: r.Currency, XUnit: "hours", Series: []series{cumulative}},
	}
	for i := range out {
		out[i].XTicks = hourTicks(hours)
		out[i].render(0, hours, 0)
	}
	return out
}

// mark puts the timeline's stock-outs, spot reclaims and standby starts
// on the chart, where each count rose, one tick a kind per unit of width.
func (c *chart) mark(timeline []Sample, hours float64) {
	kinds := []struct {
		name, color string
		count       func(Sample) int
	}{
		{"stock-out", "#d62728", func(s Sample) int { return s.StockOuts }},
		{"spot reclaim", "#ff7f0e", func(s Sample) int { return s.Reclaims }},
		{"standby start", "#2ca02c", func(s Sample) int { return s.StandbyStarts }},
	}
	for _, k := range kinds {
		var path strings.Builder
		last := -1.0
		for i := 1; i < len(timeline); i++ {
			if k.count(timeline[i]) <= k.count(timeline[i-1]) {
				continue
			}
			x := 0.0
			if hours > 0 {
				x = math.Round(timeline[i].At.Hours() / hours * chartW)
			}
			if x != last {
				fmt.Fprintf(&path, "M%g 193v7", x)
				last = x
			}
		}
		c.Marks = append(c.Marks, marks{Name: k.name, Color: k.color, Path: path.String()})
	}
}

// hourTicks are a timeline's ticks: at most a dozen, a round number of
// hours apart.
func hourTicks(hours float64) []tick {
	step := 1.0
	for _, s := range []float64{1, 2, 3, 6, 12, 24, 48, 72, 168, 336} {
		step = s
		if hours/s <= 12 {
			break
		}
	}
	var out []tick
	for h := 0.0; h <= hours+1e-9; h += step {
		pos := 0.0
		if hours > 0 {
			pos = h / hours * chartW
		}
		out = append(out, tick{Pos: pos, Label: fmt.Sprintf("%g h", h)})
	}
	return out
}

// render scales the chart's series into its box, x from x0 to x1 and y
// from 0 to the highest value (or top, when above 0), with five ticks up
// the vertical axis; each line keeps at most maxPoints points.
func (c *chart) render(x0, x1, top float64) {
	ymax := top
	if ymax <= 0 {
		ymax = 1
		for _, s := range c.Series {
			if len(s.y) > 0 {
				ymax = max(ymax, slices.Max(s.y))
			}
		}
	}
	for i := range 5 {
		v := ymax * float64(i) / 4
		c.YTicks = append(c.YTicks, tick{Pos: chartH - v/ymax*chartH, Label: fmt.Sprintf("%.4g", v)})
	}
	for i, s := range c.Series {
		xs, ys := downsample(s.x, s.y, maxPoints)
		var b strings.Builder
		for j := range xs {
			x := 0.0
			if x1 > x0 {
				x = (xs[j] - x0) / (x1 - x0) * chartW
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", x, chartH-ys[j]/ymax*chartH)
		}
		c.Series[i].Points = strings.TrimSpace(b.String())
	}
}

// downsample keeps at most n points of a line: the points fall into n
// runs of equal count, and each run gives its last x and its highest y,
// so that no peak is lost.
func downsample(x, y []float64, n int) ([]float64, []float64) {
	if len(x) <= n {
		return x, y
	}
	xs, ys := make([]float64, 0, n), make([]float64, 0, n)
	for i := range n {
		from, to := i*len(x)/n, (i+1)*len(x)/n
		xs, ys = append(xs, x[to-1]), append(ys, slices.Max(y[from:to]))
	}
	return xs, ys
}

// shortDuration prints a bucket's bound: 0, 5s, 1m, 7m30s, 1h.
func shortDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gpuscaler simulate</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
pre { background: #f6f6f6; padding: 1em; }
svg { background: #fcfcfc; border: 1px solid #ddd; }
.legend span { margin-right: 1.5em; }
</style>
</head>
<body>
<h1>gpuscaler simulate</h1>
<pre>{{.Table}}</pre>
{{define "chart"}}<svg viewBox="-70 -10 890 260" width="890" height="260" role="img" aria-label="{{.Title}}">
<line x1="0" y1="200" x2="800" y2="200" stroke="#999"/>
<line x1="0" y1="0" x2="0" y2="200" stroke="#999"/>
{{range .YTicks}}<line x1="-4" y1="{{.Pos}}" x2="800" y2="{{.Pos}}" stroke="#eee"/>
<text x="-7" y="{{.Pos}}" text-anchor="end" dominant-baseline="middle" font-size="11">{{.Label}}</text>
{{end}}{{range .XTicks}}<line x1="{{.Pos}}" y1="200" x2="{{.Pos}}" y2="205" stroke="#999"/>
<text x="{{.Pos}}" y="218" text-anchor="middle" font-size="11">{{.Label}}</text>
{{end}}<text x="-60" y="100" text-anchor="middle" font-size="11" transform="rotate(-90 -60 100)">{{.YUnit}}</text>
<text x="400" y="240" text-anchor="middle" font-size="11">{{.XUnit}}</text>
{{range .Series}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.5" points="{{.Points}}"/>
{{end}}{{range .Marks}}{{if .Path}}<path fill="none" stroke="{{.Color}}" d="{{.Path}}"/>
{{end}}{{end}}</svg>
<p class="legend">{{range .Series}}<span style="color: {{.Color}}">&#9632; {{.Name}}</span>{{end}}{{range .Marks}}<span style="color: {{.Color}}">| {{.Name}}</span>{{end}}</p>
{{end}}
<h2>{{.Waits.Title}}</h2>
{{template "chart" .Waits}}
{{range .Sections}}
<h2>{{.Title}}</h2>
{{range .Charts}}
<h3>{{.Title}}</h3>
{{template "chart" .}}
{{end}}
{{end}}
</body>
</html>
`))
