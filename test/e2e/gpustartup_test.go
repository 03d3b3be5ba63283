package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// TestNoExtraNodeWhileGPUsStart: GPU nodes register Ready a minute before
// their GPUs appear, and flap NotReady once meanwhile; MIG nodes take 30 s
// more for their devices. Five pending one-GPU pods get exactly five
// instances and ten 1g.10gb pods exactly two (seven devices a node), never
// more at any moment; every pod runs once the GPUs appear, and no node is
// left idle to scale down.
func TestNoExtraNodeWhileGPUsStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startController(t, ctx, ""+
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n"+
		"  - {name: mig, cloud: sim, instanceType: 1A100.22V, locations: [ICE-01], maxSize: 5, mig: {profile: all-1g.10gb}}\n",
		sim.GPUStartup{ReadyDelay: 60 * time.Second, MIGDelay: 30 * time.Second, Flaps: 1})
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}})
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "mig"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"mig"}}})

	// The most instances each group ever had, watched throughout.
	var mu sync.Mutex
	most := map[string]int{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if insts, err := c.acct.List(watchCtx); err == nil {
				now := map[string]int{}
				for _, in := range insts {
					now[in.Group]++
				}
				mu.Lock()
				for g, n := range now {
					most[g] = max(most[g], n)
				}
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	pods := c.env.Client.CoreV1().Pods("default")
	for i := range 5 {
		p := gpuPod(fmt.Sprintf("gpu-%d", i))
		p.Spec.NodeSelector = map[string]string{"gpuscaler.dev/node-group": "h100"}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		p := gpuPod(fmt.Sprintf("mig-%d", i))
		p.Spec.NodeSelector = map[string]string{"gpuscaler.dev/node-group": "mig"}
		q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/mig-1g.10gb": q}, Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": q}}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "a flap: a GPU node NotReady before its GPUs", func() bool {
		list, err := c.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, n := range list.Items {
			if !ready(n) {
				return true
			}
		}
		return false
	})
	waitFor(t, ctx, "all 15 pods running", func() bool {
		return runningPods(ctx, pods) == 15
	})
	// A few more passes of the controller with every pod placed.
	time.Sleep(5 * time.Second)
	stopWatch()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if most["h100"] != 5 || most["mig"] != 2 {
		t.Errorf("at most %d one-GPU and %d MIG instances at a time; want 5 and 2", most["h100"], most["mig"])
	}
	if n, m := nodeCount(ctx, c, "h100"), nodeCount(ctx, c, "mig"); n != 5 || m != 2 {
		t.Errorf("%d one-GPU and %d MIG nodes once the pods run; want 5 and 2 (none idle)", n, m)
	}
}

// TestGPUsThatNeverAppearAreReplaced: the first GPU node registers but its
// GPUs never appear. After the group's gpuStartupTimeout it is reported
// and its instance deleted, and the NodeProvisioner orders one
// replacement: three one-GPU pods run on three nodes after exactly four
// orders.
func TestGPUsThatNeverAppearAreReplaced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startController(t, ctx,
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10, gpuStartupTimeout: 30s}\n",
		sim.GPUStartup{ReadyDelay: 5 * time.Second, Failures: 1})
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}})
	pods := c.env.Client.CoreV1().Pods("default")
	for i := range 3 {
		if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("gpu-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "3 pods running on 3 GPU nodes", func() bool {
		return runningPods(ctx, pods) == 3 && len(gpuReady(readyGPUNodes(ctx, c.env.Client))) == 3
	})
	waitFor(t, ctx, "the GPU-less node gone", func() bool { return nodeCount(ctx, c, "h100") == 3 && c.engine.Count("e2e") == 3 })
	if n := c.engine.Calls()["create"]; n != 4 {
		t.Errorf("%d orders for 3 pods and one broken node, want 4", n)
	}
	waitFor(t, ctx, "a GPUsNeverAppeared event", func() bool {
		evs, err := c.env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "GPUsNeverAppeared" {
				return true
			}
		}
		return false
	})
}

// runningPods counts the Running pods a pod client lists; -1 when the list
// fails.
func runningPods(ctx context.Context, pods typedcorev1.PodInterface) int {
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return -1
	}
	running := 0
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	return running
}
