package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// simulate plays the example trace on the built-in pool and prints both
// policies side by side.
func TestSimulateExampleTrace(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	html := filepath.Join(t.TempDir(), "report.html")
	root.SetArgs([]string{"simulate", "--trace", "../../examples/traces/small.csv", "--html", html, "--log-level", "error"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	s := out.String()
	for _, want := range []string{"nodeprovisioner", "cluster-autoscaler", "pending p95", "6 (0)"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if page, err := os.ReadFile(html); err != nil || !strings.Contains(string(page), "<svg") {
		t.Errorf("HTML report: %v", err)
	}
}

// A malformed trace line stops simulate with the file and the line.
func TestSimulateRefusesABadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(path, []byte("at,duration,gpus\n0s,10m,1\n5m,10m,many\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	root := newRootCommand(&out, &out)
	root.SetArgs([]string{"simulate", "--trace", path})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), path+": line 3: gpus") {
		t.Fatalf("error %v, want one naming %s line 3", err, path)
	}
}

// A trace too short to learn on runs without the forecast and says why;
// --days is only for built-in traces.
func TestSimulateForecastNeedsDays(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs([]string{"simulate", "--trace", "../../examples/traces/small.csv", "--forecast", "--standby", "0", "--log-level", "error"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if s := out.String(); !strings.Contains(s, "no forecast: the trace spans") || strings.Contains(s, "+forecast") {
		t.Errorf("output:\n%s", s)
	}
	root = newRootCommand(&out, &errOut)
	root.SetArgs([]string{"simulate", "--trace", "../../examples/traces/small.csv", "--days", "3"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--days 3") {
		t.Errorf("--days on a file: %v", err)
	}
}
