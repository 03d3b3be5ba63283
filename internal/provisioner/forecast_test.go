package provisioner

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
)

// monday is a Monday at midnight, UTC.
var monday = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// playDay plays one day, a minute at a time, of a pool whose three
// one-GPU pods (if come) arrive at 9:00, wait two minutes and run until
// 17:00.
func playDay(ctx context.Context, f *Forecaster, clk *clocktesting.FakeClock, spec *v1alpha1.Forecast, d int, come bool) {
	start := clk.Now()
	for t := time.Duration(0); t < 24*time.Hour; t += time.Minute {
		clk.SetTime(start.Add(t))
		var pending, running []*corev1.Pod
		if come && t >= 9*time.Hour && t < 17*time.Hour {
			for i := range 3 {
				p := gpuPodNamed(fmt.Sprintf("day%d-%d", d, i), 1)
				if t < 9*time.Hour+2*time.Minute {
					pending = append(pending, p)
				} else {
					running = append(running, p)
				}
			}
		}
		out := f.Observe(ctx, "inference", spec, pending, running)
		_ = f.Report(ctx, "inference", out, len(out.Ahead))
	}
	clk.SetTime(start.Add(24 * time.Hour))
}

// A pool learns a daily habit over a week, orders ahead of it once
// trained (and only under a spec that lets it), remembers it across a
// restart through its store, and says so when the habit stops.
func TestForecasterLearnsOrdersAheadAndForgetsNothing(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(monday)
	store := &forecast.Memory{}
	f, err := NewForecaster(store, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := &v1alpha1.Forecast{MaxExtraHourlyCost: "10", TrainFor: &metav1.Duration{Duration: 2 * 24 * time.Hour}}
	playDay(ctx, f, clk, spec, 0, true)
	clk.SetTime(monday.Add(24*time.Hour + 8*time.Hour + 55*time.Minute))
	if out := f.Observe(ctx, "inference", spec, nil, nil); out.Reason != ForecastLearning || len(out.Ahead) != 0 {
		t.Fatalf("after a day of a two-day training: %s %q, %d ahead", out.Reason, out.Message, len(out.Ahead))
	}
	for d := 1; d < 7; d++ {
		clk.SetTime(monday.Add(time.Duration(d) * 24 * time.Hour))
		playDay(ctx, f, clk, spec, d, true)
	}
	at := clk.Now().Add(8*time.Hour + 55*time.Minute) // Monday 8:55, a week on
	clk.SetTime(at)
	out := f.Observe(ctx, "inference", spec, nil, nil)
	if out.Reason != ForecastOrdering || len(out.Ahead) != 3 {
		t.Fatalf("at 8:55 after a week: %s %q, %d ahead; want 3 pods ordered ahead", out.Reason, out.Message, len(out.Ahead))
	}
	if sel := out.Ahead[0].Spec.NodeSelector["pool"]; sel != "inference" || ShapeOf(out.Ahead[0]) != (forecast.Shape{GPUs: 1}) {
		t.Errorf("the pod ordered ahead is not in the likeness of the pool's pods: selector %q, shape %+v", sel, ShapeOf(out.Ahead[0]))
	}
	if out := f.Observe(ctx, "inference", nil, nil, nil); out.Reason != ForecastDisabled || len(out.Ahead) != 0 {
		t.Errorf("with no forecast spec: %s, %d ahead", out.Reason, len(out.Ahead))
	}
	if out := f.Observe(ctx, "inference", &v1alpha1.Forecast{MaxExtraHourlyCost: "0"}, nil, nil); out.Reason != ForecastDisabled {
		t.Errorf("with maxExtraHourlyCost 0: %s", out.Reason)
	}

	// A new process (another replica leading, or a restart) goes on from
	// what the store holds.
	clk.SetTime(at.Add(forecast.DefaultSlot))
	if err := f.Report(ctx, "inference", out, 0); err != nil {
		t.Fatal(err)
	}
	again, err := NewForecaster(store, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk.SetTime(at.Add(24*time.Hour - 3*time.Minute)) // Tuesday 8:52
	if out := again.Observe(ctx, "inference", spec, nil, nil); out.Reason != ForecastOrdering || len(out.Ahead) != 3 || out.Learned < 7*24*time.Hour {
		t.Fatalf("after a restart: %s %q, %d ahead, learned %s", out.Reason, out.Message, len(out.Ahead), out.Learned)
	}

	// The habit stops: the forecast misses, the pool goes back to
	// reacting and says so.
	start := at.Add(24*time.Hour - 8*time.Hour - 55*time.Minute) // Tuesday 0:00
	var lost bool
	for tt := time.Duration(0); tt < 28*24*time.Hour && !lost; tt += time.Minute {
		clk.SetTime(start.Add(tt))
		if out := again.Observe(ctx, "inference", spec, nil, nil); len(out.Lost) > 0 {
			lost = true
			if out.Reason != ForecastMissing || len(out.Ahead) != 0 {
				t.Fatalf("once its forecast missed: %s %q, %d ahead", out.Reason, out.Message, len(out.Ahead))
			}
		}
	}
	if !lost {
		t.Fatal("four weeks without the habit and the forecast is still trusted")
	}
}

// Pods are told apart by their GPUs or MIG devices.
func TestShapeOf(t *testing.T) {
	mig := gpuPodNamed("m", 0)
	mig.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("2")}
	for _, tt := range []struct {
		pod  *corev1.Pod
		want forecast.Shape
	}{
		{gpuPodNamed("a", 1), forecast.Shape{GPUs: 1}},
		{gpuPodNamed("b", 8), forecast.Shape{GPUs: 8}},
		{mig, forecast.Shape{MIG: "2x1g.10gb"}},
	} {
		if got := ShapeOf(tt.pod); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.pod.Name, got, tt.want)
		}
		if got := ShapeOf(expectedPod(tt.want, nil, 0)); got != tt.want {
			t.Errorf("a pod made for %+v is of shape %+v", tt.want, got)
		}
	}
}
