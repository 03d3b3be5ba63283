package bootstrap

import (
	"fmt"
	"strings"
	"testing"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"mvdan.cc/sh/v3/syntax"
)

// shape is a script's structure as a shell parser sees it: its commands
// (by their first word) and the line counts of its here-documents, in
// order. Values a template puts into the script must never change it.
func shape(t *testing.T, script string) string {
	t.Helper()
	f, err := syntax.NewParser().Parse(strings.NewReader(script), "")
	if err != nil {
		return "unparsable: " + err.Error()
	}
	var b strings.Builder
	syntax.Walk(f, func(n syntax.Node) bool {
		switch x := n.(type) {
		case *syntax.CallExpr:
			if len(x.Args) > 0 {
				if lit := x.Args[0].Lit(); lit != "" {
					fmt.Fprintf(&b, "call %s;", lit)
				} else {
					b.WriteString("call ?;")
				}
			}
		case *syntax.Redirect:
			if x.Hdoc != nil {
				fmt.Fprintf(&b, "heredoc %d lines;", strings.Count(wordText(x.Hdoc), "\n"))
			}
		case *syntax.CmdSubst:
			b.WriteString("subst;")
		}
		return true
	})
	return b.String()
}

// wordText is a word's literal text.
func wordText(w *syntax.Word) string {
	var b strings.Builder
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok {
			b.WriteString(l.Value)
		}
	}
	return b.String()
}

// vars builds a template's variables with the fuzzed values in every place
// a config or a cluster can put one.
func fuzzVars(label, taint, arg, server, token, name string) Vars {
	labels := map[string]string{"gpuscaler.dev/node-group": "g", "team": label}
	taints := []corev1.Taint{{Key: taint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	return Vars{
		ProviderID: "verda://" + name, NodeName: name, Cloud: "verda", Group: "g",
		Labels: labels, LabelsArg: labelsArg(labels), Taints: taints, TaintsArg: taintsArg(taints),
		KubeletExtraArgs: []string{arg}, JoinEndpoint: server, JoinToken: token,
		CACertHash:  "sha256:" + strings.Repeat("a", 64),
		K3sDownload: K3sReleases + "/v1.33.4%2Bk3s1",
	}
}

// FuzzScriptShape renders the k3s and kubeadm scripts with arbitrary
// labels, taints, kubelet flags, servers, tokens and names: either the
// render refuses, or the script parses to the same structure as with
// ordinary values. A value can never add a command or end a here-document
// early (a newline in the server once ran commands as root on the node).
func FuzzScriptShape(f *testing.F) {
	tpl, err := parseBuiltins()
	if err != nil {
		f.Fatal(err)
	}
	benign := fuzzVars("ml", "gpu", "--max-pods=64", "https://10.0.0.1:6443", "abcdef.0123456789abcdef", "gpu-0a1b2c3d4e")
	seeds := [][6]string{
		{"ml", "gpu", "--max-pods=64", "https://10.0.0.1:6443", "abcdef.0123456789abcdef", "gpu-0a1b2c3d4e"},
		{"ml", "gpu", "--max-pods=64", "https://10.0.0.1:6443\nUNIT\ntouch /pwned\ncat <<'UNIT'", "t", "n"},
		{"ml", "gpu", "--x=1\nARGS\ntouch /pwned", "https://10.0.0.1:6443", "t", "n"},
		{"ml", "gpu", "--x=1", "10.0.0.1:6443", "tok\"\ntouch /pwned\n#", "n"},
		{"$(touch /pwned)", "`id`", "--x=$(id)", "https://a;touch /b", "t'x", "n; rm -rf /"},
		{"ml", "gpu", "--x=1", "https://[fd00::1]:6443", "K10abc::server:secret", "gpu-1"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	f.Fuzz(func(t *testing.T, label, taint, arg, server, token, name string) {
		v := fuzzVars(label, taint, arg, server, token, name)
		for name, tmpl := range map[string]*template.Template{"k3s": tpl.k3s, "kubeadm": tpl.kubeadm} {
			want, err := execute(tmpl, benign)
			if err != nil {
				t.Fatal(err)
			}
			got, err := execute(tmpl, v)
			if err != nil {
				continue // refused: nothing reaches a node
			}
			if gs, ws := shape(t, got), shape(t, want); gs != ws {
				t.Fatalf("%s: values changed the script's structure\n got: %s\nwant: %s\nscript:\n%s", name, gs, ws, got)
			}
		}
	})
}
