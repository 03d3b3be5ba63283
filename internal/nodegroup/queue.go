package nodegroup

import (
	"context"
	"sync"
)

// createQueue holds a cloud's group orders waiting for one of its create
// workers: however large a scale-up, the core runs sync.maxConcurrentCreates
// creates per cloud and keeps the rest as a pointer each, not a goroutine.
// Workers start when orders wait and end when none do, so an idle core
// holds no goroutine (and no stack) for them.
type createQueue struct {
	mu      sync.Mutex
	items   []queued
	max     int
	running int
	// busy counts the running workers inside a create.
	busy int
	// ctx, start and create are set by run; orders pushed before it wait.
	ctx    context.Context
	start  func(func())
	create func(context.Context, *group, *member)
}

// queued is one order in a queue.
type queued struct {
	g   *group
	mem *member
}

func newCreateQueue(workers int) *createQueue {
	return &createQueue{max: max(workers, 1)}
}

// push adds an order, starting a worker if fewer than the maximum run.
func (q *createQueue) push(g *group, mem *member) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, queued{g: g, mem: mem})
	q.spawnLocked()
}

// spawnLocked starts workers for the orders waiting, up to the maximum.
func (q *createQueue) spawnLocked() {
	for q.start != nil && q.ctx.Err() == nil && q.running < q.max && q.running-q.busy < len(q.items) {
		q.running++
		q.start(q.work)
	}
}

// work creates orders until none waits (or the queue's context ends).
func (q *createQueue) work() {
	for {
		it, ok := q.next()
		if !ok {
			return
		}
		q.create(q.ctx, it.g, it.mem)
		q.mu.Lock()
		q.busy--
		q.mu.Unlock()
	}
}

// next takes the oldest order; when there is none, or the context has
// ended, the worker calling it is done.
func (q *createQueue) next() (queued, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.ctx.Err() != nil {
		q.running--
		return queued{}, false
	}
	it := q.items[0]
	q.items[0] = queued{}
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = nil // let the backing array go
	}
	q.busy++
	return it, true
}

// run lets the queue start workers under ctx, through start, each calling
// create for the orders it takes. Orders still queued when ctx ends are
// dropped with the process: a restart rebuilds the groups from the cloud.
func (q *createQueue) run(ctx context.Context, start func(func()), create func(context.Context, *group, *member)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ctx, q.start, q.create = ctx, start, create
	q.spawnLocked()
}
