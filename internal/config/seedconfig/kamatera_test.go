package seedconfig

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// loadKamatera imports an INI file and completes the config as start-up
// does.
func loadKamatera(t *testing.T, data []byte) (*config.Config, error) {
	t.Helper()
	cfg, err := FromKamateraINI(data)
	if err != nil {
		return nil, err
	}
	return cfg, config.Complete(cfg)
}

// TestKamateraREADMEExamples: the README's disk and network examples load
// with the seed's meaning: defaults from [global], repeated keys as lists,
// the seed's size defaults.
func TestKamateraREADMEExamples(t *testing.T) {
	for _, tt := range []struct {
		file           string
		typ            string
		min, max       int
		ng1, ng2       map[string]string
		ng2DiskSizeGiB int
	}{
		{"kamatera-readme-disks.ini", "2A-4096", 1, 254,
			map[string]string{"disks": "size=100", "networks": "name=wan,ip=auto", "scriptBase64": "IyEvYmluL2Jhc2gKZWNobyBqb2luCg=="},
			map[string]string{"disks": "size=100 size=200", "networks": "name=wan,ip=auto", "scriptBase64": "IyEvYmluL2Jhc2gKZWNobyBqb2luCg=="}, 100},
		{"kamatera-readme-networks.ini", "4B-8192", 0, 10,
			map[string]string{"disks": "size=100", "networks": "name=wan,ip=auto"},
			map[string]string{"disks": "size=100", "networks": "name=wan,ip=auto name=lan-12345-abcde,ip=auto"}, 100},
	} {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile("testdata/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := loadKamatera(t, data)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ClusterName != "mycluster" || len(cfg.NodeGroups) != 2 {
				t.Fatalf("config %+v", cfg)
			}
			k := cfg.Clouds.Kamatera
			if k == nil || k.Imported == nil || k.Imported.ClientID != "my-client-id" || k.Imported.Secret != "my-kamatera-secret" {
				t.Fatalf("clouds.kamatera %+v", k)
			}
			for i, want := range []map[string]string{tt.ng1, tt.ng2} {
				g := cfg.NodeGroups[i]
				if g.Cloud != "kamatera" || g.InstanceType != tt.typ || g.Locations[0] != "EU" || g.Image != "ubuntu_server_24.04_64-bit" ||
					g.MinSize != tt.min || g.MaxSize != tt.max || g.CapacityPolicy != config.PolicyOnDemandOnly {
					t.Errorf("group %d: %+v", i, g)
				}
				for key, v := range want {
					if g.CloudOptions[key] != v {
						t.Errorf("group %s cloudOptions[%s] = %q, want %q", g.Name, key, g.CloudOptions[key], v)
					}
				}
			}
			if cfg.NodeGroups[1].DiskSizeGiB != tt.ng2DiskSizeGiB {
				t.Errorf("ng2 diskSizeGiB %d", cfg.NodeGroups[1].DiskSizeGiB)
			}
			// The native form never holds the credentials.
			out, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), "my-kamatera-secret") || strings.Contains(string(out), "my-client-id") {
				t.Fatalf("credentials in the native form:\n%s", out)
			}
		})
	}
}

