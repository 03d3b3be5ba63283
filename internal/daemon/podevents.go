package daemon

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
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
