package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Annotations on the Nodes a Registrar manages.
const (
	// AnnotationCluster names the simulated cluster account a Node belongs to.
	AnnotationCluster = "sim.gpuscaler.dev/cluster"
	// AnnotationKwok hands the Node to kwok, which then keeps it Ready and
	// runs the pods bound to it.
	AnnotationKwok = "kwok.x-k8s.io/node"
)

const (
	registrarResync = 10 * time.Second
)

// RegistrarOptions configure a Registrar.
type RegistrarOptions struct {
	// Kwok annotates Nodes for kwok and leaves their conditions to it;
	// without kwok the Registrar marks Nodes Ready itself.
	Kwok bool
	// GPUStartup is the NVIDIA software's start-up on a GPU node; the zero
	// value advertises GPUs as the Node registers.
	GPUStartup GPUStartup
	Logger     *slog.Logger
}

// GPUStartup is what a GPU node goes through after its kubelet registers
// it Ready, as the NVIDIA driver, the device plugin and mig-manager start:
// the gap every GPU autoscaler must not pay for twice.
type GPUStartup struct {
	// ReadyDelay is the time from registration to GPUs allocatable (the
	// driver installed and the device plugin advertising).
	ReadyDelay time.Duration
	// MIGDelay is the further time until the MIG devices of a MIG node
	// appear (mig-manager repartitioning); nothing GPU is advertised
	// before.
	MIGDelay time.Duration
	// Flaps is how often the Node turns NotReady and Ready again before its
	// GPUs appear (a driver container restarting); they are spread evenly
	// over ReadyDelay, each lasting ReadyDelay/(2*Flaps+1).
	Flaps int
	// Failures is how many nodes, the first to register, never get their
	// GPUs (a driver that does not install).
	Failures int
}

// Machine is a running machine as its kubelet registers it.
type Machine struct {
	Name, ProviderID, IP string
	// Type gives the capacity (GPUs included).
	Type   cloud.InstanceType
	Labels map[string]string
	Taints []corev1.Taint
}

// Registrar stands in for the kubelets of a simulated cluster: it keeps one
// Node per running machine, registered with the machine's provider ID,
// labels, taints and GPU capacity (MIG devices included, as mig-manager and
// the device plugin would advertise them), and removes the Node when its
// machine is deleted or gone.
type Registrar struct {
	engine *Engine
	// owner marks the Nodes this Registrar manages (AnnotationCluster).
	owner    string
	machines func() ([]Machine, error)
	client   kubernetes.Interface
	opts     RegistrarOptions

	mu sync.Mutex
	// registered is when each Node was first seen registered (the engine's
	// clock); broken the nodes whose GPUs never come; failures counts them.
	registered map[string]time.Time
	broken     map[string]bool
	failures   int
	// wake is the next time a Node's GPU start-up moves on.
	wake time.Time
}

// NewRegistrar returns a Registrar for one cluster account: its running
// instances, as the engine made them.
func NewRegistrar(c *Cloud, client kubernetes.Interface, opts RegistrarOptions) *Registrar {
	e := c.engine
	return NewKubelets(e, c.cluster, func() ([]Machine, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.advanceLocked()
		var out []Machine
		for _, in := range e.sortedLocked(c.cluster) {
			if in.state != running {
				continue
			}
			t, ok := e.types[in.offering.InstanceType]
			if !ok {
				return nil, fmt.Errorf("instance %s: type %q not in catalog", in.name, in.offering.InstanceType)
			}
			v := in.view()
			out = append(out, Machine{Name: in.name, ProviderID: v.ProviderID, IP: v.IP, Type: t, Labels: in.order.labels, Taints: in.order.taints})
		}
		return out, nil
	}, client, opts)
}

// NewKubelets returns a Registrar over machines another fake describes
// (a cloud's fake API whose servers carry their kubelet's flags in their
// startup scripts); it syncs on the engine's changes and every few
// seconds. owner marks its Nodes.
func NewKubelets(e *Engine, owner string, machines func() ([]Machine, error), client kubernetes.Interface, opts RegistrarOptions) *Registrar {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Registrar{engine: e, owner: owner, machines: machines, client: client, opts: opts,
		registered: map[string]time.Time{}, broken: map[string]bool{}}
}

