package forecast

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Shape is a kind of pod demand is learned for apart: its GPUs, or its
// MIG slice. Pods of one shape need the same nodes, so what is ordered
// ahead is of the shapes expected.
type Shape struct {
	GPUs int
	MIG  string
}

// Forecast accuracy: a shape is ordered ahead for only while its
// forecasts of arrivals miss by at most MaxMiss of what arrives, beyond
// what chance misses by (Trusted), smoothed slot by slot with missAlpha
// (some twenty slots).
const (
	MaxMiss   = 0.5
	missAlpha = 0.05
)

// Demand learns a pool's demand by shape of pod: how many pods of each
// shape run or wait, and how many arrive, per slot of the day and week;
// and how well its forecasts of arrivals hit. Not safe for concurrent use.
type Demand struct {
	shapes map[Shape]*series
	// since is the first observation; slot the slot under way.
	since, slot time.Time
}

// series is one shape's profiles and the slot under way's arrivals.
type series struct {
	level, arrivals *Profile
	arrived         float64
	// expected is the forecast of the slot under way's arrivals (NaN:
	// none); missed and came smooth the forecasts' absolute error and
	// the arrivals, over the slots scored.
	expected     float64
	missed, came float64
	// chance smooths, alike, the error a forecast that hits the rate
	// makes all the same: arrivals at random around it (a Poisson
	// count) miss its mean by this much.
	chance float64
	scored bool
	// The same for the level: the slot under way's forecast and peak, and
	// the smoothed error and level over the slots scored.
	levelExpected, levelPeak float64
	levelMissed, levelSeen   float64
	levelScored              bool
}

// NewDemand returns a Demand that has learned nothing.
func NewDemand() *Demand { return &Demand{shapes: map[Shape]*series{}} }

// of is a shape's series, made on first use: none of the shape ran
// since the Demand began to learn.
func (d *Demand) of(s Shape) *series {
	sr := d.shapes[s]
	if sr == nil {
		level, _ := New(0, 0)
		arrivals, _ := New(0, 0)
		sr = &series{level: level, arrivals: arrivals, expected: math.NaN(), levelExpected: math.NaN()}
		if !d.since.IsZero() {
			level.Observe(d.since, 0)
			arrivals.Observe(d.since, 0)
		}
		d.shapes[s] = sr
	}
	return sr
}

// Arrive counts a pod of a shape that arrived (became pending) at a
// time. Calls of Arrive and Observe must come in time order.
func (d *Demand) Arrive(at time.Time, s Shape) {
	d.roll(at)
	d.of(s).arrived++
}

// roll moves to the slot of a time: the slot before is scored.
func (d *Demand) roll(now time.Time) {
	if d.since.IsZero() {
		d.since = now
	}
	if slot := now.Truncate(DefaultSlot); !slot.Equal(d.slot) {
		for _, sr := range d.shapes {
			if !d.slot.IsZero() {
				// The slot's last arrivals, at its end: after its last
				// Observe, but its own.
				sr.arrivals.Observe(d.slot.Add(DefaultSlot-time.Nanosecond), sr.arrived)
			}
			sr.score()
			if v, ok := sr.arrivals.Forecast(slot); ok {
				sr.expected = v
			}
			if v, ok := sr.level.Forecast(slot); ok {
				sr.levelExpected = v
			}
		}
		d.slot = slot
	}
}

// Observe records how many pods of each shape run or wait now; a shape
// left out has none.
func (d *Demand) Observe(now time.Time, count map[Shape]int) {
	d.roll(now)
	for s := range count {
		d.of(s)
	}
	for s, sr := range d.shapes {
		sr.level.Observe(now, float64(count[s]))
		sr.arrivals.Observe(now, sr.arrived)
		sr.levelPeak = max(sr.levelPeak, float64(count[s]))
	}
}

