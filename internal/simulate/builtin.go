package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Builtins are the names of the built-in traces.
var Builtins = []string{"diurnal-inference", "bursty-batch", "training-jobs"}

// Builtin generates a built-in trace of one day. scale multiplies its
// arrival rate (1 peaks at a few dozen GPUs); seed makes it repeat.
func Builtin(name string, scale float64, seed uint64) (Trace, error) {
	return BuiltinDays(name, scale, seed, 1)
}

// BuiltinDays generates a built-in trace of days days, each drawn as
// Builtin draws one (the first is Builtin's), one after the other.
func BuiltinDays(name string, scale float64, seed uint64, days int) (Trace, error) {
	if !(scale > 0 && scale <= 100) {
		return Trace{}, fmt.Errorf("scale %v: want more than 0, at most 100", scale)
	}
	if days < 1 || days > MaxDays {
		return Trace{}, fmt.Errorf("days %d: want 1 to %d", days, MaxDays)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	t := Trace{Name: name}
	if days > 1 {
		t.Name = fmt.Sprintf("%s ×%d days", name, days)
	}
	for d := range days {
		if err := builtinDay(&t, name, scale, rng, time.Duration(d)*day); err != nil {
			return Trace{}, err
		}
	}
	slices.SortStableFunc(t.Pods, func(a, b Pod) int { return int(a.At - b.At) })
	return t, nil
}

// MaxDays bounds a built-in trace's days: each day of the diurnal trace
// is some 1,900 pods, about a second of each policy's run and 25 MB of
// its memory (the run's series for the report), so 60 days take about
// a minute a policy and 1.5 GB. A user's trace file has no such bound.
const MaxDays = 60

// day is a built-in trace's span.
const day = 24 * time.Hour

// builtinDay adds one day of a built-in trace to t, from offset on.
func builtinDay(t *Trace, name string, scale float64, rng *rand.Rand, offset time.Duration) error {
	prefix := strings.SplitN(name, "-", 2)[0]
	add := func(p Pod) {
		p.Name = fmt.Sprintf("%s-%06d", prefix, len(t.Pods))
		p.At += offset
		p.Image, p.ImageGB = BuiltinImage(name), FactImageGB
		p.Tolerates = BuiltinTolerates(p)
		t.Pods = append(t.Pods, p)
	}
	switch name {
	case "diurnal-inference":
		// Inference replicas that follow the day: a rate of 20 arrivals an
		// hour at night rising to 140 in the afternoon (at scale 1), each
		// serving for about 40 minutes; one in five on a MIG slice.
		for at := time.Duration(0); at < day; {
			hour := at.Hours()
			rate := scale * (80 - 60*math.Cos(2*math.Pi*(hour-3)/24)) // arrivals per hour
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Hour))
			if at >= day {
				break
			}
			p := Pod{At: at.Round(time.Second), Duration: lognormal(rng, 40*time.Minute, 0.5), GPUs: 1}
			if rng.IntN(5) == 0 {
				p.GPUs, p.MIG = 0, "1g.10gb"
			}
			add(p)
		}
	case "bursty-batch":
		// Batch bursts every two to four hours of 20 to 60 jobs (at scale 1)
		// of one or two GPUs for 30 to 90 minutes, over a trickle of one an
		// hour.
		for at := time.Duration(0); at < day; at += time.Duration((2 + 2*rng.Float64()) * float64(time.Hour)) {
			n := int(scale * float64(20+rng.IntN(41)))
			for range n {
				add(Pod{At: (at + time.Duration(rng.IntN(120))*time.Second).Round(time.Second),
					Duration: time.Duration(30+rng.IntN(61)) * time.Minute, GPUs: 1 + rng.IntN(2)})
			}
		}
		for at := time.Duration(0); at < day; at += time.Duration(float64(time.Hour) / scale) {
			add(Pod{At: at, Duration: 20 * time.Minute, GPUs: 1, Priority: 1})
		}
	case "training-jobs":
		// Training jobs of a full eight-GPU node for two to six hours, about
		// one every 45 minutes (at scale 1), and fine-tuning jobs of two
		// GPUs for an hour.
		for at := time.Duration(0); at < day; {
			at += time.Duration(rng.ExpFloat64() / scale * float64(45*time.Minute))
			if at >= day {
				break
			}
			add(Pod{At: at.Round(time.Second), Duration: time.Duration(2+rng.IntN(5)) * time.Hour, GPUs: 8, Priority: 10})
			if rng.IntN(2) == 0 {
				add(Pod{At: (at + 5*time.Minute).Round(time.Second), Duration: time.Hour, GPUs: 2})
			}
		}
	default:
		return fmt.Errorf("trace %q: no such built-in trace (have %s)", name, strings.Join(Builtins, ", "))
	}
	return nil
}

// Taints the built-in pools and traces share: the GPU nodes' taint,
// which GPU pods are given a toleration of (Kubernetes'
// ExtendedResourceToleration admission plugin gives a pod one for each
// extended resource it requests, keyed by the resource's name: MIG
// slices' are nvidia.com/mig-<profile>), and the eight-GPU groups',
// which keeps the pods of one GPU or a MIG slice off the nodes that the
// jobs of several GPUs need whole, as a GPU cluster commonly does:
// otherwise the first eight-GPU node to come up would take the small
// pods that wait beside the jobs it was started for.
const (
	GPUTaint      = "nvidia.com/gpu"
	MultiGPUTaint = "gpuscaler.dev/multi-gpu"
)

// BuiltinTolerates are the taint keys a built-in trace's pod tolerates:
// its GPU resource's, and, for several GPUs, MultiGPUTaint.
func BuiltinTolerates(p Pod) []string {
	switch {
	case p.MIG != "":
		return []string{gpu.MIGResourcePrefix + p.MIG}
	case p.GPUs > 1:
		return []string{GPUTaint, MultiGPUTaint}
	}
	return []string{GPUTaint}
}

// BuiltinImage is the image every pod of a built-in trace runs, one per
// trace, FactImageGB in size: an inference server, a batch job, a
// training job.
func BuiltinImage(trace string) string {
	kind := map[string]string{"diurnal-inference": "inference", "bursty-batch": "batch", "training-jobs": "training"}[trace]
	return "builtin/" + kind + ":" + strconv.FormatFloat(FactImageGB, 'g', -1, 64) + "gb"
}

// lognormal draws a duration around median with the given spread, at
// least a minute.
func lognormal(rng *rand.Rand, median time.Duration, sigma float64) time.Duration {
	d := time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
	return max(d, time.Minute).Round(time.Second)
}
