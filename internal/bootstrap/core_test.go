package bootstrap_test

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuscaler/gpuscaler/internal/bootstrap"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	gsruntime "github.com/gpuscaler/gpuscaler/internal/runtime"
)

// TestEveryOrderGetsItsScript: the core renders each instance's script
// before ordering it, and the script registers the node with exactly the
// labels and taints of the group's template.
func TestEveryOrderGetsItsScript(t *testing.T) {
	cfg, err := config.Parse([]byte(`
clusterName: test
kubeconfig: in-cluster
sync: {period: 100ms, requestsPerSecond: 1000}
clouds: {sim: {bootDelay: 10ms}}
nodeGroups:
  - name: a100
    cloud: sim
    instanceType: 1A100.22V
    locations: [FIN-01]
    maxSize: 3
    mig: {profile: all-1g.10gb}
    labels: {team: research}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    bootstrap: {method: k3s, server: "https://10.0.0.1:6443", tokenSecretRef: {namespace: kube-system, name: k3s, key: token}}
`))
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "k3s"}, Data: map[string][]byte{"token": []byte("k3s-join-secret")}})
	log := slog.New(slog.DiscardHandler)
	r, err := bootstrap.New(cfg, bootstrap.Options{Kube: kube, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sim.NewEngine(gsruntime.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{"sim": engine.Account("test")}, nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), Bootstrap: r})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); mgr.Wait() }()
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mgr.IncreaseSize(ctx, "a100", 2); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for engine.Count("test") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("instances not ordered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tmpl, err := mgr.Template("a100")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for k, v := range tmpl.Labels {
		want = append(want, k+"="+v)
	}
	sort.Strings(want)
	for _, in := range engine.Instances("test") {
		script, ok := engine.UserData(in.Name)
		if !ok {
			t.Fatalf("no user data for %s", in.Name)
		}
		for _, s := range []string{
			"--kubelet-arg=provider-id=" + in.ProviderID,
			"--kubelet-arg=node-labels=" + strings.Join(want, ","),
			"--kubelet-arg=register-with-taints=nvidia.com/gpu=present:NoSchedule",
			"nvidia-smi mig -i \"$gpu\" -cgi 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb -C",
			"k3s-join-secret",
		} {
			if !strings.Contains(script, s) {
				t.Errorf("%s's script lacks %q", in.Name, s)
			}
		}
	}
}