// score closes a slot: its forecast of arrivals against what arrived.
func (sr *series) score() {
	if !math.IsNaN(sr.expected) {
		sr.missed += missAlpha * (math.Abs(sr.arrived-sr.expected) - sr.missed)
		sr.came += missAlpha * (sr.arrived - sr.came)
		sr.chance += missAlpha * (poissonMAD(sr.expected) - sr.chance)
		sr.scored = true
	}
	sr.arrived, sr.expected = 0, math.NaN()
	if !math.IsNaN(sr.levelExpected) {
		sr.levelMissed += missAlpha * (math.Abs(sr.levelPeak-sr.levelExpected) - sr.levelMissed)
		sr.levelSeen += missAlpha * (sr.levelPeak - sr.levelSeen)
		sr.levelScored = true
	}
	sr.levelPeak, sr.levelExpected = 0, math.NaN()
}

// Learned is how long the Demand has observed, up to now.
func (d *Demand) Learned(now time.Time) time.Duration {
	if d.since.IsZero() {
		return 0
	}
	return now.Sub(d.since)
}

// Trusted reports whether a shape's forecasts of arrivals hit well enough
// to order on: they missed by at most MaxMiss of what arrived, beyond what
// arrivals at random around the rate forecast miss by all the same (a
// forecast of nothing that saw nothing hit). A rate of a few pods a slot
// misses by half of it by chance alone: such a forecast is as right as
// any can be. Chance is forgiven up to what arrived, no more: pods
// forecast that do not come are a miss, however few.
func (d *Demand) Trusted(s Shape) bool {
	sr := d.shapes[s]
	return sr != nil && sr.scored && sr.missed <= MaxMiss*sr.came+min(sr.chance, sr.came)
}

// spread is how random a shape's arrivals are, 0 to 1: what its forecasts
// missed by against what arrivals at random around the rate would (a
// Poisson count; 1 for those or more random ones). Pods that come like
// clockwork need no margin above their expected number.
func (sr *series) spread() float64 {
	if !(sr.chance > 0) {
		return 1
	}
	return min(1, sr.missed/sr.chance)
}

// timed reports whether a trusted shape's arrivals also keep time beyond
// chance: its forecasts missed by at most MaxMiss of what arrived, chance
// not forgiven. Only then does its profile's rise (pods that come
// together at a time of day) say more than the noise of a few days.
func (sr *series) timed() bool {
	return sr.missed <= MaxMiss*sr.came
}

// poissonMAD is how far, on average, a Poisson count of the given mean
// falls from it: 2 e^-mean mean^(k+1) / k!, k the mean's whole part.
func poissonMAD(mean float64) float64 {
	if !(mean > 0) {
		return 0
	}
	k := math.Floor(mean)
	lg, _ := math.Lgamma(k + 1)
	return 2 * math.Exp((k+1)*math.Log(mean)-mean-lg)
}

// LevelTrusted reports whether a shape's forecasts of its level (how
// many run or wait) hit well enough to size on: they missed by at most
// MaxMiss of the level. A level that follows the clock is trusted even
// where its arrivals (a target raised now by three, now by one) are too
// irregular for Trusted.
func (d *Demand) LevelTrusted(s Shape) bool {
	sr := d.shapes[s]
	return sr != nil && sr.levelScored && sr.levelMissed <= MaxMiss*sr.levelSeen
}

// AheadOfLevel is Ahead for the shapes whose level forecasts hit
// (LevelTrusted), for the expected arrivals (coverage 0): what a pool of
// stopped instances, cheap to hold, is sized by.
func (d *Demand) AheadOfLevel(now time.Time, lead time.Duration) []Want {
	return d.ahead(now, lead, 0, d.LevelTrusted, func(_ *series, rise float64) float64 { return rise })
}

