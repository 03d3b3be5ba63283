// Package chartenv renders gpuscaler's Helm chart with Helm's own engine
// and installs what it grants in a test cluster (internal/testenv), so
// that tests run the processes with the chart's RBAC alone. It lives in
// the test module: Helm is a test dependency, not one of gpuscaler's.
package chartenv

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// Render renders the Helm chart in dir as one release, with Helm's
// own engine, after checking values against the chart's values schema as
// helm install does. Objects come in file-name order.
func Render(dir, release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	files, err := renderFiles(dir, release, namespace, values)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[n], "\n---") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", n, err, doc)
			}
			if len(obj.Object) > 0 {
				out = append(out, obj)
			}
		}
	}
	return out, nil
}

// AsServiceAccount installs in env's cluster the ServiceAccounts and RBAC
// objects a chart renders for values as release in namespace (created if
// missing),
// and returns the path of a kubeconfig that is gpuscaler's own
// ServiceAccount (the Deployment's; not provider mode's
// cluster-autoscaler): the admin's credentials impersonating it, so that
// every request is authorized with the chart's grants alone.
func AsServiceAccount(ctx context.Context, e *testenv.Env, chartDir, release, namespace string, values map[string]any) (string, error) {
	accounts, err := InstallRBAC(ctx, e, chartDir, release, namespace, values)
	if err != nil {
		return "", err
	}
	for _, sa := range accounts {
		if !strings.HasSuffix(sa, "-cluster-autoscaler") {
			return e.AsServiceAccount(namespace, sa)
		}
	}
	return "", fmt.Errorf("the chart renders no ServiceAccount of gpuscaler's own: %v", accounts)
}

// InstallRBAC applies to env's cluster the ServiceAccounts, Roles,
// ClusterRoles and their bindings a chart renders for values as release in namespace
// (created if missing), and returns the ServiceAccounts' names.
func InstallRBAC(ctx context.Context, e *testenv.Env, chartDir, release, namespace string, values map[string]any) ([]string, error) {
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	objs, err := Render(chartDir, release, namespace, values)
	if err != nil {
		return nil, err
	}
	var rbac []*unstructured.Unstructured
	var accounts []string
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			accounts = append(accounts, o.GetName())
			rbac = append(rbac, o)
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			rbac = append(rbac, o)
		}
	}
	if len(accounts) == 0 {
		return nil, fmt.Errorf("the chart renders no ServiceAccount")
	}
	return accounts, e.Apply(ctx, rbac...)
}

// Notes renders the chart's NOTES.txt, what helm install prints, for
// values as release in namespace.
func Notes(dir, release, namespace string, values map[string]any) (string, error) {
	files, err := renderFiles(dir, release, namespace, values)
	if err != nil {
		return "", err
	}
	for name, text := range files {
		if strings.HasSuffix(name, "/NOTES.txt") {
			return text, nil
		}
	}
	return "", fmt.Errorf("the chart in %s renders no NOTES.txt", dir)
}

// renderFiles renders every template of the chart in dir, by file name,
// once values pass its schema.
func renderFiles(dir, release, namespace string, values map[string]any) (map[string]string, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ValidateAgainstSchema(c, vals["Values"].(chartutil.Values)); err != nil {
		return nil, err
	}
	return engine.Render(c, vals)
}

// InstalledConfig reads the config a helm install put in the cluster (the
// release's ConfigMap name, key config.yaml) and writes to path the file
// a process outside a pod runs as that pod would: kubeconfig (a
// ServiceAccount's) where the chart says in-cluster, for the cluster and
// the simulated cloud, the metrics on metricsAddr, and edit's changes
// (the listeners and files of the test's own), when edit is not nil. It
// refuses a config that would not reach the cluster in-cluster.
func InstalledConfig(ctx context.Context, e *testenv.Env, namespace, name, kubeconfig, metricsAddr, path string, edit func(cfg map[string]any)) error {
	cm, err := e.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		return err
	}
	clouds, _ := cfg["clouds"].(map[string]any)
	sim, _ := clouds["sim"].(map[string]any)
	if cfg["kubeconfig"] != "in-cluster" || sim["kubeconfig"] != "in-cluster" {
		return fmt.Errorf("the chart's config does not reach the cluster in-cluster: kubeconfig %v, clouds.sim %v", cfg["kubeconfig"], sim)
	}
	cfg["kubeconfig"], sim["kubeconfig"] = kubeconfig, kubeconfig
	cfg["metrics"] = map[string]any{"address": metricsAddr}
	if edit != nil {
		edit(cfg)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	// Whole, as the kubelet swaps a mounted ConfigMap: a process that
	// polls the file never reads it half written.
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".new", path)
}
