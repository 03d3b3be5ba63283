package pending

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

func pod(name, node string, requests, limits corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
		}}},
	}
}

// On a real API server: pods that ask for whole GPUs or MIG devices and
// are not bound count; CPU pods, bound pods and
// deleted pods do not; the oldest wait follows the clock.
func TestPendingGPUPodsOnARealCluster(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := resource.MustParse
	pods := env.Client.CoreV1().Pods("default")
	for _, p := range []*corev1.Pod{
		// The API server requires limits of extended resources (and
		// defaults the requests to them).
		pod("gpu", "", nil, corev1.ResourceList{"nvidia.com/gpu": q("1")}),
		pod("two-gpus", "", nil, corev1.ResourceList{"nvidia.com/gpu": q("2")}),
		pod("mig", "", nil, corev1.ResourceList{"nvidia.com/mig-1g.10gb": q("1")}),
		pod("cpu", "", corev1.ResourceList{"cpu": q("1")}, nil),
		pod("bound", "node-1", nil, corev1.ResourceList{"nvidia.com/gpu": q("1")}),
	} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := pods.Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(first.CreationTimestamp.Add(90 * time.Second))
	p := New(env.Client, clk)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p)
	// The Node the scheduler binds to comes after the pods (a second on:
	// creation times are to the second), of group h100, not started from
	// standby: a cold create.
	time.Sleep(1100 * time.Millisecond)
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec: corev1.NodeSpec{ProviderID: "sim://node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := func(name string) (string, time.Time, bool) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", time.Time{}, false
		}
		return n.Spec.ProviderID, n.CreationTimestamp.Time, true
	}
	p.SetOrigin(NodeOrigin(node, func(pid string) (string, bool) { return "h100", pid == "sim://node-1" },
		func(string) string { return "inference" }, func(string, string) time.Time { return time.Time{} }))
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Fatalf("before the first list: %v (%v), want nothing", mfs, err)
	}
	go func() { _ = p.Run(ctx) }()
	expect := func(what string, count, oldest float64) {
		t.Helper()
		for {
			c, o := gauge(t, reg, "gpuscaler_pending_gpu_pods"), gauge(t, reg, "gpuscaler_pending_gpu_pod_oldest_seconds")
			if c == count && o >= oldest-2 && o <= oldest {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %v pending, oldest %vs; want %v, about %vs", what, c, o, count, oldest)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	expect("three GPU pods wait", 3, 90)

	// One is bound by the scheduler, one deleted: one is left.
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "default"},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "two-gpus", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	expect("the MIG pod waits alone", 1, 90)
	// The bound pod's wait was observed, from its creation to its
	// PodScheduled condition (real time: under a second here), the
	// deleted one's not.
	var count uint64
	var sum float64
	for count == 0 && ctx.Err() == nil {
		count, sum = waits(t, reg)
		time.Sleep(20 * time.Millisecond)
	}
	if count != 1 || sum < 0 || sum > 10 {
		t.Fatalf("gpuscaler_gpu_pod_wait_seconds: %d observations summing to %vs, want the bound pod's, under 10s", count, sum)
	}
	if labels := waitLabels(t, reg); labels != "pool=inference,group=h100,came=created" {
		t.Errorf("the wait is labelled %s, want pool=inference,group=h100,came=created: its Node came after it, not from standby", labels)
	}
	if err := pods.Delete(ctx, "mig", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	expect("none waits", 0, 0)
}

// waitLabels are the wait histogram's one series' labels, "name=value"
// joined by commas in the order of the histogram's label names.
func waitLabels(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpuscaler_gpu_pod_wait_seconds" && len(mf.GetMetric()) == 1 {
			byName := map[string]string{}
			for _, l := range mf.GetMetric()[0].GetLabel() {
				byName[l.GetName()] = l.GetValue()
			}
			return "pool=" + byName["pool"] + ",group=" + byName["group"] + ",came=" + byName["came"]
		}
	}
	return ""
}

// waits reads the wait histogram's count and sum.
func waits(t *testing.T, reg prometheus.Gatherer) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpuscaler_gpu_pod_wait_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, -1
}

// gauge reads an unlabelled gauge; -1 when absent.
func gauge(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// Waits reads requests and limits of init and app containers, and skips
// finished and deleting pods.
func TestWaits(t *testing.T) {
	q := resource.MustParse
	gpuInit := pod("init", "", nil, nil)
	gpuInit.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q("1")}}}}
	done := pod("done", "", corev1.ResourceList{"nvidia.com/gpu": q("1")}, nil)
	done.Status.Phase = corev1.PodSucceeded
	deleting := pod("deleting", "", corev1.ResourceList{"nvidia.com/gpu": q("1")}, nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tt := range []struct {
		pod  *corev1.Pod
		want bool
	}{
		{gpuInit, true},
		{done, false},
		{deleting, false},
		{pod("zero", "", corev1.ResourceList{"nvidia.com/gpu": q("0")}, nil), false},
		{pod("amd", "", corev1.ResourceList{"amd.com/gpu": q("1")}, nil), false},
	} {
		if got := Waits(tt.pod); got != tt.want {
			t.Errorf("Waits(%s) = %v, want %v", tt.pod.Name, got, tt.want)
		}
		stripped, _ := strip(tt.pod)
		if got := Waits(stripped.(*corev1.Pod)); got != tt.want {
			t.Errorf("Waits(strip(%s)) = %v, want %v", tt.pod.Name, got, tt.want)
		}
	}
}
