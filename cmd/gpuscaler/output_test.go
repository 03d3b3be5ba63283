package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
)

// execute runs a command line and returns its standard output and error.
func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// catalog -o json and -o yaml print what the table does, for scripts:
// each type with its GPUs, prices and the locations it can be had in now.
func TestCatalogOutputFormats(t *testing.T) {
	out, err := execute(t, "catalog", "--gpu-only", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var entries []catalogEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("catalog -o json: %v\n%s", err, out)
	}
	var h100 *catalogEntry
	for i := range entries {
		if entries[i].GPUs == 0 {
			t.Errorf("--gpu-only listed %s", entries[i].Type)
		}
		if entries[i].Type == "1H100.80S.30V" {
			h100 = &entries[i]
		}
	}
	if h100 == nil || h100.OnDemandHour != 2.29 || h100.GPUModel == "" || len(h100.OnDemandNow) == 0 {
		t.Fatalf("1H100.80S.30V in catalog -o json: %+v", h100)
	}
	out, err = execute(t, "catalog", "--gpu-only", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var again []catalogEntry
	if err := yaml.Unmarshal([]byte(out), &again); err != nil || len(again) != len(entries) {
		t.Fatalf("catalog -o yaml: %d entries, %v\n%s", len(again), err, out)
	}
	_, err = execute(t, "catalog", "-o", "xml")
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "want table, json or yaml") {
		t.Fatalf("-o xml: %v, want a usage error", err)
	}
}

// With --config, catalog lists the config's own cloud, with its
// credentials; with several, it asks which.
func TestCatalogCloudFromTheConfig(t *testing.T) {
	engine, err := verdatest.NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "config-secret"})
	defer fake.Close()
	t.Setenv("VERDA_CLIENT_ID", "id")
	t.Setenv("VERDA_CLIENT_SECRET", "config-secret")
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	verdaOnly := write("verda.yaml", `clusterName: c
clouds:
  verda: {baseURL: "`+fake.URL+`/v1"}
nodeGroups:
  - {name: h100, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 2}
`)
	out, err := execute(t, "catalog", "--config", verdaOnly, "--gpu-only")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "1H100.80S.30V") || engine.Calls()["offerings"] == 0 {
		t.Fatalf("catalog --config of a Verda config did not list Verda's catalog (calls %v):\n%s", engine.Calls(), out)
	}
	both := write("both.yaml", `clusterName: c
clouds:
  sim: {}
  verda: {baseURL: "`+fake.URL+`/v1"}
nodeGroups:
  - {name: h100, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 2}
`)
	_, err = execute(t, "catalog", "--config", both)
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "sim, verda") || !strings.Contains(err.Error(), "--cloud") {
		t.Fatalf("catalog of a config with two clouds: %v, want a usage error naming both and --cloud", err)
	}
	if out, err := execute(t, "catalog", "--config", both, "--cloud", "sim", "--gpu-only"); err != nil || !strings.Contains(out, "1H100") {
		t.Fatalf("--cloud sim: %v\n%s", err, out)
	}
}

// validate -o json prints the outcome for scripts, valid or not; an
// invalid config still exits 3, with every problem by its field.
func TestValidateOutputFormats(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("clusterName: c\nclouds: {sim: {}}\nnodeGroups:\n  - {name: g, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("clusterName: c\nclouds: {sim: {}}\nnodeGroups:\n  - {name: g, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 3, maxSize: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, "validate", "--config", good, "-o", "json")
	var v validation
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || !v.Valid || v.NodeGroups != 1 {
		t.Fatalf("a valid config: %v, %+v\n%s", err, v, out)
	}
	out, err = execute(t, "validate", "--config", bad, "-o", "yaml")
	v = validation{}
	if yerr := yaml.Unmarshal([]byte(out), &v); yerr != nil || v.Valid || len(v.Errors) < 1 || !strings.Contains(strings.Join(v.Errors, "\n"), "nodeGroups[0].maxSize") {
		t.Fatalf("an invalid config: %+v (%v)\n%s", v, yerr, out)
	}
	if exitCode(err) != exitInvalidConfig {
		t.Fatalf("an invalid config with -o yaml: exit code %d, want %d", exitCode(err), exitInvalidConfig)
	}
}

// A type the cloud's catalog lacks is a config error (exit 3) that says
// where the types are listed and, for a typo, which one was meant.
func TestUnknownInstanceTypePointsToTheCatalog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(path, []byte("clusterName: c\nclouds: {sim: {}}\nnodeGroups:\n  - {name: g, cloud: sim, instanceType: 1H100.80X.30V, locations: [FIN-01], maxSize: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := execute(t, "validate", "--config", path)
	if err == nil || exitCode(err) != exitInvalidConfig {
		t.Fatalf("validate of an unknown type: %v (exit %d), want exit %d", err, exitCode(err), exitInvalidConfig)
	}
	for _, want := range []string{"nodeGroups[0].instanceType", "gpuscaler catalog --cloud sim", "did you mean 1H100.80S.30V?"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
}

// Every command's help shows how to run it, as kubectl's does: an
// Examples section in each, the root and the parents included.
func TestEveryCommandHasExamples(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "help" || c.Name() == "completion" || c.Hidden {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Examples", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
