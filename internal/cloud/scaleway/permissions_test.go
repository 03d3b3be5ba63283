package scaleway_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// permissionRows returns the API calls docs/permissions.md's section
// lists (the first cell of each table row, unquoted).
func permissionRows(t *testing.T, section string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("../../../docs/permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## "+section
			continue
		}
		if in && strings.HasPrefix(line, "| `") {
			cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			rows[strings.Trim(cell, "`")] = true
		}
	}
	return rows
}

// calls collects the calls of every fake a test made.
type calls struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (c *calls) add(m map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range m {
		c.seen[k] = true
	}
}

// checkListed fails t for every call made that docs/permissions.md's
// section does not list.
func (c *calls) checkListed(t *testing.T, section string) {
	t.Helper()
	rows := permissionRows(t, section)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) == 0 {
		t.Fatal("no calls recorded")
	}
	for _, call := range slices.Sorted(maps.Keys(c.seen)) {
		if !rows[call] {
			t.Errorf("the backend calls %s, which docs/permissions.md's %s section does not list with its permission", call, section)
		}
	}
}
