package nodegroup

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// store is the core's memory: every group with its members, the instances
// of the launch API, the provider-ID index, and what the other parts of the
// core keep beside them. Every read of the core answers from it. One mutex
// guards all of it, so that a change that crosses parts (a sync that adopts
// an instance and lowers a surplus) is seen whole or not at all.
type store struct {
	mu sync.RWMutex
	// groups are the groups this process manages, by name; order is their
	// config order.
	groups map[string]*group
	order  []string
	// foreign are configured groups another process manages.
	foreign map[string]bool
	// launches holds the instances of the launch API (no target, no config).
	launches *group
	// pids indexes every member by provider ID and aliases.
	pids pidIndex
	// forms are, per cloud, the schemes of the ID-form aliases its
	// instances carry.
	forms *aliasForms
	// others is, per cloud, the hourly price of the instances of this
	// cluster the process does not manage (another process's groups, groups
	// unknown to this config): the cost guard counts them, so two processes
	// together stay under one cap.
	others map[string]float64
	// lastSync is when each cloud's last successful list started; synced
	// is closed (and replaced) when a list is folded in.
	lastSync map[string]time.Time
	// tombstones are the names of instances this process deleted, with
	// when a list first left them out: for ResolveAfter, a lagging list
	// that shows one again gets it deleted again, not adopted.
	tombstones map[string]time.Time
	// renamed are the former names of standby instances handed to the
	// launch API, with when the hand-over landed: a lagging list that
	// still shows one under its old name must not adopt it into its pool
	// again (it is the launched instance). Kept as tombstones are.
	renamed map[string]time.Time
	// goneAt are the names of members a list found gone, with when that
	// list started: a list that started before (one taken ahead of a
	// reload's hand-over, see Manager.Warm) is stale for them, and adopts
	// none of them. Kept as tombstones are.
	goneAt map[string]time.Time
	// refused hears of each move the member lifecycle does not have.
	refused func(mem *member, from, to phase)
	synced  chan struct{}
	// keys interns the members' offerings.
	keys keys
	// entropy feeds new instance names (Options.Entropy); crypto/rand
	// when nil.
	entropy io.Reader
}

// keys interns offering keys: members on one offering share one copy.
type keys struct {
	mu   sync.Mutex
	keys map[cloud.OfferingKey]*cloud.OfferingKey
}

// intern returns the shared copy of k.
func (ks *keys) intern(k cloud.OfferingKey) *cloud.OfferingKey {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if p, ok := ks.keys[k]; ok {
		return p
	}
	if ks.keys == nil {
		ks.keys = map[cloud.OfferingKey]*cloud.OfferingKey{}
	}
	p := new(cloud.OfferingKey)
	*p = k
	ks.keys[k] = p
	return p
}

func newStore(cfg *config.Config, manage func(string) bool) *store {
	s := &store{
		groups:   map[string]*group{},
		foreign:  map[string]bool{},
		pids:     newPIDIndex(),
		forms:    &aliasForms{},
		others:   map[string]float64{},
		lastSync: map[string]time.Time{},
		synced:   make(chan struct{}),

		tombstones: map[string]time.Time{},
		renamed:    map[string]time.Time{},
		goneAt:     map[string]time.Time{},
	}
	for i, g := range cfg.NodeGroups {
		if manage != nil && !manage(g.Name) {
			s.foreign[g.Name] = true
			continue
		}
		s.groups[g.Name] = newGroup(g, i, s.forms)
		s.order = append(s.order, g.Name)
	}
	s.launches = newGroup(config.NodeGroup{}, -1, s.forms)
	return s
}

