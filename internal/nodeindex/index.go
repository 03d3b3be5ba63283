// Package nodeindex keeps the cluster's Nodes in memory, indexed by
// provider ID, for the node-group core: whether an instance's Node
// registered (under any of its provider IDs), deleting the Nodes of
// instances that are gone, and Events about an instance recorded on its
// Node.
package nodeindex

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	"github.com/gpuscaler/gpuscaler/internal/gpu"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// Index is an informer-backed index of Nodes by provider ID. It
// implements nodegroup.Nodes and nodegroup.EventSink.
type Index struct {
	kube     kubernetes.Interface
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	log      *slog.Logger
	recorder events.EventRecorder
	bcast    events.EventBroadcaster
	// fallback carries the Events of instances no Node carries (an order
	// that failed, an instance not yet registered): the process's own
	// pod; nil drops them.
	fallback *corev1.Pod
	// groupObject names a group's object for those Events, before the
	// pod (SetGroupObject).
	groupObject func(group string) *corev1.ObjectReference
	// namespace holds the pods that pull standby instances' images, which
	// pods watches; no namespace, no pre-pulls (pods nil).
	namespace  string
	podFactory informers.SharedInformerFactory
	pods       cache.SharedIndexInformer

	mu    sync.RWMutex
	byPID map[string]string // provider ID -> node name
	pidOf map[string]string // node name -> provider ID
	// gpusAt is when each Node was first seen with GPUs allocatable; zero
	// for Nodes that had them already when the index was filled.
	gpusAt map[string]time.Time
	synced bool
	// lifts are the taints to lift from a Node the moment it shows them
	// (LiftOnSight), by provider ID; ctx is Run's, for their writes.
	lifts map[string]*lift
	ctx   context.Context
}

// lift is one LiftOnSight: the taint's key, when it was asked, and whether
// its write is under way.
type lift struct {
	key   string
	asked time.Time
	busy  bool
}

// liftFor is how long a LiftOnSight holds; the core's sync lifts what it
// missed.
const liftFor = 30 * time.Minute

var (
	_ nodegroup.Nodes     = (*Index)(nil)
	_ nodegroup.EventSink = (*Index)(nil)
	_ nodegroup.Lifter    = (*Index)(nil)
)

// New builds an index over a cluster; Run fills and follows it. namespace
// is where it runs the pods that pull standby instances' images (the
// process's own); empty runs none.
func New(kube kubernetes.Interface, log *slog.Logger, namespace string) *Index {
	if log == nil {
		log = slog.Default()
	}
	factory := informers.NewSharedInformerFactory(kube, 0)
	x := &Index{
		kube: kube, factory: factory, informer: factory.Core().V1().Nodes().Informer(), log: log,
		byPID: map[string]string{}, pidOf: map[string]string{}, gpusAt: map[string]time.Time{}, lifts: map[string]*lift{},
		ctx: context.Background(),
	}
	if namespace != "" {
		x.namespace = namespace
		x.podFactory = informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = PrePullLabel }))
		x.pods = x.podFactory.Core().V1().Pods().Informer()
	}
	x.bcast = events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	x.recorder = x.bcast.NewRecorder(newScheme(), "gpuscaler")
	_, _ = x.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    x.set,
		UpdateFunc: func(_, obj any) { x.set(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				x.mu.Lock()
				x.forget(n.Name)
				x.mu.Unlock()
			}
		},
	})
	return x
}

// set indexes a Node; initial is true for the Nodes of the first list,
// whose GPUs came at a time the index did not see.
func (x *Index) set(obj any, initial bool) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	if pid, ok := x.pidOf[n.Name]; ok && x.byPID[pid] == n.Name {
		delete(x.byPID, pid)
	}
	delete(x.pidOf, n.Name)
	if n.Spec.ProviderID != "" {
		x.pidOf[n.Name], x.byPID[n.Spec.ProviderID] = n.Spec.ProviderID, n.Name
	}
	if _, seen := x.gpusAt[n.Name]; !seen && gpu.HasGPUs(n.Status.Allocatable) {
		if initial {
			now = time.Time{}
		}
		x.gpusAt[n.Name] = now
	}
	x.liftLocked(n)
}

