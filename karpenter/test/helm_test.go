package test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

// A new user's first hour in karpenter mode: on a cluster with Karpenter's
// CRDs (its karpenter-crd chart's part), the real helm installs the chart
// with only mode=karpenter; the operator runs as the chart's ServiceAccount
// with the config and environment the chart rendered (the addresses and
// ports are this test's); the manifest helm's NOTES print is applied as
// printed; and a GPU pod gets a node gpuscaler made.
func TestHelmDefaultsScaleAGPUPod(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{karpenterCRDs(t)}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns, release, name = chartNamespace, "gs", "gs-gpuscaler"
	out, err := env.Helm(ctx, "install", release, "../../deploy/charts/gpuscaler", "--namespace", ns, "--create-namespace", "--set", "mode=karpenter")
	if err != nil {
		t.Fatal(err)
	}
	_, manifest, ok := strings.Cut(out, "kubectl apply -f - <<EOF\n")
	manifest, _, ok2 := strings.Cut(manifest, "  EOF")
	if !ok || !ok2 {
		t.Fatalf("helm install printed no manifest to apply:\n%s", out)
	}
	kube, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	asSA, err := env.AsServiceAccount(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := "127.0.0.1:" + freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := chartenv.InstalledConfig(ctx, env, ns, name, asSA, metricsAddr, cfgPath, nil); err != nil {
		t.Fatal(err)
	}

	// The container's environment as the chart renders it; what the
	// downward API fills in, and the pod's own ports, are this test's.
	var d unstructured.Unstructured
	d.SetAPIVersion("apps/v1")
	d.SetKind("Deployment")
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	vars, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	environ := []string{"KUBECONFIG=" + asSA, "POD_NAMESPACE=" + ns, "POD_NAME=" + name + "-0", "LEADER_ELECTION_NAMESPACE=" + ns}
	for _, v := range vars {
		v := v.(map[string]any)
		value, ok := v["value"].(string)
		if !ok {
			continue
		}
		switch v["name"] {
		case "GPUSCALER_CONFIG":
			value = cfgPath
		case "METRICS_PORT", "HEALTH_PROBE_PORT":
			value = freePort(t)
		}
		environ = append(environ, v["name"].(string)+"="+value)
	}
	startNamedOperator(t, env, "gpuscaler-karpenter", cfgPath, environ...)
	t.Cleanup(func() { noForbidden(t, env, "gpuscaler-karpenter") })

	for _, doc := range strings.Split(manifest, "\n  ---\n") {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatalf("the manifest helm printed: %v\n%s", err, doc)
		}
		if err := kube.Create(ctx, obj); err != nil {
			t.Fatalf("the API server refuses NOTES.txt's %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	one := resource.MustParse("1")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cuda", Image: "cuda",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": one}, Limits: corev1.ResourceList{"nvidia.com/gpu": one}}}}},
	}
	if err := kube.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the GPU pod running on a node gpuscaler made", func() bool {
		if kube.Get(ctx, client.ObjectKeyFromObject(pod), pod) != nil || pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodRunning {
			return false
		}
		n := &corev1.Node{}
		return kube.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, n) == nil && strings.HasPrefix(n.Spec.ProviderID, "sim://")
	})
}
