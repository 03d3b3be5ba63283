// Package sim is the simulated GPU cloud, gpuscaler's embedded default and
// the working fake every test of the core runs against.
//
// An Engine holds the whole simulated world: a catalog, a finite capacity
// per offering, instances moving from pending to running to gone on a clock
// tests can drive, spot reclaims, API latency and injected faults, all
// repeatable under a seed. A Cloud is one cluster's view of an Engine and
// implements cloud.Provider. A Registrar stands in for the kubelets of
// running instances by registering Nodes in a cluster.
package sim

import (
	"container/heap"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Defaults for nil and zero fields of Config.
const (
	DefaultSeed        = 1
	DefaultCapacity    = 10
	DefaultBootDelay   = 20 * time.Second
	DefaultDeleteDelay = 5 * time.Second
	// DefaultStartDelay is a stopped instance's start: the boot of a
	// machine whose disk holds the drivers and images already.
	DefaultStartDelay = 15 * time.Second
	// DefaultStoppedPrice is a stopped instance's hourly price: its disk.
	DefaultStoppedPrice = 0.05
)

// Options are an Engine's collaborators and test knobs.
type Options struct {
	// Clock drives boots, deletes, reclaims and latency; default real.
	Clock clock.WithTicker
	// Logger receives the simulated cloud's own events (reclaims); default
	// discards them.
	Logger *slog.Logger
	// Catalog replaces DefaultCatalog.
	Catalog []cloud.InstanceType
	// OutcomeUnknownRate is the fraction (0..1) of creates that take effect
	// but answer cloud.ErrOutcomeUnknown, as a request that timed out after
	// it reached the cloud.
	OutcomeUnknownRate float64
	// ListLag is how long an accepted order stays out of List answers, as
	// a real cloud's eventually consistent listing does; default none.
	ListLag time.Duration
}

// Engine is the simulated cloud's state. It is safe for concurrent use.
type Engine struct {
	clock        clock.WithTicker
	log          *slog.Logger
	bootDelay    time.Duration
	deleteDelay  time.Duration
	latency      time.Duration
	listLag      time.Duration
	startDelay   time.Duration
	stoppedPrice float64
	// bootP95, startP95 make boots and starts draws (Config).
	bootP95, startP95 time.Duration

	mu sync.Mutex
	// seed and rolls key the engine's faults: the n-th call of an
	// operation on a subject draws the same fault in every run, whatever
	// order concurrent callers reach the engine in (see rollLocked).
	seed uint64
	// rolls counts the rolls made, by subject and what was rolled for; a
	// subject's go with its instance.
	rolls       map[string]map[string]int
	faultRate   float64
	unknownRate float64
	// startFailureRate is the chance a start is refused (ErrCapacity).
	startFailureRate float64
	// failNext and loseNext are the faults tests ask for, per operation:
	// the next calls fail, or are carried out and their answers lost.
	failNext, loseNext map[string]bool
	// refusalRetried is Config.RefusalRetried.
	refusalRetried bool
	// refuseStarts is how many starts to come tests ask to be refused.
	refuseStarts   int
	reclaimPerHour float64
	locations      []string
	catalog        []cloud.InstanceType
	types          map[string]cloud.InstanceType
	capacity       map[cloud.OfferingKey]int
	used           map[cloud.OfferingKey]int
	offerings      map[cloud.OfferingKey]*cloud.OfferingKey // interned keys
	orders         map[orderKey]*order                      // interned orders
	instances      map[string]*instance                     // by name
	// scripts are the startup scripts of the instances ordered with one,
	// by name, until the instance is gone.
	scripts map[string]string
	// events are the instances' due times, soonest first; an event whose
	// instance has moved on since is dropped when it comes up.
	events eventQueue
	calls  map[string]int
	// stockOuts counts creates refused for capacity (Engine.StockOuts).
	stockOuts int
	nextID    int
	changed   chan struct{}
}

// instance is one simulated machine, kept small so that a test can hold
// 100,000 of them (64 bytes): what the order shares (group, owner, labels,
// taints) is not copied, the offering is interned, times are nanoseconds,
// the state is a byte, the startup script is kept aside (Engine.scripts),
// and what follows from the instance's number (its ID, IP and ID-form
// provider ID) is rendered when it is listed.
type instance struct {
	name     string
	num      int
	order    *order             // interned: what its order shares with others
	offering *cloud.OfferingKey // interned: one per offering
	// created is when it was ordered; due is when its state next changes
	// (pending: boots; deleting: gone; running: reclaimed, 0 never), all
	// in Unix nanoseconds on the engine's clock.
	created int64
	due     int64
	// runningAt is when it runs, or ran last (its boot's or start's draw).
	runningAt int64
	state     life
	// parked: deleted while stopped, so billed at the stopped price
	// until gone (fits in the struct's padding).
	parked bool
}

// life is where a simulated instance is in its life, in one byte.
type life uint8

const (
	pending life = iota
	running
	deleting
	// stopped: powered off by Stop, its capacity given back, billed at
	// the stopped price until started or deleted.
	stopped
)

// states are the cloud states the API answers for each state.
var states = [...]cloud.InstanceState{pending: cloud.StatePending, running: cloud.StateRunning, deleting: cloud.StateDeleting, stopped: cloud.StateStopped}

// order is what the orders of one group (or one launching owner) have in
// common; the engine keeps one per distinct set (see internOrderLocked).
type order struct {
	cluster string
	group   string
	owner   string
	install string
	labels  map[string]string // shared and read-only, see cloud.CreateSpec
	taints  []corev1.Taint
}

// orderKey identifies an order's shared parts: its labels and taints by
// identity, as the core shares one map and one slice among the orders of
// a group.
type orderKey struct {
	cluster, group, owner, install string
	labels, taints                 uintptr
	ntaints                        int
}

// internOrderLocked returns the one order for a cluster and a spec's
// shared parts.
func (e *Engine) internOrderLocked(cluster string, spec cloud.CreateSpec) *order {
	k := orderKey{cluster: cluster, group: spec.Group, owner: spec.Owner, install: spec.Install,
		labels: reflect.ValueOf(spec.Labels).Pointer(), taints: reflect.ValueOf(spec.Taints).Pointer(), ntaints: len(spec.Taints)}
	if o, ok := e.orders[k]; ok {
		return o
	}
	o := &order{cluster: cluster, group: spec.Group, owner: spec.Owner, install: spec.Install, labels: spec.Labels, taints: spec.Taints}
	e.orders[k] = o
	return o
}

// id is the instance's cloud ID.
func (in *instance) id() string { return fmt.Sprintf("sim-%06d", in.num) }

// view renders the instance as the API answers it.
func (in *instance) view() cloud.Instance {
	id := in.id()
	return cloud.Instance{
		ID:         id,
		Name:       in.name,
		ProviderID: cloud.ProviderID(Name, in.name),
		// The ID form, as clouds whose seed systems named nodes by ID have.
		Aliases:      []string{cloud.ProviderID(Name, id)},
		Group:        in.order.group,
		Owner:        in.order.owner,
		Install:      in.order.install,
		InstanceType: in.offering.InstanceType,
		Location:     in.offering.Location,
		CapacityType: in.offering.CapacityType,
		State:        states[in.state],
		Standby:      in.state == stopped,
		CreatedAt:    time.Unix(0, in.created),
		IP:           fmt.Sprintf("10.%d.%d.%d", 64+in.num>>16&63, in.num>>8&255, in.num&255),
	}
}

// NewEngine builds an engine.
func NewEngine(cfg Config, opts Options) (*Engine, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SpotReclaimRate < 0 || cfg.SpotReclaimRate > 1 {
		return nil, fmt.Errorf("clouds.sim.spotReclaimRate %v: want a chance per hour between 0 and 1", cfg.SpotReclaimRate)
	}
	if cfg.StartFailureRate < 0 || cfg.StartFailureRate > 1 {
		return nil, fmt.Errorf("clouds.sim.startFailureRate %v: want a chance between 0 and 1", cfg.StartFailureRate)
	}
	stoppedPrice := DefaultStoppedPrice
	if cfg.StoppedPrice != nil {
		if *cfg.StoppedPrice < 0 {
			return nil, fmt.Errorf("clouds.sim.stoppedPrice %v: want a price >= 0", *cfg.StoppedPrice)
		}
		stoppedPrice = *cfg.StoppedPrice
	}
	if cfg.FaultRate < 0 || cfg.FaultRate > 1 {
		return nil, fmt.Errorf("clouds.sim.faultRate %v: want a fraction between 0 and 1", cfg.FaultRate)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = DefaultSeed
	}
	e := &Engine{
		clock:            opts.Clock,
		log:              opts.Logger,
		bootDelay:        durationOr(cfg.BootDelay, DefaultBootDelay),
		bootP95:          durationOr(cfg.BootDelayP95, 0),
		startP95:         durationOr(cfg.StartDelayP95, 0),
		deleteDelay:      durationOr(cfg.DeleteDelay, DefaultDeleteDelay),
		latency:          durationOr(cfg.APILatency, 0),
		startDelay:       durationOr(cfg.StartDelay, DefaultStartDelay),
		stoppedPrice:     stoppedPrice,
		startFailureRate: cfg.StartFailureRate,
		refusalRetried:   cfg.RefusalRetried,
		listLag:          opts.ListLag,
		seed:             uint64(seed),
		rolls:            map[string]map[string]int{},
		faultRate:        cfg.FaultRate,
		unknownRate:      opts.OutcomeUnknownRate,
		reclaimPerHour:   cfg.SpotReclaimRate,
		locations:        cfg.Locations,
		catalog:          opts.Catalog,
		types:            map[string]cloud.InstanceType{},
		capacity:         map[cloud.OfferingKey]int{},
		used:             map[cloud.OfferingKey]int{},
		offerings:        map[cloud.OfferingKey]*cloud.OfferingKey{},
		orders:           map[orderKey]*order{},
		instances:        map[string]*instance{},
		scripts:          map[string]string{},
		calls:            map[string]int{},
		changed:          make(chan struct{}),
	}
	if len(e.locations) == 0 {
		e.locations = DefaultLocations()
	}
	if e.catalog == nil {
		e.catalog = DefaultCatalog()
	}
	def := DefaultCapacity
	if cfg.DefaultCapacity != nil {
		def = *cfg.DefaultCapacity
	}
	for _, t := range e.catalog {
		e.types[t.Name] = t
		for _, loc := range e.locations {
			for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
				e.capacity[cloud.OfferingKey{InstanceType: t.Name, Location: loc, CapacityType: ct}] = def
			}
		}
	}
	for i, c := range cfg.Capacity {
		n := 0
		for k := range e.capacity {
			if (c.InstanceType == "" || c.InstanceType == k.InstanceType) &&
				(c.Location == "" || c.Location == k.Location) &&
				(c.CapacityType == "" || c.CapacityType == string(k.CapacityType)) {
				e.capacity[k] = c.Count
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("clouds.sim.capacity[%d]: matches no offering (type %q, location %q, capacity type %q)",
				i, c.InstanceType, c.Location, c.CapacityType)
		}
	}
	return e, nil
}

func durationOr(d *time.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return *d
}

// Clock returns the engine's clock.
func (e *Engine) Clock() clock.WithTicker { return e.clock }

// Locations returns the simulated locations.
func (e *Engine) Locations() []string { return append([]string(nil), e.locations...) }

// Catalog returns the instance types.
func (e *Engine) Catalog() []cloud.InstanceType {
	return append([]cloud.InstanceType(nil), e.catalog...)
}

// SetCapacity sets how many instances an offering holds, to cause or lift
// stock-outs at run time. Instances already running are not affected.
func (e *Engine) SetCapacity(k cloud.OfferingKey, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.capacity[k] = n
}

// SetLatency changes what is added to every API call (Config.APILatency).
func (e *Engine) SetLatency(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.latency = d
}

// SetFaultRate changes the fraction of API calls that fail transiently.
func (e *Engine) SetFaultRate(r float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faultRate = r
}

// FailNext makes the next call of op ("create", "delete", "list", ...)
// fail transiently, as a 503 does, without taking effect. Asking again
// before that call came changes nothing: one call fails.
func (e *Engine) FailNext(op string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failNext == nil {
		e.failNext = map[string]bool{}
	}
	e.failNext[op] = true
}

// RefuseStarts makes the next n starts be refused for capacity, as one at
// the start failure rate is: the instance stays stopped.
func (e *Engine) RefuseStarts(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.refuseStarts = n
}

// LoseNext makes the next create, delete or list take effect and lose its
// answer: a create answers cloud.ErrOutcomeUnknown, the others a
// transient error. As with FailNext, one call loses its answer.
func (e *Engine) LoseNext(op string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.loseNext == nil {
		e.loseNext = map[string]bool{}
	}
	e.loseNext[op] = true
}

// lostLocked reports whether the answer to this call of op is lost,
// spending one LoseNext.
func (e *Engine) lostLocked(op string) bool {
	lost := e.loseNext[op]
	delete(e.loseNext, op)
	return lost
}

// SetOutcomeUnknownRate changes the fraction of creates that take effect
// but answer cloud.ErrOutcomeUnknown.
func (e *Engine) SetOutcomeUnknownRate(r float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unknownRate = r
}

// Calls returns how many API calls each operation has received.
func (e *Engine) Calls() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.calls))
	for k, v := range e.calls {
		out[k] = v
	}
	return out
}