// TestKamateraServerKeys: every server key reaches the group, per-group
// keys win over defaults, and the password stays out of the native form.
func TestKamateraServerKeys(t *testing.T) {
	ini := `[global]
kamatera-api-client-id = id
kamatera-api-secret = secret
kamatera-api-url = https://cloudcli.example.com
cluster-name = prod
filter-name-prefix = k8s
provider-id-prefix = rke2://
default-password = "Default-pw-1"
default-datacenter = EU
default-image = ubuntu
default-cpu = 2A
default-ram = 4096
default-disk = size=50
default-network = name=wan,ip=auto
default-dailybackup = true

[nodegroup "gpu"]
min-size = 2
max-size = 5
name-prefix = k8s-gpu
password = "Group-pw-2"
ssh-key = "ssh-ed25519 AAAAC3Nza me@host"
datacenter = EU-FR
cpu = 8D
ram = 32768
managed = true
billingcycle = monthly
monthlypackage = t5000
template-label = "team=ml"
template-label = "tier=gpu"
`
	cfg, err := loadKamatera(t, []byte(ini))
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Clouds.Kamatera
	if k.Endpoint != "https://cloudcli.example.com" || k.FilterNamePrefix != "k8s" || k.ProviderIDPrefix != "rke2://" || k.Imported.Passwords["gpu"] != "Group-pw-2" {
		t.Fatalf("clouds.kamatera %+v %+v", k, k.Imported)
	}
	g := cfg.NodeGroups[0]
	want := map[string]string{"disks": "size=50", "networks": "name=wan,ip=auto", "billingCycle": "monthly", "monthlyPackage": "t5000",
		"namePrefix": "k8s-gpu", "sshKey": "ssh-ed25519 AAAAC3Nza me@host", "dailyBackup": "true", "managed": "true"}
	for key, v := range want {
		if g.CloudOptions[key] != v {
			t.Errorf("cloudOptions[%s] = %q, want %q", key, g.CloudOptions[key], v)
		}
	}
	if g.InstanceType != "8D-32768" || g.Locations[0] != "EU-FR" || g.MinSize != 2 || g.MaxSize != 5 || g.Labels["team"] != "ml" || g.Labels["tier"] != "gpu" {
		t.Errorf("group %+v", g)
	}
	out, _ := yaml.Marshal(cfg)
	if strings.Contains(string(out), "pw-") {
		t.Errorf("a password in the native form:\n%s", out)
	}
}

// TestKamateraMalformed: each mistake is refused with the section, the
// key and the reason.
func TestKamateraMalformed(t *testing.T) {
	const head = "[global]\nkamatera-api-client-id = id\nkamatera-api-secret = s\ncluster-name = prod\n" +
		"default-datacenter = EU\ndefault-image = ubuntu\ndefault-cpu = 2A\ndefault-ram = 4096\ndefault-disk = size=100\ndefault-network = name=wan,ip=auto\n"
	for _, tt := range []struct {
		name, ini string
		want      []string
	}{
		{"unknown key", head + "[nodegroup \"ng1\"]\nmin-nodes = 1\n", []string{`section "nodegroup", subsection "ng1", variable "min-nodes"`}},
		{"unknown global key", head + "colour = blue\n[nodegroup \"ng1\"]\n", []string{`section "global", variable "colour"`}},
		{"bad number", head + "[nodegroup \"ng1\"]\nmax-size = ten\n", []string{`[nodegroup "ng1"] max-size: "ten" is not a whole number`}},
		{"bad default number", head + "default-min-size = -\n[nodegroup \"ng1\"]\n", []string{`[global] default-min-size: "-" is not a whole number`}},
		{"bad bool", head + "[nodegroup \"ng1\"]\nmanaged = maybe\n", []string{`failed to parse bool`, `variable "managed"`}},
		{"group name too long", head + "[nodegroup \"a-very-long-group-name\"]\n", []string{`[nodegroup "a-very-long-group-name"]: the name is longer than 15 characters`}},
		{"cluster name too long", strings.Replace(head, "cluster-name = prod", "cluster-name = production-cluster-eu", 1) + "[nodegroup \"ng1\"]\n",
			[]string{`[global] cluster-name: "production-cluster-eu" is longer than 15 characters`}},
		{"missing secret", strings.Replace(head, "kamatera-api-secret = s\n", "", 1) + "[nodegroup \"ng1\"]\n", []string{`[global] kamatera-api-secret: required`}},
		{"missing cluster name", strings.Replace(head, "cluster-name = prod\n", "", 1) + "[nodegroup \"ng1\"]\n", []string{`[global] cluster-name: required`}},
		{"missing image", strings.Replace(head, "default-image = ubuntu\n", "", 1) + "[nodegroup \"ng1\"]\n", []string{`[nodegroup "ng1"] image: required (here, or default-image in [global])`}},
		{"bad ram", head + "[nodegroup \"ng1\"]\nram = 4GB\n", []string{`[nodegroup "ng1"] ram: "4GB" is not a size in MB`}},
		{"spaced disk", head + "[nodegroup \"ng1\"]\ndisk = \"size=100 size=200\"\n", []string{`[nodegroup "ng1"] disk: "size=100 size=200": a spec may not be empty or contain spaces`}},
		{"bad billing", head + "[nodegroup \"ng1\"]\nbillingcycle = weekly\n", []string{`[nodegroup "ng1"] billingcycle: "weekly": want hourly or monthly`}},
		{"bad script", head + "[nodegroup \"ng1\"]\nscript-base64 = \"#!/bin/sh\"\n", []string{`[nodegroup "ng1"] script-base64: not base64`}},
		{"no groups", head, []string{`no node groups`}},
		{"unterminated", head + "[nodegroup \"ng1\"]\nimage = \"ubuntu\n", []string{`string not terminated`}},
		{"bad label", head + "[nodegroup \"ng1\"]\ntemplate-label = team\n", []string{`[nodegroup "ng1"] template-label: "team": want key=value`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromKamateraINI([]byte(tt.ini))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "= s") {
				t.Errorf("the secret in the error: %v", err)
			}
		})
	}
}

