package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

// The provider mode's first hour, and its config changes. The real helm
// installs the chart with only mode=provider; gpuscaler and the real
// cluster-autoscaler run the command lines, config, cloud-config and
// certificates the chart put in the cluster, each as its ServiceAccount
// (the files are this test's copies of the Secrets and ConfigMaps, and
// cluster-autoscaler reaches gpuscaler by the Service name of its
// cloud-config through a proxy standing in for the cluster's DNS). A GPU
// pod, as NOTES.txt says, gets a node gpuscaler made.
//
// Then `helm upgrade`s change the config. The provider's pod template
// does not change, so the one pod is never replaced; the kubelet updates
// the mounted file and the process reads it. A change only a restart
// applies, which the schema passes but start-up would refuse (a type the
// catalog lacks), is refused: counted, an Event on the pod, the process
// serving on. A good one passes start-up's checks and the process exits
// 0, for the kubelet to start it again with it, and it serves again.
func TestHelmProviderModeScalesAGPUPodAndSurvivesConfigChanges(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns, release, name = "gpuscaler", "gs", "gs-gpuscaler"
	out, err := env.Helm(ctx, "install", release, chartDir, "--namespace", ns, "--create-namespace", "--set", "mode=provider")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "A pending pod that asks for nvidia.com/gpu now makes a GPU node appear") {
		t.Fatalf("NOTES.txt does not say what to do next in provider mode:\n%s", out)
	}
	kube := env.Client
	gsKube, err := env.AsServiceAccount(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	caKube, err := env.AsServiceAccount(ns, name+"-cluster-autoscaler")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The certificates the chart generated, as its pods mount them.
	tlsFiles := func(secret string) map[string]string {
		t.Helper()
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]string{}
		for _, key := range []string{"tls.crt", "tls.key", "ca.crt"} {
			files[key] = filepath.Join(dir, secret+"-"+key)
			writeFile(t, files[key], string(s.Data[key]))
		}
		return files
	}
	server, client := tlsFiles(name+"-server-tls"), tlsFiles(name+"-client-tls")

	// The kubelet's part: the mounted config follows the ConfigMap. Only
	// what a pod owns is this test's: its listeners, files and access.
	grpcAddr, metricsAddr := loopback(t), loopback(t)
	cfgPath := filepath.Join(dir, "config.yaml")
	mount := func() {
		t.Helper()
		err := chartenv.InstalledConfig(ctx, env, ns, name, gsKube, metricsAddr, cfgPath, func(cfg map[string]any) {
			provider := cfg["provider"].(map[string]any)
			provider["listenAddress"] = grpcAddr
			tls := provider["tls"].(map[string]any)
			tls["certFile"], tls["keyFile"], tls["caCertFile"] = server["tls.crt"], server["tls.key"], server["ca.crt"]
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mount()
	deployment := func(deploy string) (generation int64, c corev1.Container) {
		t.Helper()
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Generation, d.Spec.Template.Spec.Containers[0]
	}
	generation, gs := deployment(name)
	args := replaceFlag(t, gs.Args, "--config=", cfgPath)
	args = append(args, "--config-reload-period=500ms")
	const podName = name + "-5d8c7b9f4-x2x7q"
	environ := []string{"POD_NAMESPACE=" + ns, "POD_NAME=" + podName, "POD_UID=7f6c2a8e-1b1d-4c55-9b0e-2f1f3b6a9c01"}
	proc := startGPUScalerLogged(t, env, "gpuscaler", metricsAddr, environ, args...)

	_, ca := deployment(name + "-cluster-autoscaler")
	cc, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, name+"-cluster-autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cloudConfig map[string]any
	if err := yaml.Unmarshal([]byte(cc.Data["cloud-config.yaml"]), &cloudConfig); err != nil {
		t.Fatal(err)
	}
	cloudConfig["cert"], cloudConfig["key"], cloudConfig["cacert"] = client["tls.crt"], client["tls.key"], client["ca.crt"]
	data, err := yaml.Marshal(cloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	ccPath := filepath.Join(dir, "cloud-config.yaml")
	writeFile(t, ccPath, string(data))
	proxy := serviceProxy(t, map[string]string{cloudConfig["address"].(string): grpcAddr})
	if _, err := env.StartClusterAutoscalerWithEnv(ctx, "cluster-autoscaler", caKube, []string{"HTTPS_PROXY=" + proxy},
		replaceFlag(t, ca.Command[1:], "--cloud-config=", ccPath)...); err != nil {
		t.Fatal(err)
	}
	bound := func(pod string) {
		t.Helper()
		if _, err := kube.CoreV1().Pods("default").Create(ctx, gpuPod(pod), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "GPU pod "+pod+" running on a node gpuscaler made", func() bool {
			p, err := kube.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				return false
			}
			n, err := kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			return err == nil && n.Labels["gpuscaler.dev/node-group"] == "h100"
		})
	}
	bound("first")

	upgrade := func(instanceType string) {
		t.Helper()
		values := filepath.Join(dir, "values-"+instanceType+".yaml")
		writeFile(t, values, `
mode: provider
config:
  clouds:
    sim: {bootDelay: 5s}
  nodeGroups:
    - {name: h100, cloud: sim, instanceType: `+instanceType+`, locations: [FIN-01], minSize: 0, maxSize: 4}
`)
		if _, err := env.Helm(ctx, "upgrade", release, chartDir, "--namespace", ns, "-f", values); err != nil {
			t.Fatal(err)
		}
		if g, _ := deployment(name); g != generation {
			t.Fatalf("helm upgrade changed the provider's pod template (generation %d to %d): its only pod would be replaced", generation, g)
		}
		mount()
	}
	upgrade("9Z100.1V")
	waitFor(t, ctx, "the bad change counted as refused", func() bool {
		return value(scrape(t, metricsAddr), "gpuscaler_config_reloads_total", map[string]string{"result": "refused"}) == 1
	})
	waitFor(t, ctx, "a ConfigRejected Event on the pod naming the type", func() bool {
		list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == podName && e.Reason == "ConfigRejected" && strings.Contains(e.Note, "9Z100.1V") {
				return true
			}
		}
		return false
	})
	select {
	case <-proc.done:
		t.Fatalf("gpuscaler exited on a config start-up would refuse: %v", proc.err)
	default:
	}
	if got := value(scrape(t, metricsAddr), "gpuscaler_config_reloads_total", map[string]string{"result": "restart"}); got != 0 {
		t.Fatalf("restarts %v after a refused change", got)
	}

	upgrade("1H100.80S.30V")
	select {
	case <-proc.done:
		if proc.err != nil {
			t.Fatalf("gpuscaler exited to apply a good change with %v, want status 0", proc.err)
		}
	case <-ctx.Done():
		t.Fatal("gpuscaler did not exit to apply a change that needs a restart")
	}
	if !logHas(t, filepath.Join(env.Dir, "gpuscaler.log"), "exiting to start again with the changed configuration") {
		t.Fatal("gpuscaler's log does not say why it exited")
	}
	// The kubelet starts the container again, in the same pod.
	startGPUScalerLogged(t, env, "gpuscaler-restarted", metricsAddr, environ, args...)
	bound("second")
}

// replaceFlag returns args with the one --flag=value argument that starts
// with prefix given value instead.
func replaceFlag(t *testing.T, args []string, prefix, value string) []string {
	t.Helper()
	out := append([]string(nil), args...)
	for i, a := range out {
		if strings.HasPrefix(a, prefix) {
			out[i] = prefix + value
			return out
		}
	}
	t.Fatalf("no %s... in %v", prefix, args)
	return nil
}