// StockOuts is how many creates the engine refused for want of capacity
// (ErrCapacity): the simulator marks them on its report's timeline.
func (e *Engine) StockOuts() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stockOuts
}

// Reclaim takes a running spot instance away at once, as the cloud does
// when it needs the capacity back.
func (e *Engine) Reclaim(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	in, ok := e.instances[name]
	if !ok {
		return fmt.Errorf("reclaim %q: %w", name, cloud.ErrNotFound)
	}
	e.removeLocked(in)
	return nil
}

// Changed returns a channel that is closed at the next change of any
// instance; callers take a new channel after each close.
func (e *Engine) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advanceLocked()
	return e.changed
}

// NextEvent returns the time of the next scheduled boot, deletion or
// reclaim, so watchers can wake up exactly then; ok is false when nothing is
// scheduled.
func (e *Engine) NextEvent() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.events) > 0 {
		if ev := e.events[0]; e.current(ev) {
			return time.Unix(0, ev.at), true
		}
		heap.Pop(&e.events)
	}
	return time.Time{}, false
}

// notifyLocked wakes everyone waiting on Changed.
func (e *Engine) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// advanceLocked moves every instance whose time has come to where the
// clock says it is. Each pass takes every due event; boots go in name
// order, so that the random draws follow the seed, and a spot instance
// whose reclaim falls due at once goes in the next pass.
func (e *Engine) advanceLocked() {
	now := e.clock.Now().UnixNano()
	changed := false
	for len(e.events) > 0 && e.events[0].at <= now {
		var booting []*instance
		for len(e.events) > 0 && e.events[0].at <= now {
			ev := heap.Pop(&e.events).(event)
			if !e.current(ev) {
				continue
			}
			switch in := ev.in; in.state {
			case pending:
				booting = append(booting, in)
			case running:
				e.log.Info("simulated spot instance reclaimed", "instance", in.name, "cluster", in.order.cluster,
					"type", in.offering.InstanceType, "location", in.offering.Location)
				e.removeLocked(in)
				changed = true
			case deleting:
				e.removeLocked(in)
				changed = true
			}
		}
		slices.SortFunc(booting, func(a, b *instance) int { return strings.Compare(a.name, b.name) })
		for _, in := range booting {
			bootAt := in.due
			in.state, in.due = running, 0
			if in.offering.CapacityType == cloud.Spot && e.reclaimPerHour > 0 {
				e.scheduleLocked(in, bootAt+int64(e.lifetimeLocked(in.name)))
			}
			changed = true
		}
	}
	if changed {
		e.notifyLocked()
	}
}

