package forecast

import (
	"context"
	"testing"
	"time"
)

// A Ledger writes once a slot, only what keep keeps, never before it read
// the store, and a new one goes on from what was written.
func TestLedgerSavesOnceASlot(t *testing.T) {
	ctx := context.Background()
	store := &Memory{}
	l := NewLedger(store)
	if _, ok, _ := l.Due(monday, true, nil); ok {
		t.Fatal("a ledger that has not read its store would overwrite it")
	}
	if err := l.Load(ctx, monday); err != nil {
		t.Fatal(err)
	}
	l.Of("a").Observe(monday, map[Shape]int{{GPUs: 1}: 2})
	l.Of("gone").Observe(monday, map[Shape]int{{GPUs: 1}: 1})
	keep := func(name string) bool { return name != "gone" }
	if err := l.Save(ctx, monday.Add(time.Minute), keep); err != nil {
		t.Fatal(err)
	}
	if saved, _ := store.Load(ctx); len(saved) != 0 {
		t.Fatalf("saved %d in the slot it was read in", len(saved))
	}
	if err := l.Save(ctx, monday.Add(DefaultSlot), keep); err != nil {
		t.Fatal(err)
	}
	saved, _ := store.Load(ctx)
	if len(saved) != 1 || saved["a"] == nil {
		t.Fatalf("saved %v, want a only", saved)
	}
	if _, ok, _ := l.Due(monday.Add(DefaultSlot+time.Minute), false, nil); ok {
		t.Fatal("due twice in one slot")
	}
	next := NewLedger(store)
	if err := next.Load(ctx, monday.Add(2*DefaultSlot)); err != nil {
		t.Fatal(err)
	}
	if got := next.Of("a").Learned(monday.Add(2 * DefaultSlot)); got != 2*DefaultSlot {
		t.Fatalf("a new ledger's Demand learned %s, want the first's 20m", got)
	}
}
