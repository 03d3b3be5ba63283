package cloudprovider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	karpcp "sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
	"github.com/gpuscaler/gpuscaler/karpenter/cloudprovider"
	"github.com/gpuscaler/gpuscaler/karpenter/controllers"
)

// The contract tests run the provider over gpuscaler's real core and the
// Verda client, against the in-process fake of Verda's REST API: every
// instance the tests count is one the fake's engine holds.

const account = "verda-account"

// harness is one operator process's provider: a runtime whose core leads,
// and a provider over it. Two harnesses over one fake are a restart.
type harness struct {
	rt       *daemon.Runtime
	provider *cloudprovider.CloudProvider
	stop     func()
}

func configYAML(url, templateExtra string) string {
	return fmt.Sprintf(`
clusterName: karpenter-contract
# A machine deleted right after its order is reported gone once a list
# that cannot lag behind the order leaves it out (sync.listLag, a minute
# by default): until then it may still bill. The fake's lists do not lag.
sync: {period: 1s, listLag: 2s}
clouds:
  verda: {endpoint: %q}
nodeGroups:
  - {name: tpl, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 0, maxSize: 1, managedBy: karpenter%s}
`, url+"/v1", templateExtra)
}

func start(t *testing.T, fakeURL string, kube client.Reader) *harness {
	t.Helper()
	return startWith(t, configYAML(fakeURL, ""), kube)
}

func startWith(t *testing.T, doc string, kube client.Reader) *harness {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	getenv := func(k string) string {
		return map[string]string{"VERDA_CLIENT_ID": "id", "VERDA_CLIENT_SECRET": "secret"}[k]
	}
	rt, err := daemon.Build(ctx, cfg, daemon.Options{Owner: config.ManagedByKarpenter, Getenv: getenv, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rt.Lead(ctx, func(err error) {
			if err != nil {
				t.Errorf("core: %v", err)
				return
			}
			close(started)
		})
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the core did not start")
	}
	p := cloudprovider.New(cloudprovider.Options{Kube: kube, Core: daemon.InForce(rt, func(m *nodegroup.Manager) cloudprovider.Core { return m }), Started: started,
		Templates: func(name string) (config.NodeGroup, bool) {
			for _, g := range rt.Config().NodeGroups {
				if g.Name == name {
					return g, true
				}
			}
			return config.NodeGroup{}, false
		}})
	h := &harness{rt: rt, provider: p, stop: func() { cancel(); <-done }}
	t.Cleanup(h.stop)
	return h
}

func newFake(t *testing.T) *verdatest.Server {
	t.Helper()
	return newFakeBooting(t, 100*time.Millisecond)
}

func newFakeBooting(t *testing.T, boot time.Duration) *verdatest.Server {
	t.Helper()
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(boot), DeleteDelay: sim.Duration(100 * time.Millisecond)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "secret"})
	t.Cleanup(f.Close)
	return f
}

// readyClass is a GPUNodeClass as the status controller leaves a good one.
func readyClass(name string, spec v1alpha1.GPUNodeClassSpec) *v1alpha1.GPUNodeClass {
	c := &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}, Spec: spec}
	conds := c.StatusConditions()
	for _, t := range []string{v1alpha1.ConditionCloudReady, v1alpha1.ConditionTemplateReady, v1alpha1.ConditionValidationSucceeded} {
		conds.SetTrue(t)
	}
	return c
}

func kubeWith(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).WithStatusSubresource(objs...).Build()
}

func nodeClaim(name, class string, reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "gpu"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: v1alpha1.GroupVersion.Group, Kind: "GPUNodeClass", Name: class},
			Requirements: reqs,
			Resources:    karpv1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
		},
	}
}