// rollLocked draws a number in [0, 1) for the n-th roll of what on
// subject (an instance's name, or "" for a call on none): a hash of the
// seed, what, subject and n, so that concurrent callers draw the same
// faults in whatever order they come. A shared stream would hand each
// caller the draw of whoever came first, and a replay on the same seed
// would fail different requests.
func (e *Engine) rollLocked(what, subject string) float64 {
	counts := e.rolls[subject]
	if counts == nil {
		counts = map[string]int{}
		e.rolls[subject] = counts
	}
	n := counts[what]
	counts[what] = n + 1
	h := fnv.New64a()
	_, _ = h.Write([]byte(what + "\x00" + subject))
	return rand.New(rand.NewPCG(e.seed, h.Sum64()+uint64(n))).Float64()
}

// Parked reports whether the instance named name is being deleted from
// the stopped state: billed at the stopped price, its disk, until gone,
// as a stopped machine's deletion starts no compute.
func (e *Engine) Parked(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.instances[name]
	return ok && in.state == deleting && in.parked
}

// lifetimeLocked draws how long a spot instance runs before it is
// reclaimed: exponentially distributed, so that the chance of a reclaim
// within any hour of running is reclaimPerHour.
func (e *Engine) lifetimeLocked(name string) time.Duration {
	// Drawn for the instance by name, not from one sequence: instances
	// that start at one instant (a core's concurrent starts) draw the
	// same lifetimes whatever order their calls came in.
	u := e.rollLocked("reclaim", name)
	if e.reclaimPerHour >= 1 {
		// Certain within the hour: spread uniformly over it.
		return time.Duration(u * float64(time.Hour))
	}
	perHour := -math.Log1p(-e.reclaimPerHour)
	hours := -math.Log1p(-u) / perHour
	const maxHours = 100 * 365 * 24 // keeps the Duration from overflowing
	return time.Duration(min(hours, maxHours) * float64(time.Hour))
}

