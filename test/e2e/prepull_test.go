package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// TestJoinedNodePullsTheGroupsImagesOnARealCluster: a group with
// prePullImages, under the NodeProvisioner, scales up for a pending GPU
// pod; once the new Node registers, while its GPUs start, a pod of
// gpuscaler's bound to it pulls the images (run by kwok); the pod goes once
// they are there, and the workload runs on that node.
func TestJoinedNodePullsTheGroupsImagesOnARealCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startControllerOn(t, ctx, "{bootDelay: 2s, deleteDelay: 1s}",
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 2, prePullImages: [vllm/vllm-openai:v0.6.3]}\n",
		sim.GPUStartup{ReadyDelay: 8 * time.Second})
	env, kube := c.env, c.kube
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod("work"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pulls := func() []corev1.Pod {
		p, err := env.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "gpuscaler.dev/prepull"})
		if err != nil {
			return nil
		}
		return p.Items
	}
	var pulledOn string
	waitFor(t, ctx, "a pull pod bound to the new Node", func() bool {
		if p := pulls(); len(p) == 1 {
			pulledOn = p[0].Spec.NodeName
			return pulledOn != "" && p[0].Spec.Containers[0].Image == "vllm/vllm-openai:v0.6.3"
		}
		return false
	})
	var node string
	waitFor(t, ctx, "the pod Running and the pull pod gone", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "work", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
		node = p.Spec.NodeName
		return len(pulls()) == 0
	})
	if node != pulledOn {
		t.Errorf("the images were pulled on %s, the pod runs on %s", pulledOn, node)
	}
	// The pull is asked for once: no pod comes back on later syncs.
	time.Sleep(3 * time.Second)
	if p := pulls(); len(p) != 0 {
		t.Errorf("%d pull pods after the pull ended", len(p))
	}
}
