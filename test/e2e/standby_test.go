package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
	"github.com/gpuscaler/gpuscaler/internal/forecast/configmap"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestStandbyPoolOnARealCluster: a group with a standby pool orders an
// instance for it, which registers, shows its GPUs, pulls the pool's
// images (a pod bound to its Node, run by kwok) and is stopped, its Node
// and the pull's pod gone. A pending GPU pod under the NodeProvisioner then runs on that
// instance, started in the cloud's start delay, well inside the cold boot
// it would otherwise wait; and the pool refills.
func TestStandbyPoolOnARealCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const coldBoot = 40 * time.Second
	c := startControllerOn(t, ctx, "{bootDelay: 40s, deleteDelay: 1s, startDelay: 1s}",
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 3, standby: {size: 1, warmFor: 1s, prePullImages: [vllm/vllm-openai:v0.6.3]}}\n")
	env, engine, kube := c.env, c.engine, c.kube
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	stopped := func() []cloud.Instance {
		var out []cloud.Instance
		for _, in := range engine.Instances("e2e") {
			if in.State == cloud.StateStopped && in.Standby {
				out = append(out, in)
			}
		}
		return out
	}
	var pulledOn string
	waitFor(t, ctx, "the pool's images pulled by a pod bound to its Node", func() bool {
		p, err := env.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "gpuscaler.dev/prepull"})
		if err != nil || len(p.Items) != 1 {
			return false
		}
		pulledOn = p.Items[0].Spec.NodeName
		return len(stopped()) == 0 // not stopped before its images are there
	})
	waitFor(t, ctx, "a warmed, stopped standby instance and no Node or pull pod for it", func() bool {
		nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		p, perr := env.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "gpuscaler.dev/prepull"})
		return err == nil && perr == nil && len(stopped()) == 1 && len(gpuReady(nodes.Items)) == 0 && len(p.Items) == 0
	})
	pooled := stopped()[0]
	if pulledOn != pooled.Name {
		t.Errorf("the images were pulled on %s, want the pool's instance %s", pulledOn, pooled.Name)
	}
	if n := engine.Count("e2e"); n != 1 {
		t.Fatalf("%d instances for a pool of one and no pods", n)
	}

	asked := time.Now()
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("work"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	waitFor(t, ctx, "the pod Running", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "work", metav1.GetOptions{})
		node = p.Spec.NodeName
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	if took := time.Since(asked); took >= coldBoot {
		t.Errorf("the pod ran after %s, no sooner than a cold boot (%s)", took.Round(time.Second), coldBoot)
	}
	if node != pooled.Name {
		t.Errorf("the pod runs on %s, want the standby instance %s", node, pooled.Name)
	}
	waitFor(t, ctx, "the pool refilled", func() bool {
		s := stopped()
		return len(s) == 1 && s[0].Name != pooled.Name
	})
}

