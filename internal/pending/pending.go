// Package pending follows the cluster's pods that ask for GPUs and wait for
// a node, and exports how many there are, how long the oldest has waited,
// and how long each waited until it was bound: the demand side of every
// dashboard of a GPU autoscaler, and its headline. It
// watches only pods not yet bound to a node, stripped to what it counts,
// so its memory follows the pending pods, not the cluster's.
package pending

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Pods is a prometheus.Collector over the cluster's unbound GPU pods. Run
// fills and follows it; until its first list is in, it exports nothing.
type Pods struct {
	kube     kubernetes.Interface
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	clock    clock.PassiveClock

	count  *prometheus.Desc
	oldest *prometheus.Desc
	// waited observes each GPU pod's time from creation to its binding,
	// by its node's group and how that node came (origin); gone queues
	// the pods that left the watch, to be read once (a binding, or a
	// deletion: the watch's last state cannot tell).
	waited *prometheus.HistogramVec
	origin Origin
	gone   chan *corev1.Pod
}

// How the node a pod was bound to came, the came label of
// gpuscaler_gpu_pod_wait_seconds.
const (
	// CameExisting: the node was there when the pod was made.
	CameExisting = "existing"
	// CameStandby: an instance started from a standby pool since.
	CameStandby = "standby"
	// CameCreated: an instance ordered since, a cold start.
	CameCreated = "created"
	// CameUnknown: not one of gpuscaler's nodes, or not known.
	CameUnknown = "unknown"
)

// Origin tells, for a pod bound to its node, the node's pool (the
// NodeProvisioner whose pool the group is; "" for none), its group (""
// for a node of no group) and how it came (CameExisting, CameStandby,
// CameCreated, CameUnknown).
type Origin func(ctx context.Context, pod *corev1.Pod) (pool, group, came string)

// goneQueue bounds the pods waiting to be read; past it, a burst's waits
// go unobserved rather than hold the informer.
const goneQueue = 1024

var _ prometheus.Collector = (*Pods)(nil)

// WaitBuckets are gpuscaler_gpu_pod_wait_seconds's buckets, in seconds:
// `gpuscaler simulate`'s report counts its waits in the same ones, so a
// simulation compares with production.
func WaitBuckets() []float64 {
	return []float64{5, 10, 30, 60, 120, 180, 300, 450, 600, 900, 1200, 1800, 3600}
}

// New builds a follower of a cluster's unbound pods; clk may be nil for the
// real clock.
func New(kube kubernetes.Interface, clk clock.PassiveClock) *Pods {
	if clk == nil {
		clk = clock.RealClock{}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName="
	}))
	inf := factory.Core().V1().Pods().Informer()
	_ = inf.SetTransform(strip)
	p := &Pods{
		kube: kube, factory: factory, informer: inf, clock: clk, gone: make(chan *corev1.Pod, goneQueue),
		count: prometheus.NewDesc("gpuscaler_pending_gpu_pods",
			"Pods that request GPUs (nvidia.com/gpu or MIG devices) and are not bound to a node yet.", nil, nil),
		oldest: prometheus.NewDesc("gpuscaler_pending_gpu_pod_oldest_seconds",
			"How long the oldest pod that requests GPUs has waited for a node; 0 when none waits.", nil, nil),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpuscaler_gpu_pod_wait_seconds",
			Help: "Time from a GPU pod's creation to its binding to a node, observed as the scheduler binds it: how long pods waited for GPUs, " +
				"by the node's pool (its NodeProvisioner, \"\" for none), group (\"\" for none of gpuscaler's) and how it came: existing (there when the pod was made), standby (started from a standby pool since), created (ordered since), unknown.",
			Buckets: WaitBuckets(),
		}, []string{"pool", "group", "came"}),
	}
	// A watch of unbound pods sees a binding as the pod leaving it, with
	// its last unbound state: one read tells a binding from a deletion.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: p.left})
	return p
}

// left queues a GPU pod that left the watch of unbound pods. One whose end
// the watch missed (a relist) is not read: when it ended is not known.
func (p *Pods) left(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil || !gpu.PodRequestsGPUs(pod) {
		return
	}
	select {
	case p.gone <- pod:
	default:
	}
}

