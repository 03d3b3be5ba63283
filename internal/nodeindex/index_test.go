package nodeindex

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// On a real API server: registration is found under any provider ID of an
// instance, Delete removes only the Node that carries one of them, and an
// Event about an instance lands on its Node.
func TestIndexOnARealCluster(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := New(env.Client, slog.New(slog.DiscardHandler), metav1.NamespaceDefault)
	if _, synced := x.Registered("verda://a"); synced {
		t.Fatal("synced before the informer ran")
	}
	go func() { _ = x.Run(ctx) }()
	mk := func(name, pid string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: pid}}
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("gpu-1", "datacrunch://1111")
	mk("gpu-2", "verda://gpu-2")
	wait(t, ctx, "both indexed", func() bool {
		a, _ := x.Registered("verda://gpu-1", "datacrunch://1111")
		b, _ := x.Registered("verda://gpu-2")
		return a && b
	})
	if reg, synced := x.Registered("verda://gpu-3"); reg || !synced {
		t.Fatalf("an unknown provider ID: registered %v, synced %v", reg, synced)
	}
	x.Event(nodegroup.Event{Type: "Warning", Reason: "DeleteFailed", Message: "test", ProviderID: "verda://gpu-2"})
	wait(t, ctx, "the event on the Node", func() bool {
		evs, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=gpu-2"})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Reason == "DeleteFailed"
	})
	if err := x.Delete(ctx, "verda://gpu-1", "datacrunch://1111"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("gpu-1 after Delete: %v", err)
	}
	if err := x.Delete(ctx, "verda://nothing"); err != nil {
		t.Fatalf("deleting what has no Node: %v", err)
	}
	if _, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-2", metav1.GetOptions{}); err != nil {
		t.Fatalf("gpu-2 was touched: %v", err)
	}

	// Start-up: registered, then Ready, then GPUs, each when it happened.
	if _, ok := x.Startup("verda://nothing"); ok {
		t.Fatal("Startup found a Node for an unknown provider ID")
	}
	s, ok := x.Startup("verda://gpu-2")
	if !ok || s.Registered.IsZero() || !s.Ready.IsZero() || !s.GPUs.IsZero() || s.GPUsSeen {
		t.Fatalf("a new Node: %+v, %v", s, ok)
	}
	readyAt := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	setStatus(t, ctx, env, "gpu-2", func(st *corev1.NodeStatus) {
		st.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: readyAt}}
	})
	wait(t, ctx, "Ready seen", func() bool { s, _ = x.Startup("verda://gpu-2"); return !s.Ready.IsZero() })
	if !s.Ready.Equal(readyAt.Time) || !s.GPUs.IsZero() {
		t.Fatalf("Ready Node without GPUs: %+v, want Ready at %v", s, readyAt)
	}
	before := time.Now()
	setStatus(t, ctx, env, "gpu-2", func(st *corev1.NodeStatus) {
		st.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	})
	wait(t, ctx, "GPUs seen", func() bool { s, _ = x.Startup("verda://gpu-2"); return s.GPUsSeen })
	if s.GPUs.Before(before) || s.GPUs.After(time.Now()) {
		t.Fatalf("GPUs at %v, want the time the index saw them (after %v)", s.GPUs, before)
	}
	first := s.GPUs
	setStatus(t, ctx, env, "gpu-2", func(st *corev1.NodeStatus) {
		st.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), "cpu": resource.MustParse("64")}
	})
	wait(t, ctx, "the update seen", func() bool {
		n, _, _ := x.informer.GetStore().GetByKey("gpu-2")
		_, ok := n.(*corev1.Node).Status.Allocatable["cpu"]
		return ok
	})
	if s, _ = x.Startup("verda://gpu-2"); !s.GPUs.Equal(first) || !s.GPUsNow {
		t.Fatalf("GPUs moved from %v to %v on a later update, or are not allocatable now (%v)", first, s.GPUs, s.GPUsNow)
	}
	// The device plugin restarts: the GPUs go, seen once still.
	setStatus(t, ctx, env, "gpu-2", func(st *corev1.NodeStatus) {
		st.Allocatable = corev1.ResourceList{"cpu": resource.MustParse("64")}
	})
	wait(t, ctx, "the GPUs gone", func() bool { s, _ = x.Startup("verda://gpu-2"); return !s.GPUsNow })
	if !s.GPUsSeen {
		t.Fatal("GPUs seen once are forgotten when they go")
	}
	setStatus(t, ctx, env, "gpu-2", func(st *corev1.NodeStatus) {
		st.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), "cpu": resource.MustParse("64")}
	})
	wait(t, ctx, "the GPUs back", func() bool { s, _ = x.Startup("verda://gpu-2"); return s.GPUsNow })

	// A front end's deletion taint: the Node is leaving.
	n, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the taint seen", func() bool { s, _ = x.Startup("verda://gpu-2"); return s.Leaving })

	// A standby pool's taint is seen, and lifted by Untaint; the other
	// taints stay.
	n, err = env.Client.CoreV1().Nodes().Get(ctx, "gpu-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: nodegroup.TaintStandby, Effect: corev1.TaintEffectNoSchedule})
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the standby taint seen", func() bool { s, _ = x.Startup("verda://gpu-2"); return s.Standby })
	if err := x.Untaint(ctx, nodegroup.TaintStandby, "verda://gpu-2"); err != nil {
		t.Fatal(err)
	}
	n, err = env.Client.CoreV1().Nodes().Get(ctx, "gpu-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasTaint(n, nodegroup.TaintStandby) || !hasTaint(n, "ToBeDeletedByClusterAutoscaler") {
		t.Fatalf("taints after Untaint: %+v, want the standby one gone and the other kept", n.Spec.Taints)
	}
	if err := x.Untaint(ctx, nodegroup.TaintStandby, "verda://nothing"); err != nil {
		t.Fatalf("untainting what has no Node: %v", err)
	}

	// Karpenter's registration label: the Node is claimed by its owner.
	if s, _ = x.Startup("verda://gpu-2"); s.Claimed {
		t.Fatal("a Node without Karpenter's registration label is claimed")
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels["karpenter.sh/registered"] = "true"
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the Node claimed", func() bool { s, _ = x.Startup("verda://gpu-2"); return s.Claimed })

	// Workloads: the pods bound to the Node that a stop would kill; not a
	// DaemonSet's, not a static pod's mirror, not a finished one, not
	// another Node's.
	pod := func(name, node string, change func(*corev1.Pod)) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if change != nil {
			change(p)
		}
		phase := p.Status.Phase
		created, err := env.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if phase != "" {
			created.Status.Phase = phase
			if _, err := env.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	yes := true
	pod("training", "gpu-2", nil)
	pod("elsewhere", "gpu-9", nil)
	pod("exporter", "gpu-2", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "dcgm", UID: "u1", Controller: &yes}}
	})
	pod("static", "gpu-2", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} })
	pod("done", "gpu-2", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
	if got, err := x.Workloads(ctx, "verda://gpu-2"); err != nil || len(got) != 1 || got[0] != "default/training" {
		t.Fatalf("Workloads = %v, %v; want [default/training]", got, err)
	}
	if got, err := x.Workloads(ctx, "verda://nothing"); err != nil || len(got) != 0 {
		t.Fatalf("Workloads of no Node = %v, %v; want none", got, err)
	}

	// Pre-pull: a pod bound to the Node, tolerating every taint, one
	// container per image; not a workload; done once the kubelet has
	// every image; ended by EndPrePull.
	images := []string{"nvcr.io/nvidia/pytorch:24.05-py3", "vllm/vllm-openai:v0.6.3"}
	if p := x.PrePulled(images, "verda://gpu-2"); p.Started {
		t.Fatalf("a pull before any was asked for: %+v", p)
	}
	for range 2 { // a second ask is no second pod
		if err := x.PrePull(ctx, images, "verda://gpu-2"); err != nil {
			t.Fatal(err)
		}
	}
	pp, err := env.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "prepull-gpu-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pp.Spec.NodeName != "gpu-2" || len(pp.Spec.Containers) != 2 || pp.Spec.Containers[1].Image != images[1] ||
		len(pp.Spec.Tolerations) != 1 || pp.Spec.Tolerations[0].Operator != corev1.TolerationOpExists || pp.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("the pre-pull pod: %+v", pp.Spec)
	}
	if got, _ := x.Workloads(ctx, "verda://gpu-2"); len(got) != 1 {
		t.Fatalf("Workloads = %v with the pre-pull pod, want only default/training", got)
	}
	wait(t, ctx, "the pull seen", func() bool { return x.PrePulled(images, "verda://gpu-2").Started })
	if p := x.PrePulled(images, "verda://gpu-2"); p.Done || p.Failed != "" {
		t.Fatalf("a pull the kubelet has not begun: %+v", p)
	}
	// The kubelet: the first image pulled (its container could not start,
	// as meant), the second still pulling.
	pp.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "image-0", Image: "nvcr.io/nvidia/pytorch@sha256:1111", ImageID: "nvcr.io/nvidia/pytorch@sha256:1111", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError"}}},
		{Name: "image-1", Image: images[1], State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
	}
	if pp, err = env.Client.CoreV1().Pods(metav1.NamespaceDefault).UpdateStatus(ctx, pp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the first image seen", func() bool {
		obj, _, _ := x.pods.GetStore().GetByKey("default/prepull-gpu-2")
		return len(obj.(*corev1.Pod).Status.ContainerStatuses) == 2
	})
	if p := x.PrePulled(images, "verda://gpu-2"); p.Done {
		t.Fatalf("done with one image of two: %+v", p)
	}
	pp.Status.ContainerStatuses[1].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}
	if pp, err = env.Client.CoreV1().Pods(metav1.NamespaceDefault).UpdateStatus(ctx, pp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the failed pull seen", func() bool { return x.PrePulled(images, "verda://gpu-2").Failed != "" })
	pp.Status.ContainerStatuses[1].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RunContainerError"}}
	if _, err = env.Client.CoreV1().Pods(metav1.NamespaceDefault).UpdateStatus(ctx, pp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "both images pulled", func() bool { return x.PrePulled(images, "verda://gpu-2").Done })
	if err := x.EndPrePull(ctx, "verda://gpu-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "prepull-gpu-2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pre-pull pod after EndPrePull: %v", err)
	}
	if err := x.EndPrePull(ctx, "verda://gpu-2"); err != nil {
		t.Fatalf("ending a pull that is over: %v", err)
	}

	// A second index filled from a list with the GPUs already there does not
	// know when they came.
	y := New(env.Client, slog.New(slog.DiscardHandler), "")
	go func() { _ = y.Run(ctx) }()
	wait(t, ctx, "the second index filled", func() bool { r, _ := y.Registered("verda://gpu-2"); return r })
	if s, _ := y.Startup("verda://gpu-2"); !s.GPUsSeen || !s.GPUs.IsZero() || !s.Ready.Equal(readyAt.Time) {
		t.Fatalf("a Node listed with its GPUs: %+v, want GPUsSeen and no GPU time", s)
	}
}