// TestRealClusterAutoscalerTakesFromTheStandbyPool: the real
// cluster-autoscaler, with the chart's arguments, scales a GPU group with a
// standby pool of one for a pending pod: gpuscaler starts the pool's
// stopped instance instead of ordering, the pod runs well inside the cold
// boot, and the pool refills.
// cluster-autoscaler never sees the pool's instances as the group's (they
// map to no node group), so it neither counts nor removes them.
func TestRealClusterAutoscalerTakesFromTheStandbyPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// A sync of 15 s: the standby taint of the started instance's Node
	// must go when the Node shows it (nodegroup.Lifter), not at the next
	// sync, when the pod would have waited up to 15 s more on a Ready
	// node it does not fit.
	r := startRealCA(t, ctx, 15*time.Second, "bootDelay: 20s, deleteDelay: 1s, startDelay: 1s, stoppedPrice: 0.05",
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 3, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}], standby: {size: 1, warmFor: 1s}}\n",
		"--scan-interval=2s", "--scale-down-unneeded-time=5m", "--max-node-provision-time=5m", "--v=3")
	// stopped: the pool holds one instance, and stops is how many the
	// provider has stopped.
	stopped := func(stops float64) bool {
		mfs := scrape(t, r.metricsAddr)
		return value(mfs, "gpuscaler_nodegroup_instances", map[string]string{"group": "h100", "state": "standby"}) == 1 &&
			value(mfs, "gpuscaler_cloud_api_calls_total", map[string]string{"operation": "stop", "result": "ok"}) == stops
	}
	waitFor(t, ctx, "the pool's instance warmed and stopped", func() bool {
		return stopped(1) && value(scrape(t, r.metricsAddr), "gpuscaler_hourly_spend", map[string]string{"group": "h100"}) == 0.05
	})
	groupNodes := func() []corev1.Node {
		nodes, err := r.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroup.LabelNodeGroup + "=h100"})
		if err != nil {
			return nil
		}
		return nodes.Items
	}
	waitFor(t, ctx, "the stopped instance's Node gone", func() bool { return len(groupNodes()) == 0 })
	pods := r.env.Client.CoreV1().Pods("default")
	asked := time.Now()
	if _, err := pods.Create(ctx, gpuPod("infer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var registered, lifted time.Time
	waitFor(t, ctx, "the started instance's Node without the standby taint", func() bool {
		nodes := groupNodes()
		if len(nodes) == 0 {
			return false
		}
		if registered.IsZero() {
			registered = time.Now()
		}
		if slices.ContainsFunc(nodes[0].Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodegroup.TaintStandby }) {
			return false
		}
		lifted = time.Now()
		return true
	})
	if gap := lifted.Sub(registered); gap > 3*time.Second {
		t.Errorf("the standby taint stayed %s on the started instance's Node, want it lifted when the Node showed it", gap.Round(time.Millisecond))
	}
	waitFor(t, ctx, "the pod running", func() bool { return runningPods(ctx, pods) == 1 })
	took := time.Since(asked)
	t.Logf("the pod ran %s after it was created", took.Round(time.Second))
	// The chart's --bypassed-scheduler-names spares the pod
	// cluster-autoscaler's 30 s wait for more GPU pods; the start takes
	// 1 s, a cold boot 20 s.
	if took >= 20*time.Second {
		t.Errorf("the pod ran %s after it was created, a cold boot's time: cluster-autoscaler's wait for more GPU pods, or a taint, held it", took.Round(time.Second))
	}
	// It runs on the started instance: the pool's refill may be on its
	// way, but no instance was ordered for the pod (a cold order would
	// also show as a second create before the pool's stop of it).
	mfs := scrape(t, r.metricsAddr)
	if v := value(mfs, "gpuscaler_standby_starts_total", map[string]string{"group": "h100", "result": "ok"}); v != 1 {
		t.Errorf("%v standby starts, want 1", v)
	}
	if v := value(mfs, "gpuscaler_nodegroup_instances", map[string]string{"group": "h100", "state": "running"}) +
		value(mfs, "gpuscaler_nodegroup_instances", map[string]string{"group": "h100", "state": "creating"}); v != 1 {
		t.Errorf("%v instances serve the group, want the one started", v)
	}
	waitFor(t, ctx, "the pool refilled", func() bool { return r.live(t, "h100") == 1 && stopped(2) })
	if n := r.creates(t); n != 2 {
		t.Errorf("%v creates, want 2: the pool's first and its refill", n)
	}
	r.assertNotForbidden(t)
}

