package simulate

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
)

// chart is one line chart of a report: series over the run's samples.
type chart struct {
	Title  string
	Unit   string
	Series []series
	// Max is the value at the top of the chart.
	Max float64
	// Hours is the time at the right edge.
	Hours float64
}

type series struct {
	Name  string
	Color string
	// Points are the SVG polyline's, in the chart's 800x200 box (render).
	Points string
	x, y   []float64
}

// Chart geometry, in SVG user units.
const chartW, chartH = 800.0, 200.0

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// WriteHTML writes a self-contained page: the comparison table and, for
// each result, charts over time of demand against each group's capacity,
// pending pods and spend. It loads nothing from the network.
func WriteHTML(w io.Writer, results ...*Result) error {
	var table bytes.Buffer
	if err := WriteTable(&table, results...); err != nil {
		return err
	}
	type section struct {
		Title  string
		Charts []chart
	}
	var sections []section
	for _, r := range results {
		sections = append(sections, section{
			Title:  fmt.Sprintf("%s on %s", r.Policy, r.Trace),
			Charts: charts(r),
		})
	}
	return page.Execute(w, struct {
		Table    string
		Sections []section
	}{table.String(), sections})
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
	capacity := chart{Title: "GPU demand and capacity", Unit: "GPUs", Series: []series{
		line("demand (running and pending)", 1, func(s Sample) float64 { return s.Demand }),
		line("capacity, all groups", 0, total),
	}}
	for i, g := range groups {
		capacity.Series = append(capacity.Series, line("capacity, "+g, i+2, func(s Sample) float64 { return s.Capacity[g] }))
	}
	out := []chart{
		capacity,
		{Title: "Pending pods", Unit: "pods", Series: []series{line("pending", 1, func(s Sample) float64 { return float64(s.Pending) })}},
		{Title: "Spend", Unit: "per hour", Series: []series{line("spend", 4, func(s Sample) float64 { return s.Spend })}},
	}
	for i := range out {
		out[i].render(hours)
	}
	return out
}

// render scales the chart's series into its box.
func (c *chart) render(hours float64) {
	c.Hours, c.Max = hours, 1
	for _, s := range c.Series {
		c.Max = max(c.Max, slices.Max(s.y))
	}
	for i, s := range c.Series {
		var b strings.Builder
		for j := range s.x {
			x := 0.0
			if hours > 0 {
				x = s.x[j] / hours * chartW
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", x, chartH-s.y[j]/c.Max*chartH)
		}
		c.Series[i].Points = strings.TrimSpace(b.String())
	}
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"f": func(v float64) string { return fmt.Sprintf("%.4g", v) },
}).Parse(`<!DOCTYPE html>
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
{{range .Sections}}
<h2>{{.Title}}</h2>
{{range .Charts}}
<h3>{{.Title}}</h3>
<svg viewBox="-50 -10 870 240" width="870" height="240" role="img" aria-label="{{.Title}}">
<line x1="0" y1="200" x2="800" y2="200" stroke="#999"/>
<line x1="0" y1="0" x2="0" y2="200" stroke="#999"/>
<text x="-5" y="5" text-anchor="end" font-size="11">{{f .Max}}</text>
<text x="-5" y="200" text-anchor="end" font-size="11">0</text>
<text x="800" y="218" text-anchor="end" font-size="11">{{f .Hours}} h</text>
<text x="0" y="218" font-size="11">0 h</text>
{{range .Series}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.5" points="{{.Points}}"/>
{{end}}</svg>
<p class="legend">{{range .Series}}<span style="color: {{.Color}}">&#9632; {{.Name}}</span>{{end}} ({{.Unit}})</p>
{{end}}
{{end}}
</body>
</html>
`))