// Joined returns the names of the Nodes created after since, as the
// index holds them now.
func (x *Index) Joined(since time.Time) []string {
	var names []string
	for _, obj := range x.informer.GetStore().List() {
		if n, ok := obj.(*corev1.Node); ok && n.CreationTimestamp.After(since) {
			names = append(names, n.Name)
		}
	}
	return names
}

// LiftOnSight lifts the taint of key from the Node that carries one of the
// provider IDs the moment the index sees it carry it, now if it does
// (nodegroup.Lifter), and from any Node of those provider IDs that shows
// it within liftFor; then the request is forgotten.
func (x *Index) LiftOnSight(key string, providerIDs ...string) {
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	maps.DeleteFunc(x.lifts, func(_ string, l *lift) bool { return !l.busy && now.Sub(l.asked) > liftFor })
	for _, pid := range providerIDs {
		x.lifts[pid] = &lift{key: key, asked: now}
	}
	for _, pid := range providerIDs {
		if name, ok := x.byPID[pid]; ok {
			if obj, exists, _ := x.informer.GetStore().GetByKey(name); exists {
				if n, ok := obj.(*corev1.Node); ok {
					x.liftLocked(n)
				}
			}
		}
	}
}

// liftLocked starts the write of a LiftOnSight asked for n, when n shows
// its taint and none is under way. Callers hold x.mu.
func (x *Index) liftLocked(n *corev1.Node) {
	l, ok := x.lifts[n.Spec.ProviderID]
	if !ok || l.busy || !hasTaint(n, l.key) {
		return
	}
	l.busy = true
	go x.liftNow(x.ctx, n.Spec.ProviderID, l)
}

// liftNow lifts a LiftOnSight's taint, trying again at once on a conflict
// (the kubelet writes its new Node's status meanwhile); a failure is left
// to the core's sync.
func (x *Index) liftNow(ctx context.Context, pid string, l *lift) {
	var err error
	for range 5 {
		if err = x.Untaint(ctx, l.key, pid); !apierrors.IsConflict(err) {
			break
		}
	}
	// The request stays until it expires: the Node lifted may have been
	// one on its way out (deleted with the instance's stop, found gone by
	// Untaint), and the Node the instance registers next shows the taint
	// again.
	x.mu.Lock()
	l.busy = false
	x.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		x.log.Warn("could not lift a taint the moment its node showed it; the next sync does", "providerID", pid, "taint", l.key, "error", err)
	}
}

func (x *Index) forget(name string) {
	if pid, ok := x.pidOf[name]; ok && x.byPID[pid] == name {
		delete(x.byPID, pid)
	}
	delete(x.pidOf, name)
	delete(x.gpusAt, name)
}

// Run fills the index and follows the cluster until ctx is done.
func (x *Index) Run(ctx context.Context) error {
	x.mu.Lock()
	x.ctx = ctx
	x.mu.Unlock()
	if err := x.bcast.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("node events: %w", err)
	}
	defer x.bcast.Shutdown()
	x.factory.Start(ctx.Done())
	defer x.factory.Shutdown()
	if x.podFactory != nil {
		// Not waited for: the Nodes serve every group, the pre-pull pods
		// only standby pools with images, and a cluster that denies the
		// pod watch must not hold the Nodes up (PrePull creates the pod
		// again; one there already is success).
		x.podFactory.Start(ctx.Done())
		defer x.podFactory.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), x.informer.HasSynced) {
		return nil // ctx ended first
	}
	x.mu.Lock()
	x.synced = true
	x.mu.Unlock()
	<-ctx.Done()
	return nil
}

