package bootstrap

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"text/template"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Format is how user data reaches a cloud.
type Format string

// User data formats.
const (
	// FormatScript is a shell script (Verda, the simulated cloud).
	FormatScript Format = "script"
	// FormatCloudInit is a #cloud-config document (Scaleway).
	FormatCloudInit Format = "cloud-init"
)

// Options are a Renderer's collaborators.
type Options struct {
	// Tokens mints bootstrap tokens, for groups with mintToken.
	Tokens *Tokens
	// Kube reads join-token Secrets and mints bootstrap tokens; needed only
	// by groups that use them.
	Kube kubernetes.Interface
	// KubeUnchecked says cluster access exists but cannot be reached from
	// here (a preflight outside the pod): groups with join tokens are
	// accepted without Kube, and must not render.
	KubeUnchecked bool
	// Server and ServerURL serve scripts of groups with delivery: server.
	Server    *Server
	ServerURL string
	// ServerCA, when set, is the PEM of the CA that signed the script
	// server's certificate (scriptServer.tls.caCertFile): each stub pins it,
	// so a node verifies the server without a public CA.
	ServerCA []byte
	// Formats chooses the user-data format per cloud; default script.
	Formats map[string]Format
	Clock   clock.Clock
	Logger  *slog.Logger
}

// Renderer renders each instance's user data; it implements the node-group
// core's Bootstrapper.
type Renderer struct {
	opts   Options
	groups map[string]config.NodeGroup
	tpl    *templates
	custom map[string]*template.Template
	// mints is whether any group mints bootstrap tokens: only then has
	// gpuscaler any token to delete, or the right to list them.
	mints bool

	// serverCA is Options.ServerCA's certificates, encoded anew: only
	// base64 and PEM armour reach a stub.
	serverCA string

	mu        sync.Mutex
	serverK3s string // the k3s release the API server reports, once read
}

// stubVars are the stub template's values.
type stubVars struct {
	NodeName, URL string
	// CA is the PEM the stub's fetch trusts alone; empty for the system's.
	CA string
}

// New prepares the templates of every group with a bootstrap section.
func New(cfg *config.Config, opts Options) (*Renderer, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	tpl, err := parseBuiltins()
	if err != nil {
		return nil, err
	}
	if opts.Tokens == nil && opts.Kube != nil {
		opts.Tokens = NewTokens(opts.Kube)
	}
	r := &Renderer{opts: opts, groups: map[string]config.NodeGroup{}, tpl: tpl, custom: map[string]*template.Template{}}
	var errs []error
	if len(opts.ServerCA) > 0 {
		if r.serverCA, err = certificatesPEM(opts.ServerCA); err != nil {
			errs = append(errs, fmt.Errorf("scriptServer.tls.caCertFile: %w", err))
		}
	}
	for i, g := range cfg.NodeGroups {
		b := g.Bootstrap
		if b == nil {
			continue
		}
		r.groups[g.Name] = g
		r.mints = r.mints || b.MintToken
		if b.Method == config.BootstrapCustom {
			t, err := parseCustom(b.TemplateFile)
			if err != nil {
				errs = append(errs, fmt.Errorf("nodeGroups[%d].bootstrap.templateFile: %w", i, err))
				continue
			}
			r.custom[g.Name] = t
		}
		if (b.TokenSecretRef != nil || b.MintToken) && opts.Kube == nil && !opts.KubeUnchecked {
			errs = append(errs, fmt.Errorf("nodeGroups[%d].bootstrap: join tokens need cluster access (set kubeconfig)", i))
		}
		if b.Delivery == config.DeliveryServer && (opts.Server == nil || opts.ServerURL == "") {
			errs = append(errs, fmt.Errorf("nodeGroups[%d].bootstrap.delivery: server needs the script server", i))
		}
	}
	return r, errors.Join(errs...)
}

// UserData renders one instance's startup script (or the stub that fetches
// it), in the format of the instance's cloud. Groups without a bootstrap
// section get none.
func (r *Renderer) UserData(ctx context.Context, spec cloud.CreateSpec) (string, error) {
	g, ok := r.groups[spec.Group]
	if !ok {
		return "", nil
	}
	script, err := r.script(ctx, g, spec, g.Bootstrap.TokenTTL.Duration)
	if err != nil {
		r.Release(ctx, spec.Name)
		return "", err
	}
	if g.Bootstrap.Delivery == config.DeliveryServer {
		token := r.opts.Server.Register(spec.Name, script, g.Bootstrap.TokenTTL.Duration)
		url := strings.TrimRight(r.opts.ServerURL, "/") + ScriptPath + token
		if script, err = execute(r.tpl.stub, stubVars{NodeName: spec.Name, URL: url, CA: r.serverCA}); err != nil {
			r.Release(ctx, spec.Name)
			return "", err
		}
	}
	if r.opts.Formats[g.Cloud] == FormatCloudInit {
		return CloudInit(script), nil
	}
	return script, nil
}