// observe reads a pod that left the watch and, if the scheduler bound it,
// observes its wait: from its creation to its PodScheduled condition, or
// to now when it has none.
func (p *Pods) observe(ctx context.Context, left *corev1.Pod) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pod, err := p.kube.CoreV1().Pods(left.Namespace).Get(ctx, left.Name, metav1.GetOptions{})
	if err != nil || pod.UID != left.UID || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return // deleted while it waited, or not to be read now
	}
	bound := p.clock.Now()
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			bound = c.LastTransitionTime.Time
		}
	}
	pool, group, came := "", "", CameUnknown
	if p.origin != nil {
		pool, group, came = p.origin(ctx, pod)
	}
	p.waited.WithLabelValues(pool, group, came).Observe(max(0, bound.Sub(pod.CreationTimestamp.Time).Seconds()))
}

// SetOrigin has each wait labelled with its node's group and how the
// node came (Origin); without, group "" and came "unknown". Call it
// before Run.
func (p *Pods) SetOrigin(o Origin) { p.origin = o }

// NodeOrigin is the Origin of gpuscaler's nodes, read from memory: node
// is the Node of a name as the cluster's index holds it (its provider ID
// and registration); the node's group is the one whose instance has its
// provider ID (groupOf), its pool the group's (poolOf); the node came
// existing when it registered no later than the pod was made, else
// standby when that instance was started from its pool after the pod
// was made (startedAt), else created.
func NodeOrigin(node func(name string) (providerID string, registered time.Time, ok bool),
	groupOf func(providerID string) (string, bool), poolOf func(group string) string,
	startedAt func(group, providerID string) time.Time) Origin {
	return func(_ context.Context, pod *corev1.Pod) (string, string, string) {
		providerID, registered, ok := node(pod.Spec.NodeName)
		if !ok {
			return "", "", CameUnknown
		}
		group, ok := groupOf(providerID)
		if !ok {
			return "", "", CameUnknown
		}
		pool := poolOf(group)
		switch {
		case !registered.After(pod.CreationTimestamp.Time):
			return pool, group, CameExisting
		case startedAt(group, providerID).After(pod.CreationTimestamp.Time):
			return pool, group, CameStandby
		}
		return pool, group, CameCreated
	}
}

// Run follows the cluster until ctx is done.
func (p *Pods) Run(ctx context.Context) error {
	p.factory.Start(ctx.Done())
	defer p.factory.Shutdown()
	for {
		select {
		case <-ctx.Done():
			return nil
		case pod := <-p.gone:
			p.observe(ctx, pod)
		}
	}
}

// Describe implements prometheus.Collector.
func (p *Pods) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.count
	ch <- p.oldest
	p.waited.Describe(ch)
}

// Collect implements prometheus.Collector: it counts from memory.
func (p *Pods) Collect(ch chan<- prometheus.Metric) {
	p.waited.Collect(ch)
	if !p.informer.HasSynced() {
		return
	}
	n, oldest := p.waiting()
	ch <- prometheus.MustNewConstMetric(p.count, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(p.oldest, prometheus.GaugeValue, oldest.Seconds())
}

// waiting counts the GPU pods that wait and the longest wait.
func (p *Pods) waiting() (n int, oldest time.Duration) {
	now := p.clock.Now()
	for _, obj := range p.informer.GetStore().List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !Waits(pod) {
			continue
		}
		n++
		oldest = max(oldest, now.Sub(pod.CreationTimestamp.Time))
	}
	return n, oldest
}

// Waits reports whether a pod requests GPUs (as the NodeProvisioner and
// the scheduler count requests) and waits for a node: not bound, not
// finished, not being deleted.
func Waits(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return gpu.PodRequestsGPUs(pod)
}

// strip keeps of a pod what Waits and the age read.
func strip(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	keep := func(cs []corev1.Container) []corev1.Container {
		var kept []corev1.Container
		for _, c := range cs {
			if gpu.HasGPUs(c.Resources.Requests) || gpu.HasGPUs(c.Resources.Limits) {
				kept = append(kept, corev1.Container{Name: c.Name, Resources: c.Resources})
			}
		}
		return kept
	}
	out.Spec.InitContainers, out.Spec.Containers = keep(pod.Spec.InitContainers), keep(pod.Spec.Containers)
	return out, nil
}
