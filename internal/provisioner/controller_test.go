package provisioner

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// priced is a stand-in core with fixed groups and prices; the controller's
// real core runs in the e2e tests, this checks the pool's ordering rules.
type priced map[string]float64

func (c priced) Group(name string) (nodegroup.Info, bool) {
	_, ok := c[name]
	return nodegroup.Info{Name: name, MaxSize: 10}, ok
}
func (c priced) TargetSize(string) (int, error)                  { return 0, nil }
func (c priced) IncreaseSize(context.Context, string, int) error { return nil }
func (c priced) Instances(string) ([]nodegroup.Instance, error)  { return nil, nil }
func (c priced) GroupPrice(name string) (float64, bool)          { return c[name], true }
func (c priced) GroupSpend(string) float64                       { return 0 }
func (c priced) Backoff(string) (nodegroup.Backoff, bool)        { return nodegroup.Backoff{}, false }
func (c priced) Template(string) (*corev1.Node, error) {
	return &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}, nil
}

func TestPoolOrder(t *testing.T) {
	r := &Reconciler{Core: priced{"a": 3, "b": 1, "c": 2}}
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
		if got != want || pool.MaxHourlyCost != 12.5 {
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
	r := &Reconciler{Core: priced{"a": 1, "b": 1}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
	for name, want := range map[string]bool{"alpha": false, "beta": true} {
		earlier := r.earlierPools(&v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: name}}, all)
		if got := claimed(pod, earlier); got != want {
			t.Errorf("pool %s: pod claimed elsewhere = %v, want %v", name, got, want)
		}
	}
}
