package nodegroup

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// Every phase change goes through store.to, which takes only the moves of
// the member lifecycle: a deleting member never comes back to life, an
// instance the cloud has never goes back to an order, and each refusal is
// reported.
func TestLifecycleRefusesIllegalMoves(t *testing.T) {
	var refused []string
	s := &store{refused: func(mem *member, from, to phase) { refused = append(refused, from.String()+"->"+to.String()) }}
	all := []phase{phaseCreating, phaseUnknown, phaseCreated, phaseFailed, phaseDeleting}
	legal := map[string]bool{
		"creating->unknown": true, "creating->created": true, "creating->failed": true, "creating->deleting": true,
		"unknown->created": true, "unknown->failed": true, "unknown->deleting": true,
		"created->failed": true, "created->deleting": true,
		"failed->created": true, "failed->deleting": true,
	}
	for _, from := range all {
		for _, to := range all {
			refused = nil
			mem := &member{phase: from}
			ok := s.to(mem, to)
			move := fmt.Sprintf("%s->%s", from, to)
			want := from == to || legal[move]
			switch {
			case ok != want:
				t.Errorf("%s: allowed %v, want %v", move, ok, want)
			case !want && (mem.phase != from || len(refused) != 1 || refused[0] != move):
				t.Errorf("%s: refused, yet the member is %s and the refusals are %v", move, mem.phase, refused)
			case want && mem.phase != to:
				t.Errorf("%s: allowed, yet the member is %s", move, mem.phase)
			}
		}
	}
}

// The target is checked against the members after every change: a group
// whose live members outnumber its target below maxSize has drifted, and
// the check counts and logs it.
func TestTargetDriftIsReported(t *testing.T) {
	h := newHarness(t, oneGroupLeaky, sim.Options{}, Options{})
	if err := h.mgr.IncreaseSize(context.Background(), "g", 2); err != nil {
		t.Fatal(err)
	}
	if n := h.metric("gpuscaler_target_mismatches_total", map[string]string{"group": "g"}); n != 0 {
		t.Fatalf("%v mismatches after an increase", n)
	}
	s := h.mgr.store
	s.mu.Lock()
	g := s.groups["g"]
	g.target-- // a drift no path should make
	h.mgr.sizer.reconcileLocked(g)
	s.mu.Unlock()
	if n := h.metric("gpuscaler_target_mismatches_total", map[string]string{"group": "g"}); n != 1 {
		t.Errorf("%v mismatches counted, want 1", n)
	}
}
