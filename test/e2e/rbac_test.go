package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
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
	asSA, err := chartenv.AsServiceAccount(ctx, env, "../../deploy/charts/gpuscaler", "gs", ns, map[string]any{"mode": "controller"})
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

// TestChartRBACRefuses runs as each ServiceAccount the chart makes, on a
// real API server, and tries what a taken pod would want: every write an
// attacker could turn against the cluster is refused, and what the code
// needs still goes through.
func TestChartRBACRefuses(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const chart = "../../deploy/charts/gpuscaler"
	admin := env.Client
	for _, ns := range []string{"tenant-a"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cloud-admin"}, StringData: map[string]string{"key": "v"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "join-token"}, StringData: map[string]string{"token": "v"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "database"}, StringData: map[string]string{"password": "v"}},
	} {
		if _, err := admin.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns"}, Data: map[string]string{"Corefile": ".:53 {}"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "serving"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	as := func(ns, sa string) kubernetes.Interface {
		t.Helper()
		path, err := env.AsServiceAccount(ns, sa)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	type try struct {
		what    string
		allowed bool
		call    func(kubernetes.Interface) error
	}
	check := func(who string, c kubernetes.Interface, tries []try) {
		t.Helper()
		for _, tr := range tries {
			err := tr.call(c)
			switch {
			case tr.allowed && err != nil:
				t.Errorf("%s: %s: %v", who, tr.what, err)
			case !tr.allowed && !apierrors.IsForbidden(err):
				t.Errorf("%s: %s: want forbidden, got %v", who, tr.what, err)
			}
		}
	}
	cm := func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"status": "x"}}
	}
	lease := func(ns, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}

	// Provider mode: cluster-autoscaler and gpuscaler.
	const ns = "gpuscaler"
	if _, err := chartenv.InstallRBAC(ctx, env, chart, "gs", ns, map[string]any{"mode": "provider"}); err != nil {
		t.Fatal(err)
	}
	check("cluster-autoscaler", as(ns, "gs-gpuscaler-cluster-autoscaler"), []try{
		{"edit kube-system's CoreDNS ConfigMap", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Update(ctx, cm("kube-system", "coredns"), metav1.UpdateOptions{})
			return err
		}},
		{"create a ConfigMap in kube-system", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, cm("kube-system", "aws-auth"), metav1.CreateOptions{})
			return err
		}},
		{"read kube-scheduler's leader Lease", false, func(c kubernetes.Interface) error {
			_, err := c.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{})
			return err
		}},
		{"take kube-scheduler's leader Lease", false, func(c kubernetes.Interface) error {
			_, err := c.CoordinationV1().Leases("kube-system").Update(ctx, lease("kube-system", "kube-scheduler"), metav1.UpdateOptions{})
			return err
		}},
		{"list Secrets", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create its status ConfigMap", true, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm(ns, "cluster-autoscaler-status"), metav1.CreateOptions{})
			return err
		}},
		{"update its status ConfigMap", true, func(c kubernetes.Interface) error {
			got, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cluster-autoscaler-status", metav1.GetOptions{})
			if err == nil {
				_, err = c.CoreV1().ConfigMaps(ns).Update(ctx, got, metav1.UpdateOptions{})
			}
			return err
		}},
		{"read another ConfigMap of its namespace", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "gs-gpuscaler", metav1.GetOptions{})
			return err
		}},
		{"create and renew its leader Lease", true, func(c kubernetes.Interface) error {
			got, err := c.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "cluster-autoscaler"), metav1.CreateOptions{})
			if err == nil {
				_, err = c.CoordinationV1().Leases(ns).Update(ctx, got, metav1.UpdateOptions{})
			}
			return err
		}},
	})
	check("gpuscaler (provider)", as(ns, "gs-gpuscaler"), []try{
		{"list kube-system's Secrets", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"read a Secret", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").Get(ctx, "cloud-admin", metav1.GetOptions{})
			return err
		}},
		{"patch a Node", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Nodes().Patch(ctx, "serving", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"take a leader Lease", false, func(c kubernetes.Interface) error {
			_, err := c.CoordinationV1().Leases(ns).Create(ctx, lease(ns, "gpuscaler-controller"), metav1.CreateOptions{})
			return err
		}},
		{"create a ConfigMap (no group has standby.forecast)", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm(ns, "gpuscaler-standby-forecast"), metav1.CreateOptions{})
			return err
		}},
		{"list Nodes", true, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		}},
	})

	// A bootstrap that mints tokens and reads a tokenSecretRef.
	const mintNS = "gpuscaler-mint"
	values := map[string]any{"mode": "controller", "config": map[string]any{
		"clusterName": "rbac", "clouds": map[string]any{"sim": map[string]any{}},
		"nodeGroups": []any{
			map[string]any{"name": "mint", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 2,
				"bootstrap": map[string]any{"method": "kubeadm", "server": "10.0.0.1:6443", "mintToken": true}},
			map[string]any{"name": "ref", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 2,
				"bootstrap": map[string]any{"method": "k3s", "server": "https://10.0.0.1:6443",
					"tokenSecretRef": map[string]any{"namespace": "tenant-a", "name": "join-token", "key": "token"}}},
			map[string]any{"name": "pool", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 2,
				"standby": map[string]any{"size": 1, "forecast": map[string]any{"maxSize": 2}}},
		},
	}}
	if _, err := chartenv.InstallRBAC(ctx, env, chart, "gm", mintNS, values); err != nil {
		t.Fatal(err)
	}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-abcdef", Labels: map[string]string{"gpuscaler.dev/managed-by": "gpuscaler"}},
		Type: corev1.SecretTypeBootstrapToken, StringData: map[string]string{"token-id": "abcdef", "token-secret": "0123456789abcdef"}}
	// A service-account token for an account that can do anything: with
	// create and a read of Secrets, this was a path to cluster-admin.
	saToken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "escalate",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "clusterrole-aggregation-controller"},
		Labels:      map[string]string{"gpuscaler.dev/managed-by": "gpuscaler"}}, Type: corev1.SecretTypeServiceAccountToken}
	gm := as(mintNS, "gm-gpuscaler")
	// The admission policy is in force once the API server has loaded it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := gm.CoreV1().Secrets("kube-system").Create(ctx, saToken, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "bootstrap-token") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bootstrap-token admission policy is not in force after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	check("gpuscaler (bootstrap)", gm, []try{
		{"mint a bootstrap token", true, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").Create(ctx, token, metav1.CreateOptions{})
			return err
		}},
		{"list its tokens", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "gpuscaler.dev/managed-by=gpuscaler"})
			return err
		}},
		{"read its token back", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").Get(ctx, token.Name, metav1.GetOptions{})
			return err
		}},
		{"delete a token", true, func(c kubernetes.Interface) error {
			return c.CoreV1().Secrets("kube-system").Delete(ctx, token.Name, metav1.DeleteOptions{})
		}},
		{"create a service-account token for a powerful account", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").Create(ctx, saToken, metav1.CreateOptions{})
			return err
		}},
		{"create a plain Secret in kube-system", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system",
				Name: "bootstrap-token-zzzzzz", Labels: map[string]string{"gpuscaler.dev/managed-by": "gpuscaler"}}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
			return err
		}},
		{"create a bootstrap token not labelled as gpuscaler's", false, func(c kubernetes.Interface) error {
			other := token.DeepCopy()
			other.Labels = nil
			_, err := c.CoreV1().Secrets("kube-system").Create(ctx, other, metav1.CreateOptions{})
			return err
		}},
		{"delete another Secret of kube-system", false, func(c kubernetes.Interface) error {
			return c.CoreV1().Secrets("kube-system").Delete(ctx, "cloud-admin", metav1.DeleteOptions{})
		}},
		{"watch kube-system's Secrets", false, func(c kubernetes.Interface) error {
			w, err := c.CoreV1().Secrets("kube-system").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"get a Secret of kube-system by name", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("kube-system").Get(ctx, "cloud-admin", metav1.GetOptions{})
			return err
		}},
		{"read the join token it is given", true, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("tenant-a").Get(ctx, "join-token", metav1.GetOptions{})
			return err
		}},
		{"read another Secret of that namespace", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("tenant-a").Get(ctx, "database", metav1.GetOptions{})
			return err
		}},
		{"list the Secrets of that namespace", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets("tenant-a").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create, read and replace the forecasts' ConfigMap", true, func(c kubernetes.Interface) error {
			got, err := c.CoreV1().ConfigMaps(mintNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gpuscaler-forecast"}}, metav1.CreateOptions{})
			if err == nil {
				got, err = c.CoreV1().ConfigMaps(mintNS).Get(ctx, got.Name, metav1.GetOptions{})
			}
			if err == nil {
				_, err = c.CoreV1().ConfigMaps(mintNS).Update(ctx, got, metav1.UpdateOptions{})
			}
			return err
		}},
		{"create, read and replace the standby forecasts' ConfigMap", true, func(c kubernetes.Interface) error {
			got, err := c.CoreV1().ConfigMaps(mintNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gpuscaler-standby-forecast"}}, metav1.CreateOptions{})
			if err == nil {
				got, err = c.CoreV1().ConfigMaps(mintNS).Get(ctx, got.Name, metav1.GetOptions{})
			}
			if err == nil {
				_, err = c.CoreV1().ConfigMaps(mintNS).Update(ctx, got, metav1.UpdateOptions{})
			}
			return err
		}},
		{"read another ConfigMap of its namespace", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(mintNS).Get(ctx, "gm-gpuscaler", metav1.GetOptions{})
			return err
		}},
		{"list the ConfigMaps of its namespace", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(mintNS).List(ctx, metav1.ListOptions{})
			return err
		}},
	})
}
