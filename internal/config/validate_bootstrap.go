package config

import (
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// caCertHashPattern is kubeadm's CA pin: sha256:<64 hex>.
const caCertHashPattern = `^sha256:[0-9a-f]{64}$`

// shellWordReason says what a value that reaches a node's script may hold.
const shellWordReason = "may hold only letters, digits and ._:/=,@%+-[]~ (it is written into a script that runs as root)"

// truncated shortens a value echoed in an error.
func truncated(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// K3sVersion is the form of a k3s release ("v1.33.4+k3s1"), as k3s
// servers report their version and name their releases.
var K3sVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-rc[0-9]+)?\+k3s[0-9]+$`)

// validateBootstrap checks a group's bootstrap section: the method and what
// it needs (server, token, CA pin or template) and the delivery mode.
func validateBootstrap(p *field.Path, b *Bootstrap, c *Config) field.ErrorList {
	var errs field.ErrorList
	methods := []string{BootstrapK3s, BootstrapKubeadm, BootstrapCustom}
	if !slices.Contains(methods, b.Method) {
		errs = append(errs, field.NotSupported(p.Child("method"), b.Method, methods))
	}
	custom := b.Method == BootstrapCustom
	errs = append(errs, validateServer(p, b)...)
	for i, a := range b.KubeletExtraArgs {
		if !IsShellWord(a) || !strings.HasPrefix(a, "--") && b.Method == BootstrapKubeadm {
			errs = append(errs, field.Invalid(p.Child("kubeletExtraArgs").Index(i), truncated(a),
				"one kubelet flag, --name=value: "+shellWordReason))
		}
	}
	errs = append(errs, validateJoinToken(p, b)...)
	switch {
	case b.Version != "" && b.Method != BootstrapK3s:
		errs = append(errs, field.Forbidden(p.Child("version"), "only k3s nodes install a pinned release; kubeadm nodes come with their image"))
	case b.Version != "" && !K3sVersion.MatchString(b.Version):
		errs = append(errs, field.Invalid(p.Child("version"), truncated(b.Version), "a k3s release, such as v1.33.4+k3s1"))
	}
	if b.Method == BootstrapKubeadm && !regexp.MustCompile(caCertHashPattern).MatchString(b.CACertHash) {
		errs = append(errs, field.Invalid(p.Child("caCertHash"), b.CACertHash, "kubeadm needs the CA pin, sha256:<64 hex>"))
	}
	switch {
	case custom && b.TemplateFile == "":
		errs = append(errs, field.Required(p.Child("templateFile"), "the custom method renders your template"))
	case !custom && b.TemplateFile != "":
		errs = append(errs, field.Forbidden(p.Child("templateFile"), "only the custom method takes a template"))
	}
	switch b.Delivery {
	case DeliveryInline:
	case DeliveryServer:
		if c.ScriptServer.URL == "" || c.ScriptServer.ListenAddress == "" {
			errs = append(errs, field.Required(field.NewPath("scriptServer", "url"),
				"delivery: server needs scriptServer.url and scriptServer.listenAddress"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("delivery"), b.Delivery, []string{DeliveryInline, DeliveryServer}))
	}
	errs = append(errs, within(p.Child("tokenTTL"), b.TokenTTL, time.Minute, MaxBootstrapTokenTTL,
		"a join token lives only until its node registers")...)
	return sortByField(errs)
}

// validateServer checks the endpoint a group's nodes join: k3s an https://
// URL, kubeadm host:port, the custom method what its template makes of it.
func validateServer(p *field.Path, b *Bootstrap) field.ErrorList {
	var errs field.ErrorList
	switch {
	case b.Method != BootstrapCustom && b.Server == "":
		errs = append(errs, field.Required(p.Child("server"), "the endpoint nodes join"))
	case b.Server != "" && !IsShellWord(b.Server):
		errs = append(errs, field.Invalid(p.Child("server"), truncated(b.Server), shellWordReason))
	case b.Method == BootstrapK3s:
		if u, err := url.Parse(b.Server); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
			errs = append(errs, field.Invalid(p.Child("server"), b.Server, "k3s joins an https:// URL (https://host:port)"))
		}
	case b.Method == BootstrapKubeadm:
		if _, port, err := net.SplitHostPort(b.Server); err != nil || port == "" {
			errs = append(errs, field.Invalid(p.Child("server"), b.Server, "kubeadm joins host:port"))
		}
	}
	return errs
}

// validateJoinToken checks where a group's join token comes from: a
// Secret (k3s, kubeadm) or one gpuscaler mints (kubeadm only).
func validateJoinToken(p *field.Path, b *Bootstrap) field.ErrorList {
	var errs field.ErrorList
	if b.TokenSecretRef == nil && !b.MintToken && b.Method != BootstrapCustom {
		errs = append(errs, field.Required(p.Child("tokenSecretRef"), "name the join token's Secret (or set mintToken for kubeadm)"))
	}
	if b.MintToken {
		if b.TokenSecretRef != nil {
			errs = append(errs, field.Forbidden(p.Child("mintToken"), "set tokenSecretRef or mintToken, not both"))
		}
		if b.Method == BootstrapK3s {
			errs = append(errs, field.Forbidden(p.Child("mintToken"), "k3s joins with its server token; use tokenSecretRef"))
		}
	}
	if r := b.TokenSecretRef; r != nil {
		rp := p.Child("tokenSecretRef")
		for _, f := range []struct{ name, value string }{{"namespace", r.Namespace}, {"name", r.Name}, {"key", r.Key}} {
			if f.value == "" {
				errs = append(errs, field.Required(rp.Child(f.name), ""))
			}
		}
	}
	return errs
}