// removeLocked makes an instance gone and frees its capacity.
func (e *Engine) removeLocked(in *instance) {
	delete(e.instances, in.name)
	delete(e.scripts, in.name)
	delete(e.rolls, in.name)
	in.due = 0
	if in.state != stopped {
		e.used[*in.offering]--
	}
	e.notifyLocked()
}

// scheduleLocked sets when the instance's state next changes.
// delayLocked is one draw of a boot or start (what) of the instance
// named name: median when p95 is not longer, else log-normal with that
// median and 95th percentile, the same for the same seed and the n-th
// draw of a name.
func (e *Engine) delayLocked(what, name string, median, p95 time.Duration) time.Duration {
	if p95 <= median || median <= 0 {
		return median
	}
	u := min(max(e.rollLocked(what, name), 1e-9), 1-1e-9)
	z := math.Sqrt2 * math.Erfinv(2*u-1)
	sigma := math.Log(float64(p95)/float64(median)) / 1.6448536269514722 // the standard normal's 95th percentile
	return time.Duration(float64(median) * math.Exp(sigma*z))
}

// RunningAt returns when the instance named name runs (booting or
// starting: when it will), or last began to; false for no such instance.
func (e *Engine) RunningAt(name string) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	in, ok := e.instances[name]
	if !ok || in.runningAt == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, in.runningAt), true
}

