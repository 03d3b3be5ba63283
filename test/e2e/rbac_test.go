package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
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
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/charts/gpuscaler/crds"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "gpuscaler"
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.RenderChart("../../deploy/charts/gpuscaler", "gs", ns, map[string]any{"mode": "controller"})
	if err != nil {
		t.Fatal(err)
	}
	var rbac []*unstructured.Unstructured
	sa := ""
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			sa = o.GetName()
			rbac = append(rbac, o)
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	if err := env.Apply(ctx, rbac...); err != nil {
		t.Fatal(err)
	}
	// A kubeconfig that is the ServiceAccount: the admin's credentials
	// impersonating it, so every request is authorized as the SA's.
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + ns + ":" + sa
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	asSA := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, asSA); err != nil {
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
	t.Setenv("POD_NAMESPACE", ns)
	startGPUScaler(t, env, metricsAddr, "controller", "--config", cfgPath)
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
	log, err := os.ReadFile(filepath.Join(env.Dir, "gpuscaler.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "forbidden") {
			t.Errorf("the chart's ServiceAccount lacks a permission: %s", line)
		}
	}
}
