package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const valid = `
clusterName: test
clouds:
  sim: {}
nodeGroups:
  - name: a
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01]
    maxSize: 3
  - name: b
    cloud: sim
    instanceType: 1A100.22V
    locations: [FIN-01, FIN-02]
    minSize: 1
    maxSize: 2
    mig: {profile: all-1g.10gb}
`

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider.ListenAddress != DefaultListenAddress || cfg.Sync.Period.Duration != DefaultSyncPeriod ||
		*cfg.Sync.CreateRetries != DefaultCreateRetries || cfg.NodeGroups[0].CapacityPolicy != PolicyOnDemandOnly ||
		cfg.NodeGroups[1].MIG.Strategy != MIGStrategyMixed || *cfg.Clouds.Sim.DefaultCapacity != DefaultSimCapacity ||
		!*cfg.Clouds.Sim.Kwok || len(cfg.Clouds.Sim.Locations) != 4 || cfg.Provider.GPULabel != DefaultGPULabel {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
}

// TestInvalidFields changes one field at a time and checks that the error
// names its path.
func TestInvalidFields(t *testing.T) {
	tests := []struct {
		name, from, to, path string
	}{
		{"max below min", "minSize: 1\n    maxSize: 2", "minSize: 3\n    maxSize: 2", "nodeGroups[1].maxSize: Invalid value: 2: must be >= minSize (3)"},
		{"max zero", "maxSize: 3", "maxSize: 0", "nodeGroups[0].maxSize"},
		{"negative min", "minSize: 1", "minSize: -1", "nodeGroups[1].minSize"},
		{"cluster name", "clusterName: test", "clusterName: Bad_Name", "clusterName"},
		{"cluster missing", "clusterName: test", "", "clusterName: Required"},
		{"unknown cloud", "cloud: sim\n    instanceType: 1H100", "cloud: aws\n    instanceType: 1H100", "nodeGroups[0].cloud"},
		{"no instance type", "instanceType: 1H100.80S.30V\n", "instanceType: \"\"\n", "nodeGroups[0].instanceType"},
		{"bad location", "locations: [FIN-01]", "locations: [MARS-01]", "nodeGroups[0].locations[0]"},
		{"dup location", "locations: [FIN-01, FIN-02]", "locations: [FIN-01, FIN-01]", "nodeGroups[1].locations[1]"},
		{"no locations", "locations: [FIN-01]", "locations: []", "nodeGroups[0].locations"},
		{"policy", "maxSize: 3", "maxSize: 3\n    capacityPolicy: cheapest", "nodeGroups[0].capacityPolicy"},
		{"mig strategy", "mig: {profile: all-1g.10gb}", "mig: {profile: all-1g.10gb, strategy: none}", "nodeGroups[1].mig.strategy"},
		{"mig profile", "mig: {profile: all-1g.10gb}", "mig: {strategy: mixed}", "nodeGroups[1].mig.profile"},
		{"dup group", "name: b", "name: a", "nodeGroups[1].name"},
		{"group name", "name: b", "name: B!", "nodeGroups[1].name"},
		{"label key", "maxSize: 3", "maxSize: 3\n    labels: {\"bad key\": x}", "nodeGroups[0].labels[bad key]"},
		{"reserved label", "maxSize: 3", "maxSize: 3\n    labels: {gpuscaler.dev/node-group: x}", "nodeGroups[0].labels[gpuscaler.dev/node-group]"},
		{"taint effect", "maxSize: 3", "maxSize: 3\n    taints: [{key: k, effect: Sometimes}]", "nodeGroups[0].taints[0].effect"},
		{"taint key", "maxSize: 3", "maxSize: 3\n    taints: [{effect: NoSchedule}]", "nodeGroups[0].taints[0].key"},
		{"group cost", "maxSize: 3", "maxSize: 3\n    maxHourlyCost: -1", "nodeGroups[0].maxHourlyCost"},
		{"disk", "maxSize: 3", "maxSize: 3\n    diskSizeGiB: -5", "nodeGroups[0].diskSizeGiB"},
		{"threshold", "maxSize: 3", "maxSize: 3\n    autoscalingOptions: {scaleDownGpuUtilizationThreshold: 1.5}", "nodeGroups[0].autoscalingOptions.scaleDownGpuUtilizationThreshold"},
		{"provision time", "maxSize: 3", "maxSize: 3\n    autoscalingOptions: {maxNodeProvisionTime: 0s}", "nodeGroups[0].autoscalingOptions.maxNodeProvisionTime"},
		{"tls partial", "clusterName: test", "clusterName: test\nprovider: {tls: {certFile: a.crt}}", "provider.tls.caCertFile: Required"},
		{"listen", "clusterName: test", "clusterName: test\nprovider: {listenAddress: nonsense}", "provider.listenAddress"},
		{"fault rate", "sim: {}", "sim: {faultRate: 1.5}", "clouds.sim.faultRate"},
		{"sim capacity", "sim: {}", "sim: {capacity: [{count: -1}]}", "clouds.sim.capacity[0].count"},
		{"no cloud", "clouds:\n  sim: {}", "clouds: {}", "clouds: Required"},
		{"leak action", "clusterName: test", "clusterName: test\nleakedInstances: {action: ignore}", "leakedInstances.action"},
		{"sync period", "clusterName: test", "clusterName: test\nsync: {period: -1s}", "sync.period"},
		{"bootstrap method", "maxSize: 3", "maxSize: 3\n    bootstrap: {method: ansible}", "nodeGroups[0].bootstrap.method"},
		{"bootstrap kubeconfig", "maxSize: 3", "maxSize: 3\n    bootstrap: {method: k3s, server: \"https://a:6443\", tokenSecretRef: {namespace: ns, name: sec, key: tok}}", "kubeconfig: Required"},
		{"kubeadm ca hash", "maxSize: 3", "maxSize: 3\n    bootstrap: {method: kubeadm, server: \"a:6443\", mintToken: true, caCertHash: md5:1}", "nodeGroups[0].bootstrap.caCertHash"},
		{"k3s server", "maxSize: 3", "maxSize: 3\n    bootstrap: {method: k3s, server: \"a:6443\", tokenSecretRef: {namespace: ns, name: sec, key: tok}}", "nodeGroups[0].bootstrap.server"},
		{"server delivery", "maxSize: 3", "maxSize: 3\n    bootstrap: {method: custom, templateFile: t, delivery: server}", "scriptServer.url"},
		{"owner", "maxSize: 3", "maxSize: 3\n    managedBy: karpenter", "nodeGroups[0].managedBy"},
		{"global cost", "clusterName: test", "clusterName: test\nmaxHourlyCost: -3", "maxHourlyCost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(valid, tt.from, tt.to, 1)
			if doc == valid {
				t.Fatalf("test case did not change the document")
			}
			_, err := Parse([]byte(doc))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			if !strings.Contains(err.Error(), tt.path) {
				t.Fatalf("error does not name %q:\n%v", tt.path, err)
			}
		})
	}
}