func in(key string, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

func live(f *verdatest.Server) []cloud.Instance {
	var out []cloud.Instance
	for _, in := range f.Engine().Instances(account) {
		if in.State != cloud.StateDeleting {
			out = append(out, in)
		}
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCreateGetListDelete(t *testing.T) {
	f := newFake(t)
	kube := kubeWith(readyClass("h100", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Template: "tpl", Locations: []string{"FIN-01"}}))
	h := start(t, f.URL, kube)
	ctx := context.Background()
	nc := nodeClaim("gpu-abcde", "h100", in(corev1.LabelInstanceTypeStable, "1H100.80S.30V"), in(karpv1.CapacityTypeLabelKey, "on-demand"))
	got, err := h.provider.Create(ctx, nc)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	pid := got.Status.ProviderID
	if pid == "" || got.Labels[corev1.LabelInstanceTypeStable] != "1H100.80S.30V" || got.Labels[corev1.LabelTopologyZone] != "FIN-01" ||
		got.Labels[karpv1.CapacityTypeLabelKey] != "on-demand" || got.Labels[v1alpha1.LabelGPUCount] != "1" || got.Labels[karpv1.NodePoolLabelKey] != "gpu" {
		t.Fatalf("hydrated NodeClaim: providerID %q labels %v", pid, got.Labels)
	}
	if q := got.Status.Capacity["nvidia.com/gpu"]; q.Value() != 1 {
		t.Fatalf("capacity %v", got.Status.Capacity)
	}
	if got.Annotations[v1alpha1.AnnotationNodeClassHash] == "" {
		t.Fatal("no node-class hash annotation")
	}
	insts := live(f)
	if len(insts) != 1 || insts[0].Name != "gpu-abcde" {
		t.Fatalf("the cloud holds %+v", insts)
	}
	byGet, err := h.provider.Get(ctx, pid)
	if err != nil || byGet.Status.ProviderID != pid {
		t.Fatalf("get: %v %v", byGet, err)
	}
	list, err := h.provider.List(ctx)
	if err != nil || len(list) != 1 || list[0].Status.ProviderID != pid {
		t.Fatalf("list: %v %v", list, err)
	}
	if err := h.provider.Delete(ctx, got); err != nil {
		t.Fatalf("delete: %v", err)
	}
	// Karpenter calls Delete until it hears NodeClaimNotFound.
	eventually(t, "delete to report the machine gone", func() bool {
		err := h.provider.Delete(ctx, got)
		if err != nil && !karpcp.IsNodeClaimNotFoundError(err) {
			t.Fatalf("delete: %v", err)
		}
		return err != nil
	})
	if n := len(f.Engine().Instances(account)); n != 0 {
		t.Fatalf("%d instances left", n)
	}
	if _, err := h.provider.Get(ctx, pid); !karpcp.IsNodeClaimNotFoundError(err) {
		t.Fatalf("get of a gone machine: %v", err)
	}
	if list, _ := h.provider.List(ctx); len(list) != 0 {
		t.Fatalf("list after delete: %v", list)
	}
}

// A spot offering that stocks out at create time falls to on-demand in the
// same Create; the spot offering is then unavailable in GetInstanceTypes.
func TestSpotStockOutFallsBackToOnDemand(t *testing.T) {
	f := newFake(t)
	kube := kubeWith(readyClass("h100", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Locations: []string{"FIN-01"}}))
	h := start(t, f.URL, kube)
	ctx := context.Background()
	// The core has listed the offerings as available; the capacity goes
	// before the order.
	f.Engine().SetCapacity(cloud.OfferingKey{InstanceType: "1H100.80S.30V", Location: "FIN-01", CapacityType: cloud.Spot}, 0)
	nc := nodeClaim("gpu-spot1", "h100", in(corev1.LabelInstanceTypeStable, "1H100.80S.30V"), in(karpv1.CapacityTypeLabelKey, "spot", "on-demand"))
	got, err := h.provider.Create(ctx, nc)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if ct := got.Labels[karpv1.CapacityTypeLabelKey]; ct != "on-demand" {
		t.Fatalf("landed on %q", ct)
	}
	if insts := live(f); len(insts) != 1 || insts[0].CapacityType != cloud.OnDemand {
		t.Fatalf("the cloud holds %+v", insts)
	}
	pool := &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
		NodeClassRef: &karpv1.NodeClassReference{Group: "gpuscaler.dev", Kind: "GPUNodeClass", Name: "h100"}}}}}
	types, err := h.provider.GetInstanceTypes(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range types {
		if it.Name != "1H100.80S.30V" {
			continue
		}
		for _, of := range it.Offerings {
			if of.CapacityType() == "spot" && of.Available {
				t.Fatalf("the stocked-out spot offering is still available: %+v", of)
			}
		}
	}
	// Only spot allowed: insufficient capacity, so Karpenter tries another.
	_, err = h.provider.Create(ctx, nodeClaim("gpu-spot2", "h100", in(corev1.LabelInstanceTypeStable, "1H100.80S.30V"), in(karpv1.CapacityTypeLabelKey, "spot")))
	if !karpcp.IsInsufficientCapacityError(err) {
		t.Fatalf("create on a stocked-out offering: %v", err)
	}
}

