// Package bootstrap renders the startup script each node joins the cluster
// with: its provider ID, labels and taints (exactly those of the group's
// template), its MIG setup, and how it joins (k3s, kubeadm, or the user's
// own template). It also holds the join credentials (a Secret's token, or
// a per-node kubeadm bootstrap token) and the script server that hands a
// script to its node once.
package bootstrap

import (
	"bytes"
	"embed"
	"fmt"
	"sort"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	tokenutil "k8s.io/cluster-bootstrap/token/util"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

// Vars are what a template sees. The documented variables of custom
// templates are these fields.
type Vars struct {
	// ProviderID is the node's spec.providerID ("verda://gpu-0a1b2c3d4e").
	ProviderID string
	// NodeName is the node and host name.
	NodeName string
	Cloud    string
	Group    string
	// Labels are the node's labels; LabelsArg is them as the kubelet's
	// --node-labels value (k=v,k=v, sorted).
	Labels    map[string]string
	LabelsArg string
	// Taints are the node's taints; TaintsArg is them as the kubelet's
	// --register-with-taints value (k=v:Effect,...).
	Taints    []corev1.Taint
	TaintsArg string
	// KubeletExtraArgs are extra kubelet flags from the config.
	KubeletExtraArgs []string
	// JoinEndpoint, JoinToken and CACertHash are how the node joins.
	JoinEndpoint string
	JoinToken    string
	CACertHash   string
	// K3sDownload is where a k3s node without k3s fetches the pinned
	// release and its checksums (method k3s).
	K3sDownload string
	// MIG is set for MIG groups.
	MIG *MIGVars
}

// MIGVars describe a node's MIG partitioning.
type MIGVars struct {
	Profile  string
	Strategy string
	GPUs     int
	LastGPU  int
	// Instances is nvidia-smi's -cgi list for one GPU ("1g.10gb,1g.10gb,...").
	Instances string
	// Commands: the script runs nvidia-smi; otherwise mig-manager applies
	// the profile from the nvidia.com/mig.config label.
	Commands bool
}

// templates are the parsed built-in templates.
type templates struct {
	k3s, kubeadm, stub *template.Template
}

// funcs are the templates' functions: shq quotes any value for the shell;
// word passes a value that needs no quoting and fails the render for any
// other, so no value can change the shape of a node's script.
var funcs = template.FuncMap{"shq": shellQuote, "word": word, "secret": secret, "bootstrapToken": bootstrapToken}

// secret returns a join token when it is 1 to 1024 printable ASCII
// characters without spaces, as k3s and kubeadm tokens are; anything else
// (a Secret holding a newline, binary, a whole file) stops the render.
// Its errors never hold a byte of the token.
func secret(s string) (string, error) {
	if len(s) == 0 || len(s) > 1024 {
		return "", fmt.Errorf("bootstrap: the join token is %d bytes; want 1 to 1024", len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return "", fmt.Errorf("bootstrap: the join token holds white space, a control character or non-ASCII at byte %d; no k3s or kubeadm token does", i)
		}
	}
	return s, nil
}

// bootstrapToken returns a kubeadm bootstrap token ("<id>.<secret>", a-z
// and 0-9); anything else stops the render, with an error that holds no
// byte of it.
func bootstrapToken(s string) (string, error) {
	if !tokenutil.IsValidBootstrapToken(s) {
		return "", fmt.Errorf("bootstrap: the join token is %w", errNotBootstrapToken)
	}
	return s, nil
}

// word returns v as text when it is one safe word (config.IsShellWord);
// an int is always one. Anything else is an error that stops the render.
func word(v any) (string, error) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case int:
		return fmt.Sprint(x), nil
	default:
		return "", fmt.Errorf("bootstrap: %T is not a value a script may hold", v)
	}
	if !config.IsShellWord(s) {
		// The value itself is not quoted: a custom template may pass a
		// secret through word.
		return "", fmt.Errorf("bootstrap: a value of %d bytes may not reach a node's script: %s (only letters, digits and ._:/=,@%%+-[]~)", len(s), firstBad(s))
	}
	return s, nil
}