// TestStandbyPoolFollowsItsForecast runs `gpuscaler controller` with a
// group whose standby pool a forecast sizes, and the forecast's ConfigMap
// holding a week in which the group grew by three nodes at this time of
// day: the process reads it and, before any pod asks, grows the pool from
// its size of one to four (its forecast.maxSize), the group's target
// untouched.
func TestStandbyPoolFollowsItsForecast(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/crds"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A week of the group growing from 0 to 3 nodes at the next slot's
	// time of day, for two hours: what an earlier process learned.
	now := time.Now()
	rise := now.Truncate(forecast.DefaultSlot).Add(forecast.DefaultSlot).Sub(now.Truncate(24 * time.Hour))
	d := forecast.NewDemand()
	for at := now.Add(-7 * 24 * time.Hour).Truncate(time.Minute); at.Before(now.Add(-time.Minute)); at = at.Add(time.Minute) {
		n := 0
		if tod := at.Sub(at.Truncate(24 * time.Hour)); tod >= rise && tod < rise+2*time.Hour {
			n = 3
			if tod == rise {
				for range 3 {
					d.Arrive(at, forecast.Shape{})
				}
			}
		}
		d.Observe(at, map[forecast.Shape]int{{}: n})
	}
	learned, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	store := &configmap.Store{ConfigMaps: env.Client.CoreV1().ConfigMaps(metav1.NamespaceDefault), Name: daemon.StandbyForecastConfigMap}
	if err := store.Save(ctx, map[string][]byte{"h100": learned}); err != nil {
		t.Fatal(err)
	}

	metricsAddr := loopback(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: fc
kubeconfig: %q
metrics: {address: %q}
sync: {period: 1s}
clouds:
  sim: {bootDelay: 1s, startDelay: 1s, kubeconfig: %q}
nodeGroups:
  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 6, managedBy: node-provisioner,
     standby: {size: 1, warmFor: 1s, forecast: {maxSize: 4, trainFor: 24h, leadTime: 15m}}}
`, env.Kubeconfig, metricsAddr, env.Kubeconfig))
	startGPUScalerLogged(t, env, "gpuscaler", metricsAddr, []string{"POD_NAMESPACE=" + metav1.NamespaceDefault}, "controller", "--config", cfgPath)
	waitFor(t, ctx, "a standby pool of four, sized by the forecast before any pod", func() bool {
		mfs := scrape(t, metricsAddr)
		return value(mfs, "gpuscaler_standby_forecast_size", map[string]string{"group": "h100"}) == 4 &&
			value(mfs, "gpuscaler_nodegroup_instances", map[string]string{"group": "h100", "state": "standby"}) == 4 &&
			mfs[standbyForecastOnly[1]] != nil
	})
	if n := value(scrape(t, metricsAddr), "gpuscaler_nodegroup_target_size", map[string]string{"group": "h100"}); n != 0 {
		t.Fatalf("target %v: the pool grew, not the group", n)
	}
}

// TestRealClusterAutoscalerReturnsANodeToThePool: the real
// cluster-autoscaler takes a pool's instance for a pod; the pool, whose
// refillAfter is an hour, orders nothing fresh. When the pod goes,
// cluster-autoscaler scales the idle node down after the group's
// standby.scaleDownAfter (20 s, through its per-group options), not its
// own --scale-down-unneeded-time (5 min), and the node goes back to the
// pool: stopped, not deleted, its Node gone, and the pool orders nothing.
func TestRealClusterAutoscalerReturnsANodeToThePool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r := startRealCA(t, ctx, 5*time.Second, "bootDelay: 10s, deleteDelay: 1s, startDelay: 1s, stoppedPrice: 0.05",
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 3, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}], standby: {size: 1, warmFor: 1s, refillAfter: 1h, scaleDownAfter: 20s}}\n",
		"--scan-interval=2s", "--scale-down-unneeded-time=5m", "--scale-down-delay-after-add=0s", "--max-node-provision-time=5m", "--v=3")
	stops := func() float64 {
		return value(scrape(t, r.metricsAddr), "gpuscaler_cloud_api_calls_total", map[string]string{"operation": "stop", "result": "ok"})
	}
	waitFor(t, ctx, "the pool's instance warmed and stopped", func() bool { return stops() == 1 })
	pods := r.env.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, gpuPod("infer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pod running on the pool's instance", func() bool { return runningPods(ctx, pods) == 1 })
	if err := pods.Delete(ctx, "infer", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	idle := time.Now()
	waitFor(t, ctx, "the idle node back in the pool, stopped", func() bool {
		mfs := scrape(t, r.metricsAddr)
		return value(mfs, "gpuscaler_nodegroup_instances", map[string]string{"group": "h100", "state": "standby"}) == 1 &&
			value(mfs, "gpuscaler_cloud_api_calls_total", map[string]string{"operation": "stop", "result": "ok"}) == 2
	})
	if took := time.Since(idle); took > 3*time.Minute {
		t.Errorf("the node went back %s after it was idle: cluster-autoscaler waited its own unneeded time, not the group's scaleDownAfter", took.Round(time.Second))
	}
	waitFor(t, ctx, "its Node gone", func() bool {
		nodes, err := r.env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroup.LabelNodeGroup + "=h100"})
		return err == nil && len(nodes.Items) == 0
	})
	// cluster-autoscaler may have asked for a second node while the first
	// registered with its GPUs not yet allocatable (its gpu_processor
	// takes such a node for unready); each node it ordered so is deleted
	// on scale-down, the pool being full again. So the pool's own orders
	// are the creates less its first and less the deletes: none within
	// refillAfter.
	deletes := value(scrape(t, r.metricsAddr), "gpuscaler_cloud_api_calls_total", map[string]string{"operation": "delete", "result": "ok"})
	if refills := r.creates(t) - 1 - deletes; refills != 0 {
		t.Errorf("%v creates and %v deletes: %v fresh orders for the pool within refillAfter, want none", r.creates(t), deletes, refills)
	}
	r.assertNotForbidden(t)
}
