package nodeindex

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// PrePullLabel marks the pods that pull images onto a Node, a standby
// instance's while it warms or a group's as its node joins: gpuscaler's
// own, in its namespace, never a workload.
const PrePullLabel = "gpuscaler.dev/prepull"

var _ nodegroup.PrePuller = (*Index)(nil)

// prePullName is the pre-pull pod of a Node.
func prePullName(node string) string {
	name := "prepull-" + node
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// containerName is the pre-pull pod's container of the i-th image.
func containerName(i int) string { return "image-" + strconv.Itoa(i) }

// PrePull has the Node that carries one of the provider IDs pull images:
// a pod in the index's namespace bound to it by name, tolerating every
// taint (the standby taint and the group's), with one container per
// image, each of which does nothing once its image is there. A pod there
// already is success; no Node, or no namespace, is an error.
func (x *Index) PrePull(ctx context.Context, images []string, providerIDs ...string) error {
	if x.pods == nil {
		return fmt.Errorf("pre-pull: the node index has no namespace for its pods")
	}
	node, ok := x.node(providerIDs...)
	if !ok {
		return fmt.Errorf("pre-pull: no Node carries %v", providerIDs)
	}
	no, yes, zero, nobody := false, true, int64(0), int64(65534)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: prePullName(node), Namespace: x.namespace,
			Labels: map[string]string{PrePullLabel: "true", "app.kubernetes.io/managed-by": "gpuscaler"},
		},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &zero,
			EnableServiceLinks:            &no,
			// The restricted Pod Security Standard, which the namespace
			// may enforce: the pod needs nothing but its images.
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &nobody,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		},
	}
	for i, img := range images {
		// The command is not meant to run: the kubelet pulls the image,
		// and a container that cannot start is as good as one that ran.
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: containerName(i), Image: img, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"/gpuscaler-prepull-done"},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		})
	}
	_, err := x.kube.CoreV1().Pods(x.namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("pre-pull on node %s: %w", node, err)
	}
	return nil
}

// PrePulled reports, from the index's watch of its pre-pull pods, how far
// the pull of images onto the Node that carries one of the provider IDs
// has come.
func (x *Index) PrePulled(images []string, providerIDs ...string) nodegroup.Pull {
	if x.pods == nil {
		return nodegroup.Pull{}
	}
	node, ok := x.node(providerIDs...)
	if !ok {
		return nodegroup.Pull{}
	}
	obj, exists, _ := x.pods.GetStore().GetByKey(x.namespace + "/" + prePullName(node))
	pod, isPod := obj.(*corev1.Pod)
	if !exists || !isPod {
		return nodegroup.Pull{}
	}
	out := nodegroup.Pull{Started: true, Done: true}
	// By container name: the kubelet reports an image as the runtime
	// names it (docker.io/library/..., a digest), not as the spec did.
	statuses := map[string]corev1.ContainerStatus{}
	for _, cs := range pod.Status.ContainerStatuses {
		statuses[cs.Name] = cs
	}
	for i, img := range images {
		cs, ok := statuses[containerName(i)]
		if !ok {
			out.Done = false
			continue
		}
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
				out.Failed = img + ": " + w.Reason + ": " + w.Message
			}
		}
		out.Done = out.Done && pulled(cs)
	}
	return out
}

// pulled reports whether a container's image is on its node: the
// container ran, ran out, or was created (an image ID), or the runtime
// failed to create or start it, which it tries only with the image there.
func pulled(cs corev1.ContainerStatus) bool {
	switch {
	case cs.State.Running != nil, cs.State.Terminated != nil, cs.ImageID != "":
		return true
	case cs.State.Waiting != nil:
		switch cs.State.Waiting.Reason {
		case "CreateContainerError", "CreateContainerConfigError", "RunContainerError", "CrashLoopBackOff":
			return true
		}
	}
	return false
}

// EndPrePull deletes the pre-pull pod of the Node that carries one of the
// provider IDs; none is success, and once the pod watch has listed, one it
// does not hold is not asked for.
func (x *Index) EndPrePull(ctx context.Context, providerIDs ...string) error {
	if x.pods == nil {
		return nil
	}
	node, ok := x.node(providerIDs...)
	if !ok {
		return nil
	}
	if x.pods.HasSynced() {
		if _, exists, _ := x.pods.GetStore().GetByKey(x.namespace + "/" + prePullName(node)); !exists {
			return nil // from memory: no pod, no call
		}
	}
	err := x.kube.CoreV1().Pods(x.namespace).Delete(ctx, prePullName(node), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("end the pre-pull on node %s: %w", node, err)
	}
	return nil
}
