package chart

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// grant is one verb on one resource, as a rendered rule gives it.
type grant struct {
	who, where, group, resource, verb, name string
}

func (g grant) String() string {
	return fmt.Sprintf("%s: %s in %s on %s/%s (names %s)", g.who, g.verb, g.where, g.group, g.resource, g.name)
}

// row is one line of docs/security.md's permissions table.
type row struct {
	line                                   int
	who, when, where                       string
	modes, groups, resources, verbs, names []string
}

const (
	release     = "gpuscaler" // the namespace render installs into
	refSecretNS = "tenant-a"  // the tokenSecretRef of the configs below
	refSecret   = "join-token"
)

// permissionsTable reads the rows of the table under "## Kubernetes
// permissions" in docs/security.md.
func permissionsTable(t *testing.T) []row {
	t.Helper()
	f, err := os.Open("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	list := func(cell string) []string {
		var out []string
		for _, v := range strings.Split(strings.ReplaceAll(cell, "`", ""), ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	var rows []row
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Kubernetes permissions"
			continue
		}
		if !in || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| who ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 9 {
			t.Fatalf("docs/security.md:%d: want 9 cells, got %d", n, len(cells))
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		r := row{line: n, who: cells[0], modes: list(cells[1]), when: cells[2], where: cells[3], groups: list(cells[4]),
			resources: list(cells[5]), verbs: list(cells[6]), names: list(cells[7])}
		if slices.Equal(r.modes, []string{"all"}) {
			r.modes = []string{"provider", "controller", "karpenter"}
		}
		for i, g := range r.groups {
			if g == "core" {
				r.groups[i] = ""
			}
		}
		r.where = strings.NewReplacer("release", release, "tokenSecretRef.namespace", refSecretNS).Replace(r.where)
		for i, nm := range r.names {
			if nm == "tokenSecretRef.name" {
				r.names[i] = refSecret
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("docs/security.md has no Kubernetes permissions table")
	}
	return rows
}

// grants expands the rendered Roles and ClusterRoles into single grants,
// each attributed to the ServiceAccount its binding names.
func grants(t *testing.T, objs []*unstructured.Unstructured) []grant {
	t.Helper()
	subject := map[string]string{} // kind/namespace/name of a role -> ServiceAccount
	for _, o := range objs {
		if k := o.GetKind(); k != "RoleBinding" && k != "ClusterRoleBinding" {
			continue
		}
		ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		kind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
		subs, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if len(subs) != 1 {
			t.Fatalf("%s %s binds %d subjects, want 1", o.GetKind(), o.GetName(), len(subs))
		}
		sa := subs[0].(map[string]any)["name"].(string)
		subject[kind+"/"+o.GetNamespace()+"/"+ref] = sa
	}
	var out []grant
	for _, o := range objs {
		if k := o.GetKind(); k != "Role" && k != "ClusterRole" {
			continue
		}
		sa, ok := subject[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()]
		if !ok {
			t.Fatalf("%s %s is bound to nobody", o.GetKind(), o.GetName())
		}
		who := "gpuscaler"
		if strings.HasSuffix(sa, "-cluster-autoscaler") {
			who = "cluster-autoscaler"
		}
		where := "cluster"
		if o.GetKind() == "Role" {
			where = o.GetNamespace()
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			rule := r.(map[string]any)
			names := strs(rule["resourceNames"])
			if len(names) == 0 {
				names = []string{"any"}
			}
			for _, g := range strs(rule["apiGroups"]) {
				for _, res := range strs(rule["resources"]) {
					for _, v := range strs(rule["verbs"]) {
						for _, n := range names {
							out = append(out, grant{who, where, g, res, v, n})
						}
					}
				}
			}
		}
	}
	return out
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		out = append(out, x.(string))
	}
	return out
}

// covers reports whether a row grants g in mode.
func (r row) covers(mode string, g grant) bool {
	return r.who == g.who && slices.Contains(r.modes, mode) && r.where == g.where && slices.Contains(r.groups, g.group) &&
		slices.Contains(r.resources, g.resource) && slices.Contains(r.verbs, g.verb) && slices.Contains(r.names, g.name)
}

// withConditions is a config and values that turn on every conditional
// grant of the table.
func withConditions(mode string) map[string]any {
	v := map[string]any{
		"mode": mode,
		"config": map[string]any{
			"clusterName": "rbac",
			"clouds":      map[string]any{"sim": map[string]any{}},
			"nodeGroups": []any{
				map[string]any{"name": "mint", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 2,
					"bootstrap": map[string]any{"method": "kubeadm", "server": "10.0.0.1:6443", "mintToken": true}},
				map[string]any{"name": "ref", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 2,
					"bootstrap": map[string]any{"method": "k3s", "server": "https://10.0.0.1:6443",
						"tokenSecretRef": map[string]any{"namespace": refSecretNS, "name": refSecret, "key": "token"}}},
				map[string]any{"name": "pool", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 2,
					"standby": map[string]any{"size": 1, "prePullImages": []any{"vllm/vllm-openai:v0.6.3"}, "forecast": map[string]any{"maxSize": 2}}},
			},
		},
	}
	if mode == "provider" {
		v["provider"] = map[string]any{"clusterAutoscaler": map[string]any{"extraArgs": map[string]any{"expander": "priority,least-waste"}}}
	}
	return v
}

// Every rule the chart renders is a row of docs/security.md's table, and
// every row is rendered: in each mode, with the defaults (only the rows
// that hold always) and with every condition on (all the mode's rows).
// simWhen is the condition of docs/security.md's rows for the simulated
// cloud's Node registration, which the chart's default config turns on.
const simWhen = "`clouds.sim` without a kubeconfig of its own"

func TestRBACIsWhatTheCodeUses(t *testing.T) {
	rows := permissionsTable(t)
	for _, mode := range []string{"provider", "controller", "karpenter"} {
		for name, values := range map[string]map[string]any{"defaults": {"mode": mode}, "conditions": withConditions(mode)} {
			t.Run(mode+"/"+name, func(t *testing.T) {
				objs, err := render(t, values)
				if err != nil {
					t.Fatal(err)
				}
				got := grants(t, objs)
				for _, g := range got {
					i := slices.IndexFunc(rows, func(r row) bool {
						// The defaults configure the simulated cloud alone.
						return r.covers(mode, g) && (name == "conditions" || r.when == "always" || r.when == simWhen)
					})
					if i < 0 {
						t.Errorf("the chart grants more than docs/security.md lists: %s", g)
					}
				}
				for _, r := range rows {
					if !slices.Contains(r.modes, mode) || name == "defaults" && r.when != "always" {
						continue
					}
					for _, grp := range r.groups {
						for _, res := range r.resources {
							for _, v := range r.verbs {
								for _, n := range r.names {
									want := grant{r.who, r.where, grp, res, v, n}
									if !slices.Contains(got, want) {
										t.Errorf("docs/security.md:%d lists a grant the chart does not render: %s", r.line, want)
									}
								}
							}
						}
					}
				}
			})
		}
	}
}

// Without a bootstrap that needs a token, no ServiceAccount of the chart
// can read a Secret, in any mode.
func TestNoSecretsWithoutBootstrap(t *testing.T) {
	for _, mode := range []string{"provider", "controller", "karpenter"} {
		objs, err := render(t, map[string]any{"mode": mode})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range grants(t, objs) {
			if g.resource == "secrets" || g.resource == "*" || g.verb == "*" {
				t.Errorf("%s: %s", mode, g)
			}
		}
	}
}

// A group that pulls images onto its nodes as they join gets the grant to
// create and delete the pulls' pods without a standby pool; without
// images, no such grant.
func TestPrePullGrantWithoutStandby(t *testing.T) {
	creates := func(images []any) bool {
		t.Helper()
		group := map[string]any{"name": "pull", "cloud": "sim", "instanceType": "1V100.6V", "locations": []any{"FIN-01"}, "maxSize": 2}
		if images != nil {
			group["prePullImages"] = images
		}
		objs, err := render(t, map[string]any{"mode": "controller", "config": map[string]any{
			"clusterName": "rbac", "clouds": map[string]any{"sim": map[string]any{}}, "nodeGroups": []any{group}}})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(grants(t, objs), func(g grant) bool { return g.resource == "pods" && g.verb == "create" })
	}
	if !creates([]any{"vllm/vllm-openai:v0.6.3"}) {
		t.Error("a group with prePullImages: no grant to create the pulls' pods")
	}
	if creates(nil) {
		t.Error("a group without images: a grant to create pods")
	}
}
