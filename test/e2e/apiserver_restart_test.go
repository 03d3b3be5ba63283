package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
)

// TestAPIServerRestartUnderTheController is the outage drill's second half
// (docs/reliability.md): the Kubernetes API server stops for 20 s and
// comes back on the same etcd while the NodeProvisioner controller runs
// over three busy GPU nodes. While the controller is blind, nothing is
// ordered and nothing deleted (a controller that took the lost watches for
// an empty cluster would remove live nodes, or order their pods' nodes
// again). Once the API server is back, the controller sees pods that
// arrive and the pool grows to one node per pod, no instance twice.
func TestAPIServerRestartUnderTheController(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startController(t, ctx, "  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n")
	createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}})
	pods := c.env.Client.CoreV1().Pods("default")
	addPods := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("work-%d", i)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	settled := func(n int) func() bool {
		return func() bool {
			list, err := pods.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			running := 0
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == n && len(readyGPUNodes(ctx, c.env.Client)) == n && c.engine.Count("e2e") == n
		}
	}
	start := time.Now()
	addPods(0, 3)
	waitFor(t, ctx, "3 pods Running on 3 GPU nodes", settled(3))
	t.Logf("3 nodes after %s", time.Since(start).Round(time.Second))

	// The outage: the cloud's instances are sampled from here to the end.
	var mu sync.Mutex
	low, high := 3, 3
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			n := c.engine.Count("e2e")
			mu.Lock()
			low, high = min(low, n), max(high, n)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	if err := c.env.RestartAPIServer(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server back after %s", time.Since(start).Round(time.Second))
	// Its watches come back (client-go's backoff, up to 30 s); the
	// controller's loops go on meanwhile.
	time.Sleep(10 * time.Second)
	mu.Lock()
	if low != 3 || high != 3 {
		t.Fatalf("the cloud held between %d and %d instances across the API server's restart, want 3 throughout", low, high)
	}
	mu.Unlock()

	addPods(3, 5)
	waitFor(t, ctx, "the new pods found unschedulable", func() bool {
		n := 0
		for _, name := range []string{"work-3", "work-4"} {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
					n++
				}
			}
		}
		return n == 2
	})
	t.Logf("unschedulable after %s", time.Since(start).Round(time.Second))
	waitFor(t, ctx, "5 instances ordered", func() bool { return c.engine.Count("e2e") == 5 })
	t.Logf("5 instances after %s", time.Since(start).Round(time.Second))
	waitFor(t, ctx, "5 pods Running on 5 GPU nodes", settled(5))
	t.Logf("5 nodes after %s", time.Since(start).Round(time.Second))
	close(stop)
	<-sampled
	if low != 3 || high != 5 {
		t.Fatalf("the cloud held between %d and %d instances, want 3 to 5: none deleted, none ordered twice", low, high)
	}
	names := map[string]bool{}
	for _, in := range c.engine.Instances("e2e") {
		if names[in.Name] {
			t.Fatalf("instance %s twice", in.Name)
		}
		names[in.Name] = true
	}
}
