package testenv

import (
	"context"
	"testing"
	"time"
)

// Poll asks cond every interval until it holds, and fails the test with
// what it waited for when ctx ends first.
func Poll(t testing.TB, ctx context.Context, every time.Duration, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(every):
		}
	}
}
