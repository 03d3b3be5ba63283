package provisioner

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
)

// ReportReload records a config reload's outcome as an Event on every
// NodeProvisioner: ConfigReloaded, or ConfigRejected with the reason (the
// old configuration stays in force).
func ReportReload(ctx context.Context, c client.Client, rec events.EventRecorder, path string, err error) {
	typ, reason, note := corev1.EventTypeNormal, "ConfigReloaded", "configuration reloaded from "+path
	if err != nil {
		typ, reason, note = corev1.EventTypeWarning, "ConfigRejected", err.Error()
	}
	var list v1alpha1.NodeProvisionerList
	if lerr := c.List(ctx, &list); lerr != nil {
		return
	}
	for i := range list.Items {
		rec.Eventf(&list.Items[i], nil, typ, reason, "Reload", "%s", note)
	}
}
