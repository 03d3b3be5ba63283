package test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/cmd/gpuscaler-karpenter/apis/v1alpha1"
)

// TestKarpenterWaitsForGPUs: GPU nodes register Ready a minute before
// their GPUs appear and flap NotReady once meanwhile. Five pending one-GPU
// pods get exactly five NodeClaims, never more at any moment (Karpenter
// holds a NodeClaim whose GPUs have not registered as in flight, and the
// repair policies tolerate the flap); every pod runs once the GPUs appear,
// and every node keeps a pod.
func TestKarpenterWaitsForGPUs(t *testing.T) {
	env, kube := startCluster(t)
	cfgPath := filepath.Join(env.Dir, "gpuscaler.yaml")
	write(t, cfgPath, fmt.Sprintf(`
clusterName: karpenter-gap
kubeconfig: %[1]q
sync: {period: 2s}
clouds:
  sim:
    locations: [FIN-01]
    bootDelay: 2s
    deleteDelay: 1s
    gpuReadyDelay: 60s
    readyFlaps: 1
    kubeconfig: %[1]q
nodeGroups:
  - {name: tpl, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 0, maxSize: 1, managedBy: karpenter}
`, env.Kubeconfig))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	startNamedOperator(t, env, "gpuscaler-karpenter", cfgPath)
	apply(t, ctx, kube, &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "h100"}, Spec: v1alpha1.GPUNodeClassSpec{Cloud: "sim", Template: "tpl"}})
	apply(t, ctx, kube, nodePool("gpu", "h100",
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUName, Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUCount, Operator: corev1.NodeSelectorOpIn, Values: []string{"1"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}}))

	// Every NodeClaim ever made, watched throughout.
	var mu sync.Mutex
	claims := map[string]bool{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			var list karpv1.NodeClaimList
			if kube.List(watchCtx, &list) == nil {
				mu.Lock()
				for _, nc := range list.Items {
					claims[nc.Name] = true
				}
				mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	d := deployment("work", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
	five := int32(5)
	d.Spec.Replicas = &five
	apply(t, ctx, kube, d)
	waitFor(t, ctx, "a flap: a GPU node NotReady before its GPUs", func() bool {
		var nodes corev1.NodeList
		if kube.List(ctx, &nodes) != nil {
			return false
		}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse {
					return true
				}
			}
		}
		return false
	})
	waitFor(t, ctx, "5 pods running on 5 nodes", func() bool {
		var pods corev1.PodList
		if kube.List(ctx, &pods, client.MatchingLabels{"app": "work"}) != nil {
			return false
		}
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(nodes) == 5
	})
	time.Sleep(5 * time.Second)
	stopWatch()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if len(claims) != 5 {
		t.Errorf("%d NodeClaims for 5 one-GPU pods whose nodes' GPUs came a minute late, want 5", len(claims))
	}
}
