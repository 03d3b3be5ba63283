package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubeconfigFile writes a kubeconfig whose contexts reach https://<name>.test,
// the first one current.
func kubeconfigFile(t *testing.T, dir, file string, contexts ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Config\ncurrent-context: " + contexts[0] + "\nclusters:\n")
	for _, c := range contexts {
		b.WriteString("- name: " + c + "\n  cluster: {server: https://" + c + ".test}\n")
	}
	b.WriteString("users:\n- name: u\n  user: {token: t}\ncontexts:\n")
	for _, c := range contexts {
		b.WriteString("- name: " + c + "\n  context: {cluster: " + c + ", user: u}\n")
	}
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Cluster access is read as kubectl reads it: $KUBECONFIG when the config
// and the flags name no file, a named file before it, and --context over
// the file's current context.
func TestRestConfigFollowsKubectlRules(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir) // no ~/.kube/config
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	env := kubeconfigFile(t, dir, "env.yaml", "one", "two")
	named := kubeconfigFile(t, dir, "named.yaml", "three")
	t.Setenv("KUBECONFIG", env)
	for _, tc := range []struct {
		path, context, want string
	}{
		{"", "", "https://one.test"},
		{"", "two", "https://two.test"},
		{named, "", "https://three.test"},
		{"~/named.yaml", "", "https://three.test"},
	} {
		rc, err := RestConfig(tc.path, tc.context)
		if err != nil {
			t.Fatalf("RestConfig(%q, %q): %v", tc.path, tc.context, err)
		}
		if rc.Host != tc.want {
			t.Errorf("RestConfig(%q, %q) reaches %s, want %s", tc.path, tc.context, rc.Host, tc.want)
		}
	}
	if _, err := RestConfig("", "four"); err == nil {
		t.Error("a context the file does not have was accepted")
	}
	t.Setenv("KUBECONFIG", "")
	if _, err := RestConfig("", ""); err == nil {
		t.Error("no kubeconfig anywhere, outside a pod: accepted")
	}
	if _, err := RestConfig(InCluster, ""); err == nil {
		t.Error("in-cluster outside a pod: accepted")
	}
}