// group is one node group's state. Its counts and spend are kept in step
// with every change of a member (see change), so reads are O(1).
type group struct {
	cfg config.NodeGroup
	// index is the group's position in the config file, for error paths.
	index    int
	itype    cloud.InstanceType
	gpuModel gpu.Model
	// target is the size the front end asked for; the orderer keeps live
	// members at it.
	target   int
	members  map[string]*member // by instance name
	template templateCache
	// described caches info() for the current target.
	described atomic.Pointer[described]
	// forms is the store's aliasForms, for rendering members' aliases.
	forms *aliasForms
	// inherited: the group and its members were handed over by the core
	// before a reload (Manager.Inherit), not rebuilt from a list.
	inherited bool
	// standbyAsked is the standby pool size a forecast asked for
	// (Manager.SetStandbySize); standbySize bounds it.
	standbyAsked int
	// poolShort is when demand first took from the standby pool since it
	// was last full (zero while it is); a refill waits out
	// standby.refillAfter from then. A pool short for other reasons (its
	// first fill, maxAge) orders at once.
	poolShort time.Time

	// live counts members not being deleted; counts are members by state
	// label; spend is the price of committed members whose price is known,
	// unpriced how many committed members have none yet.
	live     int
	counts   map[string]int
	spend    float64
	unpriced int
	// lingering is, by cloud, the price of the group's listed instances
	// that stand for no member (a name's second instance, one deleted and
	// still terminating): they bill until gone, so caps count them. Set
	// by each list.
	lingering map[string]float64
	// standbyTaints are the group's taints and TaintStandby, shared by the
	// orders of its standby pool; made on first use.
	standbyTaints []corev1.Taint
	// startRefused is the last start of a stopped member refused for
	// capacity, by location: demand takes members elsewhere first.
	startRefused map[string]refusal
}

// refusal is a start refused for capacity: when, and whether the cloud
// meant its whole location (a GCE zone's ZONE_RESOURCE_POOL_EXHAUSTED; a
// cloud whose refused instance stays stopped may have refused only its
// host).
type refusal struct {
	at    time.Time
	zonal bool
}

func newGroup(cfg config.NodeGroup, index int, forms *aliasForms) *group {
	return &group{cfg: cfg, index: index, members: map[string]*member{}, counts: map[string]int{}, forms: forms, lingering: map[string]float64{}}
}

// phase is where a member is in its life.
type phase uint8

const (
	// phaseCreating: the create is queued or in flight.
	phaseCreating phase = iota
	// phaseUnknown: the create's answer was lost; a later list decides
	// whether the order landed. It is never re-sent before that.
	phaseUnknown
	// phaseCreated: the cloud knows the instance (pending or running).
	phaseCreated
	// phaseFailed: the create gave up, or the cloud failed the instance; the
	// slot stays in the target, reported, until a front end removes it.
	phaseFailed
	// phaseDeleting: the instance is being deleted; it no longer counts
	// toward the target.
	phaseDeleting
)

// names are the phases' names, in metrics and logs.
var phaseNames = [...]string{phaseCreating: "creating", phaseUnknown: "unknown", phaseCreated: "created", phaseFailed: "failed", phaseDeleting: "deleting"}

func (p phase) String() string { return phaseNames[p] }

// moves is the member lifecycle: the phases each phase may go to. A member
// starts creating (ordered) or created (found at the cloud); its create
// ends created, failed, or unknown (the answer lost) until a list tells;
// a failed order whose instance the cloud made after all is created again;
// any phase may go deleting, and deleting is left only by being dropped.
var moves = [...][]phase{
	phaseCreating: {phaseUnknown, phaseCreated, phaseFailed, phaseDeleting},
	phaseUnknown:  {phaseCreated, phaseFailed, phaseDeleting},
	phaseCreated:  {phaseFailed, phaseDeleting},
	phaseFailed:   {phaseCreated, phaseDeleting},
	phaseDeleting: {},
}

