// Package forecast learns a pool's GPU demand by time of day and of week
// from what the pool observed, and predicts it ahead: GPU demand follows
// the clock (inference the day, batch office hours and cron), so capacity
// can be ordered one start-up time before it is asked for.
//
// A Profile keeps, for each slot of the day and of the week (10 minutes by
// default), the demand peak seen in that slot, exponentially smoothed over
// the days or weeks: a few kilobytes, whatever the pool's size, and
// persisted as JSON so that a restart does not forget it. A forecast for a
// time is its weekly slot once a week has been seen there, else its daily
// slot once a day has.
package forecast

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Defaults.
const (
	// DefaultSlot is a profile slot's length.
	DefaultSlot = 10 * time.Minute
	// DefaultAlpha weighs the newest observation of a slot against what
	// the slot held: 0.5 forgets a change of habit within a few periods.
	DefaultAlpha = 0.5
)

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// Profile is a pool's demand by slot of the day and of the week. It is not
// safe for concurrent use.
type Profile struct {
	slot  time.Duration
	alpha float64
	// daily and weekly are the smoothed peaks by slot; NaN where no
	// period has closed yet.
	daily, weekly []float64
	// cur is the slot being observed (its start) and peak what it saw.
	cur  time.Time
	peak float64
	// first and last are the first and the latest observation's times.
	first, last time.Time
}

// New returns an empty profile; zero slot and alpha take the defaults.
// The slot must divide a day.
func New(slot time.Duration, alpha float64) (*Profile, error) {
	if slot == 0 {
		slot = DefaultSlot
	}
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	if slot <= 0 || day%slot != 0 {
		return nil, fmt.Errorf("forecast: slot %s does not divide a day", slot)
	}
	if !(alpha > 0 && alpha <= 1) {
		return nil, fmt.Errorf("forecast: alpha %v: want more than 0, at most 1", alpha)
	}
	p := &Profile{slot: slot, alpha: alpha, daily: nans(int(day / slot)), weekly: nans(int(week / slot))}
	return p, nil
}

func nans(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// Observe records the demand (GPUs asked for: running and pending) at a
// time. Observations must come in time order; an older one is ignored.
// A slot's peak is folded into the profile when a later slot is observed.
func (p *Profile) Observe(at time.Time, gpus float64) {
	start := at.Truncate(p.slot)
	switch {
	case p.cur.IsZero():
		p.cur, p.peak, p.first = start, gpus, at
	case at.Before(p.last):
		return
	case start.After(p.cur):
		p.fold()
		p.cur, p.peak = start, gpus
	default:
		p.peak = max(p.peak, gpus)
	}
	p.last = at
}

// fold smooths the current slot's peak into both profiles.
func (p *Profile) fold() {
	d, w := p.index(p.cur)
	p.daily[d] = smooth(p.daily[d], p.peak, p.alpha)
	p.weekly[w] = smooth(p.weekly[w], p.peak, p.alpha)
}

func smooth(old, x, alpha float64) float64 {
	if math.IsNaN(old) {
		return x
	}
	return alpha*x + (1-alpha)*old
}

// index is a time's slot of the day and of the week (weeks from Monday,
// in UTC, so that a restart in another time zone learns on).
func (p *Profile) index(t time.Time) (daily, weekly int) {
	t = t.UTC()
	sinceMidnight := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second
	d := int(sinceMidnight / p.slot)
	weekday := (int(t.Weekday()) + 6) % 7 // Monday 0
	return d, weekday*len(p.daily) + d
}

// Forecast is the demand the profile expects in the slot of a time, and
// whether it has seen that slot: on the same weekday, else on any day.
func (p *Profile) Forecast(at time.Time) (gpus float64, ok bool) {
	d, w := p.index(at)
	if v := p.weekly[w]; !math.IsNaN(v) && p.Learned() >= week {
		return v, true
	}
	if v := p.daily[d]; !math.IsNaN(v) {
		return v, true
	}
	return 0, false
}

// Peak is the most the profile expects in any slot from a time to a time
// after: the capacity an order placed at from must cover until it can be
// replaced. ok is false when the profile has seen none of those slots.
func (p *Profile) Peak(from time.Time, ahead time.Duration) (gpus float64, ok bool) {
	for t := from.Truncate(p.slot); !t.After(from.Add(ahead)); t = t.Add(p.slot) {
		if v, seen := p.Forecast(t); seen {
			gpus, ok = max(gpus, v), true
		}
	}
	return gpus, ok
}

// Learned is how long the profile has observed, to the slot it observes.
func (p *Profile) Learned() time.Duration {
	if p.first.IsZero() {
		return 0
	}
	return p.cur.Sub(p.first.Truncate(p.slot))
}

// state is a profile's JSON form; NaN (no value) is written as null.
type state struct {
	Slot   string     `json:"slot"`
	Alpha  float64    `json:"alpha"`
	Daily  []*float64 `json:"daily"`
	Weekly []*float64 `json:"weekly"`
	Cur    time.Time  `json:"current,omitzero"`
	Peak   float64    `json:"peak,omitempty"`
	First  time.Time  `json:"first,omitzero"`
	Last   time.Time  `json:"last,omitzero"`
}

// MarshalJSON writes the profile: at 10-minute slots, some 1,150 numbers.
func (p *Profile) MarshalJSON() ([]byte, error) {
	return json.Marshal(state{Slot: p.slot.String(), Alpha: p.alpha, Daily: ptrs(p.daily), Weekly: ptrs(p.weekly), Cur: p.cur, Peak: p.peak, First: p.first, Last: p.last})
}

// UnmarshalJSON reads a profile MarshalJSON wrote; one of another slot
// length, or of the wrong size, is an error.
func (p *Profile) UnmarshalJSON(b []byte) error {
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("forecast: %w", err)
	}
	slot, err := time.ParseDuration(s.Slot)
	if err != nil {
		return fmt.Errorf("forecast: slot: %w", err)
	}
	fresh, err := New(slot, s.Alpha)
	if err != nil {
		return err
	}
	if len(s.Daily) != len(fresh.daily) || len(s.Weekly) != len(fresh.weekly) {
		return fmt.Errorf("forecast: %d daily and %d weekly slots, want %d and %d", len(s.Daily), len(s.Weekly), len(fresh.daily), len(fresh.weekly))
	}
	for i, v := range s.Daily {
		if v != nil {
			fresh.daily[i] = *v
		}
	}
	for i, v := range s.Weekly {
		if v != nil {
			fresh.weekly[i] = *v
		}
	}
	fresh.cur, fresh.peak, fresh.first, fresh.last = s.Cur, s.Peak, s.First, s.Last
	*p = *fresh
	return nil
}

func ptrs(s []float64) []*float64 {
	out := make([]*float64, len(s))
	for i := range s {
		if !math.IsNaN(s[i]) {
			v := s[i]
			out[i] = &v
		}
	}
	return out
}
