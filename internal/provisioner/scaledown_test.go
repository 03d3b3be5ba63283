package provisioner

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
)

// deleter records DeleteNodes and answers err; a drain calls nothing else
// of the core.
type deleter struct {
	Core
	calls int
	err   error
}

func (d *deleter) DeleteNodes(context.Context, string, []string) error {
	d.calls++
	return d.err
}

// lateReader is the API server as a drain reads it right after the taint:
// a pod the scheduler bound a moment before is not there yet.
type lateReader struct {
	client.Reader
	lists int
}

func (l *lateReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	l.lists++
	return nil
}

func drainFixture(t *testing.T, taintedAgo time.Duration, del *deleter) (*Reconciler, *corev1.Node, *lateReader) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Spec: corev1.NodeSpec{ProviderID: "sim://gpu-1", Unschedulable: true,
		Taints: []corev1.Taint{
			{Key: TaintUnneeded, Value: strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10), Effect: corev1.TaintEffectPreferNoSchedule},
			{Key: TaintDeleting, Value: strconv.FormatInt(time.Now().Add(-taintedAgo).UnixMilli(), 10), Effect: corev1.TaintEffectNoSchedule},
		}}}
	c := fake.NewClientBuilder().WithObjects(n).Build()
	reader := &lateReader{Reader: c}
	r := &Reconciler{Client: c, APIReader: reader, Core: inforce.Fixed[Core](del), Recorder: events.NewFakeRecorder(16), Logger: slog.New(slog.DiscardHandler)}
	return r, n, reader
}

// A drain reads the node's pods only DeleteDelayAfterTaint after its
// taint: a pod bound just before the taint, whose binding a read right
// after may miss, is not deleted with the node.
func TestDrainWaitsAfterTheTaint(t *testing.T) {
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	del := &deleter{}
	r, n, reader := drainFixture(t, time.Second, del)
	r.drainAndDelete(context.Background(), np, n, "g")
	if reader.lists != 0 || del.calls != 0 {
		t.Fatalf("a second after the taint: %d pod reads, %d deletes; want none before %s", reader.lists, del.calls, DefaultDeleteDelayAfterTaint)
	}
	r, n, reader = drainFixture(t, DefaultDeleteDelayAfterTaint+time.Second, del)
	r.drainAndDelete(context.Background(), np, n, "g")
	if reader.lists != 1 || del.calls != 1 {
		t.Fatalf("past the delay: %d pod reads, %d deletes; want one of each", reader.lists, del.calls)
	}
}

// A delete the core refuses (the group at its minSize) gives the node back
// to the scheduler: its taints and cordon go, not a GPU paid for that can
// never take work.
func TestRefusedDeleteUndoesTheCordon(t *testing.T) {
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	del := &deleter{err: errors.New("size limit: below minSize 1")}
	r, n, _ := drainFixture(t, time.Minute, del)
	r.drainAndDelete(context.Background(), np, n, "g")
	var got corev1.Node
	if err := r.Client.Get(context.Background(), client.ObjectKeyFromObject(n), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Unschedulable || hasTaint(&got, TaintDeleting) || hasTaint(&got, TaintUnneeded) {
		t.Errorf("after a refused delete the node is still cordoned or tainted: unschedulable %v, taints %v", got.Spec.Unschedulable, got.Spec.Taints)
	}
}