func TestEveryErrorReported(t *testing.T) {
	doc := strings.Replace(valid, "maxSize: 3", "maxSize: 0\n    capacityPolicy: x", 1)
	doc = strings.Replace(doc, "clusterName: test", "clusterName: \"\"", 1)
	_, err := Parse([]byte(doc))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errs) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
}

func TestUnknownKeys(t *testing.T) {
	for name, doc := range map[string]string{
		"top level": valid + "extra: 1\n",
		"nested":    strings.Replace(valid, "maxSize: 3", "maxsize: 3", 1),
		"cloud":     strings.Replace(valid, "sim: {}", "sim: {sed: 1}", 1),
		"duplicate": strings.Replace(valid, "clusterName: test", "clusterName: test\nclusterName: again", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(doc)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	_, err := Parse([]byte(strings.Replace(valid, "maxSize: 3", "maxsize: 3", 1)))
	if !strings.Contains(err.Error(), "maxsize") {
		t.Fatalf("error does not name the unknown key: %v", err)
	}
}

func TestEmpty(t *testing.T) {
	if _, err := Parse([]byte("  \n")); err == nil {
		t.Fatal("empty config accepted")
	}
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	if b, err := os.ReadFile("../../examples/sim-quickstart.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("clusterName: [1, 2]"))
	f.Add([]byte("nodeGroups: [{}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		if errs := Validate(cfg); len(errs) > 0 {
			t.Fatalf("Parse accepted a config that does not validate: %v", errs)
		}
	})
}
