package forecast

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// monday is a Monday at midnight, UTC.
var monday = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// officeHours is 10 GPUs from 9:00 to 17:00 on weekdays, 2 otherwise.
func officeHours(t time.Time) float64 {
	if wd := t.Weekday(); wd != time.Saturday && wd != time.Sunday && t.Hour() >= 9 && t.Hour() < 17 {
		return 10
	}
	return 2
}

// feed observes demand every minute over a span.
func feed(p *Profile, from time.Time, span time.Duration, demand func(time.Time) float64) {
	for t := from; t.Before(from.Add(span)); t = t.Add(time.Minute) {
		p.Observe(t, demand(t))
	}
}

func newProfile(t *testing.T) *Profile {
	t.Helper()
	p, err := New(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// One day teaches the time of day; the next day is forecast from it.
func TestADayTeachesTheTimeOfDay(t *testing.T) {
	p := newProfile(t)
	if _, ok := p.Forecast(monday); ok {
		t.Fatal("an empty profile forecasts")
	}
	feed(p, monday, day+time.Minute, officeHours)
	tuesday := monday.Add(day)
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{10 * time.Hour, 10}, {3 * time.Hour, 2}, {9 * time.Hour, 10}, {17 * time.Hour, 2}} {
		if got, ok := p.Forecast(tuesday.Add(c.at)); !ok || got != c.want {
			t.Errorf("Tuesday %s: %v (%v), want %v", c.at, got, ok, c.want)
		}
	}
	if got := p.Learned(); got != day {
		t.Errorf("learned %s, want a day", got)
	}
}

// Before a week is seen a weekend is forecast as any day; after, as the
// weekend it was.
func TestAWeekTeachesTheWeekday(t *testing.T) {
	p := newProfile(t)
	feed(p, monday, 5*day, officeHours)
	saturday := monday.Add(5*day + 10*time.Hour)
	if got, _ := p.Forecast(saturday); got != 10 {
		t.Errorf("Saturday 10:00 after 5 weekdays: %v, want 10 (the daily profile)", got)
	}
	feed(p, monday.Add(5*day), 2*day+time.Minute, officeHours)
	if got, _ := p.Forecast(saturday.Add(week)); got != 2 {
		t.Errorf("Saturday 10:00 after a week: %v, want 2 (the weekly profile)", got)
	}
	if got, _ := p.Forecast(monday.Add(week + 10*time.Hour)); got != 10 {
		t.Errorf("Monday 10:00 after a week: %v, want 10", got)
	}
}

// A slot's value is its peak, smoothed across days; observations out of
// order are ignored.
func TestSlotsKeepTheirPeakSmoothed(t *testing.T) {
	p := newProfile(t)
	p.Observe(monday, 4)
	p.Observe(monday.Add(3*time.Minute), 10)
	p.Observe(monday.Add(5*time.Minute), 6)
	p.Observe(monday.Add(2*time.Minute), 99) // older than the last: ignored
	p.Observe(monday.Add(day), 20)           // closes the first slot
	if got, _ := p.Forecast(monday.Add(2 * day)); got != 10 {
		t.Fatalf("after one day %v, want the peak 10", got)
	}
	p.Observe(monday.Add(day+10*time.Minute), 0) // closes the second day's slot
	if got, _ := p.Forecast(monday.Add(2 * day)); got != 15 {
		t.Fatalf("after two days %v, want 15: 0.5 × 20 + 0.5 × 10", got)
	}
}

// Peak is the most any slot ahead expects.
func TestPeakLooksAhead(t *testing.T) {
	p := newProfile(t)
	feed(p, monday, day+time.Minute, officeHours)
	at := monday.Add(day + 8*time.Hour + 55*time.Minute) // Tuesday 8:55
	if got, ok := p.Forecast(at); !ok || got != 2 {
		t.Fatalf("8:55: %v, want 2", got)
	}
	if got, ok := p.Peak(at, 3*time.Minute); !ok || got != 2 {
		t.Errorf("8:55 for 3 min: %v, want 2", got)
	}
	if got, ok := p.Peak(at, 10*time.Minute); !ok || got != 10 {
		t.Errorf("8:55 for 10 min: %v, want 10 (office hours start)", got)
	}
}

// A profile survives JSON, its unseen slots included; a wrong one is
// refused.
func TestProfileRoundTrips(t *testing.T) {
	p := newProfile(t)
	feed(p, monday, 30*time.Hour, officeHours)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 32<<10 {
		t.Errorf("%d bytes: want a bounded profile", len(b))
	}
	var q Profile
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{monday.Add(day + 10*time.Hour), monday.Add(4 * day), monday.Add(3*day + 3*time.Hour)} {
		a, aok := p.Forecast(at)
		b, bok := q.Forecast(at)
		if a != b || aok != bok {
			t.Errorf("%s: %v %v before, %v %v after", at, a, aok, b, bok)
		}
	}
	if q.Learned() != p.Learned() || !math.IsNaN(q.weekly[len(q.weekly)-1]) {
		t.Errorf("learned %s, want %s; unseen slots must stay unseen", q.Learned(), p.Learned())
	}
	bad := strings.Replace(string(b), `"slot":"10m0s"`, `"slot":"20m0s"`, 1)
	if err := json.Unmarshal([]byte(bad), &q); err == nil {
		t.Error("a profile of another slot length was read")
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	if _, err := New(7*time.Minute, 0); err == nil {
		t.Error("a 7-minute slot (not dividing a day) was taken")
	}
	if _, err := New(0, 1.5); err == nil {
		t.Error("alpha 1.5 was taken")
	}
}
