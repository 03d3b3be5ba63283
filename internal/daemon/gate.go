package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// handoverWait bounds how long a write waits for a configuration reload
// to hand over to the next core before it is answered ErrUnavailable; a
// caller's deadline shortens it. cluster-autoscaler's gRPC calls time out
// after 5 s, and it asks again on its next loop.
const handoverWait = 4 * time.Second

// gate lets writes through to the core in force, one handover at a time:
// a handover waits for the writes in flight to return, and the writes
// that arrive during it wait (bounded) for the next core. So no write is
// acknowledged by a core that is stopping, and none lands in a core that
// is being thrown away.
type gate struct {
	mu       sync.Mutex
	idle     sync.Cond
	inflight int
	// handover is closed when the handover in progress ends; nil when
	// none runs.
	handover chan struct{}
}

func newGate() *gate {
	g := &gate{}
	g.idle.L = &g.mu
	return g
}

// enter waits until no handover runs, then counts a write in flight;
// call leave when it returns.
func (g *gate) enter(ctx context.Context) error {
	bound := handoverWait
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl)-250*time.Millisecond)
	}
	var timeout <-chan time.Time
	for {
		g.mu.Lock()
		wait := g.handover
		if wait == nil {
			g.inflight++
			g.mu.Unlock()
			return nil
		}
		g.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(max(bound, 0))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("a configuration reload is handing over to a new core: %w", nodegroup.ErrUnavailable)
		}
	}
}

// leave ends a write that enter let through.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if g.inflight == 0 {
		g.idle.Broadcast()
	}
}

// close starts a handover: new writes wait, and close returns once the
// writes in flight have returned.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.handover != nil { // one handover at a time (callers serialize anyway)
		g.idle.Wait()
	}
	g.handover = make(chan struct{})
	for g.inflight > 0 {
		g.idle.Wait()
	}
}

// open ends the handover: the waiting writes go to the core in force.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.handover)
	g.handover = nil
	g.idle.Broadcast()
}
