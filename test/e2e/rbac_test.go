package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestControllerAsChartServiceAccount proves the chart's RBAC for the
// controller mode: `gpuscaler controller` runs with only what the chart
// grants its ServiceAccount (the process impersonates it) through a
// scale-up and a scale-down, and never hears "forbidden". The simulated
// kubelets register Nodes as the cluster's admin, as real kubelets do with
// their own credentials.
func TestControllerAsChartServiceAccount(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/charts/gpuscaler/crds"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "gpuscaler"
	asSA, err := env.AsChartServiceAccount(ctx, "../../deploy/charts/gpuscaler", "gs", ns, map[string]any{"mode": "controller"})
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := loopback(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: rbac
kubeconfig: %q
metrics: {address: %q}
sync: {period: 1s}
clouds:
  sim: {bootDelay: 1s, deleteDelay: 1s, kubeconfig: %q}
nodeGroups:
  - {name: l40s, cloud: sim, instanceType: 1L40S.20V, locations: [FIN-02], maxSize: 3, managedBy: node-provisioner}
`, asSA, metricsAddr, env.Kubeconfig))
	startGPUScalerLogged(t, env, "gpuscaler", metricsAddr, []string{"POD_NAMESPACE=" + ns}, "controller", "--config", cfgPath)
	var np map[string]any
	if err := yaml.Unmarshal([]byte("apiVersion: gpuscaler.dev/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: l40s}\nspec: {nodeGroups: [l40s], scaleDownDelay: 5s}\n"), &np); err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(ctx, &unstructured.Unstructured{Object: np}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("infer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the leader Lease in the release's namespace", func() bool {
		l, err := env.Client.CoordinationV1().Leases(ns).Get(ctx, "gpuscaler-controller", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
	waitFor(t, ctx, "the pod Running on a new node", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "infer", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	if err := env.Client.CoreV1().Pods("default").Delete(ctx, "infer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the idle node drained and deleted", func() bool { return len(readyGPUNodes(ctx, env.Client)) == 0 })
	waitFor(t, ctx, "the NodeProvisioner's status written", func() bool {
		got, err := env.Client.Discovery().RESTClient().Get().AbsPath("/apis/gpuscaler.dev/v1alpha1/nodeprovisioners/l40s").DoRaw(ctx)
		return err == nil && strings.Contains(string(got), `"status"`)
	})
	forbidden, err := testenv.Forbidden(filepath.Join(env.Dir, "gpuscaler.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range forbidden {
		t.Errorf("the chart's ServiceAccount lacks a permission: %s", line)
	}
}
