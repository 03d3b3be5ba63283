package daemon

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// cluster-autoscaler's status ConfigMap anchors the Events once it
// exists, by its UID; made again, the new UID; gone, none (the pod).
func TestStatusConfigMapFollowsTheConfigMap(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	maps := env.Client.CoreV1().ConfigMaps("default")
	s := &StatusConfigMap{ConfigMaps: maps, Name: "cluster-autoscaler-status"}
	go s.Watch(ctx, 50*time.Millisecond)
	uidIs := func(what string, want func(*corev1.ObjectReference) bool) {
		t.Helper()
		for ctx.Err() == nil {
			if want(s.Ref("h100")) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	time.Sleep(200 * time.Millisecond)
	if ref := s.Ref("h100"); ref != nil {
		t.Fatalf("a reference %+v before the ConfigMap exists", ref)
	}
	for range 2 {
		cm, err := maps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-autoscaler-status"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uidIs("the ConfigMap's UID", func(r *corev1.ObjectReference) bool {
			return r != nil && r.UID == cm.UID && r.Kind == "ConfigMap" && r.Namespace == "default"
		})
		if err := maps.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		uidIs("no reference once it is gone", func(r *corev1.ObjectReference) bool { return r == nil })
	}
}