// member is one slot of a group, or one launched instance: an instance, or
// the order for one. Only what the core needs of the cloud's instance is
// kept, and what few members have (an owner, an error, a lost answer) is
// kept aside, so that a member stays small: 100,000 of them must fit.
type member struct {
	name       string
	providerID string
	// id is the cloud's ID once known; it tells duplicates apart.
	id string
	// g is the member's group: the store's launches for a launched instance.
	g *group
	// off is the offering, interned by the store (see offering).
	off   *cloud.OfferingKey
	price float64
	// createdAt is the order's (or instance's) creation time; recordedAt is
	// when the core learnt of the cloud instance: a list that started
	// earlier cannot be expected to show it.
	createdAt  stamp
	recordedAt stamp
	// readyAfter is the time from createdAt to the first Ready observed.
	readyAfter time.Duration
	// x holds what few members have; nil for most (see extras, peek).
	x *extras
	// unseen counts syncs in a row that found no Node for a running member
	// past the grace period.
	unseen int32
	// ip4 is the instance's IPv4 address, 0 for none or another form (kept
	// in extras).
	ip4   uint32
	phase phase
	// state is the instance's state as last listed; unknown before the
	// cloud knows it.
	state state
	// steps are the start-up steps of its Node observed (startups).
	steps uint8
	// placeholder: providerID is the one the core made up at order
	// time, not yet one the cloud reported.
	placeholder bool
	// cancelled asks an in-flight create to delete what it creates.
	cancelled bool
	// reported: the never-registered finding was acted on.
	reported bool
	// joined: its Node was seen registered; gpusUp: with GPUs (the
	// reaper's streaks restart on these firsts).
	joined, gpusUp bool
	// ageUnknown: the cloud did not say when the instance was made, and
	// createdAt is when gpuscaler first listed it.
	ageUnknown bool
	// unconfirmed: adopted after a start from a list that may still show
	// what the process before this one deleted (see syncer.missing).
	unconfirmed bool
	// idForms: the instance's aliases are its cloud's ID forms,
	// "<scheme>://<id>" (see aliasForms), rendered from id when asked for.
	idForms bool
	// standby is where the member is in its group's standby pool; none
	// for a member that serves (see standby.go).
	standby standbyState
}

// extras is what a member carries only when it has it.
type extras struct {
	// owner is the launch API's caller; cloud the cloud it launched on.
	owner, cloud string
	// unknownSince is when a create's answer was lost.
	unknownSince time.Time
	// firstMiss is the first of the syncs in a row that found no Node.
	firstMiss time.Time
	errCode   string
	errMsg    string
	errClass  ErrorClass
	// deleteErr is why the last delete of the instance failed; shown on
	// its status until a delete goes through.
	deleteErr string
	// deleted: the cloud accepted a delete of the instance. Only then
	// does a list that leaves it out mean it is gone; until then it may be
	// a list that lags behind a fresh instance, which still bills.
	deleted bool
	// resolved is closed when a launch's outcome-unknown create is settled.
	resolved chan struct{}
	// aliases are the instance's aliases when they are not its cloud's ID
	// forms (see member.idForms).
	aliases []string
	// ip is the instance's address when it is not IPv4.
	ip string
	// warmSince is when a standby member was first listed running (its
	// warm-up counts from then); startedAt when a standby member was
	// started for demand.
	warmSince, startedAt time.Time
	// refusedAt is when the cloud last refused a stopped standby
	// member's start for capacity (sizer.refusedLocked); startTries how
	// many stopped members were refused for the one node a start of this
	// one serves, before it.
	refusedAt  time.Time
	startTries int
	// pulled: the group's prePullImages are on the member's Node, or
	// their pull was given up (joinedPullsLocked).
	pulled bool
	// busySince is when a standby member's stop first found pods that run
	// on its Node (reported once, then).
	busySince time.Time
	// pullFailed: a standby member's pre-pull failed (reported once).
	pullFailed bool
	// fromGroup and fromName name the standby member a launched one is
	// being handed over from, until the transfer's outcome is known (see
	// store.settleTransfer).
	fromGroup, fromName string
	// outdated: a member made under a group configuration that a reload
	// changed (machineChanged): in the standby pool, it is replaced and
	// nobody takes it; live, it never goes back to the pool.
	outdated bool
	// recycled: a member a front end deleted that went back to the pool
	// instead (sizer.returnLocked; member.returning until it stops). Its
	// kubelet registers without TaintStandby, so it is never handed to the
	// launch API (transfer).
	recycled bool
}

