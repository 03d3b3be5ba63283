package forecast

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// A shape whose pods arrive at the same time every day is trusted and
// ordered ahead for before they come; one whose pods come at random is
// not.
func TestDemandOrdersAheadOnlyForWhatItPredicts(t *testing.T) {
	d := NewDemand()
	daily, random := Shape{GPUs: 1}, Shape{GPUs: 8}
	rng := rand.New(rand.NewPCG(1, 2))
	running := map[Shape]int{}
	lead := 3 * time.Minute
	for now := monday; now.Before(monday.Add(3 * day)); now = now.Add(10 * time.Second) {
		// Four one-GPU pods at 9:00 for an hour; an eight-GPU job now
		// and then (about one an hour), for two hours.
		running[daily] = 0
		if now.Hour() == 9 {
			running[daily] = 4
		}
		if now.Hour() == 9 && now.Minute() == 0 && now.Second() == 0 {
			for range 4 {
				d.Arrive(now, daily)
			}
		}
		if rng.Float64() < 10.0/3600 {
			d.Arrive(now, random)
			running[random]++
		}
		d.Observe(now, running)
	}
	if !d.Trusted(daily) {
		t.Error("the daily shape is not trusted")
	}
	if d.Trusted(random) {
		t.Error("the random shape is trusted")
	}
	before := monday.Add(3*day + 8*time.Hour + 58*time.Minute) // 8:58 on day 4
	d.Observe(before, map[Shape]int{random: running[random]})
	want := d.Ahead(before, lead)
	if len(want) != 1 || want[0].Shape != daily || want[0].Pods != 4 {
		t.Fatalf("ahead of 9:00: %+v, want 4 one-GPU pods", want)
	}
	if w := d.Ahead(monday.Add(3*day+3*time.Hour), lead); len(w) != 0 {
		t.Errorf("ahead of 3:00: %+v, want nothing", w)
	}
	if got := d.Learned(before); got < 3*day {
		t.Errorf("learned %s", got)
	}
}

// A Demand written and read back forecasts and trusts as it did.
func TestDemandRoundTrips(t *testing.T) {
	d := NewDemand()
	daily := Shape{GPUs: 1}
	mig := Shape{MIG: "1g.10gb"}
	for now := monday; now.Before(monday.Add(2 * day)); now = now.Add(time.Minute) {
		count := map[Shape]int{mig: 1}
		if now.Hour() == 9 {
			count[daily] = 4
		}
		if now.Hour() == 9 && now.Minute() == 0 {
			for range 4 {
				d.Arrive(now, daily)
			}
		}
		d.Observe(now, count)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var e Demand
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	at := monday.Add(2*day + 8*time.Hour + 58*time.Minute)
	want, got := d.Ahead(at, 3*time.Minute), e.Ahead(at, 3*time.Minute)
	if len(want) == 0 || !reflect.DeepEqual(want, got) {
		t.Fatalf("ahead %+v after a round trip, want %+v", got, want)
	}
	if e.Trusted(daily) != d.Trusted(daily) || e.Trusted(mig) != d.Trusted(mig) || e.Learned(at) != d.Learned(at) {
		t.Fatal("trust or learning changed in a round trip")
	}
	if err := json.Unmarshal([]byte(`{"shapes":[{"gpus":1}]}`), &e); err == nil {
		t.Fatal("a shape without its profiles was read")
	}
}
