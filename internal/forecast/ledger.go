package forecast

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Ledger is a set of named Demands kept in a Store: read once, before
// anything is learned (a store that cannot be read is never overwritten),
// and written at most once a slot. It is not safe for concurrent use;
// Due and Saved let a caller write outside its own lock.
type Ledger struct {
	store   Store // nil: in memory only
	loaded  bool
	saved   time.Time // the slot of the last save
	demands map[string]*Demand
}

// NewLedger returns a Ledger over store (nil: in memory only).
func NewLedger(store Store) *Ledger {
	return &Ledger{store: store, demands: map[string]*Demand{}}
}

// Load reads the store the first time it succeeds. A Demand that cannot
// be read is left out (learned again from nothing) and reported.
func (l *Ledger) Load(ctx context.Context, now time.Time) error {
	if l.loaded {
		return nil
	}
	var bad []error
	if l.store != nil {
		saved, err := l.store.Load(ctx)
		if err != nil {
			return fmt.Errorf("read the saved forecasts: %w", err)
		}
		for name, b := range saved {
			d := NewDemand()
			if err := d.UnmarshalJSON(b); err != nil {
				bad = append(bad, fmt.Errorf("%s: %w", name, err))
				continue
			}
			l.demands[name] = d
		}
	}
	l.loaded, l.saved = true, now.Truncate(DefaultSlot)
	return errors.Join(bad...)
}

// Of is a name's Demand, made on first use.
func (l *Ledger) Of(name string) *Demand {
	d := l.demands[name]
	if d == nil {
		d = NewDemand()
		l.demands[name] = d
	}
	return d
}

// Forget drops a name's Demand; it reports whether there was one.
func (l *Ledger) Forget(name string) bool {
	_, ok := l.demands[name]
	delete(l.demands, name)
	return ok
}

// Due returns what to write at now, the Demands keep says to keep (nil:
// all), as JSON: when the ledger was loaded and a slot has begun since the
// last save, or always with force. ok is false when nothing is due.
func (l *Ledger) Due(now time.Time, force bool, keep func(name string) bool) (out map[string][]byte, ok bool, err error) {
	if l.store == nil || !l.loaded || !force && !now.Truncate(DefaultSlot).After(l.saved) {
		return nil, false, nil
	}
	out = make(map[string][]byte, len(l.demands))
	for name, d := range l.demands {
		if keep != nil && !keep(name) {
			continue
		}
		b, err := d.MarshalJSON()
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = b
	}
	return out, true, nil
}

// Saved records that what Due returned at now was written.
func (l *Ledger) Saved(now time.Time) {
	if slot := now.Truncate(DefaultSlot); slot.After(l.saved) {
		l.saved = slot
	}
}

// Save writes what is due at now to the store (Due, then Saved), all
// under the caller's care: for callers that may do I/O where they hold
// their lock.
func (l *Ledger) Save(ctx context.Context, now time.Time, keep func(name string) bool) error {
	due, ok, err := l.Due(now, false, keep)
	if err != nil || !ok {
		return err
	}
	if err := l.store.Save(ctx, due); err != nil {
		return fmt.Errorf("save the forecasts: %w", err)
	}
	l.Saved(now)
	return nil
}
