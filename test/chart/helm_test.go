package chart

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// The chart as an operator meets it: installed, upgraded, rolled back and
// uninstalled with the real helm CLI on a real cluster. Only a real
// install exercises what the engine alone cannot: the CRDs in crds/ go in
// first, lookup finds the provider's TLS Secrets so an upgrade or a
// rollback keeps the certificates cluster-autoscaler already trusts, and
// helm's release history records each step.
func TestHelmInstallUpgradeRollback(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, release = "gpuscaler", "gs"
	helm := func(args ...string) string {
		t.Helper()
		out, err := env.Helm(ctx, append(args, "--namespace", ns)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	values := func(name string, maxSize int) string {
		p := filepath.Join(t.TempDir(), name)
		doc := `mode: provider
config:
  clusterName: helm-test
  clouds: {sim: {}}
  nodeGroups:
    - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: ` + strconv.Itoa(maxSize) + `}
`
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	config := func() string {
		t.Helper()
		cm, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, "gs-gpuscaler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data["config.yaml"]
	}
	certs := func() map[string][]byte {
		t.Helper()
		out := map[string][]byte{}
		for _, which := range []string{"server", "client"} {
			s, err := env.Client.CoreV1().Secrets(ns).Get(ctx, "gs-gpuscaler-"+which+"-tls", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range s.Data {
				out[which+"/"+k] = v
			}
		}
		return out
	}
	sameCerts := func(step string, before map[string][]byte) {
		t.Helper()
		after := certs()
		for k, v := range before {
			if string(after[k]) != string(v) {
				t.Errorf("%s replaced %s: cluster-autoscaler's certificates no longer match", step, k)
			}
		}
	}

	helm("install", release, chartDir, "--create-namespace", "-f", values("v1.yaml", 4))
	if _, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "gs-gpuscaler", metav1.GetOptions{}); err != nil {
		t.Fatalf("no provider Deployment after install: %v", err)
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "gs-gpuscaler-cluster-autoscaler", metav1.GetOptions{}); err != nil {
		t.Fatalf("no cluster-autoscaler Deployment after install: %v", err)
	}
	crd, err := env.Client.Discovery().ServerResourcesForGroupVersion("gpuscaler.dev/v1alpha1")
	if err != nil || len(crd.APIResources) == 0 {
		t.Fatalf("the chart's CRDs were not installed: %v", err)
	}
	if !strings.Contains(config(), "maxSize: 4") {
		t.Fatalf("config after install:\n%s", config())
	}
	installed := certs()

	helm("upgrade", release, chartDir, "-f", values("v2.yaml", 6))
	if !strings.Contains(config(), "maxSize: 6") {
		t.Errorf("config after upgrade:\n%s", config())
	}
	sameCerts("the upgrade", installed)

	helm("rollback", release, "1")
	if !strings.Contains(config(), "maxSize: 4") {
		t.Errorf("config after rollback:\n%s", config())
	}
	sameCerts("the rollback", installed)

	var history []struct {
		Revision int    `json:"revision"`
		Status   string `json:"status"`
	}
	if err := json.Unmarshal([]byte(helm("history", release, "-o", "json")), &history); err != nil {
		t.Fatal(err)
	}
	if len(history) != 3 || history[2].Status != "deployed" || history[0].Status != "superseded" {
		t.Errorf("history %+v, want 3 revisions, the last deployed", history)
	}

	// Certificates near their end are made anew by the next upgrade, and
	// cluster-autoscaler, which reads its own only at start, rolls.
	caAnnotation := func() string {
		t.Helper()
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "gs-gpuscaler-cluster-autoscaler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Annotations["gpuscaler.dev/client-tls"]
	}
	before := caAnnotation()
	soon := strconv.FormatInt(time.Now().Add(24*time.Hour).Unix(), 10)
	for _, which := range []string{"server", "client"} {
		patch := []byte(`{"metadata":{"annotations":{"gpuscaler.dev/not-after":"` + soon + `"}}}`)
		if _, err := env.Client.CoreV1().Secrets(ns).Patch(ctx, "gs-gpuscaler-"+which+"-tls", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	helm("upgrade", release, chartDir, "-f", values("v2.yaml", 6))
	renewed := certs()
	if string(renewed["server/tls.crt"]) == string(installed["server/tls.crt"]) || string(renewed["client/ca.crt"]) != string(renewed["server/ca.crt"]) {
		t.Error("certificates a day from their end were not made anew, or the two no longer share a CA")
	}
	if after := caAnnotation(); after == before || after == "" {
		t.Errorf("cluster-autoscaler's pod template says %q before and %q after new certificates; want it to roll", before, after)
	}

	helm("uninstall", release)
	if _, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "gs-gpuscaler", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("provider Deployment after uninstall: %v", err)
	}
	for _, which := range []string{"server", "client"} {
		if _, err := env.Client.CoreV1().Secrets(ns).Get(ctx, "gs-gpuscaler-"+which+"-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s TLS Secret after uninstall: %v", which, err)
		}
	}
}

// The gpuscaler-crd chart upgrades the CRDs, which Helm never does for a
// chart's crds/ folder: an install of an older copy, then `helm upgrade`
// to this one, leaves this one's CRDs in the cluster. The main chart then
// installs beside it with --skip-crds. Its templates are the CRDs
// controller-gen makes (hack/update-codegen.sh --check in make lint).
func TestCRDChartUpgradesTheCRDs(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "gpuscaler"
	helm := func(args ...string) string {
		t.Helper()
		out, err := env.Helm(ctx, append(args, "--namespace", ns)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const crdChart = "../../deploy/charts/gpuscaler-crd"
	older := filepath.Join(t.TempDir(), "gpuscaler-crd")
	if err := os.CopyFS(older, os.DirFS(crdChart)); err != nil {
		t.Fatal(err)
	}
	const current = "controller-gen.kubebuilder.io/version: v0.23.0"
	names := map[string]string{"gpuscaler.dev_nodeprovisioners.yaml": "nodeprovisioners.gpuscaler.dev", "gpuscaler.dev_gpunodeclasses.yaml": "gpunodeclasses.gpuscaler.dev"}
	for file := range names {
		p := filepath.Join(older, "templates", file)
		doc, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), current) {
			t.Fatalf("%s does not carry %q: update this test", file, current)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(doc), current, "controller-gen.kubebuilder.io/version: v0.0.1", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	version := func(name string) string {
		t.Helper()
		crd, err := dyn.Resource(crds).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return crd.GetAnnotations()["controller-gen.kubebuilder.io/version"]
	}

	helm("install", "gs-crd", older, "--create-namespace")
	for _, name := range names {
		if v := version(name); v != "v0.0.1" {
			t.Fatalf("%s after installing the older chart: %s", name, v)
		}
	}
	helm("upgrade", "gs-crd", crdChart)
	for _, name := range names {
		if v := version(name); v != "v0.23.0" {
			t.Errorf("%s after helm upgrade: %s, want the chart's (v0.23.0)", name, v)
		}
	}
	helm("install", "gs", chartDir, "--skip-crds")
	if _, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "gs-gpuscaler", metav1.GetOptions{}); err != nil {
		t.Fatalf("the main chart beside the CRD chart: %v", err)
	}
}
