// Package plan decides how a NodeProvisioner pool changes size: which
// pending GPU pods each node group can take, how many nodes to add for them,
// for the utilization band and for the warm buffer, and which idle nodes
// may go. It is pure computation over a snapshot; the controller feeds it
// and carries out the result.
package plan

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Requests returns a pod's effective resource requests, as the scheduler
// counts them (init containers, sidecars and overhead included), in a list
// the caller owns.
func Requests(pod *corev1.Pod) corev1.ResourceList {
	if rl, ok := onlyContainer(pod); ok {
		return rl.DeepCopy()
	}
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

// requests is Requests for reading only: a pod of one container and
// nothing else, the common case, gives its container's own list, not a
// copy. The planner reads every pod of the pool on every pass.
func requests(pod *corev1.Pod) corev1.ResourceList {
	if rl, ok := onlyContainer(pod); ok {
		return rl
	}
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

// onlyContainer is the requests of a pod whose one container is all it
// requests with: no init containers, no overhead, no pod-level resources.
func onlyContainer(pod *corev1.Pod) (corev1.ResourceList, bool) {
	s := &pod.Spec
	if len(s.Containers) == 1 && len(s.InitContainers) == 0 && s.Overhead == nil && s.Resources == nil {
		return s.Containers[0].Resources.Requests, true
	}
	return nil, false
}

// GPUEquivalents sums the GPU resources of a list in whole GPUs: a
// nvidia.com/mig-1g.10gb device counts 1/7.
func GPUEquivalents(rl corev1.ResourceList) float64 {
	total := 0.0
	for name, q := range rl {
		if f, ok := gpu.GPUFraction(name); ok {
			total += f * float64(q.MilliValue()) / 1000
		}
	}
	return total
}

// Fits reports whether a pod could run on a fresh node built from the
// template: the template's NoSchedule and NoExecute taints are tolerated,
// the node selector and required node affinity match, and every request
// fits the allocatable.
func Fits(pod *corev1.Pod, tmpl *corev1.Node) bool {
	return FitsIn(requests(pod), tmpl.Status.Allocatable) && admits(pod, tmpl)
}

// admits checks taints, selector and affinity, not resources.
func admits(pod *corev1.Pod, tmpl *corev1.Node) bool {
	filter := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), tmpl.Spec.Taints, pod.Spec.Tolerations, filter, false); untolerated {
		return false
	}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(tmpl)
	return err == nil && ok
}

// FitsIn reports whether requests fit into free resources.
func FitsIn(req, free corev1.ResourceList) bool {
	for name, q := range req {
		if q.IsZero() {
			continue
		}
		f, ok := free[name]
		if !ok || f.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// Subtract takes req out of free in place.
func Subtract(free, req corev1.ResourceList) {
	for name, q := range req {
		f := free[name]
		f.Sub(q)
		free[name] = f
	}
}
