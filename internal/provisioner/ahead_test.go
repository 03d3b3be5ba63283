package provisioner

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/provisioner/plan"
)

// PlanAhead on hand-computed pools: one group of 1-GPU nodes at 2/h.
func TestPlanAhead(t *testing.T) {
	tmpl := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}
	pool := func(nodes int) plan.Pool {
		return plan.Pool{Groups: []plan.Group{{Name: "a", Template: tmpl, Nodes: nodes, MaxSize: 10, Price: 2, Spend: 2 * float64(nodes)}}}
	}
	idle := func(n int) []plan.Node {
		var out []plan.Node
		for i := range n {
			out = append(out, plan.Node{Name: fmt.Sprintf("idle-%d", i), Group: "a", GPUs: 1, Removable: true, Object: tmpl})
		}
		return out
	}
	coming := func(n int) []plan.Node {
		var out []plan.Node
		for i := range n {
			out = append(out, plan.Node{Name: fmt.Sprintf("coming-%d", i), Group: "a", Coming: true})
		}
		return out
	}
	inf := math.Inf(1)
	for _, tt := range []struct {
		name              string
		pool              plan.Pool
		nodes             []plan.Node
		pending, expected int
		maxExtra          float64
		add, ahead        int
		remove            []string
		reason            string
	}{
		// 1 pending pod, 3 expected at 2/h each: 4.5/h buys two of them.
		{"capped", pool(0), nil, 1, 3, 4.5, 3, 2, nil, "pending"},
		{"uncapped", pool(0), nil, 1, 3, inf, 4, 3, nil, "pending"},
		{"nothing pending", pool(0), nil, 0, 2, inf, 2, 2, nil, ReasonForecast},
		{"no budget", pool(0), nil, 1, 3, 0, 1, 0, nil, "pending"},
		{"budget below a node", pool(0), nil, 0, 3, 1.9, 0, 0, nil, ""},
		// Three idle nodes the reactive plan removes: the two expected
		// pods keep the last two it would remove, and order nothing.
		{"keeps idle nodes", pool(3), idle(3), 0, 2, inf, 0, 2, []string{"idle-0"}, ReasonForecast},
		{"keeps within the budget", pool(3), idle(3), 0, 2, 2, 0, 1, []string{"idle-0", "idle-1"}, ReasonForecast},
		// One idle node, three expected: it stays and two are ordered.
		{"keeps, then orders", pool(1), idle(1), 0, 3, inf, 2, 3, nil, ReasonForecast},
		// Two nodes on their way, ordered ahead before: they count
		// against the cap until pods come to them.
		{"counts what is on its way", pool(2), coming(2), 0, 3, 5, 0, 2, nil, ""},
		{"orders past what is on its way", pool(2), coming(2), 0, 3, 6, 1, 3, nil, ReasonForecast},
		// A pending pod takes one of them first.
		{"pending first", pool(2), coming(2), 1, 3, 4, 1, 2, nil, ReasonForecast},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, ahead := PlanAhead(tt.pool, tt.nodes, onePodEach("pending", tt.pending), onePodEach("expected", tt.expected), tt.maxExtra)
			if p.Add["a"] != tt.add || ahead != tt.ahead || !slices.Equal(p.Remove, tt.remove) || p.Reason != tt.reason {
				t.Fatalf("add %d, ahead %d, remove %v, reason %q; want add %d, ahead %d, remove %v, reason %q",
					p.Add["a"], ahead, p.Remove, p.Reason, tt.add, tt.ahead, tt.remove, tt.reason)
			}
		})
	}
}

