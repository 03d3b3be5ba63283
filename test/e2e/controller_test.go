package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodeindex"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// controllerEnv is a real cluster with the core, the simulated kubelet and
// the NodeProvisioner controller running in the test process.
type controllerEnv struct {
	env    *testenv.Env
	engine *sim.Engine
	acct   *sim.Cloud
	kube   client.Client
}

// startController starts a cluster, the core over the simulated cloud with
// groups, its kubelets (playing out the GPU start-up given, if any) and the
// NodeProvisioner controller.
func startController(t testing.TB, ctx context.Context, groups string, gpuStartup ...sim.GPUStartup) *controllerEnv {
	t.Helper()
	return startControllerOn(t, ctx, "{bootDelay: 1s, deleteDelay: 1s}", groups, gpuStartup...)
}

// startControllerOn is startController on a simulated cloud of the given
// clouds.sim section.
func startControllerOn(t testing.TB, ctx context.Context, simSection, groups string, gpuStartup ...sim.GPUStartup) *controllerEnv {
	t.Helper()
	return startControllerWith(t, ctx, simSection, groups, nil, gpuStartup...)
}

// startControllerWith is startControllerOn with the NodeProvisioner
// controller's Forecaster made by forecaster (nil: none).
func startControllerWith(t testing.TB, ctx context.Context, simSection, groups string, forecaster func(*testenv.Env) *provisioner.Forecaster,
	gpuStartup ...sim.GPUStartup) *controllerEnv {
	t.Helper()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/crds"}})
	log := slog.New(slog.DiscardHandler)
	cfg, err := config.Parse([]byte(`
clusterName: e2e
sync: {period: 1s}
clouds:
  sim: ` + simSection + `
nodeGroups:
` + groups))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acct := engine.Account(cfg.ClusterName)
	var fc *provisioner.Forecaster
	if forecaster != nil {
		fc = forecaster(env)
	}
	runCtx, kube := runController(t, ctx, env, cfg, map[string]cloud.Provider{"sim": acct}, nil, fc)
	opts := sim.RegistrarOptions{Kwok: true, Logger: log}
	if len(gpuStartup) > 0 {
		opts.GPUStartup = gpuStartup[0]
	}
	reg := sim.NewRegistrar(acct, env.Client, opts)
	go func() { _ = reg.Run(runCtx) }()
	return &controllerEnv{env: env, engine: engine, acct: acct, kube: kube}
}

// runController runs the core of cfg over the clouds, rendering startup
// scripts with boot (nil: none), and the NodeProvisioner controller with
// the Forecaster fc (nil: none) against env, until the test ends; it
// returns their context and a client that knows the CRDs.
func runController(t testing.TB, ctx context.Context, env *testenv.Env, cfg *config.Config, clouds map[string]cloud.Provider, boot nodegroup.Bootstrapper,
	fc *provisioner.Forecaster) (context.Context, client.Client) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	nodes := nodeindex.New(env.Client, log, metav1.NamespaceDefault)
	// As the controller command: Events of instances without a Node go on
	// their pool's NodeProvisioner.
	var pools atomic.Pointer[provisioner.Reconciler]
	nodes.SetGroupObject(func(group string) *corev1.ObjectReference {
		if r := pools.Load(); r != nil {
			return r.PoolOf(group)
		}
		return nil
	})
	core, err := nodegroup.New(cfg, clouds, nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), Bootstrap: boot, Nodes: nodes, Events: nodes})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); core.Wait() })
	go func() { _ = nodes.Run(runCtx) }()
	if err := core.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	scheme := newScheme(t)
	skip := true // several managers live in one test process
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: crconfig.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	r := &provisioner.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Core: inforce.Fixed[provisioner.Core](core), Recorder: mgr.GetEventRecorder("gpuscaler"), Logger: log,
		Forecaster: fc}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	pools.Store(r)
	go func() { _ = mgr.Start(runCtx) }()
	return runCtx, controllerClient(t, env)
}

