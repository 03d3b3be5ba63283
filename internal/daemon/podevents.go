package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ownPod is the pod the process runs in, named by the downward API
// (POD_NAME, POD_NAMESPACE and POD_UID, as the chart sets them): what
// happens to the process itself, and to instances no Node carries, is
// recorded on it (the Node index's SetFallback), where `kubectl describe
// pod` shows it beside the pod's restarts. nil outside a pod.
func ownPod(getenv func(string) string) *corev1.Pod {
	name := getenv("POD_NAME")
	if name == "" {
		return nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: PodNamespace(getenv), UID: types.UID(getenv("POD_UID"))}}
}

// reloadEvent is a config change's outcome as an Event on the pod:
// ConfigReloaded, ConfigRejected with the reason (the configuration in
// force stays), or ConfigRestart when the process exits to start with it.
func reloadEvent(path string, err error) (typ, reason, note string) {
	switch {
	case err == nil:
		return corev1.EventTypeNormal, "ConfigReloaded", "configuration reloaded from " + path
	case errors.Is(err, ErrRestartToApply):
		return corev1.EventTypeNormal, "ConfigRestart", err.Error()
	}
	return corev1.EventTypeWarning, "ConfigRejected", err.Error()
}

// SetGroupObject has the Events of a group's instances that no Node
// carries recorded on the object of names (nodeindex.SetGroupObject), not
// on the pod: the NodeProvisioner of its pool in controller mode,
// cluster-autoscaler's status ConfigMap in provider mode. Without cluster
// access it does nothing. Call it before Run.
func (r *Runtime) SetGroupObject(of func(group string) *corev1.ObjectReference) {
	r.groupObject.Store(&of)
	if r.clouds.nodes != nil {
		r.clouds.nodes.SetGroupObject(of)
	}
}

// poolOf is the NodeProvisioner whose pool a group is, "" for none (the
// waits' pool label): SetGroupObject's object, when it is one.
func (r *Runtime) poolOf(group string) string {
	of := r.groupObject.Load()
	if of == nil {
		return ""
	}
	if ref := (*of)(group); ref != nil && ref.Kind == "NodeProvisioner" {
		return ref.Name
	}
	return ""
}

// StatusConfigMap is cluster-autoscaler's status ConfigMap, the anchor
// of provider mode's Events: `kubectl describe configmap
// cluster-autoscaler-status` then shows, beside cluster-autoscaler's own
// view, what gpuscaler met without a Node (an order every offering
// refused, a cost cap). cluster-autoscaler makes it, perhaps after
// gpuscaler starts, and may make it again with a new UID, so Watch reads
// it every period until ctx ends; until it exists, the Events stay on the
// pod.
type StatusConfigMap struct {
	ConfigMaps interface {
		Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
	}
	Name string
	ref  atomic.Pointer[corev1.ObjectReference]
}

// Ref is the ConfigMap as an Event's reference, nil until it was read.
func (s *StatusConfigMap) Ref(string) *corev1.ObjectReference { return s.ref.Load() }

// Watch reads the ConfigMap now and every period until ctx ends. A read
// that fails otherwise than NotFound keeps the last reference.
func (s *StatusConfigMap) Watch(ctx context.Context, period time.Duration) {
	for {
		cm, err := s.ConfigMaps.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			s.ref.Store(&corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID})
		case apierrors.IsNotFound(err):
			s.ref.Store(nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// EventsOnStatusConfigMap anchors the Events of instances without a Node
// on cluster-autoscaler's status ConfigMap of that name, in the process's
// namespace, and returns what keeps its reference (run its Watch); nil
// without cluster access or a name. Call it before Run.
func (r *Runtime) EventsOnStatusConfigMap(name string) *StatusConfigMap {
	if r.clouds.kube == nil || r.clouds.nodes == nil || name == "" {
		return nil
	}
	s := &StatusConfigMap{ConfigMaps: r.clouds.kube.CoreV1().ConfigMaps(r.opts.Namespace), Name: name}
	r.clouds.nodes.SetGroupObject(s.Ref)
	return s
}
