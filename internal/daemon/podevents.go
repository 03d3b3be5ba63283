package daemon

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// podEvents records what happens to the process itself (a config change
// put in force, refused, or applied by a restart) as Events on the pod it
// runs in: `kubectl describe pod` shows them beside the pod's restarts,
// in every mode, where a provider has no object of its own to carry them.
// The pod is named by the downward API (POD_NAME, POD_NAMESPACE and
// POD_UID, as the chart sets them).
type podEvents struct {
	bcast    events.EventBroadcaster
	recorder events.EventRecorder
	pod      *corev1.Pod
}

// newPodEvents returns the recorder of the pod the process runs in; nil
// outside a pod (no POD_NAME) or without cluster access.
func newPodEvents(kube kubernetes.Interface, getenv func(string) string) *podEvents {
	name := getenv("POD_NAME")
	if kube == nil || name == "" {
		return nil
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	bcast := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	return &podEvents{
		bcast:    bcast,
		recorder: bcast.NewRecorder(scheme, "gpuscaler"),
		pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: PodNamespace(getenv),
			UID: types.UID(getenv("POD_UID"))}},
	}
}

// run sends the Events to the cluster until ctx is done.
func (p *podEvents) run(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.bcast.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("pod events: %w", err)
	}
	<-ctx.Done()
	p.bcast.Shutdown()
	return nil
}

// reload records a config change's outcome: ConfigReloaded, ConfigRejected
// with the reason (the configuration in force stays), or ConfigRestart
// when the process exits to start with it.
func (p *podEvents) reload(path string, err error) {
	if p == nil {
		return
	}
	typ, reason, note := corev1.EventTypeNormal, "ConfigReloaded", "configuration reloaded from "+path
	switch {
	case err == nil:
	case errors.Is(err, ErrRestartToApply):
		reason, note = "ConfigRestart", err.Error()
	default:
		typ, reason, note = corev1.EventTypeWarning, "ConfigRejected", err.Error()
	}
	p.recorder.Eventf(p.pod, nil, typ, reason, "Reload", "%s", note)
}