// An order every offering refuses has no Node to carry its Event: it goes
// on the NodeProvisioner whose pool the group is, where `kubectl describe
// nodeprovisioner` shows it, naming the group and instance.
func TestOrderWithoutANodeIsAnEventOnItsPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// One instance fits the location: the first order takes it, the
	// offerings still say there is room, and the next orders meet the
	// stock-out as they are made.
	c := startControllerOn(t, ctx, "{bootDelay: 1s, deleteDelay: 1s, defaultCapacity: 1}",
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n")
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "stocked-out"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}}
	if err := c.kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.env.Client.CoreV1().Pods("default").Create(ctx, gpuPod(fmt.Sprintf("waits-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "a ScaleUpFailed Event on the NodeProvisioner naming the group", func() bool {
		evs, err := c.env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=stocked-out"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ScaleUpFailed" && e.Regarding.Kind == "NodeProvisioner" && e.Regarding.UID == np.UID &&
				strings.HasPrefix(e.Note, "group h100, instance ") {
				return true
			}
		}
		return false
	})
}

func newScheme(t testing.TB) *runtime.Scheme {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// controllerClient is a client of the test cluster that knows
// NodeProvisioners.
func controllerClient(t testing.TB, env *testenv.Env) client.Client {
	kube, err := client.New(env.Config, client.Options{Scheme: newScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// TestNodeProvisionerScalesFromZero: five pending pods that each want one
// GPU make a NodeProvisioner over a 1-GPU group order five nodes, which
// register, and the pods run.
func TestNodeProvisionerScalesFromZero(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n")
	env, engine, kube := c.env, c.engine, c.kube
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p := gpuPod(fmt.Sprintf("work-%d", i))
		if _, err := env.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "5 pods Running on 5 new GPU nodes", func() bool {
		pods, err := env.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 5 && len(readyGPUNodes(ctx, env.Client)) == 5
	})
	if n := engine.Count("e2e"); n != 5 {
		t.Fatalf("%d instances ordered for 5 one-GPU pods", n)
	}
	waitFor(t, ctx, "a ScaledUp event", func() bool {
		evs, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=gpus"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ScaledUp" {
				return true
			}
		}
		return false
	})
	waitFor(t, ctx, "the status to report the pool", func() bool {
		var got v1alpha1.NodeProvisioner
		if err := kube.Get(ctx, client.ObjectKey{Name: "gpus"}, &got); err != nil {
			return false
		}
		if len(got.Status.Groups) != 1 || got.Status.Groups[0].GPUsRequested == nil || got.Status.Groups[0].GPUsRequested.Value() != 5 {
			return false
		}
		return got.Status.Nodes == 5 && got.Status.GPUUtilizationPercent == 100 && len(got.Status.Conditions) > 0
	})
	// Deleting the pool releases its group: its instances go, then the object.
	if err := kube.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pool's instances deleted and the NodeProvisioner gone", func() bool {
		var got v1alpha1.NodeProvisioner
		err := kube.Get(ctx, client.ObjectKey{Name: "gpus"}, &got)
		return engine.Count("e2e") == 0 && apierrors.IsNotFound(err)
	})
}

