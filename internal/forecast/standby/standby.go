// Package standby sizes node groups' standby pools by the demand their own
// history predicts: each group's target size is learned per slot of the
// day and of the week (a forecast.Demand, kept in a forecast.Store), and a
// group with standby.forecast gets a pool of its standby.size plus the
// growth expected within its lead time, up to standby.forecast.maxSize.
//
// It serves every front end alike: cluster-autoscaler and the
// NodeProvisioner set target sizes, and a pool sized ahead of their
// growth turns the cold starts it would have cost into standby starts.
package standby

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
)

// Core is what the Sizer needs of the node-group core in force;
// *nodegroup.Manager implements it.
type Core interface {
	TargetSize(group string) (int, error)
	SetStandbySize(ctx context.Context, group string, n int) (int, error)
}

// Options configure a Sizer.
type Options struct {
	// Core returns the core in force (a reload swaps it); Groups the node
	// groups in force.
	Core   func() Core
	Groups func() []config.NodeGroup
	// Store keeps what was learned across restarts; nil keeps it in
	// memory only.
	Store forecast.Store
	// Clock defaults to the real one; Logger to none.
	Clock  clock.PassiveClock
	Logger *slog.Logger
	// Registerer receives the Sizer's gauges; nil registers none.
	Registerer prometheus.Registerer
}

// Sizer learns the groups' sizes and sizes their standby pools. Step is
// not safe for concurrent use; Run steps in one goroutine.
type Sizer struct {
	opts   Options
	size   *prometheus.GaugeVec
	expect *prometheus.GaugeVec

	mu sync.Mutex
	// ledger holds each group's learned size; last is its target at the
	// last step (a rise is that many nodes arriving).
	ledger *forecast.Ledger
	last   map[string]int
}

// nodes is the one shape a group's demand is learned in: its nodes.
var nodes = forecast.Shape{}

// New returns a Sizer that has learned nothing yet.
func New(opts Options) (*Sizer, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sizer{opts: opts, ledger: forecast.NewLedger(opts.Store), last: map[string]int{},
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuscaler_standby_forecast_size",
			Help: "The standby pool size the group's forecast asked for (standby.size plus the growth it expects, up to standby.forecast.maxSize)."}, []string{"group"}),
		expect: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuscaler_standby_forecast_expected_nodes",
			Help: "The target size the group's forecast expected now."}, []string{"group"}),
	}
	if r := opts.Registerer; r != nil {
		for _, c := range []prometheus.Collector{s.size, s.expect} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("standby forecast metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Run steps every period (30 s if none) until ctx ends; a failed step
// is logged, once while it fails the same way, and tried again at the
// next.
func (s *Sizer) Run(ctx context.Context, period time.Duration) error {
	if period <= 0 {
		period = 30 * time.Second // the default sync period
	}
	t := time.NewTicker(period)
	defer t.Stop()
	var last string
	for {
		if err := s.Step(ctx); err != nil && err.Error() != last {
			s.opts.Logger.Warn("standby forecast", "error", err)
			last = err.Error()
		} else if err == nil {
			last = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step observes every group with standby.forecast and sizes its pool:
// standby.size, plus the growth its forecast expects within its lead
// time once it has learned for trainFor and its forecasts of growth hit.
// What was learned is saved once a 10-minute slot.
func (s *Sizer) Step(ctx context.Context) error {
	var groups []config.NodeGroup
	for _, g := range s.opts.Groups() {
		if g.Standby != nil && g.Standby.Forecast != nil {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		return nil // nothing to learn: the store is not even read
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock.Now()
	if err := s.ledger.Load(ctx, now); err != nil {
		return err // learning nothing rather than overwrite what the store holds
	}
	core := s.opts.Core()
	var errs []error
	for _, g := range groups {
		target, err := core.TargetSize(g.Name)
		if err != nil {
			continue // not in the core in force (a reload under way)
		}
		d := s.ledger.Of(g.Name)
		if last, ok := s.last[g.Name]; ok {
			for range target - last {
				d.Arrive(now, nodes)
			}
		}
		s.last[g.Name] = target
		d.Observe(now, map[forecast.Shape]int{nodes: target})
		if v, ok := d.Expected(now); ok {
			s.expect.WithLabelValues(g.Name).Set(v)
		}
		f := g.Standby.Forecast
		want := g.Standby.Size
		if d.Learned(now) >= f.ForecastTrainFor() {
			for _, w := range d.AheadOfLevel(now, f.ForecastLeadTime()) {
				want += w.Pods
			}
		}
		size, err := core.SetStandbySize(ctx, g.Name, want)
		if err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", g.Name, err))
			continue
		}
		s.size.WithLabelValues(g.Name).Set(float64(size))
	}
	// Only the groups a forecast sizes now are kept: a group whose
	// standby.forecast went is forgotten with the next save.
	sized := map[string]bool{}
	for _, g := range groups {
		sized[g.Name] = true
	}
	if err := s.ledger.Save(ctx, now, func(name string) bool { return sized[name] }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
