package controllers

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/karpenter/cloudprovider"
)

// Leaks deletes the machines Karpenter launched that no NodeClaim owns
// (the NodeClaim was deleted while the launch's answer was lost, or the
// operator crashed between the two): Karpenter core only collects the
// reverse, NodeClaims without machines. A machine is owned by the NodeClaim
// of its name or of its provider ID; one younger than Grace is left alone,
// as its NodeClaim may not be readable yet. Only the leader runs it.
type Leaks struct {
	// Reader lists NodeClaims; use the manager's API reader, so that a
	// cache that lags never reads as a missing NodeClaim.
	Reader client.Reader
	Core   inforce.Core[cloudprovider.Core]
	// Period between passes (default 2 minutes) and Grace (default 1
	// minute).
	Period, Grace time.Duration
	Clock         clock.Clock
	Logger        *slog.Logger
}

// Register adds the collector to the manager.
func (l *Leaks) Register(_ context.Context, mgr manager.Manager) error {
	l.defaults()
	return mgr.Add(l)
}

func (l *Leaks) defaults() {
	if l.Period <= 0 {
		l.Period = 2 * time.Minute
	}
	if l.Grace <= 0 {
		l.Grace = time.Minute
	}
	if l.Clock == nil {
		l.Clock = clock.RealClock{}
	}
	if l.Logger == nil {
		l.Logger = slog.Default()
	}
}

// NeedLeaderElection makes the collector a leader's job.
func (l *Leaks) NeedLeaderElection() bool { return true }

// Start collects every Period until ctx is done.
func (l *Leaks) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.Clock.After(l.Period):
		}
		if err := l.Collect(ctx); err != nil && ctx.Err() == nil {
			l.Logger.Warn("leaked-machine collection failed; retrying next pass", "error", err)
		}
	}
}

// Collect runs one pass and returns the first error.
func (l *Leaks) Collect(ctx context.Context) error {
	l.defaults()
	launched := l.Core.Read().Launched(cloudprovider.Owner)
	if len(launched) == 0 {
		return nil
	}
	var claims karpv1.NodeClaimList
	if err := l.Reader.List(ctx, &claims); err != nil {
		return err
	}
	owned := map[string]bool{}
	for _, nc := range claims.Items {
		owned[nc.Name] = true
		if nc.Status.ProviderID != "" {
			owned[nc.Status.ProviderID] = true
		}
	}
	now := l.Clock.Now()
	for _, in := range launched {
		if owned[in.Name] || owned[in.ProviderID] || in.State == nodegroup.StateDeleting || now.Sub(in.CreatedAt) < l.Grace {
			continue
		}
		l.Logger.Info("deleting a machine no NodeClaim owns", "machine", in.Name, "providerID", in.ProviderID, "age", now.Sub(in.CreatedAt).Round(time.Second))
		if err := l.Core.Write(ctx, func(c cloudprovider.Core) error { return c.Terminate(ctx, in.ProviderID) }); err != nil {
			return err
		}
	}
	return nil
}
