package provisioner

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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

// returning answers StandbyReturn with a pool's room and scaleDownAfter.
type returning struct {
	Core
	room  int
	after time.Duration
}

func (c returning) StandbyReturn(string) (int, time.Duration) { return c.room, c.after }

// A node of a group whose standby pool has room goes after the pool's
// scaleDownAfter, not the NodeProvisioner's scaleDownDelay: it goes back to
// the pool and comes back in a start. Only as many as the pool takes back
// go early; the others wait out the delay.
func TestNodesGoBackToThePoolEarly(t *testing.T) {
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	idle := func(name string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "sim://" + name,
			Taints: []corev1.Taint{{Key: TaintUnneeded, Value: strconv.FormatInt(time.Now().Add(-3*time.Minute).Unix(), 10), Effect: corev1.TaintEffectPreferNoSchedule}}}}
	}
	for _, tc := range []struct {
		name     string
		core     returning
		draining int
	}{
		{"no pool", returning{}, 0},
		{"a pool with room for one", returning{room: 1, after: 2 * time.Minute}, 1},
		{"a full pool", returning{room: 0, after: 2 * time.Minute}, 0},
		{"scaleDownAfter not reached", returning{room: 2, after: 5 * time.Minute}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := idle("gpu-1"), idle("gpu-2")
			c := fake.NewClientBuilder().WithObjects(&a, &b).Build()
			r := &Reconciler{Client: c, APIReader: c, Core: inforce.Fixed[Core](tc.core), Recorder: events.NewFakeRecorder(16), Logger: slog.New(slog.DiscardHandler)}
			var list corev1.NodeList
			if err := c.List(context.Background(), &list); err != nil {
				t.Fatal(err)
			}
			r.scaleDown(context.Background(), np, []string{"gpu-1", "gpu-2"}, ScaleDownDelay(np.Spec, false), list.Items, func(*corev1.Node) string { return "g" })
			if err := c.List(context.Background(), &list); err != nil {
				t.Fatal(err)
			}
			draining := 0
			for i := range list.Items {
				if hasTaint(&list.Items[i], TaintDeleting) {
					draining++
				}
			}
			if draining != tc.draining {
				t.Fatalf("%d nodes draining three minutes after they became unneeded (scaleDownDelay 10m), want %d", draining, tc.draining)
			}
		})
	}
}

// Scale-down considers nodes already draining first, then the longest
// unneeded, then by name: a pool's room for early returns goes to the same
// nodes on every pass, whatever order the cached list gives.
func TestDrainOrder(t *testing.T) {
	now := time.Now()
	at := func(name string, unneeded time.Duration, draining bool) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if unneeded > 0 {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintUnneeded, Value: strconv.FormatInt(now.Add(-unneeded).Unix(), 10)})
		}
		if draining {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintDeleting, Value: "1"})
		}
		return n
	}
	nodes := []corev1.Node{at("busy", 0, false), at("new", time.Minute, false), at("old", time.Hour, false), at("draining", time.Minute, true), at("also-new", time.Minute, false)}
	var got []string
	for _, i := range drainOrder(nodes) {
		got = append(got, nodes[i].Name)
	}
	if want := []string{"draining", "old", "also-new", "new", "busy"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// A node past scaleDownDelay that its pool takes back uses the pool's
// room: with room for one, a node unneeded for an hour goes (back to the
// pool), and one unneeded for three minutes is not cordoned for an early
// return the pool has no room left for. Before, the node past its delay
// skipped the count, and both drained.
func TestANodePastItsDelayUsesThePoolsRoom(t *testing.T) {
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "pool"}}
	idle := func(name string, ago time.Duration) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "sim://" + name,
			Taints: []corev1.Taint{{Key: TaintUnneeded, Value: strconv.FormatInt(time.Now().Add(-ago).Unix(), 10), Effect: corev1.TaintEffectPreferNoSchedule}}}}
	}
	a, b := idle("gpu-old", time.Hour), idle("gpu-new", 3*time.Minute)
	c := fake.NewClientBuilder().WithObjects(&a, &b).Build()
	r := &Reconciler{Client: c, APIReader: c, Core: inforce.Fixed[Core](returning{room: 1, after: 2 * time.Minute}),
		Recorder: events.NewFakeRecorder(16), Logger: slog.New(slog.DiscardHandler)}
	var list corev1.NodeList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	r.scaleDown(context.Background(), np, []string{"gpu-old", "gpu-new"}, ScaleDownDelay(np.Spec, false), list.Items, func(*corev1.Node) string { return "g" })
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var draining []string
	for i := range list.Items {
		if hasTaint(&list.Items[i], TaintDeleting) {
			draining = append(draining, list.Items[i].Name)
		}
	}
	if !slices.Equal(draining, []string{"gpu-old"}) {
		t.Fatalf("draining %v, want only gpu-old: the pool has room for one", draining)
	}
}