func setStatus(t *testing.T, ctx context.Context, env *testenv.Env, name string, change func(*corev1.NodeStatus)) {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(&n.Status)
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func wait(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	testenv.Poll(t, ctx, 20*time.Millisecond, what, cond)
}

// LiftOnSight lifts a taint from a Node the moment the index sees it, with
// no further call: from a Node that registers with it after the request,
// as a standby instance's does when it starts, and from one that carries
// it already. The Node's other taints stay; a Node of another provider ID
// keeps its taint.
func TestLiftOnSight(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := New(env.Client, slog.New(slog.DiscardHandler), "")
	go func() { _ = x.Run(ctx) }()
	standby := corev1.Taint{Key: nodegroup.TaintStandby, Effect: corev1.TaintEffectNoSchedule}
	gpu := corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	mk := func(name string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "sim://" + name, Taints: []corev1.Taint{gpu, standby}}}
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lifted := func(name string) bool {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hasTaint(n, gpu.Key) {
			t.Fatalf("node %s lost its other taint: %v", name, n.Spec.Taints)
		}
		return !hasTaint(n, standby.Key)
	}

	x.LiftOnSight(nodegroup.TaintStandby, "sim://started")
	mk("started")
	wait(t, ctx, "the taint of a Node registered after the request lifted", func() bool { return lifted("started") })

	mk("warm")
	mk("other")
	wait(t, ctx, "both indexed", func() bool {
		a, _ := x.Registered("sim://warm")
		b, _ := x.Registered("sim://other")
		return a && b
	})
	x.LiftOnSight(nodegroup.TaintStandby, "sim://warm")
	wait(t, ctx, "the taint of a Node that had it lifted", func() bool { return lifted("warm") })
	if lifted("other") {
		t.Fatal("the taint of a Node nobody asked for was lifted")
	}

	// The Node lifted was one on its way out (the instance stopped): the
	// Node it registers next is lifted too.
	if err := env.Client.CoreV1().Nodes().Delete(ctx, "warm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the Node gone from the index", func() bool { r, _ := x.Registered("sim://warm"); return !r })
	mk("warm")
	wait(t, ctx, "the taint of the Node registered again lifted", func() bool { return lifted("warm") })
}
