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

	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
)

// TestKarpenterWaitsForGPUs: GPU nodes register Ready a minute before
// their GPUs appear and flap NotReady once meanwhile, and MIG nodes wait
// half a minute more for their slices (mig-manager). Five pending one-GPU
// pods get exactly five NodeClaims and nine pods of one 1g.10gb slice each
// exactly two (seven slices on a node of one H100), never more at any moment (Karpenter
// holds a NodeClaim whose GPUs have not registered as in flight, and the
// repair policies tolerate the flap); every pod runs once its GPUs appear.
func TestKarpenterWaitsForGPUs(t *testing.T) {
	t.Parallel()
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
    migReadyDelay: 30s
    readyFlaps: 1
    kubeconfig: %[1]q
nodeGroups:
  - {name: tpl, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 0, maxSize: 1, managedBy: karpenter}
`, env.Kubeconfig))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	startNamedOperator(t, env, "gpuscaler-karpenter", cfgPath)
	apply(t, ctx, kube, &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "h100"}, Spec: v1alpha1.GPUNodeClassSpec{Cloud: "sim", Template: "tpl"}})
	apply(t, ctx, kube, &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "h100-mig"},
		Spec: v1alpha1.GPUNodeClassSpec{Cloud: "sim", MIG: &v1alpha1.MIG{Profile: "all-1g.10gb", Strategy: "mixed"}}})
	onDemand := karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}}
	apply(t, ctx, kube, nodePool("gpu", "h100",
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUName, Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUCount, Operator: corev1.NodeSelectorOpIn, Values: []string{"1"}},
		onDemand))
	apply(t, ctx, kube, nodePool("mig", "h100-mig",
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelMIGConfig, Operator: corev1.NodeSelectorOpIn, Values: []string{"all-1g.10gb"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUName, Operator: corev1.NodeSelectorOpIn, Values: []string{"h100"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelGPUCount, Operator: corev1.NodeSelectorOpIn, Values: []string{"1"}},
		onDemand))

	// Every NodeClaim ever made, by NodePool, watched throughout.
	var mu sync.Mutex
	claims := map[string]string{}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			var list karpv1.NodeClaimList
			if kube.List(watchCtx, &list) == nil {
				mu.Lock()
				for _, nc := range list.Items {
					claims[nc.Name] = nc.Labels[karpv1.NodePoolLabelKey]
				}
				mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	work := deployment("work", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
	five := int32(5)
	work.Spec.Replicas = &five
	apply(t, ctx, kube, work)
	slices := deployment("slices", corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")})
	nine := int32(9)
	slices.Spec.Replicas = &nine
	apply(t, ctx, kube, slices)
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
	running := func(app string) (pods int, nodes map[string]bool) {
		var list corev1.PodList
		nodes = map[string]bool{}
		if kube.List(ctx, &list, client.MatchingLabels{"app": app}) != nil {
			return 0, nodes
		}
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				pods++
				nodes[p.Spec.NodeName] = true
			}
		}
		return pods, nodes
	}
	waitFor(t, ctx, "5 GPU pods running on 5 nodes, 9 MIG pods on 2", func() bool {
		gpuPods, gpuNodes := running("work")
		migPods, migNodes := running("slices")
		return gpuPods == 5 && len(gpuNodes) == 5 && migPods == 9 && len(migNodes) == 2
	})
	time.Sleep(5 * time.Second)
	stopWatch()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	byPool := map[string]int{}
	for _, pool := range claims {
		byPool[pool]++
	}
	if byPool["gpu"] != 5 || byPool["mig"] != 2 || len(claims) != 7 {
		t.Errorf("NodeClaims by NodePool %v for 5 one-GPU pods and 9 one-slice pods whose nodes' GPUs came a minute late (MIG slices 30 s later), want gpu: 5, mig: 2", byPool)
	}
}
