package conformance

import (
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Calls collects the API calls of every fake a backend's tests made, by
// the names each fake gives them (its Calls method), so that a test can
// check them against docs/permissions.md once every subtest is done.
type Calls struct {
	mu   sync.Mutex
	seen map[string]bool
}

// Add records the calls of one fake.
func (c *Calls) Add(calls map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	for k := range calls {
		c.seen[k] = true
	}
}

// CheckListed fails t for every recorded call that the table of
// docsPath's section "## <section>..." does not list: a call's API
// names (names(call); nil: the call itself) must each be the first cell
// of a row, between backquotes. A call names returns none for is an error
// too: the test cannot tell what it is.
func (c *Calls) CheckListed(t *testing.T, docsPath, section string, names func(call string) []string) {
	t.Helper()
	data, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(line, "## "+section)
			continue
		}
		if in && strings.HasPrefix(line, "| `") {
			cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			rows[strings.Trim(cell, "`")] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) == 0 {
		t.Fatal("no calls recorded")
	}
	for _, call := range slices.Sorted(maps.Keys(c.seen)) {
		apis := []string{call}
		if names != nil {
			if apis = names(call); len(apis) == 0 {
				t.Errorf("the backend makes a call the test cannot name (%s): name it, and list it in %s", call, docsPath)
			}
		}
		for _, api := range apis {
			if !rows[api] {
				t.Errorf("the backend calls %s, which %s's %s table does not list with its permission", api, docsPath, section)
			}
		}
	}
}