// The operator dies while a create's answer is on its way: the instance
// exists, the NodeClaim has no provider ID. The next process's Create for
// the same NodeClaim adopts the machine: one instance, one order.
func TestRestartBetweenCreateAndStatus(t *testing.T) {
	f := newFake(t)
	kube := kubeWith(readyClass("h100", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Locations: []string{"FIN-01"}}))
	first := start(t, f.URL, kube)
	nc := nodeClaim("gpu-crash", "h100", in(corev1.LabelInstanceTypeStable, "1H100.80S.30V"), in(karpv1.CapacityTypeLabelKey, "on-demand"))
	f.HangNext(http.MethodPost, "/instances", 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := first.provider.Create(ctx, nc)
	cancel()
	if err == nil {
		t.Fatal("create answered although its answer was held back")
	}
	first.stop() // the crash
	eventually(t, "the order to land", func() bool { return len(live(f)) == 1 })

	second := start(t, f.URL, kube)
	got, err := second.provider.Create(context.Background(), nc)
	if err != nil {
		t.Fatalf("create after the restart: %v", err)
	}
	insts := live(f)
	if len(insts) != 1 || got.Status.ProviderID != "verda://"+insts[0].Name {
		t.Fatalf("after the restart: %+v; NodeClaim has %q", insts, got.Status.ProviderID)
	}
	if n := f.Calls()["POST /instances"]; n != 1 {
		t.Fatalf("%d create calls", n)
	}
}

// A machine whose NodeClaim is gone (deleted while the answer was lost) is
// deleted by the collector; one with a NodeClaim is kept.
func TestLeakedMachineCollected(t *testing.T) {
	f := newFake(t)
	class := readyClass("h100", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Locations: []string{"FIN-01"}})
	kube := kubeWith(class)
	h := start(t, f.URL, kube)
	ctx := context.Background()
	keep := nodeClaim("gpu-keep", "h100", in(karpv1.CapacityTypeLabelKey, "on-demand"))
	leak := nodeClaim("gpu-leak", "h100", in(karpv1.CapacityTypeLabelKey, "on-demand"))
	for _, nc := range []*karpv1.NodeClaim{keep, leak} {
		if _, err := h.provider.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	if err := kube.Create(ctx, keep); err != nil {
		t.Fatal(err)
	}
	leaks := &controllers.Leaks{Reader: kube, Core: daemon.InForce(h.rt, func(m *nodegroup.Manager) cloudprovider.Core { return m }), Grace: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := leaks.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the leaked machine deleted", func() bool {
		insts := live(f)
		return len(insts) == 1 && insts[0].Name == "gpu-keep"
	})
}

// GetInstanceTypes offers GPU types with their GPUs, keeps CPU types out of
// GPU selectors, and with MIG offers only types whose GPUs take the
// profile, with its devices.
func TestInstanceTypes(t *testing.T) {
	f := newFake(t)
	kube := kubeWith(
		readyClass("all", v1alpha1.GPUNodeClassSpec{Cloud: "verda"}),
		readyClass("mig", v1alpha1.GPUNodeClassSpec{Cloud: "verda", MIG: &v1alpha1.MIG{Profile: "all-1g.10gb", Strategy: "mixed"}}),
	)
	h := start(t, f.URL, kube)
	ctx := context.Background()
	pool := func(class string) *karpv1.NodePool {
		return &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "gpuscaler.dev", Kind: "GPUNodeClass", Name: class}}}}}
	}
	all, err := h.provider.GetInstanceTypes(ctx, pool("all"))
	if err != nil || len(all) == 0 {
		t.Fatalf("types: %d, %v", len(all), err)
	}
	var sawGPU, sawCPU bool
	for _, it := range all {
		gpus := it.Capacity["nvidia.com/gpu"]
		count := it.Requirements.Get(v1alpha1.LabelGPUCount)
		switch {
		case gpus.Value() > 0:
			sawGPU = true
			if count.Operator() != corev1.NodeSelectorOpIn || count.Any() != fmt.Sprint(gpus.Value()) {
				t.Fatalf("%s: %d GPUs, count requirement %s", it.Name, gpus.Value(), count)
			}
			if len(it.Offerings) == 0 {
				t.Fatalf("%s has no offerings", it.Name)
			}
		default:
			sawCPU = true
			if count.Operator() != corev1.NodeSelectorOpDoesNotExist {
				t.Fatalf("CPU type %s: count requirement %s", it.Name, count)
			}
		}
		if a := it.Allocatable()[corev1.ResourceMemory]; a.Cmp(it.Capacity[corev1.ResourceMemory]) >= 0 {
			t.Fatalf("%s: no memory overhead", it.Name)
		}
	}
	if !sawGPU || !sawCPU {
		t.Fatalf("GPU types %v, CPU types %v", sawGPU, sawCPU)
	}
	again, _ := h.provider.GetInstanceTypes(ctx, pool("all"))
	if &again[0] != &all[0] && again[0] != all[0] {
		t.Fatal("a repeated call rebuilt the instance types")
	}
	mig, err := h.provider.GetInstanceTypes(ctx, pool("mig"))
	if err != nil || len(mig) == 0 {
		t.Fatalf("MIG types: %d, %v", len(mig), err)
	}
	for _, it := range mig {
		if _, ok := it.Capacity["nvidia.com/mig-1g.10gb"]; !ok {
			t.Fatalf("%s offers no MIG devices: %v", it.Name, it.Capacity)
		}
		if _, ok := it.Capacity["nvidia.com/gpu"]; ok {
			t.Fatalf("%s offers whole GPUs under MIG", it.Name)
		}
		if r := it.Requirements.Get(v1alpha1.LabelMIGConfig); r.Any() != "all-1g.10gb" {
			t.Fatalf("%s: MIG requirement %s", it.Name, r)
		}
	}
	if len(mig) >= len(all) {
		t.Fatalf("MIG offers %d of %d types", len(mig), len(all))
	}
}

