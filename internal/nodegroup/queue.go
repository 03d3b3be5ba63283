package nodegroup

import (
	"context"
	"sync"
)

// createQueue holds a cloud's group orders waiting for one of its create
// workers: however large a scale-up, the core runs sync.maxConcurrentCreates
// creates per cloud and keeps the rest as a pointer each, not a goroutine.
type createQueue struct {
	mu      sync.Mutex
	items   []queued
	wake    chan struct{}
	workers int
}

// queued is one order in a queue.
type queued struct {
	g   *group
	mem *member
}

func newCreateQueue(workers int) *createQueue {
	return &createQueue{wake: make(chan struct{}, 1), workers: max(workers, 1)}
}

// push adds an order and wakes a worker.
func (q *createQueue) push(g *group, mem *member) {
	q.mu.Lock()
	q.items = append(q.items, queued{g: g, mem: mem})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest order, if any.
func (q *createQueue) pop() (queued, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return queued{}, false
	}
	it := q.items[0]
	q.items[0] = queued{}
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = nil // let the backing array go
	}
	return it, true
}

// len is how many orders wait.
func (q *createQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// run starts the workers under ctx; each calls create for the orders it
// takes, until ctx is done. A worker that takes an order while more wait
// wakes another, so a burst fans out to every worker. Orders still queued
// when ctx ends are dropped with the process: a restart rebuilds the
// groups from the cloud.
func (q *createQueue) run(ctx context.Context, start func(func()), create func(context.Context, *group, *member)) {
	for range q.workers {
		start(func() {
			for ctx.Err() == nil {
				it, ok := q.pop()
				if !ok {
					select {
					case <-ctx.Done():
						return
					case <-q.wake:
					}
					continue
				}
				if q.len() > 0 {
					select {
					case q.wake <- struct{}{}:
					default:
					}
				}
				create(ctx, it.g, it.mem)
			}
		})
	}
}
