package standby

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
)

// sizes stands in for the core: targets set by the test, and the standby
// sizes the Sizer asked for (the core's own bounds are tested in
// nodegroup's TestStandbyPoolFollowsItsForecast).
type sizes struct {
	target, asked map[string]int
}

func (c *sizes) TargetSize(g string) (int, error) { return c.target[g], nil }
func (c *sizes) SetStandbySize(_ context.Context, g string, n int) (int, error) {
	c.asked[g] = n
	return n, nil
}

var monday = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// A group that grows by four nodes at 9:00 every day gets a pool of its
// size plus four ahead of 9:00 once the forecast has learned (and not
// before), and keeps what it learned across a restart; a group whose size
// moves at random keeps its pool at its size.
func TestPoolGrowsAheadOfTheDailyRise(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(monday)
	groups := []config.NodeGroup{
		{Name: "daily", MaxSize: 10, Standby: &config.Standby{Size: 1, Forecast: &config.StandbyForecast{MaxSize: 5, TrainFor: &metav1.Duration{Duration: 3 * 24 * time.Hour}}}},
		{Name: "random", MaxSize: 10, Standby: &config.Standby{Size: 1, Forecast: &config.StandbyForecast{MaxSize: 5, TrainFor: &metav1.Duration{Duration: 3 * 24 * time.Hour}}}},
		{Name: "fixed", MaxSize: 10, Standby: &config.Standby{Size: 2}},
	}
	core := &sizes{target: map[string]int{}, asked: map[string]int{}}
	store := &forecast.Memory{}
	newSizer := func() *Sizer {
		s, err := New(Options{Core: func() Core { return core }, Groups: func() []config.NodeGroup { return groups }, Store: store, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := newSizer()
	rng := rand.New(rand.NewPCG(7, 7))
	play := func(from, to time.Time) {
		for now := from; now.Before(to); now = now.Add(time.Minute) {
			clk.SetTime(now)
			core.target["daily"] = 0
			if h := now.Sub(monday) % (24 * time.Hour); h >= 9*time.Hour && h < 17*time.Hour {
				core.target["daily"] = 4
			}
			if rng.IntN(90) == 0 {
				core.target["random"] = rng.IntN(5)
			}
			if err := s.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	play(monday, monday.Add(24*time.Hour+8*time.Hour+52*time.Minute))
	if core.asked["daily"] != 1 {
		t.Fatalf("on day 2, before the training ends, the pool was sized %d, want its size 1", core.asked["daily"])
	}
	play(clk.Now(), monday.Add(7*24*time.Hour+8*time.Hour+52*time.Minute))
	if core.asked["daily"] != 5 {
		t.Fatalf("at 8:52 after a week, the pool was sized %d, want 1 + the 4 nodes 9:00 brings", core.asked["daily"])
	}
	if core.asked["random"] > 2 {
		t.Errorf("the group whose size moves at random got a pool of %d ahead", core.asked["random"])
	}
	if _, ok := core.asked["fixed"]; ok {
		t.Error("a pool without standby.forecast was sized")
	}
	play(clk.Now(), monday.Add(7*24*time.Hour+12*time.Hour))
	if core.asked["daily"] != 1 {
		t.Fatalf("at noon, the rise past, the pool was sized %d, want 1", core.asked["daily"])
	}

	// A restart goes on from the store.
	s = newSizer()
	play(monday.Add(8*24*time.Hour+8*time.Hour+51*time.Minute), monday.Add(8*24*time.Hour+8*time.Hour+53*time.Minute))
	if core.asked["daily"] != 5 {
		t.Fatalf("after a restart, at 8:52, the pool was sized %d, want 5", core.asked["daily"])
	}
}