// TestKamateraFieldNames: a native validation error is named as the INI
// file writes it.
func TestKamateraFieldNames(t *testing.T) {
	cfg := &config.Config{NodeGroups: []config.NodeGroup{{Name: "ng1"}, {Name: "gpu"}}}
	for path, want := range map[string]string{
		"nodeGroups[1].maxSize":               `[nodegroup "gpu"] max-size`,
		"nodeGroups[0].cloudOptions[disks]":   `[nodegroup "ng1"] disk`,
		"nodeGroups[0].locations[0]":          `[nodegroup "ng1"] datacenter`,
		"nodeGroups[1].labels[team]":          `[nodegroup "gpu"] template-label[team]`,
		"nodeGroups[0]":                       `[nodegroup "ng1"]`,
		"clusterName":                         `[global] cluster-name`,
		"clouds.kamatera.providerIDPrefix":    `[global] provider-id-prefix`,
		"nodeGroups[0].cloudOptions[unknown]": `nodeGroups[0].cloudOptions[unknown]`,
	} {
		if got := KamateraField(cfg, path); got != want {
			t.Errorf("KamateraField(%s) = %q, want %q", path, got, want)
		}
	}
}

// TestKamateraExample: examples/kamatera.ini loads as documented.
func TestKamateraExample(t *testing.T) {
	data, err := os.ReadFile("../../../examples/kamatera.ini")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadKamatera(t, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.NodeGroups) != 2 {
		t.Fatalf("groups %+v", cfg.NodeGroups)
	}
	big, workers := cfg.NodeGroups[0], cfg.NodeGroups[1]
	if big.InstanceType != "16D-65536" || big.MaxSize != 4 || big.CloudOptions["disks"] != "size=200 size=500" || big.Labels["tier"] != "big" {
		t.Errorf("big %+v", big)
	}
	if workers.InstanceType != "4B-8192" || workers.MinSize != 0 || workers.MaxSize != 10 || workers.CloudOptions["scriptBase64"] == "" {
		t.Errorf("workers %+v", workers)
	}
}

// The Kamatera INI is told from a YAML config by its first section
// header, whatever comments come before it.
func TestIsKamateraINI(t *testing.T) {
	for doc, want := range map[string]bool{
		"; comment\n# another\n\n[global]\nkamatera-api-client-id = x\n": true,
		"[nodegroup \"gpu\"]\nmin-size = 0\n":                            true,
		"[NodeGroup \"gpu\"]\n":                                          true,
		"clusterName: prod\nnodeGroups: []\n":                            false,
		"[a, b]\n":                                                       false,
		"[other]\nx = 1\n":                                               false,
		"[global\n":                                                      false,
		"":                                                               false,
	} {
		if got := IsKamateraINI([]byte(doc)); got != want {
			t.Errorf("IsKamateraINI(%q) = %v, want %v", doc, got, want)
		}
	}
}
