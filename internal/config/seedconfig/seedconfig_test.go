package seedconfig

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

func TestDataCrunchReadme(t *testing.T) {
	data, err := os.ReadFile("testdata/datacrunch-readme.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]map[string]string{
		"json":   {"DATACRUNCH_CLUSTER_CONFIG_JSON": string(data)},
		"base64": {"DATACRUNCH_CLUSTER_CONFIG": base64.StdEncoding.EncodeToString(data)},
		"file":   {"DATACRUNCH_CLUSTER_CONFIG_FILE": "testdata/datacrunch-readme.json"},
	} {
		t.Run(name, func(t *testing.T) {
			got, _, ok, err := DataCrunchEnv(func(k string) string { return env[k] })
			if err != nil || !ok {
				t.Fatalf("env: %v %v", ok, err)
			}
			cfg, err := FromDataCrunch("prod", []string{"0:3:1A100.22V:FIN-01:gpu-nodes"}, got)
			if err != nil {
				t.Fatal(err)
			}
			if err := config.Complete(cfg); err != nil {
				t.Fatal(err)
			}
			g := cfg.NodeGroups[0]
			if g.Name != "gpu-nodes" || g.InstanceType != "1A100.22V" || g.Locations[0] != "FIN-01" || g.MaxSize != 3 ||
				g.CapacityPolicy != config.PolicyPreferSpot || g.DiskSizeGiB != 100 || *g.OverrideNumGPUs != 7 ||
				g.Image != "ubuntu-24.04-cuda-12.8-open-docker" || g.CloudOptions["sshKeyIDs"] != "your-ssh-key-id" ||
				g.CloudOptions["pricing"] != "DYNAMIC_PRICE" || g.Taints[0].Key != "gpu-node" || g.Labels["nodepool"] != "gpu" {
				t.Fatalf("converted %+v", g)
			}
			if !cfg.Clouds.Verda.AdoptLegacyInstances {
				t.Error("imported config does not adopt the seed's instances")
			}
		})
	}
}

func TestDataCrunchErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
		nodes            []string
	}{
		{"bad nodes", "", "--nodes[0]", []string{"0:3:1A100.22V:gpu"}},
		{"no nodes", "", "--nodes", nil},
		{"bad option", `{"node_configs":{"p":{"instance_option":"cheapest"}}}`, "node_configs[p].instance_option", []string{"0:1:1V100.6V:FIN-01:p"}},
		{"unknown field", `{"node_configs":{"p":{"instance_optoin":"spot_only"}}}`, "instance_optoin", []string{"0:1:1V100.6V:FIN-01:p"}},
		{"orphan pool", `{"node_configs":{"q":{}}}`, "node_configs[q]", []string{"0:1:1V100.6V:FIN-01:p"}},
		{"trailing comma as in a README example", `{"node_configs":{"p":{"labels":{"nodepool":"spot",}}}}`, "invalid character", []string{"0:1:1V100.6V:FIN-01:p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromDataCrunch("prod", tt.nodes, []byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to name %q", err, tt.want)
			}
		})
	}
	cfg, err := FromDataCrunch("prod", []string{"3:1:1V100.6V:FIN-01:p"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ve *config.ValidationError
	if err := config.Complete(cfg); !errors.As(err, &ve) || !strings.Contains(err.Error(), "nodeGroups[0].maxSize") {
		t.Fatalf("min > max: %v", err)
	}
}

func TestCAVerdaReadme(t *testing.T) {
	data, err := os.ReadFile("testdata/ca-verda-readme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !IsCAVerda(data) {
		t.Fatal("not recognised as ca-verda")
	}
	cfg, err := FromCAVerda("prod", data)
	if err != nil {
		t.Fatal(err)
	}
	if err := config.Complete(cfg); err != nil {
		t.Fatal(err)
	}
	g := cfg.NodeGroups[0]
	if g.Name != "gpu-workers" || g.InstanceType != "1V100.6V" || g.Locations[0] != "FIN-03" || g.MaxSize != 10 ||
		g.CloudOptions["startupScriptID"] != "your-startup-script-id" || g.CloudOptions["contract"] != "PAY_AS_YOU_GO" ||
		g.CloudOptions["pricing"] != "FIXED_PRICE" || g.Labels["verda.com/gpu"] != "v100" || g.CapacityPolicy != config.PolicyOnDemandOnly {
		t.Fatalf("converted %+v", g)
	}
	spot := strings.Replace(string(data), `"PAY_AS_YOU_GO"`, `"SPOT"`, 1)
	cfg, _ = FromCAVerda("prod", []byte(spot))
	if cfg.NodeGroups[0].CapacityPolicy != config.PolicySpotOnly {
		t.Fatalf("SPOT contract became %s", cfg.NodeGroups[0].CapacityPolicy)
	}
	typo := strings.Replace(string(data), "max_size", "maxsize", 1)
	if _, err := FromCAVerda("prod", []byte(typo)); err == nil || !strings.Contains(err.Error(), "maxsize") {
		t.Fatalf("unknown key: %v", err)
	}
	noLoc := strings.Replace(string(data), `    location: "FIN-03"                     # Verda datacenter location`+"\n", "", 1)
	cfg, _ = FromCAVerda("prod", []byte(noLoc))
	if err := config.Complete(cfg); err == nil || !strings.Contains(err.Error(), "nodeGroups[0].locations") {
		t.Fatalf("missing location: %v", err)
	}
}

func TestDotEnv(t *testing.T) {
	p := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(p, []byte("# creds\nVERDA_CLIENT_ID=abc\nexport VERDA_CLIENT_SECRET=\"s e c\"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := DotEnv(p)
	if err != nil || env["VERDA_CLIENT_ID"] != "abc" || env["VERDA_CLIENT_SECRET"] != "s e c" {
		t.Fatalf("%v %v", env, err)
	}
	if env, err := DotEnv(filepath.Join(t.TempDir(), "missing")); err != nil || len(env) != 0 {
		t.Fatalf("missing file: %v %v", env, err)
	}
	if err := os.WriteFile(p, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := DotEnv(p); err == nil || !strings.Contains(err.Error(), ":1") {
		t.Fatalf("bad line: %v", err)
	}
}

// Each seed file is recognised as its own format and as no other; native
// configs and manifests as none of them.
func TestFormatsByContent(t *testing.T) {
	detectors := map[string]func([]byte) bool{
		"kamatera": IsKamateraINI, "ca-verda": IsCAVerda, "datacrunch": IsDataCrunch, "dotenv": IsDotEnv,
	}
	files := map[string]string{
		"testdata/kamatera-readme-disks.ini":             "kamatera",
		"testdata/kamatera-readme-networks.ini":          "kamatera",
		"testdata/ca-verda-readme.yaml":                  "ca-verda",
		"testdata/datacrunch-readme.json":                "datacrunch",
		"testdata/scw-karpenter-provisioner.yaml":        "",
		"../../../examples/sim-quickstart.yaml":          "",
		"../../../examples/baseten-nodeprovisioner.yaml": "",
	}
	contents := map[string][]byte{
		"a .env":                      []byte("# Verda\nexport VERDA_CLIENT_ID=a\n\nVERDA_CLIENT_SECRET='b c'\n"),
		"a DataCrunch trailing comma": []byte(`{"node_configs": {"gpu": {"disk_size_gb": 100,}}}`),
		"YAML with an = in a value":   []byte("clusterName: a=b\n"),
		"only comments":               []byte("# nothing\n"),
	}
	want := map[string]string{"a .env": "dotenv", "a DataCrunch trailing comma": "datacrunch"}
	for path, format := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		contents[path], want[path] = data, format
	}
	for name, data := range contents {
		for format, is := range detectors {
			if got := is(data); got != (want[name] == format) {
				t.Errorf("%s: Is %s = %v", name, format, got)
			}
		}
	}
}