// extras returns the member's extras to change, making them on first use.
func (mem *member) extras() *extras {
	if mem.x == nil {
		mem.x = &extras{}
	}
	return mem.x
}

// peek returns the member's extras to read; zero when it has none.
func (mem *member) peek() extras {
	if mem.x == nil {
		return extras{}
	}
	return *mem.x
}

// offering is the offering the member was ordered on (or the cloud
// reports); zero before either.
func (mem *member) offering() cloud.OfferingKey {
	if mem.off == nil {
		return cloud.OfferingKey{}
	}
	return *mem.off
}

// group is the name of the member's group; empty for a launched instance.
func (mem *member) group() string { return mem.g.cfg.Name }

// cloud is the name of the cloud the member's instance is on.
func (mem *member) cloud() string {
	if mem.g.cfg.Cloud != "" {
		return mem.g.cfg.Cloud
	}
	return mem.peek().cloud
}

// known reports whether the cloud has (or had) the member's instance.
func (mem *member) known() bool { return mem.state != stateUnknown }

// running reports whether the member's instance runs.
func (mem *member) running() bool {
	return mem.phase == phaseCreated && mem.state == stateRunning
}

// state is a cloud.InstanceState in one byte.
type state uint8

const (
	stateUnknown state = iota
	statePending
	stateRunning
	stateDeleting
	stateStopped
	stateFailed
)

// states are the cloud's states by their byte.
var states = [...]cloud.InstanceState{
	stateUnknown: "", statePending: cloud.StatePending, stateRunning: cloud.StateRunning,
	stateDeleting: cloud.StateDeleting, stateStopped: cloud.StateStopped, stateFailed: cloud.StateFailed,
}

// stateOf is the byte of a cloud's state; a state the core does not know
// reads as pending (the cloud has the instance, it does not run yet).
func stateOf(s cloud.InstanceState) state {
	for i, known := range states {
		if known == s {
			return state(i)
		}
	}
	return statePending
}

// stamp is a wall-clock instant in Unix nanoseconds, 0 for none: a third of
// the size of a time.Time, of which a member holds two.
type stamp int64

// stampOf returns t's stamp.
func stampOf(t time.Time) stamp {
	if t.IsZero() {
		return 0
	}
	return stamp(t.UnixNano())
}

// Time returns the instant; the zero time for none.
func (s stamp) Time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(s)).UTC()
}

// stateLabel is the member's state in the instances gauge.
// memberStates are stateLabel's answers, the state label of
// gpuscaler_nodegroup_instances.
var memberStates = []string{"creating", "running", "deleting", "failed", stateStandby}

// stateStandby is the state label of a standby pool's members.
const stateStandby = "standby"

func (mem *member) stateLabel() string {
	switch {
	case mem.pooled() && mem.phase != phaseDeleting:
		return stateStandby
	case mem.phase == phaseFailed:
		return "failed"
	case mem.phase == phaseDeleting:
		return "deleting"
	case mem.running():
		return "running"
	default:
		return "creating"
	}
}

// committed reports whether the member counts toward spend: everything but
// a failed order the cloud never knew.
func (mem *member) committed() bool {
	return mem.phase != phaseFailed || mem.known()
}

// setInstance records what the cloud says of the member's instance. A
// string the member holds already is kept, so that the index's keys and
// the member share one copy and the list's answer can go.
func (s *store) setInstance(mem *member, in cloud.Instance) {
	if mem.id != in.ID {
		// The aliases stay what the cloud first reported (a Node may carry
		// them): no longer the new ID's forms.
		s.keepAliasesWhole(mem)
		mem.id = in.ID
	}
	mem.state = stateOf(in.State)
	mem.setAddr(in.IP)
	if in.ProviderID != "" && in.ProviderID != mem.providerID {
		mem.providerID = in.ProviderID
	}
	if len(in.Aliases) > 0 && !mem.hasAliases() {
		s.setAliases(mem, in.Aliases)
	}
	if !in.CreatedAt.IsZero() {
		mem.createdAt = stampOf(in.CreatedAt)
	}
	if in.InstanceType != "" {
		mem.off = s.keys.intern(cloud.OfferingKey{InstanceType: in.InstanceType, Location: in.Location, CapacityType: in.CapacityType})
	}
}

