// Package chart renders deploy/charts/gpuscaler with Helm's own engine
// (helm.sh/helm/v3, pinned in go.mod) and applies what it renders to a
// real test cluster.
package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
	"github.com/gpuscaler/gpuscaler/test/chartenv"
)

const chartDir = "../../deploy/charts/gpuscaler"

func render(t *testing.T, values map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	return chartenv.Render(chartDir, "gs", "gpuscaler", values)
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.GetKind()]++
	}
	return out
}

// full turns on every optional part.
func full(mode string) map[string]any {
	return map[string]any{
		"mode":              mode,
		"credentials":       map[string]any{"existingSecret": "cloud-keys"},
		"serviceMonitor":    map[string]any{"enabled": true},
		"prometheusRule":    map[string]any{"enabled": true},
		"dashboard":         map[string]any{"enabled": true},
		"networkPolicy":     map[string]any{"enabled": true, "metricsFrom": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"name": "monitoring"}}}}},
		"podAnnotations":    map[string]any{"a": "b"},
		"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
		"priorityClassName": "system-cluster-critical",
	}
}

// Every mode renders with the defaults and with every option on, into the
// objects the mode needs.
func TestRenderModes(t *testing.T) {
	for _, mode := range []string{"provider", "controller", "karpenter"} {
		for name, values := range map[string]map[string]any{"defaults": {"mode": mode}, "full": full(mode)} {
			t.Run(mode+"/"+name, func(t *testing.T) {
				objs, err := render(t, values)
				if err != nil {
					t.Fatal(err)
				}
				k := kinds(objs)
				for _, want := range []string{"Deployment", "ServiceAccount", "ConfigMap", "Service", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "NetworkPolicy"} {
					if k[want] == 0 {
						t.Errorf("no %s: %v", want, k)
					}
				}
				switch mode {
				case "provider":
					if k["Deployment"] != 2 || k["Secret"] != 2 || k["PodDisruptionBudget"] != 0 {
						t.Errorf("provider: %v", k)
					}
				default:
					if k["Deployment"] != 1 || k["PodDisruptionBudget"] != 1 {
						t.Errorf("%s: %v", mode, k)
					}
				}
				if name == "full" && (k["ServiceMonitor"] != 1 || k["PrometheusRule"] != 1) {
					t.Errorf("full: %v", k)
				}
				// The config file the chart writes is one gpuscaler accepts.
				for _, o := range objs {
					if o.GetKind() != "ConfigMap" || o.GetName() != "gs-gpuscaler" {
						continue
					}
					data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
					cfg, err := config.Parse([]byte(data))
					if err != nil {
						t.Fatalf("the rendered config is refused: %v\n%s", err, data)
					}
					if cfg.Kubeconfig != "in-cluster" || cfg.Metrics.Address != "0.0.0.0:9090" ||
						(mode == "provider" && (cfg.Provider.ListenAddress != "0.0.0.0:8086" || cfg.Provider.TLS.CACertFile == "")) {
						t.Fatalf("rendered config: %+v", cfg)
					}
				}
			})
		}
	}
}

