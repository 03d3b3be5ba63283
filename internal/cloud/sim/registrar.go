package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
	Kwok   bool
	Logger *slog.Logger
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
}

// NewRegistrar returns a Registrar for one cluster account: its running
// instances, as the engine made them.
func NewRegistrar(c *Cloud, client kubernetes.Interface, opts RegistrarOptions) *Registrar {
	e := c.engine
	return NewKubelets(e, c.cluster, func() ([]Machine, error) {
		var out []Machine
		for _, in := range e.snapshot(c.cluster) {
			if in.State != cloud.StateRunning {
				continue
			}
			t, ok := e.types[in.InstanceType]
			if !ok {
				return nil, fmt.Errorf("instance %s: type %q not in catalog", in.Name, in.InstanceType)
			}
			out = append(out, Machine{Name: in.Name, ProviderID: in.ProviderID, IP: in.IP, Type: t, Labels: in.labels, Taints: in.taints})
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
	return &Registrar{engine: e, owner: owner, machines: machines, client: client, opts: opts}
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
	for name, in := range running {
		if err := r.ensure(ctx, in, have[name]); err != nil {
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
	// kwok fills in capacity of its own for a Node that has none; the
	// instance's real capacity (GPUs above all) must win.
	if advertises(node, capacity) && (r.opts.Kwok || isReady(node)) {
		return nil
	}
	node = node.DeepCopy()
	node.Status.Capacity = capacity
	node.Status.Allocatable = capacity.DeepCopy()
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: in.IP}, {Type: corev1.NodeHostName, Address: in.Name}}
	if !r.opts.Kwok {
		now := metav1.NewTime(r.engine.clock.Now())
		node.Status.Phase = corev1.NodeRunning
		node.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "simulated kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
	}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set status of node %s: %w", in.Name, err)
	}
	return nil
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
