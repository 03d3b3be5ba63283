package simulate

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
)

// SweepFields are the NodeProvisioner settings a sweep can vary, each over
// whole numbers (scaleDownDelay in minutes; with Options.Forecast,
// forecast.maxExtraHourlyCost in the clouds' currency,
// forecast.coveragePercent, and forecast.scaleDownDelay in minutes).
var SweepFields = []string{"minUnutilizedGPUNodes", "minGPUUtilizationPercent", "maxGPUUtilizationPercent", "scaleDownDelay",
	"forecast.maxExtraHourlyCost", "forecast.coveragePercent", "forecast.scaleDownDelay"}

// Sweep is a grid over one NodeProvisioner setting.
type Sweep struct {
	Field  string
	Values []int
}

// ParseSweep reads "field=from..to" (or a single value).
func ParseSweep(s string) (Sweep, error) {
	field, span, ok := strings.Cut(s, "=")
	if !ok {
		return Sweep{}, fmt.Errorf("sweep %q: want field=from..to, such as minUnutilizedGPUNodes=0..3", s)
	}
	known := false
	for _, f := range SweepFields {
		if strings.EqualFold(f, field) {
			field, known = f, true
		}
	}
	if !known {
		return Sweep{}, fmt.Errorf("sweep %q: field %q is not one of %s", s, field, strings.Join(SweepFields, ", "))
	}
	fromS, toS, isRange := strings.Cut(span, "..")
	if !isRange {
		toS = fromS
	}
	from, err1 := strconv.Atoi(fromS)
	to, err2 := strconv.Atoi(toS)
	if err1 != nil || err2 != nil || from < 0 || to < from || to-from > 100 {
		return Sweep{}, fmt.Errorf("sweep %q: want whole numbers from..to, 0 <= from <= to, at most 101 values", s)
	}
	sw := Sweep{Field: field}
	for v := from; v <= to; v++ {
		sw.Values = append(sw.Values, v)
	}
	return sw, nil
}

// apply returns spec with the sweep's field set to v.
func (sw Sweep) apply(spec v1alpha1.NodeProvisionerSpec, v int) v1alpha1.NodeProvisionerSpec {
	n := int32(v)
	switch sw.Field {
	case "minUnutilizedGPUNodes":
		spec.MinUnutilizedGPUNodes = &n
	case "minGPUUtilizationPercent":
		spec.MinGPUUtilizationPercent = &n
	case "maxGPUUtilizationPercent":
		spec.MaxGPUUtilizationPercent = &n
	case "scaleDownDelay":
		spec.ScaleDownDelay = &metav1.Duration{Duration: time.Duration(v) * time.Minute}
	case "forecast.maxExtraHourlyCost", "forecast.coveragePercent", "forecast.scaleDownDelay":
		fc := v1alpha1.Forecast{}
		if spec.Forecast != nil {
			fc = *spec.Forecast
		}
		switch sw.Field {
		case "forecast.maxExtraHourlyCost":
			fc.MaxExtraHourlyCost = strconv.Itoa(v)
		case "forecast.coveragePercent":
			fc.CoveragePercent = &n
		default:
			fc.ScaleDownDelay = &metav1.Duration{Duration: time.Duration(v) * time.Minute}
		}
		spec.Forecast = &fc
	}
	return spec
}

// Run plays the trace once per value with the NodeProvisioner policy.
func (sw Sweep) Run(ctx context.Context, trace Trace, opts Options) ([]*Result, error) {
	if strings.HasPrefix(sw.Field, "forecast.") && !opts.Forecast {
		return nil, fmt.Errorf("sweep over %s: the run has no forecast", sw.Field)
	}
	opts.Policy = NodeProvisioner
	base := opts.Provisioner
	var out []*Result
	for _, v := range sw.Values {
		opts.Provisioner = sw.apply(base, v)
		r, err := Run(ctx, trace, opts)
		if err != nil {
			return nil, fmt.Errorf("%s=%d: %w", sw.Field, v, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// WriteFrontier prints each value's p95 wait and cost, marking with * the
// settings no other beats on both (the frontier).
func (sw Sweep) WriteFrontier(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tpending p95\tcost\tidle share\tfrontier\t\n", sw.Field)
	for i, r := range results {
		mark := "*"
		for j, o := range results {
			if j != i && o.Wait(0.95) <= r.Wait(0.95) && o.Cost <= r.Cost && (o.Wait(0.95) < r.Wait(0.95) || o.Cost < r.Cost) {
				mark = ""
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%.2f\t%.1f%%\t%s\t\n", sw.Values[i], fmtDuration(r.Wait(0.95)), r.Cost, 100*r.IdleShare(), mark)
	}
	return tw.Flush()
}
