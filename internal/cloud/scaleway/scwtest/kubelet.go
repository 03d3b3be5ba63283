package scwtest

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// Kubelets returns a stand-in for the kubelets of the fake's servers: each
// running server that booted with a cloud-init registers a Node as its
// kubelet would, from the flags the cloud-init gives it (node name,
// provider ID, labels, taints), with its type's capacity. A server whose
// cloud-init names no provider ID never joins.
func (s *Server) Kubelets(client kubernetes.Interface, opts sim.RegistrarOptions) *sim.Registrar {
	types := map[string]cloud.InstanceType{}
	for _, t := range Catalog() {
		types[t.Name] = t
	}
	return sim.NewKubelets(s.engine, "scaleway-fake", func() ([]sim.Machine, error) {
		var out []sim.Machine
		for _, sv := range s.Servers() {
			if sv.State != "running" {
				continue
			}
			m, ok := kubeletFlags(sv.BootCloudInit)
			if !ok {
				continue
			}
			m.Type, m.IP = types[sv.CommercialType], "10.64.0.1"
			out = append(out, m)
		}
		return out, nil
	}, client, opts)
}

// kubeletFlags reads a node's registration from the flags in its startup
// script (k3s's --kubelet-arg=..., or the kubelet's own).
func kubeletFlags(script string) (sim.Machine, bool) {
	var m sim.Machine
	fields := strings.FieldsFunc(script, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '"' || r == '\'' || r == '\\' })
	for i, f := range fields {
		f = strings.TrimPrefix(f, "--kubelet-arg=")
		f = strings.TrimPrefix(f, "--")
		switch k, v, _ := strings.Cut(f, "="); k {
		case "node-name":
			if v == "" && i+1 < len(fields) {
				v = fields[i+1]
			}
			m.Name = v
		case "provider-id":
			m.ProviderID = v
		case "node-labels":
			m.Labels = map[string]string{}
			for _, kv := range strings.Split(v, ",") {
				if lk, lv, ok := strings.Cut(kv, "="); ok {
					m.Labels[lk] = lv
				}
			}
		case "register-with-taints":
			for _, t := range strings.Split(v, ",") {
				kv, effect, _ := strings.Cut(t, ":")
				tk, tv, _ := strings.Cut(kv, "=")
				m.Taints = append(m.Taints, corev1.Taint{Key: tk, Value: tv, Effect: corev1.TaintEffect(effect)})
			}
		}
	}
	return m, m.Name != "" && m.ProviderID != ""
}