func (e *Engine) scheduleLocked(in *instance, at int64) {
	in.due = at
	heap.Push(&e.events, event{at: at, in: in, state: in.state})
}

// current reports whether an event still stands: its instance exists and
// is in the state, and due at the time, the event was made for.
func (e *Engine) current(ev event) bool {
	in := ev.in
	return e.instances[in.name] == in && in.state == ev.state && in.due == ev.at
}

// internLocked returns the one shared copy of an offering key.
func (e *Engine) internLocked(k cloud.OfferingKey) *cloud.OfferingKey {
	if p, ok := e.offerings[k]; ok {
		return p
	}
	p := &k
	e.offerings[k] = p
	return p
}

// sortedLocked returns a cluster's instances, sorted by name.
func (e *Engine) sortedLocked(cluster string) []*instance {
	out := make([]*instance, 0, len(e.instances))
	for _, in := range e.instances {
		if in.order.cluster == cluster {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b *instance) int { return strings.Compare(a.name, b.name) })
	return out
}

// event is an instance's due time, in the engine's queue.
type event struct {
	at    int64
	in    *instance
	state life
}

// eventQueue is a min-heap of events by time (container/heap).
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].in.name < q[j].in.name
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	old[len(old)-1] = event{}
	*q = old[:len(old)-1]
	if n := len(*q); cap(*q) > 1024 && n < cap(*q)/4 {
		// A burst of boots has drained: give its room back.
		*q = append(make(eventQueue, 0, 2*n), *q...)
	}
	return ev
}

// validLocation reports whether loc is a simulated location.
func (e *Engine) validLocation(loc string) bool {
	for _, l := range e.locations {
		if l == loc {
			return true
		}
	}
	return false
}

func knownLocations(e *Engine) string { return strings.Join(e.locations, ", ") }
