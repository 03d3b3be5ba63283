package testenv

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// TestClusterRunsGPUPods registers a Node the way a kubelet would and
// checks the whole chain: kwok makes it Ready, kube-controller-manager lifts
// the not-ready taint, kube-scheduler binds a GPU pod, kwok runs it.
func TestClusterRunsGPUPods(t *testing.T) {
	env := Start(t, Options{ControllerManager: true, Scheduler: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := env.Client.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"kubernetes.io/hostname": "gpu-0"}},
		Spec: corev1.NodeSpec{ProviderID: "sim://gpu-0"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("1"),
	}
	// kwok may patch the new Node first; set its capacity on the latest version.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Capacity, node.Status.Allocatable = rl, rl
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "node Ready without the not-ready taint", func() bool {
		n, err := nodes.Get(ctx, "gpu-0", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, tt := range n.Spec.Taints {
			if tt.Key == corev1.TaintNodeNotReady {
				return false
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	pods := env.Client.CoreV1().Pods("default")
	_, err = pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cuda"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "cuda", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
			Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "pod bound and Running", func() bool {
		p, err := pods.Get(ctx, "cuda", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "gpu-0" && p.Status.Phase == corev1.PodRunning
	})
}

// TestNoProcessOutlivesTheEnv starts an environment in a subtest, lets it
// clean up, and checks that no component is left running.
func TestNoProcessOutlivesTheEnv(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real cluster: run without -short (make test)")
	}
	var pids []int
	var dir string
	t.Run("env", func(t *testing.T) {
		env := Start(t, Options{ControllerManager: true, Scheduler: true, Kwok: true})
		pids, dir = env.PIDs(), env.Dir
		if len(pids) != 5 {
			t.Fatalf("%d processes, want 5", len(pids))
		}
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil || err == syscall.EPERM {
			t.Errorf("process %d is still alive", pid)
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), dir) {
			t.Errorf("process %s still runs with the env's folder: %q", p.Name(), cmdline)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("env folder %s not removed: %v", dir, err)
	}
}

func poll(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	Poll(t, ctx, 200*time.Millisecond, what, cond)
}
