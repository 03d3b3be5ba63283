package gcp_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// methods maps the fake's name of a call (gcptest.Server.Calls: the HTTP
// method and the path's last segment, zonal and regional alike) to the
// Compute API methods it stands for.
var methods = map[string][]string{
	"GET instanceGroupManager":    {"instanceGroupManagers.get", "regionInstanceGroupManagers.get"},
	"POST listManagedInstances":   {"instanceGroupManagers.listManagedInstances", "regionInstanceGroupManagers.listManagedInstances"},
	"POST createInstances":        {"instanceGroupManagers.createInstances", "regionInstanceGroupManagers.createInstances"},
	"POST deleteInstances":        {"instanceGroupManagers.deleteInstances", "regionInstanceGroupManagers.deleteInstances"},
	"POST stopInstances":          {"instanceGroupManagers.stopInstances", "regionInstanceGroupManagers.stopInstances"},
	"POST startInstances":         {"instanceGroupManagers.startInstances", "regionInstanceGroupManagers.startInstances"},
	"POST resize":                 {"instanceGroupManagers.resize"},
	"POST instanceGroupManagers":  {"instanceGroupManagers.insert"},
	"DELETE instanceGroupManager": {"instanceGroupManagers.delete"},
	"GET instanceGroupManagers":   {"instanceGroupManagers.aggregatedList"},
	"GET operations":              {"zoneOperations.get", "regionOperations.get"},
	"GET instances":               {"instances.list"},
	"GET instanceTemplate":        {"instanceTemplates.get", "regionInstanceTemplates.get"},
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

// checkListed fails t for every call made whose API methods
// docs/permissions.md's GCP table does not list with their permission.
func (c *calls) checkListed(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile("../../../docs/permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(line, "## GCP")
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
		ms, ok := methods[call]
		if !ok {
			t.Errorf("the backend makes a call the test cannot name (%s): add it to methods and to docs/permissions.md", call)
		}
		for _, m := range ms {
			if !rows[m] {
				t.Errorf("the backend calls %s, which docs/permissions.md's GCP table does not list with its permission", m)
			}
		}
	}
}