// TestControllerCommand runs `gpuscaler controller` as a process against
// the cluster: a NodeProvisioner and a pending GPU pod get a node.
func TestControllerCommand(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/crds"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	metricsAddr := loopback(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: ctl
kubeconfig: %q
metrics: {address: %q}
sync: {period: 1s}
clouds:
  sim: {bootDelay: 1s, kubeconfig: %q}
nodeGroups:
  - {name: l40s, cloud: sim, instanceType: 1L40S.20V, locations: [FIN-02], maxSize: 3, managedBy: node-provisioner}
`, env.Kubeconfig, metricsAddr, env.Kubeconfig))
	startGPUScaler(t, env, metricsAddr, "controller", "--config", cfgPath, "--config-reload-period=500ms") // leader election on
	var obj map[string]any
	if err := yaml.Unmarshal([]byte("apiVersion: gpuscaler.dev/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: l40s}\nspec: {nodeGroups: [l40s]}\n"), &obj); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodeprovisioners")).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("infer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the controller to hold its leader lease", func() bool {
		l, err := env.Client.CoordinationV1().Leases("kube-system").Get(ctx, "gpuscaler-controller", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
	waitFor(t, ctx, "the pod Running on a new L40S node", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "infer", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		return err == nil && n.Labels["node.kubernetes.io/instance-type"] == "1L40S.20V"
	})
	// The forecast learns the pool from the start: its gauges the
	// dashboard shows (all but the expected pods, which need a day seen).
	waitFor(t, ctx, "the pool's forecast gauges on /metrics", func() bool {
		mfs := scrape(t, metricsAddr)
		for _, name := range controllerOnly {
			if _, ok := mfs[name]; !ok && name != "gpuscaler_forecast_expected_pods" {
				return false
			}
		}
		return value(mfs, "gpuscaler_forecast_actual_pods", map[string]string{"pool": "l40s"}) == 1
	})
	// The pod's wait, by its node's pool, group and how the node came.
	waitFor(t, ctx, "the pod's wait on /metrics, on a node created for the l40s pool", func() bool {
		return value(scrape(t, metricsAddr), "gpuscaler_gpu_pod_wait_seconds", map[string]string{"pool": "l40s", "came": "created"}) == 1
	})

	// An invalid config is refused: an Event says so and the old one stays.
	writeFile(t, cfgPath, "clusterName: ctl\nnodeGroups: [{name: broken}]\n")
	waitFor(t, ctx, "a ConfigRejected event", func() bool {
		evs, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=l40s"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ConfigRejected" {
				return true
			}
		}
		return false
	})
	// A valid change is picked up without a restart: a new group serves a new pool.
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: ctl
kubeconfig: %q
metrics: {address: %q}
sync: {period: 1s}
clouds:
  sim: {bootDelay: 1s, kubeconfig: %q}
nodeGroups:
  - {name: l40s, cloud: sim, instanceType: 1L40S.20V, locations: [FIN-02], maxSize: 3, managedBy: node-provisioner}
  - {name: v100, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 3, managedBy: node-provisioner}
`, env.Kubeconfig, metricsAddr, env.Kubeconfig))
	if err := yaml.Unmarshal([]byte("apiVersion: gpuscaler.dev/v1alpha1\nkind: NodeProvisioner\nmetadata: {name: v100}\nspec: {nodeGroups: [v100]}\n"), &obj); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodeprovisioners")).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	small := gpuPod("small")
	small.Spec.NodeSelector = map[string]string{"gpuscaler.dev/node-group": "v100"}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, small, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pod of the new group's pool running", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "small", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
}

// nodeCount counts the Nodes of a group.
func nodeCount(ctx context.Context, c *controllerEnv, group string) int {
	list, err := c.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "gpuscaler.dev/node-group=" + group})
	if err != nil {
		return -1
	}
	return len(list.Items)
}

func createNP(t *testing.T, ctx context.Context, c *controllerEnv, np *v1alpha1.NodeProvisioner) {
	t.Helper()
	if err := c.kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
}

// TestWarmBufferAndScaleDown: with a buffer of one, three GPU pods run on
// three nodes plus one idle; when the work ends the busy nodes go after the
// delay and the buffer stays.
func TestWarmBufferAndScaleDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n")
	one := int32(1)
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "buffered"}, Spec: v1alpha1.NodeProvisionerSpec{
		NodeGroups: []string{"h100"}, MinUnutilizedGPUNodes: &one, ScaleDownDelay: &metav1.Duration{Duration: 2 * time.Second}}})
	pods := c.env.Client.CoreV1().Pods("default")
	for i := range 3 {
		if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("job-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "3 pods running and one idle node", func() bool {
		list, _ := pods.List(ctx, metav1.ListOptions{})
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 3 && len(readyGPUNodes(ctx, c.env.Client)) == 4
	})
	for i := range 3 {
		if err := pods.Delete(ctx, fmt.Sprintf("job-%d", i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the pool to shrink to its buffer", func() bool {
		return nodeCount(ctx, c, "h100") == 1 && c.engine.Count("e2e") == 1
	})
	// It stays there.
	time.Sleep(5 * time.Second)
	if n := nodeCount(ctx, c, "h100"); n != 1 {
		t.Fatalf("%d nodes after the buffer settled", n)
	}
}

