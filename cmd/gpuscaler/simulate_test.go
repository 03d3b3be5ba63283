package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/pending"
	"github.com/gpuscaler/gpuscaler/internal/simulate"
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

// The cloud's timings are flags over the pool's clouds.sim: given, they
// change what runs (a shorter boot, a shorter wait), and they are checked
// as the config is (a 95th percentile under its median names the field).
func TestSimulateTimingFlags(t *testing.T) {
	p95 := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		root := newRootCommand(&out, &errOut)
		root.SetArgs(append([]string{"simulate", "--trace", "../../examples/traces/small.csv", "--policy", "nodeprovisioner", "--standby", "0"}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "pending" && f[1] == "p95" {
				return f[2]
			}
		}
		t.Fatalf("no p95 in:\n%s", out.String())
		return ""
	}
	facts, fast := p95(), p95("--boot-delay", "30s", "--boot-delay-p95", "30s", "--gpu-startup", "30s")
	if facts == fast || fast != "1m00s" {
		t.Errorf("p95 wait %s on the facts, %s with 30 s boots and GPU start-ups; want 1m00s with them", facts, fast)
	}
	var out bytes.Buffer
	root := newRootCommand(&out, &out)
	root.SetArgs([]string{"simulate", "--trace", "../../examples/traces/small.csv", "--boot-delay", "2m", "--boot-delay-p95", "1m"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "clouds.sim.bootDelayP95") {
		t.Fatalf("a p95 under its median: %v, want an error naming clouds.sim.bootDelayP95", err)
	}
}

// simulate -o json prints every column and the floor as JSON, and
// nothing else on stdout.
func TestSimulateJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs([]string{"simulate", "--trace", "../../examples/traces/small.csv", "--standby", "0", "-o", "json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var got []simulate.Summary
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
	}
	names := []string{}
	for _, s := range got {
		names = append(names, s.Name)
		if s.Pods != 6 || s.Cost < s.FloorCost {
			t.Errorf("%s: %d pods, cost %.2f against the floor %.2f", s.Name, s.Pods, s.Cost, s.FloorCost)
		}
	}
	if strings.Join(names, ",") != "nodeprovisioner,cluster-autoscaler,oracle,floor" || !got[3].Floor {
		t.Errorf("columns %v", names)
	}
	// The waits in the real metric's buckets: every pod within the last.
	for _, s := range got[:3] {
		b := s.WaitBuckets
		if len(b) != len(pending.WaitBuckets()) || b[len(b)-1].LeSeconds != 3600 || b[len(b)-1].Pods != s.Pods {
			t.Errorf("%s: wait buckets %+v, want gpuscaler_gpu_pod_wait_seconds's, the last holding all %d pods", s.Name, b, s.Pods)
		}
	}
	if !strings.Contains(errOut.String(), "trace small.csv") {
		t.Errorf("the trace's line is not on stderr: %q", errOut.String())
	}
}

// --pool plays a cloud's catalog: Scaleway's costs are in euros; on
// Verda's the default asks for no standby pool (Verda bills a stopped
// instance in full) and an explicit one is refused with the reason; a
// cloud without GPU types, or --pool beside --config, is a usage error.
func TestSimulatePool(t *testing.T) {
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		root := newRootCommand(&out, &errOut)
		root.SetArgs(append([]string{"simulate", "--trace", "../../examples/traces/small.csv", "--log-level", "error"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	out, err := run("--pool", "scaleway", "--policy", "nodeprovisioner")
	if err != nil || !strings.Contains(out, "scaleway catalog") || !strings.Contains(out, " EUR") || !strings.Contains(out, "+standby 2") {
		t.Errorf("--pool scaleway: %v\n%s", err, out)
	}
	out, err = run("--pool", "verda")
	if err != nil || strings.Contains(out, "+standby") || !strings.Contains(out, "verda catalog") {
		t.Errorf("--pool verda: %v, want no standby column\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pool", "verda", "--standby", "2"}, "bills a shut-down instance in full"},
		{[]string{"--pool", "kamatera"}, "sells no GPU server types"},
		{[]string{"--pool", "aws"}, "want one of sim, verda, gcp, scaleway, kamatera"},
		{[]string{"--pool", "gcp", "--config", "../../examples/sim-quickstart.yaml"}, "not both"},
	} {
		_, err := run(c.args...)
		var usage *usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &usage) {
			t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
}