// OrdersAhead on a hand-computed pool: one pending pod, five expected
// within the lead time, two of them within the standby lead time, one
// group of 1-GPU nodes whose pool holds some instances. What the pending
// pod and the two soon need is taken (the pool first); of the three
// others, as many as the pool still holds wait for it, and the rest are
// ordered fresh.
func TestOrdersAhead(t *testing.T) {
	tmpl := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}
	pool := plan.Pool{Groups: []plan.Group{{Name: "a", Template: tmpl, MaxSize: 20, Price: 2}}}
	pending, expected := onePodEach("pending", 1), onePodEach("expected", 5)
	for _, tt := range []struct {
		name        string
		expected    int
		held        int
		take, fresh int
	}{
		{"no pool: all taken, as IncreaseSize did", 5, 0, 6, 0},
		{"a pool of one: it serves what is soon", 5, 1, 3, 3},
		{"a pool of four: three taken, one waits", 5, 4, 3, 2},
		{"a pool of five: two wait", 5, 5, 3, 1},
		{"a pool past the need: nothing fresh", 5, 10, 3, 0},
		{"nothing expected: pending taken", 0, 4, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := PlanAhead(pool, nil, pending, expected[:tt.expected], math.Inf(1))
			o := OrdersAhead(pool, nil, pending, expected[:min(2, tt.expected)], math.Inf(1), p, func(string) int { return tt.held })
			if o.Take["a"] != tt.take || o.Fresh["a"] != tt.fresh {
				t.Fatalf("take %d, fresh %d; want take %d, fresh %d (the plan adds %d)", o.Take["a"], o.Fresh["a"], tt.take, tt.fresh, p.Add["a"])
			}
		})
	}
}

// onePodEach is n pods of one GPU each, named prefix-0 on, that fit any
// node.
func onePodEach(prefix string, n int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		p := gpuPodNamed(fmt.Sprintf("%s-%d", prefix, i), 1)
		p.Spec.NodeSelector = nil
		out = append(out, p)
	}
	return out
}

// gpuPodNamed is a pod in namespace ml asking for whole GPUs, on the
// inference pool's nodes.
func gpuPodNamed(name string, gpus int64) *corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID(name)},
		Spec: corev1.PodSpec{
			Containers:   []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q}}}},
			NodeSelector: map[string]string{"pool": "inference"},
		}}
}

// A pool's idle nodes wait its scaleDownDelay (10 minutes unset) unless a
// forecast vouches for it; then its forecast's (2 minutes unset), never
// longer than the pool's own.
func TestScaleDownDelay(t *testing.T) {
	d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }
	for _, c := range []struct {
		name    string
		spec    v1alpha1.NodeProvisionerSpec
		vouched bool
		want    time.Duration
	}{
		{"defaults", v1alpha1.NodeProvisionerSpec{}, false, 10 * time.Minute},
		{"no forecast", v1alpha1.NodeProvisionerSpec{ScaleDownDelay: d(5 * time.Minute)}, true, 5 * time.Minute},
		{"not vouched", v1alpha1.NodeProvisionerSpec{ScaleDownDelay: d(5 * time.Minute), Forecast: &v1alpha1.Forecast{}}, false, 5 * time.Minute},
		{"vouched, forecast's default", v1alpha1.NodeProvisionerSpec{Forecast: &v1alpha1.Forecast{}}, true, 2 * time.Minute},
		{"vouched", v1alpha1.NodeProvisionerSpec{ScaleDownDelay: d(5 * time.Minute), Forecast: &v1alpha1.Forecast{ScaleDownDelay: d(30 * time.Second)}}, true, 30 * time.Second},
		{"vouched, the pool's shorter", v1alpha1.NodeProvisionerSpec{ScaleDownDelay: d(time.Minute), Forecast: &v1alpha1.Forecast{ScaleDownDelay: d(3 * time.Minute)}}, true, time.Minute},
	} {
		if got := ScaleDownDelay(c.spec, c.vouched); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if got := Coverage(nil); got != 0.8 {
		t.Errorf("default coverage %v, want 0.8", got)
	}
	pct := int32(95)
	if got := Coverage(&v1alpha1.Forecast{CoveragePercent: &pct}); got != 0.95 {
		t.Errorf("coverage %v, want 0.95", got)
	}
}
