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
	want := d.Ahead(before, lead, 0)
	if len(want) != 1 || want[0].Shape != daily || want[0].Pods != 4 {
		t.Fatalf("ahead of 9:00: %+v, want 4 one-GPU pods", want)
	}
	if w := d.Ahead(monday.Add(3*day+3*time.Hour), lead, 0); len(w) != 0 {
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
	want, got := d.Ahead(at, 3*time.Minute, 0.8), e.Ahead(at, 3*time.Minute, 0.8)
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

// PoissonQuantile against sums done by hand: for a mean of 1.2 the
// count is at most 0, 1, 2, 3 with probability 0.301, 0.663, 0.880,
// 0.966; for 0.067 at most 0 with 0.935.
func TestPoissonQuantile(t *testing.T) {
	for _, c := range []struct {
		mean, q float64
		want    int
	}{
		{1.2, 0.3, 0}, {1.2, 0.5, 1}, {1.2, 0.8, 2}, {1.2, 0.95, 3}, {1.2, 0.97, 4},
		{0.067, 0.9, 0}, {0.067, 0.95, 1},
		{0, 0.99, 0}, {-1, 0.5, 0},
	} {
		if got := PoissonQuantile(c.mean, c.q); got != c.want {
			t.Errorf("PoissonQuantile(%v, %v) = %d, want %d", c.mean, c.q, got, c.want)
		}
	}
	// A large mean: about normal, 400 ± 20, its 95th percentile 400 +
	// 1.645 × 20 and a half.
	if got := PoissonQuantile(400, 0.95); got < 432 || got > 435 {
		t.Errorf("PoissonQuantile(400, 0.95) = %d, want 433 or so", got)
	}
}

// A shape that holds steady while its pods come and go like clockwork (six
// arrive every ten minutes, six leave) expects 1.8 arrivals within three
// minutes, and as many departures: the arrivals take the nodes the
// departures free, and its forecasts never miss, so nothing is ordered
// ahead for it, whatever the coverage. With coverage 0 its expected
// arrivals are counted, rounded, as a standby pool sizes them. A shape
// whose pods arrive at random (a Poisson stream of 1.5 a slot) and leave
// as randomly misses by about what chance gives, so it is trusted all the
// same, and gets a margin that grows with the coverage asked: a count of
// its 0.45 arrivals and 0.45 departures within three minutes is at most
// 1 with probability 0.77, 2 with 0.94 and 3 with 0.99.
func TestAheadCoversAShareOfArrivals(t *testing.T) {
	d := NewDemand()
	steady, random := Shape{GPUs: 1}, Shape{GPUs: 2}
	rng := rand.New(rand.NewPCG(3, 4))
	for now := monday; now.Before(monday.Add(4 * day)); now = now.Add(time.Minute) {
		if now.Minute()%10 < 6 {
			d.Arrive(now, steady)
		}
		if rng.Float64() < 0.15 {
			d.Arrive(now, random)
		}
		d.Observe(now, map[Shape]int{steady: 10, random: 5})
	}
	if !d.Trusted(steady) || !d.Trusted(random) {
		t.Fatalf("trusted: steady %v, random %v; want both", d.Trusted(steady), d.Trusted(random))
	}
	if sp := d.shapes[random].spread(); sp < 0.5 || sp > 1 {
		t.Errorf("the random shape's spread is %.2f, want about 1", sp)
	}
	at := monday.Add(4*day + 12*time.Hour)
	pods := func(coverage float64) (steadyPods, randomPods int) {
		for _, w := range d.Ahead(at, 3*time.Minute, coverage) {
			switch w.Shape {
			case steady:
				steadyPods = w.Pods
			case random:
				randomPods = w.Pods
			}
		}
		return steadyPods, randomPods
	}
	if got, _ := pods(0); got != 2 {
		t.Errorf("coverage 0: %d steady pods ahead, want its 1.8 arrivals, 2", got)
	}
	for _, coverage := range []float64{0.5, 0.8, 0.95} {
		if got, _ := pods(coverage); got != 0 {
			t.Errorf("coverage %v: %d steady pods ahead, want none: departures serve its arrivals", coverage, got)
		}
	}
	_, half := pods(0.5)
	_, some := pods(0.8)
	_, most := pods(0.95)
	if half > 1 || some < half || most <= half || most > 3 {
		t.Errorf("random pods ahead: %d at coverage 0.5 (want 0 or 1), %d at 0.8, %d at 0.95 (want more than at 0.5, at most 3)", half, some, most)
	}
}

// Chance forgives a forecast no more than what arrived: a shape whose pods
// stop coming (a Poisson stream of one every 20 minutes for three days,
// then none) is not trusted a day later, although a forecast of under
// 0.7 pods a slot misses nothing by less than a Poisson count of that
// mean would by chance.
func TestPodsThatStopComingAreNotForgiven(t *testing.T) {
	d := NewDemand()
	s := Shape{GPUs: 1}
	rng := rand.New(rand.NewPCG(5, 6))
	end := monday.Add(4 * day)
	for now := monday; now.Before(end); now = now.Add(time.Minute) {
		if now.Before(monday.Add(3*day)) && rng.Float64() < 1.0/20 {
			d.Arrive(now, s)
		}
		d.Observe(now, map[Shape]int{s: 1})
		if now.Equal(monday.Add(3*day-time.Minute)) && !d.Trusted(s) {
			t.Fatal("a Poisson stream of one pod every 20 minutes is not trusted")
		}
	}
	if d.Trusted(s) {
		sr := d.shapes[s]
		t.Errorf("trusted a day after the pods stopped: missed %.3f, came %.3f, chance %.3f", sr.missed, sr.came, sr.chance)
	}
}
