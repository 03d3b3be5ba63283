package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

// realCA is a test cluster where the real cluster-autoscaler (built by
// hack/testbins from upstream's source) drives `gpuscaler provider` over
// mTLS, each as the chart deploys it in provider mode: its own
// ServiceAccount and RBAC, the chart's command line and cloud-config (with
// the addresses and files of this test).
type realCA struct {
	env         *testenv.Env
	metricsAddr string
	ca          *testenv.ClusterAutoscaler
}

const (
	caRelease   = "gs"
	caNamespace = "gpuscaler"
)

// startRealCA starts the cluster, the provider (syncing every syncPeriod)
// with nodeGroups on the simulated cloud configured by simCloud (YAML
// flow-map entries), and cluster-autoscaler with the chart's arguments and
// then caArgs.
func startRealCA(t *testing.T, ctx context.Context, syncPeriod time.Duration, simCloud, nodeGroups string, caArgs ...string) *realCA {
	t.Helper()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true})
	// The groups go into the chart's values as they would be installed:
	// some grants depend on them (a standby pool's Node patch).
	var groups []any
	if err := yaml.Unmarshal([]byte(nodeGroups), &groups); err != nil {
		t.Fatal(err)
	}
	values := map[string]any{"mode": "provider", "config": map[string]any{"clusterName": "realca",
		"clouds": map[string]any{"sim": map[string]any{}}, "nodeGroups": groups}}
	accounts, err := chartenv.InstallRBAC(ctx, env, chartDir, caRelease, caNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	var gsKube, caKube string
	for _, sa := range accounts {
		kc, err := env.AsServiceAccount(caNamespace, sa)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(sa, "-cluster-autoscaler") {
			caKube = kc
		} else {
			gsKube = kc
		}
	}
	if gsKube == "" || caKube == "" {
		t.Fatalf("the chart's ServiceAccounts in provider mode: %v", accounts)
	}
	dir := t.TempDir()
	tlsFiles, err := testenv.IssueMTLS(dir, "cluster-autoscaler")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, metricsAddr := loopback(t), loopback(t)
	cfgPath := filepath.Join(dir, "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: realca
kubeconfig: %q
provider:
  listenAddress: %q
  tls: {certFile: %q, keyFile: %q, caCertFile: %q, clientNames: [cluster-autoscaler]}
metrics: {address: %q}
sync: {period: %s}
clouds:
  sim: {kubeconfig: %q, %s}
nodeGroups:
%s`, gsKube, grpcAddr, tlsFiles.ServerCert, tlsFiles.ServerKey, tlsFiles.CA, metricsAddr, syncPeriod, env.Kubeconfig, simCloud, nodeGroups))
	startProvider(t, env, cfgPath, metricsAddr)

	args, cloudConfig := chartAutoscaler(t, values)
	cloudConfig["address"] = grpcAddr
	cloudConfig["cert"], cloudConfig["key"], cloudConfig["cacert"] = tlsFiles.ClientCert, tlsFiles.ClientKey, tlsFiles.CA
	ccPath := filepath.Join(dir, "cloud-config.yaml")
	data, err := yaml.Marshal(cloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ccPath, string(data))
	for i, a := range args {
		if strings.HasPrefix(a, "--cloud-config=") {
			args[i] = "--cloud-config=" + ccPath
		}
	}
	ca, err := env.StartClusterAutoscaler(ctx, "cluster-autoscaler", caKube, append(args, caArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &realCA{env: env, metricsAddr: metricsAddr, ca: ca}
}

// chartAutoscaler returns the arguments of the chart's cluster-autoscaler
// container (after the binary) and its cloud-config.
func chartAutoscaler(t *testing.T, values map[string]any) ([]string, map[string]any) {
	t.Helper()
	objs, err := chartenv.Render(chartDir, caRelease, caNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	var cloudConfig map[string]any
	for _, o := range objs {
		if !strings.HasSuffix(o.GetName(), "-cluster-autoscaler") {
			continue
		}
		switch o.GetKind() {
		case "Deployment":
			containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if err != nil || len(containers) != 1 {
				t.Fatalf("the chart's cluster-autoscaler containers: %v %v", containers, err)
			}
			cmd, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "command")
			if err != nil || len(cmd) < 2 {
				t.Fatalf("the chart's cluster-autoscaler command: %v %v", cmd, err)
			}
			args = cmd[1:]
		case "ConfigMap":
			cc, _, err := unstructured.NestedString(o.Object, "data", "cloud-config.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal([]byte(cc), &cloudConfig); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(args) == 0 || cloudConfig == nil {
		t.Fatal("the chart renders no cluster-autoscaler Deployment and cloud-config in provider mode")
	}
	return args, cloudConfig
}

// creates is how many creates the provider sent to the cloud.
func (r *realCA) creates(t *testing.T) float64 {
	return value(scrape(t, r.metricsAddr), "gpuscaler_cloud_api_calls_total", map[string]string{"operation": "create"})
}

// live is how many instances of group the provider counts, booting or
// running (not deleting).
func (r *realCA) live(t *testing.T, group string) float64 {
	mfs := scrape(t, r.metricsAddr)
	return value(mfs, "gpuscaler_nodegroup_instances", map[string]string{"group": group, "state": "creating"}) +
		value(mfs, "gpuscaler_nodegroup_instances", map[string]string{"group": group, "state": "running"})
}

// TestRealClusterAutoscalerScalesFromAndToZero: the real cluster-autoscaler
// scales a GPU group from zero for two pending one-GPU pods, through GPU
// nodes that register Ready before their GPUs appear and flap NotReady
// once, then back to zero once the pods are gone. At no moment are there
// more instances than pods, two creates in all, and neither ServiceAccount
// is refused anything.
func TestRealClusterAutoscalerScalesFromAndToZero(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r := startRealCA(t, ctx, 2*time.Second, "bootDelay: 2s, deleteDelay: 1s, gpuReadyDelay: 8s, readyFlaps: 1",
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 4, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}\n",
		"--scan-interval=2s", "--scale-down-unneeded-time=5s", "--scale-down-delay-after-add=5s",
		"--scale-down-delay-after-delete=1s", "--max-node-provision-time=3m", "--v=3")

	var mu sync.Mutex
	most := 0
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if n := int(r.live(t, "h100")); n > 0 {
				mu.Lock()
				most = max(most, n)
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	pods := r.env.Client.CoreV1().Pods("default")
	for i := range 2 {
		if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("infer-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "both pods running on GPU nodes", func() bool { return runningPods(ctx, pods) == 2 })
	time.Sleep(10 * time.Second) // a few more loops with every pod placed
	stopWatch()
	<-watched
	if most != 2 {
		t.Errorf("at most %d instances at a time for two one-GPU pods, want 2", most)
	}
	if n := r.creates(t); n != 2 {
		t.Errorf("%v creates for two pods, want 2", n)
	}

	for i := range 2 {
		if err := pods.Delete(ctx, fmt.Sprintf("infer-%d", i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "cluster-autoscaler scaling the group to zero", func() bool {
		nodes, err := r.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(nodes.Items) == 0 && r.live(t, "h100") == 0
	})
	if n := value(scrape(t, r.metricsAddr), "gpuscaler_nodegroup_target_size", map[string]string{"group": "h100"}); n != 0 {
		t.Errorf("target size %v after the scale-down, want 0", n)
	}
	r.assertNotForbidden(t)
}

// TestRealClusterAutoscalerAndSlowBoots: a group at minSize 1 whose
// instance boots for longer than cluster-autoscaler's
// --max-node-provision-time. cluster-autoscaler takes it for a node that
// will never register and asks to delete it (with
// --force-delete-unregistered-nodes, through ForceDeleteNodes, then
// DeleteNodes): gpuscaler keeps it, never buys a second one, and the node
// joins once booted (defect 1 of issue 33).
func TestRealClusterAutoscalerAndSlowBoots(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%v", force), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			r := startRealCA(t, ctx, 2*time.Second, "bootDelay: 60s, deleteDelay: 1s",
				"  - {name: slow, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 1, maxSize: 3}\n",
				"--scan-interval=2s", "--max-node-provision-time=10s", fmt.Sprintf("--force-delete-unregistered-nodes=%v", force), "--v=3")
			waitFor(t, ctx, "the minimum ordered", func() bool { return r.live(t, "slow") == 1 })
			deadline := time.Now().Add(40 * time.Second) // past the provision time, before the boot ends
			for time.Now().Before(deadline) {
				if n := r.live(t, "slow"); n != 1 {
					t.Fatalf("%v live instances while the first boots, want the 1 of minSize", n)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if !logHas(t, r.ca.Log, "Found longUnregistered Nodes") {
				t.Fatalf("cluster-autoscaler never took the booting instance for long unregistered; the test proves nothing")
			}
			if force && !logHas(t, filepath.Join(r.env.Dir, "gpuscaler.log"), "method=NodeGroupDeleteNodes code=InvalidArgument") {
				t.Fatalf("cluster-autoscaler never asked to delete the booting instance below minSize; the test proves nothing")
			}
			waitFor(t, ctx, "the node registered", func() bool {
				nodes, err := r.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				return err == nil && len(nodes.Items) == 1
			})
			if n := r.creates(t); n != 1 {
				t.Errorf("%v creates for a group at minSize 1, want 1", n)
			}
			r.assertNotForbidden(t)
		})
	}
}

// assertNotForbidden fails the test for every request the API server
// refused either ServiceAccount.
func (r *realCA) assertNotForbidden(t *testing.T) {
	t.Helper()
	for _, log := range []string{filepath.Join(r.env.Dir, "gpuscaler.log"), r.ca.Log} {
		forbidden, err := testenv.Forbidden(log)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range forbidden {
			t.Errorf("the chart's RBAC lacks a permission (%s): %s", filepath.Base(log), line)
		}
	}
}

func logHas(t *testing.T, path, s string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s)
}
