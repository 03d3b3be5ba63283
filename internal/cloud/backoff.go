package cloud

import (
	"context"
	"math/rand/v2"
	"time"
)

// MaxBackoff caps Backoff's wait.
const MaxBackoff = 30 * time.Second

// Backoff waits before retry number attempt (0 for the first retry): base
// doubled per attempt, capped at MaxBackoff, plus up to half of that as
// jitter, so that clients retrying together spread out. It returns early
// with ctx's error.
func Backoff(ctx context.Context, base time.Duration, attempt int) error {
	d := min(base<<min(attempt, 16), MaxBackoff)
	d += time.Duration(rand.Int64N(int64(d)/2 + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