// A node group without managedBy is the mode's front end's (the config's
// own default, cluster-autoscaler, refused the NodeProvisioner of a
// controller install with default values), and NOTES.txt's NodeProvisioner
// names the groups the controller may size.
func TestDefaultGroupsFollowTheMode(t *testing.T) {
	owners := map[string]string{"provider": config.ManagedByClusterAutoscaler, "controller": config.ManagedByNodeProvisioner, "karpenter": config.ManagedByKarpenter}
	for mode, owner := range owners {
		t.Run(mode, func(t *testing.T) {
			objs, err := render(t, map[string]any{"mode": mode})
			if err != nil {
				t.Fatal(err)
			}
			var cfg *config.Config
			for _, o := range objs {
				if o.GetKind() == "ConfigMap" && o.GetName() == "gs-gpuscaler" {
					data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
					if cfg, err = config.Parse([]byte(data)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if cfg == nil || len(cfg.NodeGroups) == 0 {
				t.Fatal("no config with node groups rendered")
			}
			for _, g := range cfg.NodeGroups {
				if g.ManagedBy != owner {
					t.Errorf("group %s is managedBy %q, want %q in %s mode", g.Name, g.ManagedBy, owner, mode)
				}
			}
			notes, err := chartenv.Notes(chartDir, "gs", "gpuscaler", map[string]any{"mode": mode})
			if err != nil {
				t.Fatal(err)
			}
			if mode != "controller" {
				return
			}
			_, manifest, ok := strings.Cut(notes, "kubectl apply -f - <<EOF\n")
			manifest, _, ok2 := strings.Cut(manifest, "  EOF")
			if !ok || !ok2 {
				t.Fatalf("NOTES.txt prints no NodeProvisioner to apply:\n%s", notes)
			}
			var np struct {
				Kind string
				Spec struct{ NodeGroups []string }
			}
			if err := yaml.Unmarshal([]byte(manifest), &np); err != nil || np.Kind != "NodeProvisioner" {
				t.Fatalf("NOTES.txt's manifest: %v\n%s", err, manifest)
			}
			if want := []string{cfg.NodeGroups[0].Name}; !slices.Equal(np.Spec.NodeGroups, want) {
				t.Fatalf("NOTES.txt's NodeProvisioner sizes %v, want %v", np.Spec.NodeGroups, want)
			}
		})
	}
}

// A config change reaches the running pods through their hot reload
// (which refuses a bad one and keeps the config in force), not a rollout:
// the ConfigMap is a mounted folder, which the kubelet updates (a subPath
// mount never changes). In controller mode only a change a reload cannot
// apply (the clouds, say) changes the pod template. The provider's one pod
// is never rolled by the config: it checks a restart-only change itself
// and exits to start with it (--restart-on-config-change); before, the
// Recreate strategy killed the working provider for a config the new pod
// might refuse.
func TestOnlyRestartChangesRollThePods(t *testing.T) {
	deployment := func(mode string, cfg map[string]any) (checksum string, args []any, mounts []any) {
		t.Helper()
		objs, err := render(t, map[string]any{"mode": mode, "config": cfg})
		if err != nil {
			t.Fatal(err)
		}
		d := find(t, objs, "Deployment", "gs-gpuscaler").Object
		checksum, _, _ = unstructured.NestedString(d, "spec", "template", "metadata", "annotations", "checksum/config-restart")
		containers, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		args, _, _ = unstructured.NestedSlice(c, "args")
		mounts, _, _ = unstructured.NestedSlice(c, "volumeMounts")
		return checksum, args, mounts
	}
	cfg := func(maxSize int, sim map[string]any) map[string]any {
		return map[string]any{"clusterName": "c", "clouds": map[string]any{"sim": sim},
			"nodeGroups": []any{map[string]any{"name": "g", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": maxSize}}}
	}
	base, args, mounts := deployment("controller", cfg(2, map[string]any{}))
	if base == "" {
		t.Fatal("no checksum/config-restart on the controller's pod template")
	}
	if slices.Contains(args, any("--restart-on-config-change")) {
		t.Error("the controller's replicas exit on a restart-only change, though the checksum rolls them")
	}
	if sum, _, _ := deployment("controller", cfg(5, map[string]any{})); sum != base {
		t.Error("a group's maxSize, which a reload applies, rolls the pods")
	}
	if sum, _, _ := deployment("controller", cfg(2, map[string]any{"bootDelay": "5s"})); sum == base {
		t.Error("a change of the clouds section, which needs a restart, does not roll the controller's pods")
	}
	for _, m := range mounts {
		m := m.(map[string]any)
		if m["name"] == "config" && (m["subPath"] != nil || m["mountPath"] != "/etc/gpuscaler/config") {
			t.Errorf("the config is mounted as %v: a subPath mount never sees the ConfigMap change", m)
		}
	}
	if !slices.Contains(args, any("--config=/etc/gpuscaler/config/config.yaml")) {
		t.Errorf("the controller's args %v do not read the mounted folder's config.yaml", args)
	}

	sum, args, _ := deployment("provider", cfg(2, map[string]any{}))
	if other, _, _ := deployment("provider", cfg(2, map[string]any{"bootDelay": "5s"})); sum != "" || other != "" {
		t.Errorf("the provider's pod template carries a config checksum (%q, %q): a change would recreate its only pod", sum, other)
	}
	if !slices.Contains(args, any("--restart-on-config-change")) {
		t.Errorf("the provider's args %v: a restart-only change would never be applied", args)
	}
}

// A typo or a wrong type fails at install, against values.schema.json.
func TestValuesSchemaRefuses(t *testing.T) {
	group := func(k string, v any) map[string]any {
		g := map[string]any{"name": "h100", "cloud": "sim", "instanceType": "1H100.80S.30V", "locations": []any{"FIN-01"}, "maxSize": 4}
		g[k] = v
		return map[string]any{"clouds": map[string]any{"sim": map[string]any{}}, "nodeGroups": []any{g}}
	}
	for name, c := range map[string]struct {
		values map[string]any
		// want are what the error must say: the field's path, and why.
		want []string
	}{
		"replicas as text": {map[string]any{"replicas": "two"}, []string{"/replicas"}},
		"unknown mode":     {map[string]any{"mode": "daemon"}, []string{"/mode"}},
		"misspelt key":     {map[string]any{"replica": 2}, []string{"replica"}},
		"kubeconfig": {map[string]any{"config": map[string]any{"kubeconfig": "/root/.kube/config"}},
			[]string{"/config/kubeconfig", "the chart sets config.kubeconfig"}},
		"provider": {map[string]any{"config": map[string]any{"provider": map[string]any{"listenAddress": ":8086"}}},
			[]string{"/config/provider", "the chart sets config.provider"}},
		// config is checked against gpuscaler's own types.
		"misspelt config key": {map[string]any{"config": group("maxsize", 4)}, []string{"/config/nodeGroups/0", "maxsize"}},
		"negative maxSize":    {map[string]any{"config": group("maxSize", -1)}, []string{"/config/nodeGroups/0/maxSize", "minimum"}},
		"duration as number": {map[string]any{"config": map[string]any{"sync": map[string]any{"period": 30}}},
			[]string{"/config/sync/period", "string"}},
		"fault rate of 1": {map[string]any{"config": map[string]any{"clouds": map[string]any{"sim": map[string]any{"faultRate": 1}}}},
			[]string{"/config/clouds/sim/faultRate"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render(t, c.values)
			if err == nil {
				t.Fatalf("values %v accepted", c.values)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q: %v", w, err)
				}
			}
		})
	}
}

// What every mode renders is accepted by a real API server (server-side
// apply), the chart's CRDs first.
func TestRenderedManifestsApply(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDDirs: []string{filepath.Join(chartDir, "crds"), monitoringCRDs(t)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// One release per mode, each in its namespace: a release's mode is
	// fixed (its Deployment's selector names it).
	for _, mode := range []string{"provider", "controller", "karpenter"} {
		ns := "gpuscaler-" + mode
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		objs, err := chartenv.Render(chartDir, "gs-"+mode, ns, full(mode))
		if err != nil {
			t.Fatal(err)
		}
		if err := env.Apply(ctx, objs...); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
	}
}

// monitoringCRDs writes minimal CRDs for the Prometheus operator's kinds,
// which the test cluster does not have: the schema is open, the point is
// the object's group, version and kind.
func monitoringCRDs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, k := range []schema.GroupVersionKind{
		{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"},
		{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"},
	} {
		plural := strings.ToLower(k.Kind) + "s"
		crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[1]s.%[2]s}
spec:
  group: %[2]s
  scope: Namespaced
  names: {kind: %[3]s, plural: %[1]s, singular: %[4]s}
  versions:
    - name: %[5]s
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, plural, k.Group, k.Kind, strings.ToLower(k.Kind), k.Version)
		if err := os.WriteFile(filepath.Join(dir, plural+".yaml"), []byte(crd), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// find returns the rendered object of kind and name, or fails.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// With cert-manager and no issuerRef, the provider's and
// cluster-autoscaler's certificates come from a CA of the release's own,
// held by namespaced Issuers, and the provider accepts only
// cluster-autoscaler's name: a shared ClusterIssuer's certificates are
// never trusted.
func TestCertManagerMakesACAOfItsOwn(t *testing.T) {
	objs, err := render(t, map[string]any{"mode": "provider", "provider": map[string]any{"tls": map[string]any{"certManager": map[string]any{"enabled": true}}}})
	if err != nil {
		t.Fatal(err)
	}
	find(t, objs, "Issuer", "gs-gpuscaler-selfsigned")
	ca := find(t, objs, "Certificate", "gs-gpuscaler-ca")
	if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
		t.Error("the CA Certificate is not a CA")
	}
	find(t, objs, "Issuer", "gs-gpuscaler-ca")
	for _, name := range []string{"gs-gpuscaler-server-tls", "gs-gpuscaler-client-tls"} {
		ref, _, _ := unstructured.NestedStringMap(find(t, objs, "Certificate", name).Object, "spec", "issuerRef")
		if ref["kind"] != "Issuer" || ref["name"] != "gs-gpuscaler-ca" {
			t.Errorf("%s is issued by %v, want the release's own CA Issuer", name, ref)
		}
	}
	client := find(t, objs, "Certificate", "gs-gpuscaler-client-tls")
	if cn, _, _ := unstructured.NestedString(client.Object, "spec", "commonName"); cn != "cluster-autoscaler" {
		t.Errorf("client certificate for %q", cn)
	}
	data, _, _ := unstructured.NestedString(find(t, objs, "ConfigMap", "gs-gpuscaler").Object, "data", "config.yaml")
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Provider.TLS.ClientNames; len(got) != 1 || got[0] != "cluster-autoscaler" {
		t.Errorf("provider.tls.clientNames = %v", got)
	}

	// An issuer of the operator's is used as given, and nothing else made.
	objs, err = render(t, map[string]any{"mode": "provider", "provider": map[string]any{"tls": map[string]any{"certManager": map[string]any{
		"enabled": true, "issuerRef": map[string]any{"kind": "ClusterIssuer", "name": "corp"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if k := kinds(objs); k["Issuer"] != 0 || k["Certificate"] != 2 {
		t.Errorf("with an issuerRef: %v", k)
	}
}

// Certificates for GitOps: with provider.tls.existingSecrets the chart
// makes no certificate (Argo CD and Flux render without reaching the
// cluster, so the chart's own would be made anew on every sync) and the
// two Deployments mount the Secrets named; half a pair, or both that and
// cert-manager, is refused. NOTES.txt says which source is in use.
func TestExistingTLSSecrets(t *testing.T) {
	tls := func(v map[string]any) map[string]any {
		return map[string]any{"mode": "provider", "provider": map[string]any{"tls": v}}
	}
	objs, err := render(t, tls(map[string]any{"existingSecrets": map[string]any{"server": "gs-server", "client": "ca-client"}}))
	if err != nil {
		t.Fatal(err)
	}
	if k := kinds(objs); k["Secret"] != 0 || k["Certificate"] != 0 || k["Issuer"] != 0 {
		t.Errorf("the chart made certificates of its own: %v", k)
	}
	mounted := func(deploy, want string) {
		t.Helper()
		vols, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", deploy).Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name == want {
				return
			}
		}
		t.Errorf("%s does not mount Secret %s: %v", deploy, want, vols)
	}
	mounted("gs-gpuscaler", "gs-server")
	mounted("gs-gpuscaler-cluster-autoscaler", "ca-client")
	notes, err := chartenv.Notes(chartDir, "gs", "gpuscaler", tls(map[string]any{"existingSecrets": map[string]any{"server": "gs-server", "client": "ca-client"}}))
	if err != nil || !strings.Contains(notes, "Its certificates are yours: Secrets gs-server") {
		t.Errorf("NOTES.txt does not say the certificates are the operator's (%v):\n%s", err, notes)
	}
	for source, values := range map[string]map[string]any{
		"generated by this chart": {"mode": "provider"},
		"come from cert-manager":  tls(map[string]any{"certManager": map[string]any{"enabled": true}}),
	} {
		if notes, err := chartenv.Notes(chartDir, "gs", "gpuscaler", values); err != nil || !strings.Contains(notes, source) {
			t.Errorf("NOTES.txt does not say the certificates were %s (%v):\n%s", source, err, notes)
		}
	}
	for name, v := range map[string]map[string]any{
		"half a pair": {"existingSecrets": map[string]any{"server": "gs-server"}},
		"two sources": {"existingSecrets": map[string]any{"server": "a", "client": "b"}, "certManager": map[string]any{"enabled": true}},
	} {
		if _, err := render(t, tls(v)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A config that runs the script server gets its port in the Deployment,
// the Service and the NetworkPolicy; one that does not, none.
func TestScriptServerPortIsOpened(t *testing.T) {
	values := map[string]any{"mode": "controller", "config": map[string]any{
		"clusterName": "s", "clouds": map[string]any{"sim": map[string]any{}},
		"scriptServer": map[string]any{"listenAddress": "0.0.0.0:8443", "url": "https://scripts.example.com:8443"},
		"nodeGroups":   []any{map[string]any{"name": "g", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 1}},
	}}
	for _, with := range []bool{true, false} {
		if !with {
			values = map[string]any{"mode": "controller"}
		}
		objs, err := render(t, values)
		if err != nil {
			t.Fatal(err)
		}
		ports, _, _ := unstructured.NestedSlice(find(t, objs, "Service", "gs-gpuscaler").Object, "spec", "ports")
		svc := false
		for _, p := range ports {
			if p.(map[string]any)["name"] == "scripts" && fmt.Sprint(p.(map[string]any)["port"]) == "8443" {
				svc = true
			}
		}
		ingress, _, _ := unstructured.NestedSlice(find(t, objs, "NetworkPolicy", "gs-gpuscaler").Object, "spec", "ingress")
		np := false
		for _, rule := range ingress {
			for _, p := range rule.(map[string]any)["ports"].([]any) {
				if p.(map[string]any)["port"] == "scripts" {
					np = true
				}
			}
		}
		containers, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", "gs-gpuscaler").Object, "spec", "template", "spec", "containers")
		pod := strings.Contains(fmt.Sprint(containers[0].(map[string]any)["ports"]), "scripts")
		if svc != with || np != with || pod != with {
			t.Errorf("script server %v: Service port %v, NetworkPolicy %v, container port %v", with, svc, np, pod)
		}
	}
}

// The script server reaches booting machines outside the cluster through
// a Service of its own (NodePort or LoadBalancer) that carries its port
// alone (never the metrics or gRPC port) and keeps each machine's address
// (externalTrafficPolicy Local), which bindToInstanceIP checks. A real
// API server accepts it.
func TestScriptServerServiceExposesScriptsOnly(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, typ := range []string{"ClusterIP", "NodePort", "LoadBalancer"} {
		t.Run(typ, func(t *testing.T) {
			values := map[string]any{"mode": "provider", "config": map[string]any{
				"clusterName": "s", "clouds": map[string]any{"sim": map[string]any{}},
				"scriptServer": map[string]any{"listenAddress": "0.0.0.0:8443", "url": "https://scripts.example.com:8443"},
				"nodeGroups":   []any{map[string]any{"name": "g", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 1}},
			}, "scriptServer": map[string]any{"service": map[string]any{
				"type": typ, "annotations": map[string]any{"example.com/lb": "external"}, "loadBalancerSourceRanges": []any{"203.0.113.0/24"},
			}}}
			objs, err := render(t, values)
			if err != nil {
				t.Fatal(err)
			}
			var svc *unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "Service" && o.GetName() == "gs-gpuscaler-scripts" {
					svc = o
				}
			}
			if typ == "ClusterIP" {
				if svc != nil {
					t.Fatal("a ClusterIP script server got a Service of its own")
				}
				return
			}
			if svc == nil {
				t.Fatalf("no Service of the script server's own for %s", typ)
			}
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			policy, _, _ := unstructured.NestedString(svc.Object, "spec", "externalTrafficPolicy")
			if len(ports) != 1 || ports[0].(map[string]any)["name"] != "scripts" || policy != "Local" || svc.GetAnnotations()["example.com/lb"] != "external" {
				t.Fatalf("the scripts Service: ports %v, externalTrafficPolicy %q, annotations %v", ports, policy, svc.GetAnnotations())
			}
			svc.SetNamespace("default")
			svc.SetName("scripts-" + strings.ToLower(typ))
			if err := env.Apply(ctx, svc); err != nil {
				t.Fatalf("the API server refuses the scripts Service: %v", err)
			}
		})
	}
}

// Secrets reach gpuscaler as files: secretFiles mounts each at
// /etc/gpuscaler/secrets/<name>, 0440 and group gpuscaler's; the script
// server's TLS comes from a Secret, with its CA pinned by the nodes; a
// config with a real cloud and no clusterName is refused, one with only
// the simulated cloud is named after the release; the probes use the
// health port, which the network policy opens to no pod.
func TestFilesClusterNameAndHealth(t *testing.T) {
	values := map[string]any{"mode": "controller",
		"secretFiles":  []any{map[string]any{"secretName": "gcp-key"}},
		"scriptServer": map[string]any{"tls": map[string]any{"existingSecret": "scripts-cert", "pinCA": true}},
		"config": map[string]any{
			"clouds":       map[string]any{"sim": map[string]any{}},
			"scriptServer": map[string]any{"listenAddress": "0.0.0.0:8443", "url": "https://scripts.example.com:8443"},
			"nodeGroups":   []any{map[string]any{"name": "g", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 1}},
		}}
	objs, err := render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	cm := find(t, objs, "ConfigMap", "gs-gpuscaler")
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		t.Fatalf("the rendered config: %v\n%s", err, data)
	}
	if cfg.ClusterName != "gs" {
		t.Errorf("clusterName %q with only the simulated cloud, want the release's name", cfg.ClusterName)
	}
	if tls := cfg.ScriptServer.TLS; tls.CertFile != "/etc/gpuscaler/scripts-tls/tls.crt" || tls.CACertFile != "/etc/gpuscaler/scripts-tls/ca.crt" {
		t.Errorf("scriptServer.tls %+v, want the mounted Secret's files", tls)
	}
	if cfg.Metrics.HealthAddress != "0.0.0.0:8081" {
		t.Errorf("metrics.healthAddress %q, want 0.0.0.0:8081", cfg.Metrics.HealthAddress)
	}
	spec, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "gs-gpuscaler").Object, "spec", "template", "spec")
	text := fmt.Sprint(spec)
	for _, want := range []string{"secretName:gcp-key", "defaultMode:288", "mountPath:/etc/gpuscaler/secrets/gcp-key", "fsGroup:65532",
		"secretName:scripts-cert", "mountPath:/etc/gpuscaler/scripts-tls", "path:/healthz port:health", "path:/readyz port:health"} {
		if !strings.Contains(text, want) {
			t.Errorf("the pod spec lacks %s:\n%s", want, text)
		}
	}
	ingress, _, _ := unstructured.NestedSlice(find(t, objs, "NetworkPolicy", "gs-gpuscaler").Object, "spec", "ingress")
	if strings.Contains(fmt.Sprint(ingress), "health") {
		t.Errorf("the network policy admits pods to the health port: %v", ingress)
	}
	if egress, _, _ := unstructured.NestedSlice(find(t, objs, "NetworkPolicy", "gs-gpuscaler").Object, "spec", "egress"); egress != nil {
		t.Errorf("egress %v by default, want none (blockMetadata is opt-in)", egress)
	}
	values["networkPolicy"] = map[string]any{"blockMetadata": true}
	if objs, err = render(t, values); err != nil {
		t.Fatal(err)
	}
	if egress, _, _ := unstructured.NestedSlice(find(t, objs, "NetworkPolicy", "gs-gpuscaler").Object, "spec", "egress"); !strings.Contains(fmt.Sprint(egress), "except:[169.254.169.254/32]") {
		t.Errorf("egress %v with blockMetadata, want everything but the metadata endpoint", egress)
	}
	values["config"].(map[string]any)["clouds"] = map[string]any{"verda": map[string]any{}}
	if _, err := render(t, values); err == nil || !strings.Contains(err.Error(), "config.clusterName is required") {
		t.Errorf("a Verda config without clusterName: %v, want config.clusterName is required", err)
	}
	// GCP without a key file authenticates through the metadata endpoint.
	values["config"].(map[string]any)["clusterName"] = "prod"
	values["config"].(map[string]any)["clouds"] = map[string]any{"gcp": map[string]any{"project": "p", "zone": "us-central1-a"}}
	values["image"] = map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)}
	objs, err = render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	if types, _, _ := unstructured.NestedStringSlice(find(t, objs, "NetworkPolicy", "gs-gpuscaler").Object, "spec", "policyTypes"); slices.Contains(types, "Egress") {
		t.Errorf("policy types %v for GCP without a key file, want no egress rule", types)
	}
	if spec := fmt.Sprint(find(t, objs, "Deployment", "gs-gpuscaler").Object); !strings.Contains(spec, "gpuscaler@sha256:abab") {
		t.Error("image.digest does not pin the image")
	}
}

// The values file of each cloud that ships with the chart (values/) renders
// in every mode, into a config that passes the checks start-up runs (all
// but those that need the cloud's credentials), with its groups on that
// cloud.
func TestPerCloudValuesRender(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "values", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clouds := map[string]bool{}
	for _, f := range files {
		cloud := strings.TrimSuffix(filepath.Base(f), ".yaml")
		clouds[cloud] = true
		for _, mode := range []string{"provider", "controller", "karpenter"} {
			t.Run(cloud+"/"+mode, func(t *testing.T) {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				var values map[string]any
				if err := yaml.Unmarshal(data, &values); err != nil {
					t.Fatal(err)
				}
				values["mode"] = mode
				objs, err := render(t, values)
				if err != nil {
					t.Fatalf("%s does not render in %s mode: %v", f, mode, err)
				}
				doc, _, _ := unstructured.NestedString(find(t, objs, "ConfigMap", "gs-gpuscaler").Object, "data", "config.yaml")
				cfg, err := config.Parse([]byte(doc))
				if err != nil {
					t.Fatalf("the config %s renders is refused: %v\n%s", f, err, doc)
				}
				if _, err := daemon.Preflight(context.Background(), cfg, daemon.Options{}, daemon.PreflightOptions{FileOnly: true}); err != nil {
					t.Fatalf("the config %s renders fails start-up's checks: %v", f, err)
				}
				for _, g := range cfg.NodeGroups {
					if g.Cloud != cloud {
						t.Errorf("group %s is on %s, in the values file of %s", g.Name, g.Cloud, cloud)
					}
				}
			})
		}
	}
	for _, want := range []string{"verda", "scaleway", "kamatera", "gcp"} {
		if !clouds[want] {
			t.Errorf("no values file for %s in %s/values", want, chartDir)
		}
	}
}

// The settings a chart user reaches for (Karpenter's and
// cluster-autoscaler's charts have them) reach the objects: names, log
// level, environment, arguments, security contexts, host network, the
// ServiceMonitor's relabelings, cluster-autoscaler's scheduling; and by
// default the pods spread over zones and stay off the nodes gpuscaler
// makes.
func TestChartSettings(t *testing.T) {
	deployment := func(objs []*unstructured.Unstructured, name string) map[string]any {
		t.Helper()
		for _, o := range objs {
			if o.GetKind() == "Deployment" && o.GetName() == name {
				spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
				return spec
			}
		}
		t.Fatalf("no Deployment %s", name)
		return nil
	}
	str := func(v any) string { out, _ := yaml.Marshal(v); return string(out) }

	objs, err := render(t, map[string]any{"mode": "controller"})
	if err != nil {
		t.Fatal(err)
	}
	spec := deployment(objs, "gs-gpuscaler")
	if s := str(spec["affinity"]); !strings.Contains(s, "key: gpuscaler.dev/cloud") || !strings.Contains(s, "operator: DoesNotExist") {
		t.Errorf("default affinity does not keep gpuscaler off its own nodes:\n%s", s)
	}
	if s := str(spec["topologySpreadConstraints"]); !strings.Contains(s, "topology.kubernetes.io/zone") ||
		!strings.Contains(s, "app.kubernetes.io/instance: gs") || !strings.Contains(s, "app.kubernetes.io/component: controller") {
		t.Errorf("default spread is not over zones with the pods' selector:\n%s", s)
	}
	if s := str(spec["containers"]); !strings.Contains(s, "--log-level=info") || !strings.Contains(s, "readOnlyRootFilesystem: true") {
		t.Errorf("default container:\n%s", s)
	}
	if s := str(spec["securityContext"]); !strings.Contains(s, "fsGroup: 65532") {
		t.Errorf("default pod security context:\n%s", s)
	}

	values := full("provider")
	for k, v := range map[string]any{
		"fullnameOverride":   "autoscaler",
		"logLevel":           "debug",
		"env":                []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}},
		"extraArgs":          []any{"--context=other"},
		"podSecurityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 1000},
		"securityContext":    map[string]any{"readOnlyRootFilesystem": true, "privileged": false},
		"hostNetwork":        true,
		"serviceMonitor": map[string]any{"enabled": true, "relabelings": []any{map[string]any{"targetLabel": "cluster", "replacement": "eu-1"}},
			"metricRelabelings": []any{map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_.*", "action": "drop"}}},
		"provider": map[string]any{"clusterAutoscaler": map[string]any{"nodeSelector": map[string]any{"pool": "system"},
			"tolerations": []any{map[string]any{"key": "system", "operator": "Exists"}}}},
	} {
		values[k] = v
	}
	objs, err = render(t, values)
	if err != nil {
		t.Fatal(err)
	}
	spec = deployment(objs, "autoscaler")
	c := str(spec["containers"])
	for _, want := range []string{"--log-level=debug", "--context=other", "name: HTTPS_PROXY", "privileged: false"} {
		if !strings.Contains(c, want) {
			t.Errorf("the container lacks %q:\n%s", want, c)
		}
	}
	if spec["hostNetwork"] != true || spec["dnsPolicy"] != "ClusterFirstWithHostNet" {
		t.Errorf("hostNetwork %v, dnsPolicy %v", spec["hostNetwork"], spec["dnsPolicy"])
	}
	if s := str(spec["securityContext"]); !strings.Contains(s, "runAsUser: 1000") {
		t.Errorf("pod security context:\n%s", s)
	}
	ca := deployment(objs, "autoscaler-cluster-autoscaler")
	if s := str(ca["nodeSelector"]) + str(ca["tolerations"]); !strings.Contains(s, "pool: system") || !strings.Contains(s, "key: system") {
		t.Errorf("cluster-autoscaler's scheduling:\n%s", s)
	}
	if s := str(ca["containers"]); !strings.Contains(s, "containerPort: 8085") || !strings.Contains(s, "/health-check") {
		t.Errorf("cluster-autoscaler's metrics port and probe:\n%s", s)
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" {
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
			if s := str(eps); !strings.Contains(s, "targetLabel: cluster") || !strings.Contains(s, "action: drop") {
				t.Errorf("ServiceMonitor endpoints:\n%s", s)
			}
		}
	}

	objs, err = render(t, map[string]any{"mode": "karpenter", "nameOverride": "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	spec = deployment(objs, "gs-gpu")
	if s := str(spec["topologySpreadConstraints"]); !strings.Contains(s, "app.kubernetes.io/name: gpu") {
		t.Errorf("nameOverride did not reach the selector:\n%s", s)
	}
}
