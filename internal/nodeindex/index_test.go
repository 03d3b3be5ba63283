package nodeindex

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// On a real API server: registration is found under any provider ID of an
// instance, Delete removes only the Node that carries one of them, and an
// Event about an instance lands on its Node.
func TestIndexOnARealCluster(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := New(env.Client, slog.New(slog.DiscardHandler))
	if _, synced := x.Registered("verda://a"); synced {
		t.Fatal("synced before the informer ran")
	}
	go func() { _ = x.Run(ctx) }()
	mk := func(name, pid string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: pid}}
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("gpu-1", "datacrunch://1111")
	mk("gpu-2", "verda://gpu-2")
	wait(t, ctx, "both indexed", func() bool {
		a, _ := x.Registered("verda://gpu-1", "datacrunch://1111")
		b, _ := x.Registered("verda://gpu-2")
		return a && b
	})
	if reg, synced := x.Registered("verda://gpu-3"); reg || !synced {
		t.Fatalf("an unknown provider ID: registered %v, synced %v", reg, synced)
	}
	x.Event(nodegroup.Event{Type: "Warning", Reason: "DeleteFailed", Message: "test", ProviderID: "verda://gpu-2"})
	wait(t, ctx, "the event on the Node", func() bool {
		evs, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=gpu-2"})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Reason == "DeleteFailed"
	})
	if err := x.Delete(ctx, "verda://gpu-1", "datacrunch://1111"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("gpu-1 after Delete: %v", err)
	}
	if err := x.Delete(ctx, "verda://nothing"); err != nil {
		t.Fatalf("deleting what has no Node: %v", err)
	}
	if _, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-2", metav1.GetOptions{}); err != nil {
		t.Fatalf("gpu-2 was touched: %v", err)
	}
}

func wait(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
