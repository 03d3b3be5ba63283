package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config convert takes the file as an argument as well as with --config,
// and both print the same native config.
func TestConfigConvertPositional(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	caVerda := "node_groups:\n  gpu-pool:\n    min_size: 0\n    max_size: 3\n    instance_type: 1V100.6V\n    location: FIN-01\n"
	if err := os.WriteFile(path, []byte(caVerda), 0o600); err != nil {
		t.Fatal(err)
	}
	convert := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append([]string{"config", "convert"}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("config convert %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	positional, flag := convert(path), convert("--config", path)
	if positional != flag || !strings.Contains(positional, "gpu-pool") {
		t.Fatalf("positional:\n%s\nflag:\n%s", positional, flag)
	}
	// The default cluster name is shared by every install that keeps it.
	if !strings.Contains(positional, "give this cluster its own name") {
		t.Errorf("no note about the default clusterName:\n%s", positional)
	}
	if named := convert("--cluster-name", "prod-eu", path); strings.Contains(named, "give this cluster its own name") || !strings.Contains(named, "clusterName: prod-eu") {
		t.Errorf("with --cluster-name:\n%s", named)
	}
}

// A Karpenter v1alpha5 Provisioner (scw-karpenter's) converts to a
// GPUNodeClass and a v1 NodePool.
func TestConfigConvertProvisioner(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs([]string{"config", "convert", "../../internal/config/seedconfig/testdata/scw-karpenter-provisioner.yaml"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if s := out.String(); !strings.Contains(s, "kind: GPUNodeClass") || !strings.Contains(s, "kind: NodePool") || !strings.Contains(errOut.String(), "SCW_ACCESS_KEY") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", s, errOut.String())
	}
}

// Every seed format is recognised by its content: the Kamatera INI given
// as a file (not with --cloud-config) converts and validates, seed
// manifests validate, and the files that cannot stand alone get the flag
// that reads them (issue 35: the INI answered a YAML decode error, the
// manifests "unknown field", the others a YAML error).
func TestSeedFormatsByContent(t *testing.T) {
	run := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	const ini = "../../examples/kamatera.ini"
	byFile, err := run("config", "convert", ini)
	if err != nil {
		t.Fatalf("config convert %s: %v\n%s", ini, err, byFile)
	}
	byFlag, err := run("config", "convert", "--cloud-config", ini)
	if err != nil || byFile != byFlag || !strings.Contains(byFile, "kamatera") {
		t.Fatalf("as a file:\n%s\nwith --cloud-config (%v):\n%s", byFile, err, byFlag)
	}
	// A DataCrunch cluster config converts beside --nodes as it does from
	// DATACRUNCH_CLUSTER_CONFIG_FILE; alone, and a .env file, are refused
	// with the flags that read them.
	const dc = "../../internal/config/seedconfig/testdata/datacrunch-readme.json"
	nodes := []string{"--nodes", "0:3:1V100.6V:FIN-01:gpu-nodes"}
	byFile, err = run(append([]string{"config", "convert", dc}, nodes...)...)
	if err != nil {
		t.Fatalf("config convert %s --nodes: %v\n%s", dc, err, byFile)
	}
	t.Setenv("DATACRUNCH_CLUSTER_CONFIG_FILE", dc)
	byEnv, err := run(append([]string{"config", "convert"}, nodes...)...)
	if err != nil || byFile != byEnv || !strings.Contains(byFile, "all-1g.10gb") {
		t.Fatalf("as a file:\n%s\nfrom DATACRUNCH_CLUSTER_CONFIG_FILE (%v):\n%s", byFile, err, byEnv)
	}
	env := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(env, []byte("# Verda\nexport VERDA_CLIENT_ID=a\nVERDA_CLIENT_SECRET='b'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{dc: "--nodes", env: "--env-file"} {
		for _, args := range [][]string{{"config", "convert", file}, {"validate", "--config", file}} {
			if out, err := run(args...); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%v: %v, want an error naming %s\n%s", args, err, want, out)
			}
		}
	}
	for _, tc := range []struct{ file, want string }{
		{ini, "valid (2 node groups)"},
		{"../../internal/config/seedconfig/testdata/scw-karpenter-provisioner.yaml", "valid (Karpenter v1alpha5 Provisioners"},
		{"../../examples/baseten-nodeprovisioner.yaml", "valid (Baseten NodeProvisioner manifests"},
	} {
		if out, err := run("validate", "--config", tc.file); err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("validate --config %s: %v\n%s", tc.file, err, out)
		}
	}
}