// Run reconciles Nodes until ctx is done: on every change of the engine, at
// each scheduled boot or deletion, and every few seconds. Errors are logged
// and retried.
func (r *Registrar) Run(ctx context.Context) error {
	e := r.engine
	for {
		changed := e.Changed()
		if err := r.Sync(ctx); err != nil && ctx.Err() == nil {
			r.opts.Logger.Warn("node registration failed; retrying", "error", err)
		}
		wait := registrarResync
		if next, ok := e.NextEvent(); ok {
			if d := next.Sub(e.clock.Now()); d < wait {
				wait = max(d, 0)
			}
		}
		r.mu.Lock()
		if !r.wake.IsZero() {
			wait = min(wait, max(r.wake.Sub(e.clock.Now()), 0))
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-e.clock.After(wait):
		}
	}
}

// Sync makes the cluster's simulated Nodes match the running instances once.
func (r *Registrar) Sync(ctx context.Context) error {
	machines, err := r.machines()
	if err != nil {
		return err
	}
	running := map[string]Machine{}
	for _, m := range machines {
		running[m.Name] = m
	}
	nodes, err := r.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var errs []error
	r.mu.Lock()
	r.wake = time.Time{}
	for name := range r.registered {
		if _, ok := running[name]; !ok {
			delete(r.registered, name)
			delete(r.broken, name)
		}
	}
	r.mu.Unlock()
	have := map[string]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Annotations[AnnotationCluster] != r.owner {
			continue
		}
		if _, ok := running[n.Name]; !ok {
			err := r.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete node %s: %w", n.Name, err))
				continue
			}
			r.opts.Logger.Info("node removed with its instance", "node", n.Name)
			continue
		}
		have[n.Name] = n
	}
	// In name order: which Node is "the first to register" (GPUStartup's
	// failures) must not depend on map order.
	for _, name := range slices.Sorted(maps.Keys(running)) {
		if err := r.ensure(ctx, running[name], have[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensure registers one machine's Node, and its status, if missing.
func (r *Registrar) ensure(ctx context.Context, in Machine, node *corev1.Node) error {
	nodes := r.client.CoreV1().Nodes()
	if node == nil {
		labels := maps.Clone(in.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[corev1.LabelHostname] = in.Name
		ann := map[string]string{AnnotationCluster: r.owner}
		if r.opts.Kwok {
			ann[AnnotationKwok] = "fake"
		}
		created, err := nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: in.Name, Labels: labels, Annotations: ann},
			Spec:       corev1.NodeSpec{ProviderID: in.ProviderID, Taints: in.Taints},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = nodes.Get(ctx, in.Name, metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("register node %s: %w", in.Name, err)
		}
		node = created
		r.opts.Logger.Info("node registered", "node", in.Name, "providerID", in.ProviderID)
	}
	capacity, err := r.capacity(in)
	if err != nil {
		return err
	}
	st := r.startup(in, capacity)
	// During a flap the Node is taken from kwok (which would mark it Ready
	// at once) and marked NotReady here; after it, marked Ready and handed
	// back.
	kwok := r.opts.Kwok && !st.flapping
	_, hasKwok := node.Annotations[AnnotationKwok]
	if hasKwok && !kwok {
		if node, err = r.setKwok(ctx, node, false); err != nil {
			return err
		}
	}
	manageReady := !kwok || !hasKwok
	// kwok fills in capacity of its own for a Node that has none; the
	// instance's real capacity (GPUs above all) must win.
	if !advertises(node, st.advertise) || manageReady && !readyIs(node, !st.flapping) {
		node = node.DeepCopy()
		node.Status.Capacity = st.advertise
		node.Status.Allocatable = st.advertise.DeepCopy()
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: in.IP}, {Type: corev1.NodeHostName, Address: in.Name}}
		if manageReady {
			setReady(node, !st.flapping, r.engine.clock.Now())
		}
		if node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("set status of node %s: %w", in.Name, err)
		}
	}
	if kwok && !hasKwok {
		if _, err = r.setKwok(ctx, node, true); err != nil {
			return err
		}
	}
	return nil
}

// setKwok hands a Node to kwok, or takes it back.
func (r *Registrar) setKwok(ctx context.Context, node *corev1.Node, kwok bool) (*corev1.Node, error) {
	node = node.DeepCopy()
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	if kwok {
		node.Annotations[AnnotationKwok] = "fake"
	} else {
		delete(node.Annotations, AnnotationKwok)
	}
	updated, err := r.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node.Name, err)
	}
	return updated, nil
}