// Errors of the interface's contract.
func TestNotFoundAndNotReady(t *testing.T) {
	f := newFake(t)
	notReady := &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "broken", Generation: 1}, Spec: v1alpha1.GPUNodeClassSpec{Cloud: "verda"}}
	notReady.StatusConditions().SetFalse(v1alpha1.ConditionCloudReady, "CloudNotReady", "no such cloud")
	kube := kubeWith(notReady)
	h := start(t, f.URL, kube)
	ctx := context.Background()
	if _, err := h.provider.Create(ctx, nodeClaim("a", "missing")); !karpcp.IsInsufficientCapacityError(err) {
		t.Fatalf("create with a missing class: %v", err)
	}
	if _, err := h.provider.Create(ctx, nodeClaim("b", "broken")); !karpcp.IsNodeClassNotReadyError(err) {
		t.Fatalf("create with a class not ready: %v", err)
	}
	gone := nodeClaim("c", "broken")
	gone.Status.ProviderID = "verda://00000000-0000-0000-0000-000000000000"
	if err := h.provider.Delete(ctx, gone); !karpcp.IsNodeClaimNotFoundError(err) {
		t.Fatalf("delete of an unknown machine: %v", err)
	}
	if _, err := h.provider.Get(ctx, gone.Status.ProviderID); !karpcp.IsNodeClaimNotFoundError(err) {
		t.Fatalf("get of an unknown machine: %v", err)
	}
	var nre *karpcp.NodeRebootNotImplementedError
	if err := h.provider.Reboot(ctx, gone, "op"); !errors.As(err, &nre) {
		t.Fatalf("reboot: %v", err)
	}
}

