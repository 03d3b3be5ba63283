package gcptest

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// Kubelets registers a Node for each running member of the fake's MIGs,
// as a GKE node pool's nodes register: named after the instance, with the
// provider ID gce://<project>/<zone>/<name>, the machine type's GPUs, and
// the labels and taints of the group's template (its kube-labels item and
// kube-env's NODE_TAINTS).
func (s *Server) Kubelets(client kubernetes.Interface, opts sim.RegistrarOptions) *sim.Registrar {
	types := map[string]cloud.InstanceType{}
	for _, t := range MachineTypes {
		types[t.Name] = t
	}
	return sim.NewKubelets(s.engine, "gcp-fake", func() ([]sim.Machine, error) {
		s.settle()
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []sim.Machine
		for _, g := range s.igms {
			t := s.templates[g.template]
			for name, m := range g.members {
				if m.action != "NONE" || !m.created {
					continue
				}
				mc := sim.Machine{Name: name, ProviderID: "gce://" + s.opts.Project + "/" + m.zone + "/" + name, IP: "10.128.0.2",
					Type: types[g.machineType], Labels: map[string]string{}}
				if t != nil {
					for _, kv := range strings.Split(t.Metadata["kube-labels"], ",") {
						if k, v, ok := strings.Cut(kv, "="); ok {
							mc.Labels[k] = v
						}
					}
					mc.Taints = nodeTaints(t.Metadata["kube-env"])
				}
				out = append(out, mc)
			}
		}
		return out, nil
	}, client, opts)
}

// nodeTaints reads NODE_TAINTS from a kube-env item.
func nodeTaints(env string) []corev1.Taint {
	var out []corev1.Taint
	for line := range strings.Lines(env) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "NODE_TAINTS:")
		if !ok {
			continue
		}
		for _, raw := range strings.Split(strings.Trim(strings.TrimSpace(v), `'"`), ",") {
			kv, effect, _ := strings.Cut(raw, ":")
			k, val, _ := strings.Cut(kv, "=")
			out = append(out, corev1.Taint{Key: k, Value: val, Effect: corev1.TaintEffect(effect)})
		}
	}
	return out
}
