package sim

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

var quietLog = slog.New(slog.DiscardHandler)

// registrarFixture is an engine on a fake clock, one cluster account and a
// fake API server.
type registrarFixture struct {
	engine *Engine
	clk    *clocktesting.FakeClock
	acct   *Cloud
	kube   *fake.Clientset
	reg    *Registrar
}

func newRegistrarFixture(t *testing.T, kwok bool, objects ...*corev1.Node) *registrarFixture {
	t.Helper()
	e, clk := newTestEngine(t, Config{}, Options{})
	kube := fake.NewClientset()
	for _, n := range objects {
		if _, err := kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	acct := e.Account("c1")
	return &registrarFixture{
		engine: e, clk: clk, acct: acct, kube: kube,
		reg: NewRegistrar(acct, kube, RegistrarOptions{Kwok: kwok, Logger: quietLog}),
	}
}

func (f *registrarFixture) create(t *testing.T, name, typ string, labels map[string]string, taints ...corev1.Taint) cloud.Instance {
	t.Helper()
	in, err := f.acct.Create(context.Background(), cloud.CreateSpec{
		Name: name, Group: "g", InstanceType: typ, Location: "FIN-01", CapacityType: cloud.OnDemand,
		Labels: labels, Taints: taints,
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func (f *registrarFixture) sync(t *testing.T) {
	t.Helper()
	if err := f.reg.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *registrarFixture) nodes(t *testing.T) map[string]corev1.Node {
	t.Helper()
	list, err := f.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Node{}
	for _, n := range list.Items {
		out[n.Name] = n
	}
	return out
}

func TestRegistrarRegistersRunningInstances(t *testing.T) {
	f := newRegistrarFixture(t, true)
	taint := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	f.create(t, "gpu-1", "1H100.80S.30V", map[string]string{"pool": "a"}, taint)
	f.create(t, "mig-mixed", "8H100.80S.176V", map[string]string{gpu.LabelMIGConfig: "all-1g.10gb"})
	f.create(t, "mig-single", "1A100.22V", map[string]string{gpu.LabelMIGConfig: "all-3g.40gb", gpu.LabelMIGStrategy: "single"})
	f.create(t, "mig-off", "2H100.80S.80V", map[string]string{gpu.LabelMIGConfig: "all-disabled"})
	f.create(t, "cpu-1", "CPU.4V.16G", nil)
	if _, err := f.engine.Account("c2").Create(context.Background(), cloud.CreateSpec{
		Name: "other", InstanceType: "1V100.6V", Location: "FIN-01", CapacityType: cloud.OnDemand,
	}); err != nil {
		t.Fatal(err)
	}

	f.sync(t)
	if got := f.nodes(t); len(got) != 0 {
		t.Fatalf("nodes registered before boot: %v", len(got))
	}
	f.clk.Step(DefaultBootDelay)
	f.sync(t)
	nodes := f.nodes(t)
	if _, ok := nodes["other"]; ok {
		t.Error("registered another cluster's instance")
	}
	if len(nodes) != 5 {
		t.Fatalf("%d nodes, want 5", len(nodes))
	}

	n := nodes["gpu-1"]
	if n.Spec.ProviderID != "sim://gpu-1" {
		t.Errorf("providerID = %q", n.Spec.ProviderID)
	}
	if n.Labels["pool"] != "a" || n.Labels[corev1.LabelHostname] != "gpu-1" {
		t.Errorf("labels = %v", n.Labels)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != taint {
		t.Errorf("taints = %v", n.Spec.Taints)
	}
	if n.Annotations[AnnotationKwok] != "fake" || n.Annotations[AnnotationCluster] != "c1" {
		t.Errorf("annotations = %v", n.Annotations)
	}
	if len(n.Status.Conditions) != 0 {
		t.Errorf("conditions set although kwok owns them: %v", n.Status.Conditions)
	}

	type rl = map[corev1.ResourceName]string
	tests := []struct {
		node string
		want rl
	}{
		{"gpu-1", rl{"cpu": "30", "memory": "120Gi", "ephemeral-storage": "100Gi", "pods": "110", "nvidia.com/gpu": "1"}},
		{"mig-mixed", rl{"cpu": "176", "nvidia.com/mig-1g.10gb": "56"}},
		{"mig-single", rl{"cpu": "22", "nvidia.com/gpu": "2"}},
		{"mig-off", rl{"nvidia.com/gpu": "2"}},
		{"cpu-1", rl{"cpu": "4", "memory": "16Gi", "pods": "110"}},
	}
	for _, tt := range tests {
		n := nodes[tt.node]
		for name, want := range tt.want {
			for what, list := range map[string]corev1.ResourceList{"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable} {
				if q, ok := list[name]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s %s %s = %v, want %s", tt.node, what, name, list[name], want)
				}
			}
		}
	}
	if _, ok := nodes["mig-mixed"].Status.Capacity[gpu.ResourceGPU]; ok {
		t.Error("mixed-strategy node advertises whole GPUs too")
	}
	if _, ok := nodes["cpu-1"].Status.Capacity[gpu.ResourceGPU]; ok {
		t.Error("CPU node advertises GPUs")
	}
}

func TestRegistrarWithoutKwokMarksReady(t *testing.T) {
	f := newRegistrarFixture(t, false)
	f.create(t, "a", "1L40S.20V", nil)
	f.clk.Step(DefaultBootDelay)
	f.sync(t)
	n := f.nodes(t)["a"]
	if _, ok := n.Annotations[AnnotationKwok]; ok {
		t.Error("kwok annotation without kwok")
	}
	if !isReady(&n) || n.Status.Phase != corev1.NodeRunning {
		t.Fatalf("node not ready: %+v", n.Status)
	}
	ready := n.Status.Conditions[0]
	if !ready.LastHeartbeatTime.Time.Equal(f.clk.Now()) || !ready.LastTransitionTime.Time.Equal(f.clk.Now()) {
		t.Errorf("condition times %v/%v, want %v", ready.LastHeartbeatTime, ready.LastTransitionTime, f.clk.Now())
	}
}

func TestRegistrarSecondSyncWritesNothing(t *testing.T) {
	f := newRegistrarFixture(t, false)
	f.create(t, "a", "1H100.80S.30V", nil)
	f.clk.Step(DefaultBootDelay)
	f.sync(t)
	f.kube.ClearActions()
	f.sync(t)
	for _, a := range f.kube.Actions() {
		if a.GetVerb() != "list" {
			t.Errorf("steady-state sync issued %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestRegistrarRestoresOverwrittenCapacity(t *testing.T) {
	f := newRegistrarFixture(t, true)
	f.create(t, "a", "1H100.80S.30V", nil)
	f.clk.Step(DefaultBootDelay)
	f.sync(t)
	// kwok, seeing a Node, may fill in capacity of its own.
	n := f.nodes(t)["a"]
	n.Status.Capacity = corev1.ResourceList{"cpu": resource.MustParse("1k"), "pods": resource.MustParse("1M")}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	if _, err := f.kube.CoreV1().Nodes().UpdateStatus(context.Background(), &n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	got := f.nodes(t)["a"].Status.Allocatable
	if q := got[gpu.ResourceGPU]; q.Value() != 1 {
		t.Fatalf("allocatable after resync = %v", got)
	}
	if q := got[corev1.ResourceCPU]; q.Value() != 30 {
		t.Fatalf("cpu after resync = %v", q.String())
	}
}

func TestRegistrarRemovesNodesOfGoneInstances(t *testing.T) {
	foreign := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign"},
		Spec:       corev1.NodeSpec{ProviderID: "verda://foreign"},
	}
	otherCluster := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "theirs", Annotations: map[string]string{AnnotationCluster: "c2"}},
		Spec:       corev1.NodeSpec{ProviderID: "sim://theirs"},
	}
	stale := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "stale", Annotations: map[string]string{AnnotationCluster: "c1"}},
		Spec:       corev1.NodeSpec{ProviderID: "sim://stale"},
	}
	f := newRegistrarFixture(t, true, foreign, otherCluster, stale)
	del := f.create(t, "deleted", "1H100.80S.30V", nil)
	spot, err := f.acct.Create(context.Background(), cloud.CreateSpec{
		Name: "spot", InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: cloud.Spot,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.create(t, "kept", "1H100.80S.30V", nil)
	f.clk.Step(DefaultBootDelay)
	f.sync(t)
	if got := len(f.nodes(t)); got != 5 {
		t.Fatalf("%d nodes before removal, want 5", got)
	}

	if err := f.acct.Delete(context.Background(), del); err != nil {
		t.Fatal(err)
	}
	if err := f.engine.Reclaim(spot.Name); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	nodes := f.nodes(t)
	for _, gone := range []string{"deleted", "spot", "stale"} {
		if _, ok := nodes[gone]; ok {
			t.Errorf("node %s still registered", gone)
		}
	}
	for _, kept := range []string{"kept", "foreign", "theirs"} {
		if _, ok := nodes[kept]; !ok {
			t.Errorf("node %s removed", kept)
		}
	}
}

func TestRegistrarRetriesAfterAPIErrors(t *testing.T) {
	f := newRegistrarFixture(t, true)
	failures := 1
	f.kube.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	f.create(t, "a", "1H100.80S.30V", nil)
	f.clk.Step(DefaultBootDelay)
	if err := f.reg.Sync(context.Background()); err == nil {
		t.Fatal("Sync hid the API error")
	}
	f.sync(t)
	if _, ok := f.nodes(t)["a"]; !ok {
		t.Fatal("node not registered on retry")
	}
}

func TestRegistrarBadMIGProfileIsReported(t *testing.T) {
	f := newRegistrarFixture(t, true)
	f.create(t, "a", "1L40S.20V", map[string]string{gpu.LabelMIGConfig: "all-1g.10gb"})
	f.create(t, "b", "1H100.80S.30V", nil)
	f.clk.Step(DefaultBootDelay)
	err := f.reg.Sync(context.Background())
	if !errors.Is(err, gpu.ErrNotMIGCapable) {
		t.Fatalf("Sync error = %v, want not MIG-capable", err)
	}
	// One bad instance does not hold up the others.
	if n := f.nodes(t)["b"]; n.Status.Capacity.Name(gpu.ResourceGPU, resource.DecimalSI).Value() != 1 {
		t.Fatalf("node b capacity = %v", n.Status.Capacity)
	}
}

// TestRegistrarRunFollowsTheEngine drives Run with the fake clock: the Node
// appears when the boot delay has passed and goes when the instance is
// deleted, with no polling.
func TestRegistrarRunFollowsTheEngine(t *testing.T) {
	f := newRegistrarFixture(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := f.kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := f.create(t, "a", "1H100.80S.30V", nil)
	done := make(chan error)
	go func() { done <- f.reg.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// Run waits for the boot on the clock; let it get there.
	for !f.clk.HasWaiters() {
		runtime.Gosched()
	}
	f.clk.Step(DefaultBootDelay)
	expectEvent(t, w, watch.Added, "a")
	if err := f.acct.Delete(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, watch.Deleted, "a")
}

// expectEvent reads watch events until one of the given type for the named
// Node arrives.
func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) {
	t.Helper()
	for ev := range w.ResultChan() {
		if n, ok := ev.Object.(*corev1.Node); ok && ev.Type == typ && n.Name == name {
			return
		}
	}
	t.Fatalf("watch closed before %s %s", typ, name)
}

// The GPU start-up plays out on the engine's clock: GPUs appear after
// ReadyDelay, MIG devices MIGDelay later, the Node flaps NotReady (out of
// kwok's hands) in between, and the first Node to register never gets its
// GPUs.
func TestRegistrarGPUStartup(t *testing.T) {
	f := newRegistrarFixture(t, true)
	f.reg.opts.GPUStartup = GPUStartup{ReadyDelay: 60 * time.Second, MIGDelay: 30 * time.Second, Flaps: 1, Failures: 1}
	f.create(t, "a-broken", "1H100.80S.30V", nil)
	f.create(t, "b", "1H100.80S.30V", nil)
	f.create(t, "m", "8H100.80S.176V", map[string]string{gpu.LabelMIGConfig: "all-1g.10gb"})
	f.clk.Step(DefaultBootDelay)
	registered := f.clk.Now()
	type want struct {
		gpus, mig, kwok, ready bool
	}
	check := func(when string, w map[string]want) {
		t.Helper()
		f.sync(t)
		nodes := f.nodes(t)
		for name, w := range w {
			n := nodes[name]
			gpus := n.Status.Allocatable.Name(gpu.ResourceGPU, resource.DecimalSI).Value() > 0
			mig := n.Status.Allocatable.Name(gpu.MIGResourceName("1g.10gb"), resource.DecimalSI).Value() > 0
			_, kwok := n.Annotations[AnnotationKwok]
			notReady := false
			for _, c := range n.Status.Conditions {
				notReady = notReady || c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse
			}
			if gpus != w.gpus || mig != w.mig || kwok != w.kwok || notReady == w.ready {
				t.Errorf("%s, node %s: gpus %v, mig %v, kwok %v, notReady %v; want %+v", when, name, gpus, mig, kwok, notReady, w)
			}
			if n.Status.Allocatable.Cpu().IsZero() {
				t.Errorf("%s, node %s: no CPU advertised", when, name)
			}
		}
	}
	check("at registration", map[string]want{"a-broken": {kwok: true, ready: true}, "b": {kwok: true, ready: true}, "m": {kwok: true, ready: true}})
	if f.reg.wake != registered.Add(20*time.Second) {
		t.Errorf("next wake %v, want the flap at %v", f.reg.wake, registered.Add(20*time.Second))
	}
	f.clk.Step(20 * time.Second)
	check("during the flap", map[string]want{"b": {kwok: false, ready: false}, "m": {kwok: false, ready: false}})
	f.clk.Step(20 * time.Second)
	check("after the flap", map[string]want{"b": {kwok: true, ready: true}, "m": {kwok: true, ready: true}})
	f.clk.Step(20 * time.Second)
	check("after gpuReadyDelay", map[string]want{"a-broken": {kwok: true, ready: true}, "b": {gpus: true, kwok: true, ready: true}, "m": {kwok: true, ready: true}})
	f.clk.Step(30 * time.Second)
	check("after migReadyDelay", map[string]want{"a-broken": {kwok: true, ready: true}, "b": {gpus: true, kwok: true, ready: true}, "m": {mig: true, kwok: true, ready: true}})
	f.clk.Step(time.Hour)
	check("an hour on", map[string]want{"a-broken": {kwok: true, ready: true}})
}