// The machine boots with the template's bootstrap, rendered for the
// NodeClaim: its provider ID, the resolved labels, the class's image and
// Karpenter's unregistered taint, which core lifts once the Node is known.
func TestBootstrapCarriesTheNodeClaim(t *testing.T) {
	f := newFakeBooting(t, time.Minute) // the script stays in the store while the machine boots
	tmpl := filepath.Join(t.TempDir(), "join.tmpl")
	if err := os.WriteFile(tmpl, []byte("#!/bin/sh\nexec kubelet --provider-id={{.ProviderID}} --node-labels={{.LabelsArg}} --register-with-taints={{.TaintsArg}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kube := kubeWith(readyClass("h100", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Template: "tpl", Locations: []string{"FIN-01"}, Image: "ubuntu-24.04-cuda-12.8-open-docker"}))
	h := startWith(t, configYAML(f.URL, fmt.Sprintf(", bootstrap: {method: custom, templateFile: %q}", tmpl)), kube)
	nc := nodeClaim("gpu-boot1", "h100", in(corev1.LabelInstanceTypeStable, "1H100.80S.30V"), in(karpv1.CapacityTypeLabelKey, "on-demand"))
	nc.Spec.StartupTaints = []corev1.Taint{{Key: "gpu-driver-not-ready", Effect: corev1.TaintEffectNoSchedule}}
	got, err := h.provider.Create(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	scripts := f.Scripts()
	if len(scripts) != 1 {
		t.Fatalf("%d scripts stored", len(scripts))
	}
	for _, want := range []string{"--provider-id=" + got.Status.ProviderID, "karpenter.sh/nodepool=gpu", "node.kubernetes.io/instance-type=1H100.80S.30V",
		"topology.kubernetes.io/zone=FIN-01", "karpenter.sh/capacity-type=on-demand", "nvidia.com/gpu.count=1", "karpenter.sh/unregistered", "gpu-driver-not-ready"} {
		if !strings.Contains(scripts[0], want) {
			t.Errorf("the startup script lacks %q:\n%s", want, scripts[0])
		}
	}
	if got.Status.ImageID != "ubuntu-24.04-cuda-12.8-open-docker" {
		t.Errorf("image %q", got.Status.ImageID)
	}
}

// Karpenter retries a Create that timed out. While the first order is in
// flight (or its answer lost) the retry is told to come back, not handed
// the core's made-up provider ID: on a cloud that assigns IDs at create
// the NodeClaim would never match its Node. Once the order resolves, the
// retry gets the machine, ordered once.
func TestRetriedCreateWaitsForTheOrder(t *testing.T) {
	f := newFake(t)
	kube := kubeWith(readyClass("h100", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Locations: []string{"FIN-01"}}))
	h := start(t, f.URL, kube)
	nc := nodeClaim("gpu-retry", "h100", in(corev1.LabelInstanceTypeStable, "1H100.80S.30V"), in(karpv1.CapacityTypeLabelKey, "on-demand"))
	f.HangNext(http.MethodPost, "/instances", 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := h.provider.Create(ctx, nc)
	cancel()
	if err == nil {
		t.Fatal("create answered although its answer was held back")
	}
	var createErr *karpcp.CreateError
	if _, err := h.provider.Create(context.Background(), nc); !errors.As(err, &createErr) {
		t.Fatalf("a retry while the order is in flight: %v; want a CreateError to retry later", err)
	}
	var got *karpv1.NodeClaim
	eventually(t, "the retry to get the machine", func() bool {
		got, err = h.provider.Create(context.Background(), nc)
		return err == nil
	})
	insts := live(f)
	if len(insts) != 1 || got.Status.ProviderID != "verda://"+insts[0].Name {
		t.Fatalf("machines %+v; NodeClaim has %q", insts, got.Status.ProviderID)
	}
	if n := f.Calls()["POST /instances"]; n != 1 {
		t.Fatalf("%d create calls", n)
	}
}

// A machine the cloud failed after taking its order (Verda's no_capacity
// status) never registers: a repeated Create deletes it and answers
// InsufficientCapacity, so Karpenter deletes the NodeClaim and schedules
// again at once instead of holding a dead machine until the registration
// TTL.
func TestCreateOfAFailedMachineGivesItUp(t *testing.T) {
	f := newFake(t)
	kube := kubeWith(readyClass("h100", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Locations: []string{"FIN-01"}}))
	h := start(t, f.URL, kube)
	nc := nodeClaim("gpu-failed", "h100", in(corev1.LabelInstanceTypeStable, "1H100.80S.30V"), in(karpv1.CapacityTypeLabelKey, "on-demand"))
	if _, err := h.provider.Create(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	f.OverrideField(nc.Name, "status", `"no_capacity"`)
	eventually(t, "the core to list the machine failed", func() bool {
		in, ok := h.rt.Core().LaunchedNamed(nc.Name)
		return ok && in.ErrorCode != ""
	})
	if _, err := h.provider.Create(context.Background(), nc); !karpcp.IsInsufficientCapacityError(err) {
		t.Fatalf("create of a failed machine: %v; want InsufficientCapacity", err)
	}
	eventually(t, "the failed machine deleted", func() bool { return len(live(f)) == 0 })
}

// A class's cloudOptions get the per-cloud check the config's groups get at
// start: a misspelt key, or one the cloud does not take, fails validation
// naming it; the cloud's own keys pass.
func TestClassCloudOptionsAreChecked(t *testing.T) {
	h := start(t, newFake(t).URL, kubeWith())
	for _, tc := range []struct {
		opts map[string]string
		want string
	}{
		{map[string]string{"startupScriptIDs": "abc"}, "spec.cloudOptions[startupScriptIDs]"},
		{map[string]string{"pricing": "CHEAP"}, "spec.cloudOptions[pricing]"},
		{map[string]string{"pricing": "DYNAMIC_PRICE", "onSpotDiscontinue": "delete_permanently"}, ""},
	} {
		class := readyClass("c", v1alpha1.GPUNodeClassSpec{Cloud: "verda", Locations: []string{"FIN-01"}, CloudOptions: tc.opts})
		c, err := h.provider.Check(class)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.want == "" && c.Validation != nil:
			t.Errorf("cloudOptions %v: %v, want them taken", tc.opts, c.Validation)
		case tc.want != "" && (c.Validation == nil || !strings.Contains(c.Validation.Error(), tc.want)):
			t.Errorf("cloudOptions %v: %v, want an error naming %s", tc.opts, c.Validation, tc.want)
		}
	}
}
