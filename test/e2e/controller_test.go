package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestNodeProvisionerScalesFromZero: five pending pods that each want one
// GPU make a NodeProvisioner over a 1-GPU group order five nodes, which
// register, and the pods run.
func TestNodeProvisionerScalesFromZero(t *testing.T) {
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/crds"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)

	cfg, err := config.Parse([]byte(`
clusterName: e2e
sync: {period: 1s}
clouds:
  sim: {bootDelay: 1s, deleteDelay: 1s}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sim.NewEngine(*cfg.Clouds.Sim, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acct := engine.Account(cfg.ClusterName)
	core, err := nodegroup.New(cfg, map[string]cloud.Provider{"sim": acct}, nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); core.Wait() }()
	if err := core.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	reg := sim.NewRegistrar(acct, env.Client, sim.RegistrarOptions{Kwok: true, Logger: log})
	go func() { _ = reg.Run(runCtx) }()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &provisioner.Reconciler{Client: mgr.GetClient(), Core: core, Recorder: mgr.GetEventRecorder("gpuscaler"), Logger: log}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(runCtx) }()

	kube, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p := gpuPod(fmt.Sprintf("work-%d", i))
		if _, err := env.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "5 pods Running on 5 new GPU nodes", func() bool {
		pods, err := env.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 5 && len(readyGPUNodes(ctx, env.Client)) == 5
	})
	if n := engine.Count("e2e"); n != 5 {
		t.Fatalf("%d instances ordered for 5 one-GPU pods", n)
	}
	waitFor(t, ctx, "a ScaledUp event", func() bool {
		evs, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=gpus"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ScaledUp" {
				return true
			}
		}
		return false
	})
	waitFor(t, ctx, "the status to report the pool", func() bool {
		var got v1alpha1.NodeProvisioner
		if err := kube.Get(ctx, client.ObjectKey{Name: "gpus"}, &got); err != nil {
			return false
		}
		return got.Status.Nodes == 5 && got.Status.GPUUtilizationPercent == 100 && len(got.Status.Conditions) > 0
	})
}

// TestControllerCommand runs `gpuscaler controller` as a process against
// the cluster: a NodeProvisioner and a pending GPU pod get a node.
func TestControllerCommand(t *testing.T) {
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/crds"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	metricsAddr := loopback(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: ctl
kubeconfig: %q
metrics: {address: %q}
sync: {period: 1s}
clouds:
  sim: {bootDelay: 1s, kubeconfig: %q}
nodeGroups:
  - {name: l40s, cloud: sim, instanceType: 1L40S.20V, locations: [FIN-02], maxSize: 3}
`, env.Kubeconfig, metricsAddr, env.Kubeconfig))
	startGPUScaler(t, env, metricsAddr, "controller", "--config", cfgPath, "--leader-elect=false")
	var obj map[string]any
	if err := yaml.Unmarshal([]byte("apiVersion: gpuscaler.dev/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: l40s}\nspec: {nodeGroups: [l40s]}\n"), &obj); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodeprovisioners")).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("infer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pod Running on a new L40S node", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "infer", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		return err == nil && n.Labels["node.kubernetes.io/instance-type"] == "1L40S.20V"
	})
}
