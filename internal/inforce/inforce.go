// Package inforce hands the front ends the core of the configuration in
// force. A configuration reload replaces the core (nodegroup.Manager)
// under a running front end; a front end keeps one Core handle across
// reloads, reads from whichever core is in force, and writes through
// Write, which never lets a write land in a core that is handing over
// to the next.
package inforce

import "context"

// Core is a handle on the core in force, seen through the interface C
// that a front end declares (externalgrpc.Core, provisioner.Core, …).
// The zero Core is not usable; build one with New or Fixed.
type Core[C any] struct {
	read  func() C
	write func(ctx context.Context, fn func(C) error) error
}

// New returns a Core that reads through read and writes through write.
// write runs fn on the core in force and returns fn's error, or an error
// of its own when no core can take the write now.
func New[C any](read func() C, write func(ctx context.Context, fn func(C) error) error) Core[C] {
	return Core[C]{read: read, write: write}
}

// Fixed returns a Core on one core that never changes: for front ends
// run without reloads (simulate, benchmarks, tests).
func Fixed[C any](c C) Core[C] {
	return Core[C]{
		read:  func() C { return c },
		write: func(_ context.Context, fn func(C) error) error { return fn(c) },
	}
}

// Read returns the core in force, for reads. Do not keep it: the next
// call may answer another core.
func (h Core[C]) Read() C { return h.read() }

// Write runs fn, a write, on the core in force.
func (h Core[C]) Write(ctx context.Context, fn func(C) error) error { return h.write(ctx, fn) }
