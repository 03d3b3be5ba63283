package fakeid

import (
	"regexp"
	"testing"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// A seeded Source repeats its sequence, two seeds differ, and every ID is
// a version-4 UUID, seeded or not.
func TestSeededSourcesRepeat(t *testing.T) {
	a, b, c, r := New(7), New(7), New(8), New(0)
	seen := map[string]bool{}
	for range 100 {
		x, y, z, w := a.UUID(), b.UUID(), c.UUID(), r.UUID()
		if x != y {
			t.Fatalf("seed 7 gave %s and %s", x, y)
		}
		if x == z || seen[x] {
			t.Fatalf("%s repeats (seed 8: %s)", x, z)
		}
		seen[x] = true
		for _, id := range []string{x, z, w} {
			if !uuidV4.MatchString(id) {
				t.Fatalf("%q is not a version-4 UUID", id)
			}
		}
	}
}