// setAddr records the instance's address: an IPv4 one in four bytes.
func (mem *member) setAddr(ip string) {
	if a, err := netip.ParseAddr(ip); err == nil && a.Is4() {
		b := a.As4()
		mem.ip4 = binary.BigEndian.Uint32(b[:])
		if mem.x != nil {
			mem.x.ip = ""
		}
		return
	}
	mem.ip4 = 0
	if ip != mem.peek().ip {
		mem.extras().ip = ip
	}
}

// addr is the instance's address; empty before the cloud reports one.
func (mem *member) addr() string {
	if mem.ip4 != 0 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], mem.ip4)
		return netip.AddrFrom4(b).String()
	}
	return mem.peek().ip
}

// hasAliases reports whether the member's aliases are known.
func (mem *member) hasAliases() bool {
	return mem.idForms || (mem.x != nil && len(mem.x.aliases) > 0)
}

// aliases renders the member's aliases.
func (mem *member) aliases() []string {
	if mem.idForms {
		return mem.g.forms.render(mem.cloud(), mem.id)
	}
	return mem.peek().aliases
}

// setAliases records the aliases a cloud reports for the member's instance:
// as a flag when they are the cloud's ID forms, else whole.
func (s *store) setAliases(mem *member, aliases []string) {
	if mem.id != "" && s.pids.byID[mem.id] == nil && s.forms.match(mem.cloud(), mem.id, aliases) {
		mem.idForms = true
		s.pids.indexID(mem)
		return
	}
	s.indexWhole(mem, aliases)
}

// keepAliasesWhole turns a member's ID-form aliases into whole ones, for a
// change its ID forms cannot follow.
func (s *store) keepAliasesWhole(mem *member) {
	if !mem.idForms {
		return
	}
	aliases := mem.aliases()
	s.pids.unindexID(mem)
	mem.idForms = false
	s.indexWhole(mem, aliases)
}

// indexWhole keeps a member's aliases as strings and indexes each.
func (s *store) indexWhole(mem *member, aliases []string) {
	mem.extras().aliases = aliases
	for _, pid := range aliases {
		s.pids.whole[pid] = mem
	}
}

// instance renders the member as the cloud instance to delete.
func (mem *member) instance() cloud.Instance {
	k := mem.offering()
	return cloud.Instance{
		ID: mem.id, Name: mem.name, ProviderID: mem.providerID, Aliases: mem.aliases(), Group: mem.group(), Owner: mem.peek().owner,
		InstanceType: k.InstanceType, Location: k.Location, CapacityType: k.CapacityType,
		State: states[mem.state], CreatedAt: mem.createdAt.Time(), IP: mem.addr(),
	}
}

// providerIDs are the member's canonical provider ID and its aliases.
func (mem *member) providerIDs() []string {
	return append([]string{mem.providerID}, mem.aliases()...)
}

// account adds (sign 1) or removes (sign -1) a member from its group's
// counts and spend.
func (g *group) account(mem *member, sign int) {
	g.counts[mem.stateLabel()] += sign
	if mem.phase != phaseDeleting && !mem.pooled() {
		g.live += sign
	}
	if mem.committed() {
		if mem.price > 0 {
			g.spend += float64(sign) * mem.price
		} else {
			g.unpriced += sign
		}
	}
}

// recount rebuilds counts and spend from the members, shedding any
// floating-point drift; the syncer calls it once per list.
func (g *group) recount() {
	g.live, g.spend, g.unpriced = 0, 0, 0
	clear(g.counts)
	for _, mem := range g.members {
		g.account(mem, 1)
	}
}