// firstBad says where a value stops being one shell word, without
// showing any of it.
func firstBad(s string) string {
	if s == "" {
		return "it is empty"
	}
	for i, r := range s {
		if !config.IsShellWord(string(r)) {
			return fmt.Sprintf("byte %d is %s", i, charClass(r))
		}
	}
	return "it starts with a character that would change the script"
}

func charClass(r rune) string {
	switch {
	case r == ' ' || r == '\t':
		return "white space"
	case r == '\n' || r == '\r':
		return "a line break"
	case r < 0x20 || r == 0x7f:
		return "a control character"
	case r > 0x7e:
		return "outside ASCII"
	}
	return "a shell metacharacter"
}

func parseBuiltins() (*templates, error) {
	parse := func(name string) (*template.Template, error) {
		return template.New(name).Funcs(funcs).Option("missingkey=error").
			ParseFS(templateFS, "templates/"+name, "templates/mig.tmpl")
	}
	k3s, err := parse("k3s.sh.tmpl")
	if err != nil {
		return nil, err
	}
	kubeadm, err := parse("kubeadm.sh.tmpl")
	if err != nil {
		return nil, err
	}
	stub, err := parse("stub.sh.tmpl")
	if err != nil {
		return nil, err
	}
	return &templates{k3s: k3s, kubeadm: kubeadm, stub: stub}, nil
}

// parseCustom reads a user's template; it may use {{template "mig" .}}.
func parseCustom(path string) (*template.Template, error) {
	data, err := config.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bootstrap template: %w", err)
	}
	t, err := template.New("mig.tmpl").Funcs(funcs).Option("missingkey=error").ParseFS(templateFS, "templates/mig.tmpl")
	if err != nil {
		return nil, err
	}
	if _, err := t.New("custom").Parse(string(data)); err != nil {
		return nil, fmt.Errorf("bootstrap template %s: %w", path, err)
	}
	return t.Lookup("custom"), nil
}

// execute renders a template.
func execute(t *template.Template, v any) (string, error) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		return "", fmt.Errorf("render %s: %w", t.Name(), err)
	}
	return buf.String(), nil
}

// labelsArg renders labels as the kubelet's --node-labels value.
func labelsArg(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// taintsArg renders taints as the kubelet's --register-with-taints value.
func taintsArg(taints []corev1.Taint) string {
	parts := make([]string, len(taints))
	for i, t := range taints {
		parts[i] = t.Key + "=" + t.Value + ":" + string(t.Effect)
	}
	return strings.Join(parts, ",")
}

// migVars derives the MIG setup from a node's labels.
func migVars(labels map[string]string, b *config.Bootstrap) (*MIGVars, error) {
	profile := labels[gpu.LabelMIGConfig]
	if profile == "" {
		return nil, nil
	}
	var model gpu.Model
	for _, m := range gpu.Models() {
		if m.Accelerator == labels[gpu.LabelAccelerator] {
			model = m
		}
	}
	if model.Name == "" {
		return nil, fmt.Errorf("MIG profile %q on a node whose GPU model is unknown", profile)
	}
	devs, err := gpu.MIGDevices(model.Name, profile)
	if err != nil {
		return nil, err
	}
	var inst []string
	names := make([]string, 0, len(devs))
	for d := range devs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		for range devs[d] {
			inst = append(inst, d)
		}
	}
	gpus := 0
	if _, err := fmt.Sscan(labels[gpu.LabelCount], &gpus); err != nil || gpus < 1 {
		return nil, fmt.Errorf("MIG node without a GPU count label")
	}
	strategy := labels[gpu.LabelMIGStrategy]
	return &MIGVars{
		Profile: profile, Strategy: strategy, GPUs: gpus, LastGPU: gpus - 1,
		Instances: strings.Join(inst, ","), Commands: !b.MIGManager && len(inst) > 0,
	}, nil
}

// shellQuote quotes a string for POSIX shells.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