// Registered reports whether a Node carries one of the provider IDs; synced
// is false until the index is filled.
func (x *Index) Registered(providerIDs ...string) (registered, synced bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.synced {
		return false, false
	}
	for _, pid := range providerIDs {
		if _, ok := x.byPID[pid]; ok {
			return true, true
		}
	}
	return false, true
}

// node returns the name of the Node that carries one of the provider IDs.
func (x *Index) node(providerIDs ...string) (string, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, pid := range providerIDs {
		if name, ok := x.byPID[pid]; ok {
			return name, true
		}
	}
	return "", false
}

// Startup tells how far the Node that carries one of the provider IDs has
// come: created, Ready (the condition's last transition to True), GPUs
// allocatable (first seen by this index).
func (x *Index) Startup(providerIDs ...string) (nodegroup.Startup, bool) {
	name, ok := x.node(providerIDs...)
	if !ok {
		return nodegroup.Startup{}, false
	}
	obj, exists, _ := x.informer.GetStore().GetByKey(name)
	n, isNode := obj.(*corev1.Node)
	if !exists || !isNode {
		return nodegroup.Startup{}, false
	}
	s := nodegroup.Startup{Registered: n.CreationTimestamp.Time, Leaving: leaving(n), Standby: hasTaint(n, nodegroup.TaintStandby),
		Claimed: n.Labels[labelKarpenterRegistered] == "true", GPUsNow: gpu.HasGPUs(n.Status.Allocatable)}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			s.Ready = c.LastTransitionTime.Time
		}
	}
	// From the handler's record, not the store's object: the store is
	// updated before the handler runs.
	x.mu.RLock()
	s.GPUs, s.GPUsSeen = x.gpusAt[name]
	x.mu.RUnlock()
	return s, true
}

// labelKarpenterRegistered is the label Karpenter (v1) puts on a Node once
// it has synced its NodeClaim's labels and taints onto it
// (karpv1.NodeRegisteredLabelKey; not imported, Karpenter is a front end
// above this package).
const labelKarpenterRegistered = "karpenter.sh/registered"

// leaving reports whether a front end marked n for deletion: it carries
// the taint cluster-autoscaler (its taints.ToBeDeletedTaint), Karpenter
// (karpenter.sh/disrupted, v1) or the NodeProvisioner
// (provisioner.TaintDeleting; not imported, the provisioner is a front end
// above this package) puts on a node it is about to delete.
func leaving(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case "ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", "gpuscaler.dev/deleting":
			return true
		}
	}
	return false
}

// Delete deletes the Node that carries one of the provider IDs, checking
// that it still carries it (a name reused by a new Node is left alone); no
// such Node is success.
func (x *Index) Delete(ctx context.Context, providerIDs ...string) error {
	n, err := x.get(ctx, providerIDs...)
	if n == nil || err != nil {
		return err
	}
	name := n.Name
	carries := false
	for _, pid := range providerIDs {
		carries = carries || n.Spec.ProviderID == pid
	}
	if !carries {
		return nil
	}
	err = x.kube.CoreV1().Nodes().Delete(ctx, name, deleteOptions(n.UID))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	x.log.Info("deleted the Node of an instance that is gone", "node", name, "providerID", n.Spec.ProviderID)
	return nil
}

// Untaint removes the taint of key from the Node that carries one of the
// provider IDs, with the Node's resourceVersion (a conflict is tried again
// by the next sync); no such Node or taint is success.
func (x *Index) Untaint(ctx context.Context, key string, providerIDs ...string) error {
	n, err := x.get(ctx, providerIDs...)
	if n == nil || err != nil || !hasTaint(n, key) {
		return err
	}
	name := n.Name
	// A merge patch of the taints whole, with the resourceVersion read: a
	// Node changed meanwhile is a conflict, tried again by the next sync.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
		"spec":     map[string]any{"taints": slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })},
	})
	if err != nil {
		return err
	}
	if _, err := x.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	x.log.Info("lifted a taint from a node", "node", name, "taint", key)
	return nil
}

