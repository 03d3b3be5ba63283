package bootstrap

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	k3sToken  = "K10secretk3stoken::server:0123456789abcdef"
	caHash    = "sha256:0000000000000000000000000000000000000000000000000000000000000abc"
	joinToken = "abcdef.0123456789abcdef"
)

// testConfig has one plain and one MIG group per method.
func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
clusterName: test
kubeconfig: in-cluster
clouds: {sim: {}}
nodeGroups:
  - name: k3s-plain
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01]
    maxSize: 3
    bootstrap: {method: k3s, server: "https://10.0.0.1:6443", tokenSecretRef: {namespace: kube-system, name: k3s, key: token}}
  - name: k3s-mig
    cloud: sim
    instanceType: 2H100.80S.80V
    locations: [FIN-01]
    maxSize: 3
    mig: {profile: all-1g.10gb}
    bootstrap: {method: k3s, server: "https://10.0.0.1:6443", tokenSecretRef: {namespace: kube-system, name: k3s, key: token}}
  - name: kubeadm-plain
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01]
    maxSize: 3
    bootstrap: {method: kubeadm, server: "10.0.0.1:6443", tokenSecretRef: {namespace: kube-system, name: kubeadm, key: token}, caCertHash: "` + caHash + `", kubeletExtraArgs: ["--max-pods=64"]}
  - name: kubeadm-mig
    cloud: sim
    instanceType: 1A100.22V
    locations: [FIN-01]
    maxSize: 3
    mig: {profile: all-balanced}
    bootstrap: {method: kubeadm, server: "10.0.0.1:6443", tokenSecretRef: {namespace: kube-system, name: kubeadm, key: token}, caCertHash: "` + caHash + `"}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serverK3s is the version the test cluster's API server reports, as a
// k3s server does.
const serverK3s = "v1.33.4+k3s1"

func secrets() *fake.Clientset {
	c := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "k3s"}, Data: map[string][]byte{"token": []byte(k3sToken)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm"}, Data: map[string][]byte{"token": []byte(joinToken)}},
	)
	c.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: serverK3s}
	return c
}

// specs are the orders the core would send: the labels and taints of the
// group's template.
func spec(group string) cloud.CreateSpec {
	labels := map[string]string{
		"gpuscaler.dev/node-group": group, "gpuscaler.dev/capacity-type": "on-demand", "kubernetes.io/arch": "amd64",
		"topology.kubernetes.io/zone": "FIN-01", "gpuscaler.dev/accelerator": "h100", "nvidia.com/gpu.count": "1",
	}
	switch group {
	case "k3s-mig":
		labels["nvidia.com/gpu.count"] = "2"
		labels["nvidia.com/mig.config"], labels["nvidia.com/mig.strategy"] = "all-1g.10gb", "mixed"
	case "kubeadm-mig":
		labels["gpuscaler.dev/accelerator"] = "a100-80gb"
		labels["nvidia.com/mig.config"], labels["nvidia.com/mig.strategy"] = "all-balanced", "mixed"
	}
	return cloud.CreateSpec{
		Name: group + "-0123456789", Group: group, Labels: labels,
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}},
	}
}