// TestSurplusIdleNodeGoes: two idle nodes and a buffer of one. The
// surplus node goes after scaleDownDelay and the kept one is never marked:
// which node goes does not depend on the order the cache lists them in.
// Before, each pass kept whichever node came first, so the surplus one was
// unmarked and marked again (a patch each) and its clock never ran out.
func TestSurplusIdleNodeGoes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n")
	one := int32(1)
	const delay = 15 * time.Second
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "surplus"}, Spec: v1alpha1.NodeProvisionerSpec{
		NodeGroups: []string{"h100"}, MinUnutilizedGPUNodes: &one, ScaleDownDelay: &metav1.Duration{Duration: delay}}})
	pods := c.env.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, gpuPod("job"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pod running and one idle node", func() bool {
		p, err := pods.Get(ctx, "job", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && len(readyGPUNodes(ctx, c.env.Client)) == 2
	})
	if err := pods.Delete(ctx, "job", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	idleAt := time.Now()
	// Node updates come often in a real cluster (the kubelet's status),
	// and each one is a pass of the controller over the cached Nodes.
	touch, stopTouching := context.WithCancel(ctx)
	defer stopTouching()
	go func() {
		for i := 0; touch.Err() == nil; i++ {
			list, _ := c.env.Client.CoreV1().Nodes().List(touch, metav1.ListOptions{LabelSelector: "gpuscaler.dev/node-group=h100"})
			for _, n := range list.Items {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.gpuscaler.dev/touched":"%d"}}}`, i)
				_, _ = c.env.Client.CoreV1().Nodes().Patch(touch, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	waitFor(t, ctx, "the surplus node gone", func() bool {
		return nodeCount(ctx, c, "h100") == 1 && c.engine.Count("e2e") == 1
	})
	if took := time.Since(idleAt); took > 3*delay {
		t.Fatalf("the surplus node went %s after it became idle; scaleDownDelay is %s", took.Round(time.Second), delay)
	}
	t.Logf("the surplus node went %s after it became idle", time.Since(idleAt).Round(time.Second))
	// The node kept is never marked while the buffer keeps it.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		list, err := c.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "gpuscaler.dev/node-group=h100"})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list.Items {
			for _, taint := range n.Spec.Taints {
				if taint.Key == provisioner.TaintUnneeded {
					t.Fatalf("the node the buffer keeps, %s, is marked unneeded", n.Name)
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestScaleDownSafety: a PodDisruptionBudget that allows no eviction keeps
// its node; a safe-to-evict "false" pod keeps its node; and a node marked
// unneeded is unmarked when a new pod lands on it during the delay.
func TestScaleDownSafety(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: a, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 5}\n"+
		"  - {name: b, cloud: sim, instanceType: 1A100.22V, locations: [FIN-01], maxSize: 5}\n"+
		"  - {name: c, cloud: sim, instanceType: 1L40S.20V, locations: [FIN-01], maxSize: 5}\n")
	pods := c.env.Client.CoreV1().Pods("default")
	// One node per group, each made by one GPU pod.
	for _, g := range []string{"a", "b", "c"} {
		createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "np-" + g}, Spec: v1alpha1.NodeProvisionerSpec{
			NodeGroups: []string{g}, ScaleDownDelay: &metav1.Duration{Duration: map[string]time.Duration{"a": 2 * time.Second, "b": 2 * time.Second, "c": 20 * time.Second}[g]}}})
		p := gpuPod("gpu-" + g)
		p.Spec.NodeSelector = map[string]string{"gpuscaler.dev/node-group": g}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeOf := map[string]string{}
	waitFor(t, ctx, "the three GPU pods running", func() bool {
		for _, g := range []string{"a", "b", "c"} {
			p, err := pods.Get(ctx, "gpu-"+g, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false
			}
			nodeOf[g] = p.Spec.NodeName
		}
		return true
	})
	// A guard pod under a PDB that allows no eviction on a's node, and a
	// safe-to-evict "false" pod on b's node.
	guard := cpuPod("guard", nodeOf["a"], map[string]string{"app": "guard"}, nil)
	pinned := cpuPod("pinned", nodeOf["b"], nil, map[string]string{"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})
	for _, p := range []*corev1.Pod{guard, pinned} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	minAvailable := intstr.FromInt32(1)
	if _, err := c.env.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guard"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "guard and pinned pods running", func() bool {
		for _, n := range []string{"guard", "pinned"} {
			p, err := pods.Get(ctx, n, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	})
	// The GPU work ends everywhere.
	for _, g := range []string{"a", "b", "c"} {
		if err := pods.Delete(ctx, "gpu-"+g, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	// c's node is marked unneeded; a new GPU pod lands on it before its 20 s delay ends.
	waitFor(t, ctx, "c's node marked unneeded", func() bool { return hasTaintKey(ctx, c, nodeOf["c"], provisioner.TaintUnneeded) })
	back := gpuPod("gpu-c-again")
	back.Spec.NodeSelector = map[string]string{"gpuscaler.dev/node-group": "c"}
	back.Spec.Tolerations = append(back.Spec.Tolerations, corev1.Toleration{Key: provisioner.TaintUnneeded, Operator: corev1.TolerationOpExists})
	if _, err := pods.Create(ctx, back, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "c's node unmarked once the new pod runs there", func() bool {
		p, err := pods.Get(ctx, "gpu-c-again", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == nodeOf["c"] && !hasTaintKey(ctx, c, nodeOf["c"], provisioner.TaintUnneeded)
	})
	waitFor(t, ctx, "a blocked scale-down event for a's node", func() bool {
		evs, err := c.env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=np-a"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ScaleDownBlocked" {
				return true
			}
		}
		return false
	})
	// Well past both delays, a's and b's nodes are still there.
	time.Sleep(6 * time.Second)
	for _, g := range []string{"a", "b", "c"} {
		if n := nodeCount(ctx, c, g); n != 1 {
			t.Errorf("group %s has %d nodes, want its node kept", g, n)
		}
	}
	if hasTaintKey(ctx, c, nodeOf["b"], provisioner.TaintUnneeded) {
		t.Error("the node of a safe-to-evict=false pod was marked unneeded")
	}
}

func cpuPod(name, node string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers:   []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations:  []corev1.Toleration{{Key: provisioner.TaintUnneeded, Operator: corev1.TolerationOpExists}},
		},
	}
}

func hasTaintKey(ctx context.Context, c *controllerEnv, node, key string) bool {
	n, err := c.env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	return err == nil && hasTaint(*n, key)
}

// TestPoolDecisions: the utilization band adds a node before the pool is
// full; a stocked-out group hands its demand to the next and says so; MIG
// pods scale a MIG group by devices per node.
func TestPoolDecisions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startController(t, ctx, ""+
		"  - {name: big, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 3}\n"+
		"  - {name: first, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 3}\n"+
		"  - {name: second, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-02], maxSize: 3}\n"+
		"  - {name: mig, cloud: sim, instanceType: 1A100.22V, locations: [ICE-01], maxSize: 3, mig: {profile: all-1g.10gb}}\n")
	c.engine.SetCapacity(cloud.OfferingKey{InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: cloud.OnDemand}, 0)
	eighty := int32(80)
	for name, groups := range map[string][]string{"band": {"big"}, "fallback": {"first", "second"}, "mig": {"mig"}} {
		spec := v1alpha1.NodeProvisionerSpec{NodeGroups: groups}
		if name == "band" {
			spec.MaxGPUUtilizationPercent = &eighty
		}
		createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	}
	pods := c.env.Client.CoreV1().Pods("default")
	create := func(name, group string, res corev1.ResourceName) {
		p := gpuPod(name)
		p.Spec.NodeSelector = map[string]string{"gpuscaler.dev/node-group": group}
		if res != "nvidia.com/gpu" {
			q := p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{res: q}, Limits: corev1.ResourceList{res: q}}
		}
		if group == "first" {
			p.Spec.NodeSelector = nil
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: "gpuscaler.dev/node-group", Operator: corev1.NodeSelectorOpIn, Values: []string{"first", "second"}}}}}}}}
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(prefix string) int {
		list, _ := pods.List(ctx, metav1.ListOptions{})
		n := 0
		for _, p := range list.Items {
			if len(p.Name) >= len(prefix) && p.Name[:len(prefix)] == prefix && p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n
	}

	// Band: 6 of 8 GPUs requested (75 %) needs one node; the 7th pod (87.5 %) adds a second.
	for i := range 6 {
		create(fmt.Sprintf("band-%d", i), "big", "nvidia.com/gpu")
	}
	// MIG: ten 1g.10gb pods on 7-device nodes need two nodes.
	for i := range 10 {
		create(fmt.Sprintf("mig-%d", i), "mig", "nvidia.com/mig-1g.10gb")
	}
	// Fallback: the first group is stocked out.
	create("fallback-0", "first", "nvidia.com/gpu")

	waitFor(t, ctx, "6 band pods and 10 MIG pods running", func() bool { return running("band-") == 6 && running("mig-") == 10 })
	if n := nodeCount(ctx, c, "big"); n != 1 {
		t.Fatalf("the band group has %d nodes at 75%%, want 1", n)
	}
	if n := nodeCount(ctx, c, "mig"); n != 2 {
		t.Fatalf("the MIG group has %d nodes for 10 devices at 7 per node, want 2", n)
	}
	create("band-6", "big", "nvidia.com/gpu")
	waitFor(t, ctx, "a second node once requests pass 80%", func() bool { return running("band-") == 7 && nodeCount(ctx, c, "big") == 2 })

	waitFor(t, ctx, "the fallback pod running in the second group", func() bool {
		p, err := pods.Get(ctx, "fallback-0", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
		n, err := c.env.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		return err == nil && n.Labels["gpuscaler.dev/node-group"] == "second"
	})
	waitFor(t, ctx, "CapacityUnavailable for the first group", func() bool {
		var np v1alpha1.NodeProvisioner
		if err := c.kube.Get(ctx, client.ObjectKey{Name: "fallback"}, &np); err != nil {
			return false
		}
		for _, g := range np.Status.Groups {
			if g.Name == "first" && g.CapacityUnavailable {
				return true
			}
		}
		return false
	})
}

// Deleting a NodeProvisioner drains its nodes before their instances go:
// a pod whose PodDisruptionBudget allows no eviction keeps running, its
// node with it, and once the budget allows it the pod is evicted, the
// node deleted and the NodeProvisioner released.
func TestDeletingAPoolDrainsItsNodes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 4, managedBy: node-provisioner}\n")
	env, engine, kube := c.env, c.engine, c.kube
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "serving"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	p := gpuPod("infer")
	p.Labels = map[string]string{"app": "infer"}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: p.Labels}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		got, err := env.Client.CoreV1().Pods("default").Get(ctx, "infer", metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning && got.DeletionTimestamp == nil
	}
	waitFor(t, ctx, "the pod Running on a new node", running)
	if err := kube.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	// Long enough for several finalizer passes past the taint's delay.
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if !running() || engine.Count("e2e") != 1 {
			t.Fatalf("the pool's deletion killed a pod its PodDisruptionBudget protects (pod running %v, %d instances)", running(), engine.Count("e2e"))
		}
	}
	if err := env.Client.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "infer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pod evicted, the instance deleted and the NodeProvisioner gone", func() bool {
		var got v1alpha1.NodeProvisioner
		err := kube.Get(ctx, client.ObjectKey{Name: "serving"}, &got)
		return !running() && engine.Count("e2e") == 0 && apierrors.IsNotFound(err)
	})
}