// Ahead is what to order ahead of at now, by shape: for each trusted
// shape, the pods its level is expected to grow by within lead (the time
// an order takes to serve), with a margin for chance, or, for a shape
// whose arrivals keep time, the growth its profile expects meanwhile
// beyond what its level forecasts miss by (a level that wanders from day
// to day rises and falls by that much without a pattern), if more.
//
// The pods that arrive within lead are not all new capacity: as many as
// the level does not grow by replace pods that leave meanwhile, and take
// the nodes those free (the plan keeps idle nodes for the pods expected).
// Ordering for every arrival buys a node for each pod a departure serves,
// and pays its boot. But arrivals and departures both come one by one at
// random around their rates (Poisson counts), so the growth falls short
// about half the time: the margin is how far a count of both's expected
// number reaches above it at the coverage quantile (0.5 to 1), which
// falls short with a chance of 1 − coverage at most; for arrivals less
// random than that, the margin is as much smaller as they are (spread).
// Coverage 0 takes the expected arrivals, rounded, with no departures
// counted. Shapes come sorted by GPUs, then MIG slice; none with nothing
// to order.
func (d *Demand) Ahead(now time.Time, lead time.Duration, coverage float64) []Want {
	return d.ahead(now, lead, coverage, d.Trusted, func(sr *series, rise float64) float64 {
		if !sr.timed() {
			return 0
		}
		return rise - sr.levelMissed
	})
}

// AllTrusted reports whether the Demand has seen a shape and trusts every
// one it has seen: Ahead then speaks for all of the pool's pods.
func (d *Demand) AllTrusted() bool {
	for s := range d.shapes {
		if !d.Trusted(s) {
			return false
		}
	}
	return len(d.shapes) > 0
}

// ahead is Ahead for the shapes trusted says, counting of the rise their
// level profile expects what growth makes of it.
func (d *Demand) ahead(now time.Time, lead time.Duration, coverage float64, trusted func(Shape) bool, growth func(sr *series, rise float64) float64) []Want {
	var out []Want
	for s, sr := range d.shapes {
		if !trusted(s) {
			continue
		}
		peak, ok := sr.level.Peak(now, lead)
		if !ok {
			continue
		}
		// A slot not seen is one before the shape was: none of it ran.
		level, _ := sr.level.Forecast(now)
		incoming, _ := sr.arrivals.Peak(now, lead)
		mean := incoming * float64(lead) / float64(DefaultSlot)
		arrivals := int(math.Round(mean))
		if coverage > 0 {
			rise := max(peak-level, 0)
			moves := mean + max(mean-rise, 0) // the arrivals, and the departures the rise leaves
			arrivals = int(math.Round(rise + sr.spread()*(float64(PoissonQuantile(moves, coverage))-moves)))
		}
		if n := max(int(math.Round(growth(sr, peak-level))), arrivals); n > 0 {
			out = append(out, Want{Shape: s, Pods: n})
		}
	}
	slices.SortFunc(out, func(a, b Want) int { return compareShapes(a.Shape, b.Shape) })
	return out
}

// PoissonQuantile is the least n for which a Poisson count of the given
// mean is at most n with probability q or more (0 < q < 1); 0 for a mean
// of 0 or less.
func PoissonQuantile(mean, q float64) int {
	if !(mean > 0) {
		return 0
	}
	// The terms e^-mean * mean^n / n!, each computed in logs so that a
	// large mean does not underflow it; q is reached within a few
	// standard deviations above the mean, some mean steps (the pods that
	// arrive within a lead time: tens, or a few hundred in a vast pool).
	n, cdf := 0, 0.0
	for ; n < int(mean+20*math.Sqrt(mean)+20); n++ {
		lg, _ := math.Lgamma(float64(n + 1))
		cdf += math.Exp(float64(n)*math.Log(mean) - mean - lg)
		if cdf >= q {
			return n
		}
	}
	return n
}

// Expected is how many pods, of every shape, the Demand expects to run
// or wait at a time; ok is false while no shape has seen its slot.
func (d *Demand) Expected(at time.Time) (pods float64, ok bool) {
	for _, sr := range d.shapes {
		if v, seen := sr.level.Forecast(at); seen {
			pods, ok = pods+v, true
		}
	}
	return pods, ok
}

