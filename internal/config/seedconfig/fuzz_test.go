package seedconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// The importers read files users wrote for other tools. Whatever they are
// given, they must not panic; what they accept and what then completes
// must be a config `gpuscaler config convert` can write out: as native
// YAML, it parses again to the same config.

// addFile seeds a fuzz target with a file of testdata.
func addFile(f *testing.F, name string, with func(data []byte)) {
	f.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	with(data)
}

// checkImported completes an imported config as start-up does, and checks
// the round trip through native YAML.
func checkImported(t *testing.T, cfg *config.Config, err error) {
	t.Helper()
	if err != nil {
		if cfg != nil {
			t.Fatalf("an importer returned a config with an error: %v", err)
		}
		return
	}
	if cfg == nil {
		t.Fatal("an importer returned neither a config nor an error")
	}
	if config.Complete(cfg) != nil {
		return // refused at start-up, with the field path
	}
	if k := cfg.Clouds.Kamatera; k != nil {
		k.Imported = nil // an INI file's secrets stay in memory, never written out
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatalf("marshal an imported config: %v", err)
	}
	again, err := config.Parse(out)
	if err != nil {
		t.Fatalf("an imported config, written as native YAML, is refused: %v\n%s", err, out)
	}
	if !equality.Semantic.DeepEqual(cfg, again) {
		t.Fatalf("an imported config changed through native YAML:\n%s", out)
	}
}

// FuzzDataCrunch: the DataCrunch autoscaler's cluster JSON and one --nodes
// flag.
func FuzzDataCrunch(f *testing.F) {
	addFile(f, "datacrunch-readme.json", func(data []byte) { f.Add(data, "0:3:1A100.22V:FIN-01:gpu-nodes") })
	for _, s := range [][2]string{
		{"", "1:2:1H100.80S.30V:FIN-01:a"},
		{"{}", "0:0:x:y:z"},
		{`{"nodeConfigs": {"a": {}}}`, "0:3:1A100.22V:FIN-01:a"},
		{`{"nodeConfigs": null}`, "3:1:1A100.22V:FIN-01:a"},
		{`[1,2]`, "::::"},
		{`{"a": 1, "a": 2}`, "-1:99999999999999999999:t:r:n"},
	} {
		f.Add([]byte(s[0]), s[1])
	}
	f.Fuzz(func(t *testing.T, clusterJSON []byte, nodes string) {
		cfg, err := FromDataCrunch("fuzz", strings.Split(nodes, ","), clusterJSON)
		checkImported(t, cfg, err)
	})
}

// FuzzCAVerda: ca-verda's config.yaml.
func FuzzCAVerda(f *testing.F) {
	addFile(f, "ca-verda-readme.yaml", func(data []byte) { f.Add(data) })
	for _, s := range []string{"", "nodeGroups: [{}]", "nodeGroups: {a: 1}", "a: &x [*x]", "nodeGroups:\n- name: x\n  minSize: -1\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = IsCAVerda(data)
		cfg, err := FromCAVerda("fuzz", data)
		checkImported(t, cfg, err)
	})
}

// FuzzKamateraINI: the Kamatera cluster-autoscaler's INI file.
func FuzzKamateraINI(f *testing.F) {
	addFile(f, "kamatera-readme-disks.ini", func(data []byte) { f.Add(data) })
	addFile(f, "kamatera-readme-networks.ini", func(data []byte) { f.Add(data) })
	for _, s := range []string{
		"", "[global]", "[nodegroup \"", "[nodegroup \"a\"]\nmin-size=x\n", "[global]\nkamatera-api-client-id=\n",
		"[nodegroup \"a\"]\nmax-size=-3\ndisk=size=abc\n", "key-without-section=1\n", "[nodegroup \"a b\"]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := FromKamateraINI(data)
		checkImported(t, cfg, err)
	})
}

// FuzzDotEnv: ca-verda's .env file. Every line it accepts is a KEY=VALUE
// whose key it keeps.
func FuzzDotEnv(f *testing.F) {
	for _, s := range []string{
		"", "VERDA_CLIENT_ID=abc\nVERDA_CLIENT_SECRET='s e c'\n", "export A=\"b\"\n# c\n", "=\n", "A\n", "A==\n", "\"\n", strings.Repeat("x", 70_000),
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "env")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		env, err := DotEnv(path)
		if err != nil {
			if env != nil {
				t.Fatalf("DotEnv returned values with an error: %v", err)
			}
			return
		}
		for k := range env {
			if strings.ContainsAny(k, "\n") {
				t.Fatalf("key %q spans lines", k)
			}
		}
	})
}

// FuzzConvertManifests: the Karpenter Provisioner and Baseten
// NodeProvisioner manifests `gpuscaler config convert` reads. Whatever they
// write must be YAML.
func FuzzConvertManifests(f *testing.F) {
	addFile(f, "scw-karpenter-provisioner.yaml", func(data []byte) { f.Add(data) })
	for _, s := range []string{
		"", "---\n---\n", "kind: Provisioner\n", "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nspec: {requirements: [{}]}\n",
		"kind: NodeProvisioner\nspec: 3\n", "kind: NodeProvisioner\n---\nkind: Provisioner\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, convert := range map[string]func([]byte) ([]byte, []string, error){
			"Provisioner": ConvertProvisioners, "NodeProvisioner": ConvertNodeProvisioners,
		} {
			_, _ = IsProvisionerManifest(data), IsNodeProvisionerManifest(data)
			out, _, err := convert(data)
			if err != nil {
				continue
			}
			var v any
			if err := yaml.Unmarshal(out, &v); err != nil {
				t.Fatalf("%s: converted output is not YAML: %v\n%s", name, err, out)
			}
		}
	})
}