// to moves a member to phase p: the one way a member's phase changes once
// it is in the store. A move the lifecycle (moves) does not have is
// refused and reported through refused, and the member keeps its phase;
// to reports whether the member is in p. Call it inside change, which
// keeps the counts; callers hold the lock.
func (s *store) to(mem *member, p phase) bool {
	if mem.phase == p {
		return true
	}
	if !slices.Contains(moves[mem.phase], p) {
		if s.refused != nil {
			s.refused(mem, mem.phase, p)
		}
		return false
	}
	mem.phase = p
	return true
}

// change applies fn to a member of the group and keeps the counts in step.
func (s *store) change(g *group, mem *member, fn func()) {
	g.account(mem, -1)
	fn()
	g.account(mem, 1)
}

// add puts a new member in its group and the index.
func (s *store) add(g *group, mem *member) {
	g.members[mem.name] = mem
	g.account(mem, 1)
	s.index(mem)
}

// drop forgets a member entirely.
func (s *store) drop(g *group, mem *member) {
	if g.members[mem.name] != mem {
		return
	}
	g.account(mem, -1)
	delete(g.members, mem.name)
	s.pids.unindex(mem)
}

// index makes a member findable by all its provider IDs.
func (s *store) index(mem *member) { s.pids.index(mem) }

// reindex moves a member to a new canonical provider ID. A placeholder
// made up at order time stays an alias: a cloud that assigns IDs at create
// (Scaleway) replaces the placeholder a front end may still hold
// (cluster-autoscaler deleting a slot it listed while the order was in
// flight).
func (s *store) reindex(mem *member, providerID string) {
	if providerID == "" || providerID == mem.providerID {
		return
	}
	old := mem.providerID
	switch {
	case mem.placeholder && old != "" && !slices.Contains(mem.aliases(), old):
		s.keepAliasesWhole(mem) // the placeholder is no ID form
		x := mem.extras()
		x.aliases = append(slices.Clone(x.aliases), old)
	case s.pids.whole[old] == mem:
		// A real ID replaced (the member now stands for another listed
		// instance): the old one must not lead to it.
		delete(s.pids.whole, old)
	}
	mem.providerID, mem.placeholder = providerID, false
	s.index(mem)
}

// groupsOn returns the managed groups on one cloud, in config order.
func (s *store) groupsOn(cloudName string) []*group {
	var out []*group
	for _, name := range s.order {
		if g := s.groups[name]; g.cfg.Cloud == cloudName {
			out = append(out, g)
		}
	}
	return out
}

// poolMark starts the random part of the names of a standby pool's
// orders, "<prefix>-p<10 hex>": no hex digit, so no other order's name
// has it. The cloud keeps the name, so a restarted process tells a pool
// member still warming up (running, not yet stopped and marked Standby)
// from capacity (orderedForPool).
const poolMark = "p"

// newName returns a fresh hostname "<prefix>-<10 hex>" ("<prefix>-p<10
// hex>" for an order of the standby pool), checked against the group's
// members.
func (s *store) newName(g *group, prefix string, pool bool) string {
	if pool {
		prefix += "-" + poolMark
	} else {
		prefix += "-"
	}
	src := s.entropy
	if src == nil {
		src = rand.Reader
	}
	for {
		var b [5]byte
		if _, err := io.ReadFull(src, b[:]); err != nil {
			panic(fmt.Sprintf("instance name entropy: %v", err)) // crypto/rand never fails on supported platforms
		}
		name := prefix + hex.EncodeToString(b[:])
		if _, taken := g.members[name]; !taken {
			return name
		}
	}
}

// orderedForPool reports whether an instance's name is one newName gives
// an order of a standby pool.
func orderedForPool(name string) bool {
	i := strings.LastIndexByte(name, '-')
	rest, ok := strings.CutPrefix(name[i+1:], poolMark)
	if i < 0 || !ok || len(rest) != 10 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}