// Shapes are the shapes the Demand has seen, sorted by GPUs, then MIG
// slice.
func (d *Demand) Shapes() []Shape {
	out := make([]Shape, 0, len(d.shapes))
	for s := range d.shapes {
		out = append(out, s)
	}
	slices.SortFunc(out, compareShapes)
	return out
}

func compareShapes(a, b Shape) int {
	return cmp.Or(cmp.Compare(a.GPUs, b.GPUs), strings.Compare(a.MIG, b.MIG))
}

// Want is a number of pods of a shape to order ahead for.
type Want struct {
	Shape Shape
	Pods  int
}

// demandState is a Demand's JSON form: its shapes' profiles and scores.
type demandState struct {
	Since  time.Time    `json:"since,omitzero"`
	Slot   time.Time    `json:"slot,omitzero"`
	Shapes []shapeState `json:"shapes"`
}

type shapeState struct {
	GPUs     int      `json:"gpus,omitempty"`
	MIG      string   `json:"mig,omitempty"`
	Level    *Profile `json:"level"`
	Arrivals *Profile `json:"arrivals"`
	Arrived  float64  `json:"arrived,omitempty"`
	Expected *float64 `json:"expected,omitempty"`
	Missed   float64  `json:"missed,omitempty"`
	Came     float64  `json:"came,omitempty"`
	Chance   float64  `json:"chance,omitempty"`
	Scored   bool     `json:"scored,omitempty"`
	// The level's score (LevelTrusted), the same way.
	LevelExpected *float64 `json:"levelExpected,omitempty"`
	LevelPeak     float64  `json:"levelPeak,omitempty"`
	LevelMissed   float64  `json:"levelMissed,omitempty"`
	LevelSeen     float64  `json:"levelSeen,omitempty"`
	LevelScored   bool     `json:"levelScored,omitempty"`
}

// MarshalJSON writes what the Demand learned, so that a restart goes on
// from it: some 2,300 numbers a shape at 10-minute slots.
func (d *Demand) MarshalJSON() ([]byte, error) {
	st := demandState{Since: d.since, Slot: d.slot}
	for s, sr := range d.shapes {
		ss := shapeState{GPUs: s.GPUs, MIG: s.MIG, Level: sr.level, Arrivals: sr.arrivals, Arrived: sr.arrived,
			Missed: sr.missed, Came: sr.came, Chance: sr.chance, Scored: sr.scored,
			LevelPeak: sr.levelPeak, LevelMissed: sr.levelMissed, LevelSeen: sr.levelSeen, LevelScored: sr.levelScored}
		ss.Expected, ss.LevelExpected = orNil(sr.expected), orNil(sr.levelExpected)
		st.Shapes = append(st.Shapes, ss)
	}
	slices.SortFunc(st.Shapes, func(a, b shapeState) int {
		return compareShapes(Shape{a.GPUs, a.MIG}, Shape{b.GPUs, b.MIG})
	})
	return json.Marshal(st)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Demand) UnmarshalJSON(b []byte) error {
	var st demandState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("forecast: %w", err)
	}
	fresh := NewDemand()
	fresh.since, fresh.slot = st.Since, st.Slot
	for _, ss := range st.Shapes {
		if ss.Level == nil || ss.Arrivals == nil {
			return fmt.Errorf("forecast: shape %d GPUs %q: a profile is missing", ss.GPUs, ss.MIG)
		}
		sr := &series{level: ss.Level, arrivals: ss.Arrivals, arrived: ss.Arrived, expected: orNaN(ss.Expected),
			missed: ss.Missed, came: ss.Came, chance: ss.Chance, scored: ss.Scored,
			levelExpected: orNaN(ss.LevelExpected), levelPeak: ss.LevelPeak, levelMissed: ss.LevelMissed, levelSeen: ss.LevelSeen, levelScored: ss.LevelScored}
		fresh.shapes[Shape{GPUs: ss.GPUs, MIG: ss.MIG}] = sr
	}
	*d = *fresh
	return nil
}

// orNil is v, or nil for NaN (JSON has no NaN).
func orNil(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// orNaN reads what orNil wrote.
func orNaN(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}
