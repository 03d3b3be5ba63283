package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Exit codes mean something: 0 done, 2 a command line that cannot run
// (with a pointer to --help), 3 a configuration start-up refuses, 1 any
// other failure.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "clusterName: t\nclouds: {sim: {}}\nnodeGroups:\n  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 2}\n")
	misspelt := write("misspelt.yaml", "clusterName: t\nclouds: {sim: {}}\nnodeGroups:\n  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxsize: 2}\n")
	negative := write("negative.yaml", "clusterName: t\nclouds: {sim: {}}\nnodeGroups:\n  - {name: g, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: -1}\n")
	empty := write("empty.yaml", "# nothing\n")
	for _, c := range []struct {
		args []string
		want int
		says string
	}{
		{[]string{"version"}, exitOK, ""},
		{[]string{"validate", "--config", good}, exitOK, ""},
		{[]string{"frobnicate"}, exitUsage, "--help"},
		{[]string{"validate", "--no-such-flag"}, exitUsage, "--help"},
		{[]string{"version", "--log-level", "loud"}, exitUsage, "want debug, info, warn or error"},
		{[]string{"version", "extra"}, exitUsage, "--help"},
		{[]string{"validate", "--config", misspelt}, exitInvalidConfig, "maxsize"},
		{[]string{"validate", "--config", negative}, exitInvalidConfig, "maxSize"},
		{[]string{"validate", "--config", empty}, exitInvalidConfig, "empty"},
		{[]string{"validate", "--config", filepath.Join(dir, "absent.yaml")}, exitFailure, "absent.yaml"},
	} {
		var out, errOut bytes.Buffer
		root := newRootCommand(&out, &errOut)
		if got := run(root, &errOut, c.args); got != c.want || !strings.Contains(errOut.String(), c.says) {
			t.Errorf("gpuscaler %s: exit %d, want %d; stderr %q should say %q", strings.Join(c.args, " "), got, c.want, errOut.String(), c.says)
		}
	}
}
