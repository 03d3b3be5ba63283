package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

// A new user's first hour, in controller mode (the chart's default): the
// real helm installs the chart with no values at all; gpuscaler runs with
// the config the chart rendered, as the chart's ServiceAccount (only the
// addresses a pod would own are this test's); the one manifest helm's
// NOTES print is applied as printed; and a GPU pod is bound to a node
// gpuscaler made on the simulated cloud, which registers its Nodes in
// the cluster because the chart says so.
func TestHelmDefaultsScaleAGPUPod(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, release = "gpuscaler", "gs"
	out, err := env.Helm(ctx, "install", release, chartDir, "--namespace", ns, "--create-namespace")
	if err != nil {
		t.Fatal(err)
	}
	_, manifest, ok := strings.Cut(out, "kubectl apply -f - <<EOF\n")
	manifest, _, ok2 := strings.Cut(manifest, "  EOF")
	if !ok || !ok2 {
		t.Fatalf("helm install printed no manifest to apply:\n%s", out)
	}

	asSA, err := env.AsServiceAccount(ns, release+"-gpuscaler")
	if err != nil {
		t.Fatal(err)
	}
	// Outside a pod, in-cluster is the ServiceAccount's kubeconfig, and
	// the listeners are loopback ports of this test's.
	metricsAddr := loopback(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := chartenv.InstalledConfig(ctx, env, ns, release+"-gpuscaler", asSA, metricsAddr, cfgPath, nil); err != nil {
		t.Fatal(err)
	}
	startGPUScalerLogged(t, env, "gpuscaler", metricsAddr, []string{"POD_NAMESPACE=" + ns}, "controller", "--config", cfgPath)

	var obj map[string]any
	if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
		t.Fatalf("the manifest helm printed: %v\n%s", err, manifest)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodeprovisioners")).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the GPU pod bound to a node gpuscaler made", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "first", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" {
			return false
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		return err == nil && n.Labels["gpuscaler.dev/node-group"] == "h100" && p.Status.Phase == corev1.PodRunning
	})
}