func render(t *testing.T, r *Renderer, group string) string {
	t.Helper()
	out, err := r.UserData(context.Background(), spec(group))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGolden(t *testing.T) {
	r, err := New(testConfig(t), Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := New(testConfig(t), Options{Kube: secrets(), Formats: map[string]Format{"sim": FormatCloudInit}})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"k3s-plain.sh":           render(t, r, "k3s-plain"),
		"k3s-mig.sh":             render(t, r, "k3s-mig"),
		"kubeadm-plain.sh":       render(t, r, "kubeadm-plain"),
		"kubeadm-mig.sh":         render(t, r, "kubeadm-mig"),
		"k3s-plain.cloud-init":   render(t, ci, "k3s-plain"),
		"kubeadm-mig.cloud-init": render(t, ci, "kubeadm-mig"),
	}
	for name, got := range cases {
		path := filepath.Join("testdata", name+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if got != string(want) {
			t.Errorf("%s differs from %s:\n%s", name, path, got)
		}
	}
}

// TestScriptsPassShellChecks runs bash -n and shellcheck on every rendered
// script. shellcheck comes from Debian's package (make test installs it).
func TestScriptsPassShellChecks(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Fatal("shellcheck is not installed: apt-get install shellcheck (make test does it)")
	}
	r, err := New(testConfig(t), Options{Kube: secrets(), Server: newServer(t, ServerOptions{}), ServerURL: "https://scripts.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	stub, err := execute(r.tpl.stub, stubVars{NodeName: "n", URL: "https://scripts.example.com/v1/scripts/tok"})
	if err != nil {
		t.Fatal(err)
	}
	pinnedStub, err := execute(r.tpl.stub, stubVars{NodeName: "n", URL: "https://scripts.example.com/v1/scripts/tok", CA: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"})
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{"stub": stub, "stub-pinned": pinnedStub}
	for _, g := range []string{"k3s-plain", "k3s-mig", "kubeadm-plain", "kubeadm-mig"} {
		scripts[g] = render(t, r, g)
	}
	dir := t.TempDir()
	for name, s := range scripts {
		path := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(path, []byte(s), 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", name, err, out)
		}
		if out, err := exec.Command("shellcheck", "-s", "bash", path).CombinedOutput(); err != nil {
			t.Errorf("shellcheck %s: %v\n%s", name, err, out)
		}
	}
}

func TestCustomTemplate(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "join.tmpl")
	if err := os.WriteFile(tmpl, []byte("#!/bin/bash\n# {{.Group}} on {{.Cloud}}\nmy-join --id {{.ProviderID}} --labels {{.LabelsArg}} --taints {{.TaintsArg}}\n{{template \"mig\" .}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.NodeGroups[1].Bootstrap = &config.Bootstrap{Method: config.BootstrapCustom, TemplateFile: tmpl, Delivery: config.DeliveryInline, TokenTTL: cfg.NodeGroups[0].Bootstrap.TokenTTL}
	r, err := New(cfg, Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, r, "k3s-mig")
	for _, want := range []string{"my-join --id sim://k3s-mig-0123456789", "nvidia.com/mig.config=all-1g.10gb", "nvidia.com/gpu=present:NoSchedule", "nvidia-smi mig -i \"$gpu\" -cgi 1g.10gb,"} {
		if !strings.Contains(out, want) {
			t.Errorf("custom output lacks %q:\n%s", want, out)
		}
	}
	if err := os.WriteFile(tmpl, []byte("{{.Nope}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ = New(cfg, Options{Kube: secrets()})
	if _, err := r.UserData(context.Background(), spec("k3s-mig")); err == nil {
		t.Fatal("a template naming an unknown variable rendered")
	}
}

func TestGroupsWithoutBootstrapGetNothing(t *testing.T) {
	r, err := New(testConfig(t), Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	s := spec("k3s-plain")
	s.Group = "other"
	if out, err := r.UserData(context.Background(), s); err != nil || out != "" {
		t.Fatalf("got %q, %v", out, err)
	}
}

// TestCloudsOwnProviderID: an order carrying its cloud's own provider-ID
// form (a seed's prefix, a zone and id) hands exactly that to the kubelet.
func TestCloudsOwnProviderID(t *testing.T) {
	r, err := New(testConfig(t), Options{Kube: secrets()})
	if err != nil {
		t.Fatal(err)
	}
	s := spec("k3s-plain")
	s.ProviderID = "rke2://k3s-plain-0123456789"
	out, err := r.UserData(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "provider-id=rke2://k3s-plain-0123456789") || strings.Contains(out, "sim://") {
		t.Fatalf("script does not carry the order's provider ID:\n%s", out)
	}
}

// A k3s group's nodes install the config's release when it names one,
// else the server's; a server that reports no k3s release and no release
// in the config fail the order, saying what to set.
func TestK3sReleaseIsTheServersOrTheConfigs(t *testing.T) {
	notK3s := secrets()
	notK3s.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.34.4"}
	r, err := New(testConfig(t), Options{Kube: notK3s})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.UserData(context.Background(), spec("k3s-plain")); err == nil || !strings.Contains(err.Error(), "bootstrap.version") {
		t.Errorf("a k3s node for a server that is not k3s: %v", err)
	}
	cfg := testConfig(t)
	for i := range cfg.NodeGroups {
		if cfg.NodeGroups[i].Bootstrap.Method == config.BootstrapK3s {
			cfg.NodeGroups[i].Bootstrap.Version = "v1.32.9+k3s2"
		}
	}
	if r, err = New(cfg, Options{Kube: notK3s}); err != nil {
		t.Fatal(err)
	}
	if got := render(t, r, "k3s-plain"); !strings.Contains(got, K3sReleases+"/v1.32.9%2Bk3s2/") {
		t.Errorf("the config's release is not the one installed:\n%s", got)
	}
}