// setReady sets a Node's Ready condition, as its kubelet posts it.
func setReady(node *corev1.Node, ready bool, at time.Time) {
	now := metav1.NewTime(at)
	status, reason, msg := corev1.ConditionTrue, "KubeletReady", "simulated kubelet is posting ready status"
	if !ready {
		status, reason, msg = corev1.ConditionFalse, "KubeletNotReady", "simulated: container runtime network not ready (driver restarting)"
	}
	node.Status.Phase = corev1.NodeRunning
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.Message, c.LastHeartbeatTime = status, reason, msg, now
			node.Status.Conditions[i] = c
			return
		}
	}
	node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
		Type: corev1.NodeReady, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now,
	})
}

// nodeStartup is where a Node is in its GPU start-up.
type nodeStartup struct {
	// advertise is the capacity to advertise now: without GPUs before
	// they appear.
	advertise corev1.ResourceList
	flapping  bool
}

// startup places a machine's Node in its GPU start-up (remembering when it
// registered, and whether it is one whose GPUs never come) and schedules
// the Registrar's next wake-up.
func (r *Registrar) startup(in Machine, capacity corev1.ResourceList) nodeStartup {
	g := r.opts.GPUStartup
	if in.Type.GPUCount == 0 || g == (GPUStartup{}) {
		return nodeStartup{advertise: capacity}
	}
	now := r.engine.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	since, ok := r.registered[in.Name]
	if !ok {
		since = now
		r.registered[in.Name] = since
		if r.failures < g.Failures {
			r.failures++
			r.broken[in.Name] = true
			r.opts.Logger.Info("simulated: this node's GPUs will never appear", "node", in.Name)
		}
	}
	gpusAt := since.Add(g.ReadyDelay)
	if in.Labels[gpu.LabelMIGConfig] != "" {
		gpusAt = gpusAt.Add(g.MIGDelay)
	}
	var st nodeStartup
	if r.broken[in.Name] || now.Before(gpusAt) {
		st.advertise = corev1.ResourceList{}
		for name, q := range capacity {
			if _, isGPU := gpu.GPUFraction(name); !isGPU {
				st.advertise[name] = q
			}
		}
	} else {
		st.advertise = capacity
	}
	var events []time.Time
	if !r.broken[in.Name] {
		events = append(events, gpusAt)
	}
	if g.Flaps > 0 && g.ReadyDelay > 0 {
		d := g.ReadyDelay / time.Duration(2*g.Flaps+1)
		for i := range g.Flaps {
			start := since.Add(d * time.Duration(2*i+1))
			end := start.Add(d)
			st.flapping = st.flapping || !now.Before(start) && now.Before(end)
			events = append(events, start, end)
		}
	}
	for _, t := range events {
		if t.After(now) && (r.wake.IsZero() || t.Before(r.wake)) {
			r.wake = t
		}
	}
	return st
}

// advertises reports whether a Node's capacity and allocatable both hold
// exactly the given resources.
func advertises(n *corev1.Node, want corev1.ResourceList) bool {
	for _, have := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		if len(have) != len(want) {
			return false
		}
		for name, q := range want {
			if h, ok := have[name]; !ok || h.Cmp(q) != 0 {
				return false
			}
		}
	}
	return true
}

// readyIs reports whether a Node's Ready condition is there and says ready.
func readyIs(n *corev1.Node, ready bool) bool {
	want := corev1.ConditionFalse
	if ready {
		want = corev1.ConditionTrue
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == want
		}
	}
	return false
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// capacity is what the machine's kubelet and device plugin advertise.
func (r *Registrar) capacity(in Machine) (corev1.ResourceList, error) {
	t := in.Type
	rl := cloud.NodeResources(t, 0)
	if t.GPUCount == 0 {
		return rl, nil
	}
	profile := in.Labels[gpu.LabelMIGConfig]
	if profile == "" {
		rl[gpu.ResourceGPU] = *resource.NewQuantity(int64(t.GPUCount), resource.DecimalSI)
		return rl, nil
	}
	strategy := in.Labels[gpu.LabelMIGStrategy]
	if strategy == "" {
		strategy = gpu.StrategyMixed
	}
	mig, err := gpu.MIGResources(t.GPUModel, profile, strategy, t.GPUCount)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", in.Name, err)
	}
	maps.Copy(rl, mig)
	return rl, nil
}
