package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// RenderChart renders the Helm chart in dir as one release, with Helm's
// own engine, after checking values against the chart's values schema as
// helm install does. Objects come in file-name order.
func RenderChart(dir, release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
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
	files, err := engine.Render(c, vals)
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

// Apply server-side applies objects to the cluster as its admin, and
// returns the first refusal.
func (e *Env) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	force := true
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "gpuscaler-test", Force: &force}); err != nil {
			return fmt.Errorf("the API server refuses %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

// AsChartServiceAccount installs the ServiceAccounts and RBAC objects a
// chart renders for values as release in namespace (created if missing),
// and returns the path of a kubeconfig that is gpuscaler's own
// ServiceAccount (the Deployment's; not provider mode's
// cluster-autoscaler): the admin's credentials impersonating it, so that
// every request is authorized with the chart's grants alone.
func (e *Env) AsChartServiceAccount(ctx context.Context, chartDir, release, namespace string, values map[string]any) (string, error) {
	accounts, err := e.InstallChartRBAC(ctx, chartDir, release, namespace, values)
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

// InstallChartRBAC applies the ServiceAccounts, Roles, ClusterRoles and
// their bindings a chart renders for values as release in namespace
// (created if missing), and returns the ServiceAccounts' names.
func (e *Env) InstallChartRBAC(ctx context.Context, chartDir, release, namespace string, values map[string]any) ([]string, error) {
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	objs, err := RenderChart(chartDir, release, namespace, values)
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
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	if len(accounts) == 0 {
		return nil, fmt.Errorf("the chart renders no ServiceAccount")
	}
	return accounts, e.Apply(ctx, rbac...)
}

// AsServiceAccount returns the path of a kubeconfig that is the
// ServiceAccount namespace/name: the admin's credentials impersonating it
// and its groups.
func (e *Env) AsServiceAccount(namespace, name string) (string, error) {
	kc, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		return "", err
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + namespace + ":" + name
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	}
	path := filepath.Join(e.Dir, namespace+"-"+name+"-sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	return path, nil
}

// Forbidden returns the lines of a log file that report a request the
// API server forbade.
func Forbidden(logPath string) ([]string, error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "forbidden") {
			out = append(out, line)
		}
	}
	return out, nil
}