// Reissue puts the script of an instance ordered at ordered back on the
// script server, under the token its stub carries, until the deadline the
// first one had: for an instance that was booting while gpuscaler
// restarted (the server keeps scripts in memory). It does nothing for
// groups whose scripts are not delivered by the server, or once the
// deadline has passed; a token the node has used already comes back to
// life, which the binding to the instance's address (the default) limits
// to the node itself.
func (r *Renderer) Reissue(ctx context.Context, spec cloud.CreateSpec, ordered time.Time) error {
	g, ok := r.groups[spec.Group]
	if !ok || g.Bootstrap.Delivery != config.DeliveryServer || !r.opts.Server.Keyed() {
		return nil // a server without a shared key: the node's token cannot be matched
	}
	expires := ordered.Add(g.Bootstrap.TokenTTL.Duration)
	left := expires.Sub(r.opts.Clock.Now())
	if left <= 0 {
		return nil
	}
	// A minted join token lives no longer than the script's first deadline.
	script, err := r.script(ctx, g, spec, left)
	if err != nil {
		return err
	}
	if !r.opts.Server.Reissue(spec.Name, script, expires) {
		r.Release(ctx, spec.Name)
	}
	return nil
}

// script renders an instance's script itself, minting (for tokenTTL) or
// reading its join token.
func (r *Renderer) script(ctx context.Context, g config.NodeGroup, spec cloud.CreateSpec, tokenTTL time.Duration) (string, error) {
	b := g.Bootstrap
	pid := spec.ProviderID
	if pid == "" {
		pid = cloud.ProviderID(g.Cloud, spec.Name)
	}
	v := Vars{
		ProviderID: pid, NodeName: spec.Name, Cloud: g.Cloud, Group: g.Name,
		Labels: spec.Labels, LabelsArg: labelsArg(spec.Labels), Taints: spec.Taints, TaintsArg: taintsArg(spec.Taints),
		KubeletExtraArgs: b.KubeletExtraArgs, JoinEndpoint: b.Server, CACertHash: b.CACertHash,
	}
	mig, err := migVars(spec.Labels, b)
	if err != nil {
		return "", err
	}
	v.MIG = mig
	if b.Method == config.BootstrapK3s {
		release, err := r.k3sVersion(b)
		if err != nil {
			return "", err
		}
		v.K3sDownload = K3sReleases + "/" + strings.ReplaceAll(release, "+", "%2B")
	}
	switch {
	case b.TokenSecretRef != nil:
		if v.JoinToken, err = secretToken(ctx, r.opts.Kube, b.TokenSecretRef, b.Method); err != nil {
			return "", err
		}
	case b.MintToken:
		if v.JoinToken, err = r.opts.Tokens.Mint(ctx, spec.Name, tokenTTL, r.opts.Clock.Now()); err != nil {
			return "", err
		}
	}
	var t *template.Template
	switch b.Method {
	case config.BootstrapK3s:
		t = r.tpl.k3s
	case config.BootstrapKubeadm:
		t = r.tpl.kubeadm
	default:
		t = r.custom[g.Name]
	}
	return execute(t, v)
}

// certificatesPEM returns the certificates of a PEM file, encoded anew;
// anything but certificates is an error.
func certificatesPEM(data []byte) (string, error) {
	var out strings.Builder
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if strings.TrimSpace(string(rest)) != "" {
				return "", errors.New("holds something other than PEM blocks")
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return "", fmt.Errorf("holds a %s; want only certificates", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("a certificate: %w", err)
		}
		if err := pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}); err != nil {
			return "", err
		}
	}
	if out.Len() == 0 {
		return "", errors.New("holds no certificate")
	}
	return out.String(), nil
}

// K3sReleases is where k3s releases are published, each with its
// binaries and their SHA-256 sums (sha256sum-<arch>.txt).
const K3sReleases = "https://github.com/k3s-io/k3s/releases/download"

// k3sVersion is the k3s release a group's nodes install: the config's, or
// the API server's own (a k3s server reports "v1.33.4+k3s1"), read once.
func (r *Renderer) k3sVersion(b *config.Bootstrap) (string, error) {
	if b.Version != "" {
		return b.Version, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serverK3s != "" {
		return r.serverK3s, nil
	}
	if r.opts.Kube == nil {
		return "", errors.New("bootstrap.version: set the k3s release nodes install; without cluster access the server's cannot be read")
	}
	info, err := r.opts.Kube.Discovery().ServerVersion()
	if err != nil {
		return "", fmt.Errorf("bootstrap.version: reading the server's k3s version: %w", err)
	}
	if !config.K3sVersion.MatchString(info.GitVersion) {
		return "", fmt.Errorf("bootstrap.version: the API server reports %q, not a k3s release; set the k3s release nodes install", info.GitVersion)
	}
	r.serverK3s = info.GitVersion
	return r.serverK3s, nil
}

// Release withdraws what was prepared for an instance whose order failed:
// its minted token and its script on the server.
func (r *Renderer) Release(ctx context.Context, node string) {
	if r.opts.Server != nil {
		r.opts.Server.Forget(node)
	}
	if r.opts.Tokens == nil || !r.mints {
		return
	}
	if err := r.opts.Tokens.Delete(ctx, node); err != nil {
		r.opts.Logger.Warn("could not delete the join token of a failed order; it expires on its own", "node", node, "error", err)
	}
}

// CloudInit wraps a script as cloud-init user data: written root-only,
// run once, then removed.
func CloudInit(script string) string {
	var b strings.Builder
	b.WriteString("#cloud-config\nwrite_files:\n  - path: /run/gpuscaler/bootstrap.sh\n    owner: root:root\n    permissions: '0700'\n    content: |\n")
	for _, line := range strings.Split(strings.TrimRight(script, "\n"), "\n") {
		b.WriteString("      " + line + "\n")
	}
	b.WriteString("runcmd:\n  - [bash, -c, 'bash /run/gpuscaler/bootstrap.sh; rc=$?; rm -f /run/gpuscaler/bootstrap.sh; exit $rc']\n")
	return b.String()
}
