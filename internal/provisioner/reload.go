package provisioner

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// Runtime is what a configuration runs: the core over its groups. Stop
// ends it; it must be rebuilt from the clouds on the next start.
type Runtime interface {
	Core
	Deleter
	Stop()
}

// Build starts a Runtime for a configuration.
type Build func(ctx context.Context, cfg *config.Config) (Runtime, error)

// Swappable is the controller's core across config reloads: every call goes
// to the Runtime of the configuration in force.
type Swappable struct {
	mu  sync.RWMutex
	cur Runtime
}

var (
	_ Core    = (*Swappable)(nil)
	_ Deleter = (*Swappable)(nil)
)

func (s *Swappable) get() Runtime {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur
}

// Group implements Core.
func (s *Swappable) Group(name string) (nodegroup.Info, bool) { return s.get().Group(name) }

// TargetSize implements Core.
func (s *Swappable) TargetSize(g string) (int, error) { return s.get().TargetSize(g) }

// IncreaseSize implements Core.
func (s *Swappable) IncreaseSize(ctx context.Context, g string, d int) error {
	return s.get().IncreaseSize(ctx, g, d)
}

// Instances implements Core.
func (s *Swappable) Instances(g string) ([]nodegroup.Instance, error) { return s.get().Instances(g) }

// Template implements Core.
func (s *Swappable) Template(g string) (*corev1.Node, error) { return s.get().Template(g) }

// GroupPrice implements Core.
func (s *Swappable) GroupPrice(g string) (float64, bool) { return s.get().GroupPrice(g) }

// GroupSpend implements Core.
func (s *Swappable) GroupSpend(g string) float64 { return s.get().GroupSpend(g) }

// DeleteNodes implements Deleter.
func (s *Swappable) DeleteNodes(ctx context.Context, g string, ids []string) error {
	return s.get().DeleteNodes(ctx, g, ids)
}

// SetRuntime puts a Runtime in force, for a controller without reload.
func SetRuntime(s *Swappable, rt Runtime) error {
	if rt == nil {
		return errors.New("no runtime")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = rt
	return nil
}

// Reloader watches the config file (a mounted ConfigMap included: it polls
// the content, which follows the ConfigMap's symlink swaps) and, when it
// changes, validates it and swaps in a Runtime built from it. An invalid
// file is refused: the old configuration stays, with a log line and a
// ConfigRejected Event on every NodeProvisioner.
type Reloader struct {
	Path     string
	Period   time.Duration
	Core     *Swappable
	Build    Build
	Client   client.Client
	Recorder events.EventRecorder
	Logger   *slog.Logger

	last []byte
}

// Start builds the first Runtime from the file; Run then watches it.
func (l *Reloader) Start(ctx context.Context) error {
	data, err := os.ReadFile(l.Path)
	if err != nil {
		return err
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return err
	}
	rt, err := l.Build(ctx, cfg)
	if err != nil {
		return err
	}
	l.Core.mu.Lock()
	l.Core.cur = rt
	l.Core.mu.Unlock()
	l.last = data
	return nil
}

// Run polls the file until ctx is done, then stops the Runtime in force.
func (l *Reloader) Run(ctx context.Context) error {
	period := l.Period
	if period <= 0 {
		period = 10 * time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	defer func() { l.Core.get().Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		data, err := os.ReadFile(l.Path)
		if err != nil || bytes.Equal(data, l.last) {
			continue
		}
		l.last = data
		if err := l.reload(ctx, data); err != nil {
			l.Logger.Error("config change refused; keeping the configuration in force", "path", l.Path, "error", err)
			l.event(ctx, corev1.EventTypeWarning, "ConfigRejected", err.Error())
			continue
		}
		l.Logger.Info("config reloaded", "path", l.Path)
		l.event(ctx, corev1.EventTypeNormal, "ConfigReloaded", "configuration reloaded from "+l.Path)
	}
}

func (l *Reloader) reload(ctx context.Context, data []byte) error {
	cfg, err := config.Parse(data)
	if err != nil {
		return err
	}
	rt, err := l.Build(ctx, cfg)
	if err != nil {
		return errors.Join(errors.New("new configuration does not start"), err)
	}
	l.Core.mu.Lock()
	old := l.Core.cur
	l.Core.cur = rt
	l.Core.mu.Unlock()
	old.Stop()
	return nil
}

func (l *Reloader) event(ctx context.Context, typ, reason, note string) {
	var list v1alpha1.NodeProvisionerList
	if err := l.Client.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		l.Recorder.Eventf(&list.Items[i], nil, typ, reason, "Reload", "%s", note)
	}
}
