package provisioner

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// priced is a stand-in core with fixed groups and prices; the controller's
// real core runs in the e2e tests, this checks the pool's ordering rules.
type priced map[string]float64

func (c priced) Group(name string) (nodegroup.Info, bool) {
	_, ok := c[name]
	return nodegroup.Info{Name: name, MaxSize: 10}, ok
}
func (c priced) TargetSize(string) (int, error)                       { return 0, nil }
func (c priced) IncreaseSize(context.Context, string, int) error      { return nil }
func (c priced) IncreaseSizeFresh(context.Context, string, int) error { return nil }
func (c priced) StandbyReady(string) int                              { return 0 }
func (c priced) DeleteNodes(context.Context, string, []string) error  { return nil }
func (c priced) Instances(string) ([]nodegroup.Instance, error)       { return nil, nil }
func (c priced) GroupForProviderID(string) (string, bool)             { return "", false }
func (c priced) GroupPrice(name string) (float64, bool)               { return c[name], true }
func (c priced) GroupSpend(string) float64                            { return 0 }
func (c priced) StandbyReturn(string) (int, time.Duration)            { return 0, 0 }
func (c priced) Backoff(string) (nodegroup.Backoff, bool)             { return nodegroup.Backoff{}, false }
func (c priced) Template(string) (*corev1.Node, error) {
	return &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}, nil
}

func TestPoolOrder(t *testing.T) {
	r := &Reconciler{Core: inforce.Fixed[Core](priced{"a": 3, "b": 1, "c": 2})}
	for order, want := range map[v1alpha1.GroupOrder]string{
		v1alpha1.GroupOrderOrdered:       "a,b,c",
		v1alpha1.GroupOrderCheapestFirst: "b,c,a",
	} {
		np := &v1alpha1.NodeProvisioner{Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"a", "b", "c"}, GroupOrder: order, MaxHourlyCost: "12.5"}}
		pool, err := r.pool(context.Background(), np)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for i, g := range pool.Groups {
			if i > 0 {
				got += ","
			}
			got += g.Name
		}
		if got != want || pool.MaxHourlyCost == nil || *pool.MaxHourlyCost != 12.5 {
			t.Errorf("%s: order %s, cap %v; want %s", order, got, pool.MaxHourlyCost, want)
		}
	}
	if _, err := r.pool(context.Background(), &v1alpha1.NodeProvisioner{Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"zzz"}}}); err == nil {
		t.Fatal("an unknown group was accepted")
	}
}

func TestPodsAreClaimedByOnePool(t *testing.T) {
	all := []v1alpha1.NodeProvisioner{
		{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"b"}}},
	}
	r := &Reconciler{Core: inforce.Fixed[Core](priced{"a": 1, "b": 1})}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
	for name, want := range map[string]bool{"alpha": false, "beta": true} {
		earlier := r.earlierPools(&v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: name}}, all)
		if got := claimed(pod, earlier); got != want {
			t.Errorf("pool %s: pod claimed elsewhere = %v, want %v", name, got, want)
		}
	}
}

// owners is a core whose instances are known by provider ID.
type owners struct {
	priced
	byID map[string]string
}

func (o owners) GroupForProviderID(pid string) (string, bool) {
	g, ok := o.byID[pid]
	return g, ok
}

// A node belongs to the group whose instance it is, whatever labels its
// kubelet gave it: a node of pool a that relabels itself into pool b's
// group (NodeRestriction does not guard gpuscaler.dev/node-group) is not
// pool b's capacity, nor drained or deleted through b.
func TestMembershipIsByProviderID(t *testing.T) {
	r := &Reconciler{Core: inforce.Fixed[Core](owners{priced: priced{"a": 1, "b": 1}, byID: map[string]string{"sim://a-1": "a", "sim://b-1": "b"}})}
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"b"}}}
	groupOf, owned := r.membership(np, plan.Pool{Groups: []plan.Group{{Name: "b"}}})
	node := func(pid, label string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{nodegroup.LabelNodeGroup: label}}, Spec: corev1.NodeSpec{ProviderID: pid}}
	}
	for _, c := range []struct {
		what string
		n    *corev1.Node
		want string
	}{
		{"pool b's own node", node("sim://b-1", "b"), "b"},
		{"pool a's node relabelled into b", node("sim://a-1", "b"), ""},
		{"a node no group has, labelled b", node("sim://stranger", "b"), ""},
	} {
		if got := groupOf(c.n); got != c.want {
			t.Errorf("%s: counted in %q, want %q", c.what, got, c.want)
		}
		if got := owned(c.n); got != c.want {
			t.Errorf("%s: owned by %q, want %q", c.what, got, c.want)
		}
	}
}