// Workloads lists, from the API server, the pods bound to the Node that
// carries one of the provider IDs, and returns the namespaced names of
// those that run work: not a DaemonSet's, not a static pod's mirror, not
// finished. No such Node is none.
func (x *Index) Workloads(ctx context.Context, providerIDs ...string) ([]string, error) {
	name, ok := x.node(providerIDs...)
	if !ok {
		return nil, nil
	}
	pods, err := x.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return nil, fmt.Errorf("list the pods on node %s: %w", name, err)
	}
	var out []string
	for i := range pods.Items {
		if p := &pods.Items[i]; works(p) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out, nil
}

// works reports whether a pod runs work a node's stop would kill: it has
// not finished, and neither a DaemonSet nor the kubelet (a static pod)
// owns it (those run on every node and come back with it), nor gpuscaler
// (a pre-pull pod).
func works(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if p.Labels[PrePullLabel] != "" {
		return false // gpuscaler's own, pulling a standby instance's images
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return false
	}
	return true
}

// Node is the Node named name as the index last saw it: its provider ID
// and when it registered; ok is false when the index has none. A read of
// memory.
func (x *Index) Node(name string) (providerID string, registered time.Time, ok bool) {
	obj, exists, _ := x.informer.GetStore().GetByKey(name)
	n, isNode := obj.(*corev1.Node)
	if !exists || !isNode {
		return "", time.Time{}, false
	}
	return n.Spec.ProviderID, n.CreationTimestamp.Time, true
}

// get reads, from the API server, the Node that carries one of the
// provider IDs; nil when there is none.
func (x *Index) get(ctx context.Context, providerIDs ...string) (*corev1.Node, error) {
	name, ok := x.node(providerIDs...)
	if !ok {
		return nil, nil
	}
	n, err := x.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return n, err
}

// hasTaint reports whether n carries a taint of key.
func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// Event records an Event about an instance on its Node, when it has one,
// else on the fallback pod (SetFallback) naming the group and instance;
// the core logs every Event anyway.
func (x *Index) Event(e nodegroup.Event) {
	if name, ok := x.node(e.ProviderID); ok && e.ProviderID != "" {
		obj, exists, _ := x.informer.GetStore().GetByKey(name)
		if n, isNode := obj.(*corev1.Node); exists && isNode {
			x.recorder.Eventf(n, nil, e.Type, e.Reason, "Autoscaling", "%s", e.Message)
			return
		}
	}
	subject := "group " + e.Group
	if e.Instance != "" {
		subject += ", instance " + e.Instance
	}
	if x.groupObject != nil {
		if ref := x.groupObject(e.Group); ref != nil {
			x.recorder.Eventf(ref, nil, e.Type, e.Reason, "Autoscaling", "%s: %s", subject, e.Message)
			return
		}
	}
	if x.fallback == nil {
		return
	}
	x.recorder.Eventf(x.fallback, nil, e.Type, e.Reason, "Autoscaling", "%s: %s", subject, e.Message)
}

// SetFallback names the pod that carries the Events of instances no Node
// carries, and the process's own (PodEvent); call it before Run.
func (x *Index) SetFallback(pod *corev1.Pod) { x.fallback = pod }

// SetGroupObject names, for a group, the object whose `kubectl describe`
// should show the Events of its instances that no Node carries (an order
// every offering refused, a cost cap, a Node that never registered): the
// NodeProvisioner whose pool it is, cluster-autoscaler's status
// ConfigMap. of returns nil for a group it has none for, whose Events go
// to the fallback pod; it must not block (a cache read). Call it before
// Run.
func (x *Index) SetGroupObject(of func(group string) *corev1.ObjectReference) { x.groupObject = of }

// PodEvent records an Event about the process itself (a config reload) on
// the fallback pod; without one it is dropped (the process logs it).
func (x *Index) PodEvent(typ, reason, note string) {
	if x.fallback != nil {
		x.recorder.Eventf(x.fallback, nil, typ, reason, "Reload", "%s", note)
	}
}
