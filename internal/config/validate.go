package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// maxNameLength bounds cluster and group names, so that instance hostnames
// built from them stay within 63 characters.
const maxNameLength = 40

// Validate returns every problem of a defaulted config, each with its field
// path, in the order of the file's sections. It does not stop at the first.
func Validate(c *Config) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateName(field.NewPath("clusterName"), c.ClusterName)...)
	errs = append(errs, validateOwnership(field.NewPath("ownership"), c.Ownership)...)
	errs = append(errs, validateProvider(field.NewPath("provider"), c.Provider)...)
	if c.Metrics.Address != "0" {
		errs = append(errs, validateAddress(field.NewPath("metrics", "address"), c.Metrics.Address)...)
	}
	if c.Metrics.HealthAddress != "" {
		errs = append(errs, validateAddress(field.NewPath("metrics", "healthAddress"), c.Metrics.HealthAddress)...)
	}
	errs = append(errs, validateSync(field.NewPath("sync"), c.Sync)...)
	errs = append(errs, nonNegativeFloat(field.NewPath("maxHourlyCost"), c.MaxHourlyCost)...)
	errs = append(errs, validateLeaked(field.NewPath("leakedInstances"), c.LeakedInstances)...)
	errs = append(errs, validateScriptServer(field.NewPath("scriptServer"), c.ScriptServer)...)
	errs = append(errs, validateKubeconfig(c)...)
	errs = append(errs, validateClouds(field.NewPath("clouds"), c.Clouds)...)
	errs = append(errs, validateGroups(field.NewPath("nodeGroups"), c)...)
	errs = append(errs, validateKamateraGroups(c)...)
	errs = append(errs, validateScalewayGroups(c)...)
	return sanitize(errs)
}

// validateOwnership checks the install IDs.
func validateOwnership(path *field.Path, o OwnershipConfig) field.ErrorList {
	var errs field.ErrorList
	if o.InstallID != "" {
		if err := cloud.CheckInstall(o.InstallID); err != nil {
			errs = append(errs, field.Invalid(path.Child("installID"), o.InstallID, err.Error()))
		}
	}
	seen := map[string]bool{}
	for i, id := range o.TakeOver {
		p := path.Child("takeOver").Index(i)
		switch err := cloud.CheckInstall(id); {
		case err != nil:
			errs = append(errs, field.Invalid(p, id, err.Error()))
		case seen[id]:
			errs = append(errs, field.Duplicate(p, id))
		case id == o.InstallID:
			errs = append(errs, field.Invalid(p, id, "this install's own ID"))
		}
		seen[id] = true
	}
	return errs
}

// maxEchoedValue bounds how much of a bad value an error repeats: a 10 MB
// label must not come back in full.
const maxEchoedValue = 128

// sanitize makes errors safe to print: a URL's password is hidden and long
// values are cut.
func sanitize(errs field.ErrorList) field.ErrorList {
	for _, e := range errs {
		if s, ok := e.BadValue.(string); ok {
			e.BadValue = cloud.Truncate(cloud.RedactUserinfo(s), maxEchoedValue)
		}
		e.Detail = cloud.RedactUserinfo(e.Detail)
	}
	return errs
}

func validateProvider(p *field.Path, pc ProviderConfig) field.ErrorList {
	errs := validateAddress(p.Child("listenAddress"), pc.ListenAddress)
	if len(errs) == 0 && !IsLoopback(pc.ListenAddress) && !pc.TLS.Enabled() && !pc.Insecure {
		errs = append(errs, field.Forbidden(p.Child("listenAddress"), fmt.Sprintf(
			"%s is reachable off this machine: anyone who reaches it could scale groups and delete nodes; set provider.tls for mTLS, or provider.insecure: true to accept that", pc.ListenAddress)))
	}
	errs = append(errs, validateTLS(p.Child("tls"), pc.TLS)...)
	for i, n := range pc.TLS.ClientNames {
		if strings.TrimSpace(n) == "" || len(n) > 253 {
			errs = append(errs, field.Invalid(p.Child("tls", "clientNames").Index(i), n, "must be a certificate's common name or DNS name"))
		}
	}
	if len(pc.TLS.ClientNames) > 0 && !pc.TLS.Enabled() {
		errs = append(errs, field.Forbidden(p.Child("tls", "clientNames"), "needs mTLS: set certFile, keyFile and caCertFile"))
	}
	if pc.GPULabel != "" {
		for _, msg := range validation.IsQualifiedName(pc.GPULabel) {
			errs = append(errs, field.Invalid(p.Child("gpuLabel"), pc.GPULabel, msg))
		}
	}
	return errs
}

// validateTLS checks that mTLS is off or has all three files, naming each
// one missing.
func validateTLS(p *field.Path, t TLSConfig) field.ErrorList {
	if !t.Enabled() {
		return nil
	}
	var errs field.ErrorList
	for _, f := range []struct{ name, value string }{
		{"certFile", t.CertFile}, {"keyFile", t.KeyFile}, {"caCertFile", t.CACertFile},
	} {
		if f.value == "" {
			errs = append(errs, field.Required(p.Child(f.name), "mTLS needs certFile, keyFile and caCertFile together"))
		}
	}
	return errs
}

func validateSync(p *field.Path, s SyncConfig) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, within(p.Child("period"), s.Period, MinSyncPeriod, 24*time.Hour,
		"each period lists every cloud once")...)
	if s.MaxConcurrentCreates < 1 {
		errs = append(errs, field.Invalid(p.Child("maxConcurrentCreates"), s.MaxConcurrentCreates, "must be >= 1"))
	}
	if !(s.RequestsPerSecond > 0) || math.IsInf(s.RequestsPerSecond, 1) {
		errs = append(errs, field.Invalid(p.Child("requestsPerSecond"), s.RequestsPerSecond, "must be a number > 0"))
	}
	errs = append(errs, positive(p.Child("offeringBackoff"), s.OfferingBackoff)...)
	errs = append(errs, within(p.Child("listLag"), s.ListLag, 0, time.Hour,
		"a (re)started gpuscaler holds its first orders that long")...)
	if s.CreateRetries != nil && *s.CreateRetries < 0 {
		errs = append(errs, field.Invalid(p.Child("createRetries"), *s.CreateRetries, "must be >= 0"))
	}
	if s.MaxGroupSize < 1 || s.MaxGroupSize > MaxGroupSizeCeiling {
		errs = append(errs, field.Invalid(p.Child("maxGroupSize"), s.MaxGroupSize, fmt.Sprintf("must be from 1 to %d", MaxGroupSizeCeiling)))
	}
	if s.MaxIncrease < 1 {
		errs = append(errs, field.Invalid(p.Child("maxIncrease"), s.MaxIncrease, "must be >= 1"))
	}
	return errs
}

// IsLoopback reports whether a host:port listens on loopback only: an IP
// in 127.0.0.0/8 or ::1, or "localhost". An empty host listens everywhere.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	return cloud.IsLoopbackHost(host)
}

func validateLeaked(p *field.Path, l LeakedInstancesConfig) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, positive(p.Child("gracePeriod"), l.GracePeriod)...)
	if actions := []string{LeakActionDelete, LeakActionReport}; !slices.Contains(actions, l.Action) {
		errs = append(errs, field.NotSupported(p.Child("action"), l.Action, actions))
	}
	return errs
}

func validateScriptServer(p *field.Path, ss ScriptServerConfig) field.ErrorList {
	if ss.ListenAddress == "" && ss.URL == "" {
		return nil
	}
	errs := validateAddress(p.Child("listenAddress"), ss.ListenAddress)
	switch {
	case !isHTTPURL(ss.URL):
		errs = append(errs, field.Invalid(p.Child("url"), ss.URL, "must be the http(s) URL nodes reach the server at"))
	case isPlainHTTP(ss.URL) && !urlOnLoopback(ss.URL) && !ss.Insecure:
		errs = append(errs, field.Forbidden(p.Child("url"), "plain http would send scripts and join tokens in clear; use https (scriptServer.tls, or a TLS proxy in front), or set scriptServer.insecure: true to accept that"))
	}
	if (ss.TLS.CertFile == "") != (ss.TLS.KeyFile == "") {
		errs = append(errs, field.Required(p.Child("tls"), "certFile and keyFile go together"))
	}
	if len(ss.TLS.ClientNames) > 0 {
		errs = append(errs, field.Forbidden(p.Child("tls", "clientNames"), "nodes fetch scripts without a client certificate; clientNames is the provider's"))
	}
	if ss.TLS.CACertFile != "" && isPlainHTTP(ss.URL) {
		errs = append(errs, field.Forbidden(p.Child("tls", "caCertFile"), "the CA nodes pin verifies an https url only"))
	}
	return errs
}

// validateKubeconfig requires cluster access when a group's bootstrap reads
// or mints join tokens.
func validateKubeconfig(c *Config) field.ErrorList {
	if c.Kubeconfig != "" {
		return nil
	}
	for i, g := range c.NodeGroups {
		if b := g.Bootstrap; b != nil && (b.TokenSecretRef != nil || b.MintToken) {
			return field.ErrorList{field.Required(field.NewPath("kubeconfig"),
				fmt.Sprintf("nodeGroups[%d].bootstrap reads or mints join tokens in the cluster; use in-cluster in a pod", i))}
		}
	}
	return nil
}

// validateName checks a cluster or group name: a DNS label of at most
// maxNameLength characters.
func validateName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	if len(name) > maxNameLength {
		errs = append(errs, field.TooLong(p, name, maxNameLength))
	}
	return errs
}

// validateAddress checks a listen address: host:port with a numeric port
// (0 picks a free one).
func validateAddress(p *field.Path, addr string) field.ErrorList {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return field.ErrorList{field.Invalid(p, addr, "must be host:port: "+err.Error())}
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return field.ErrorList{field.Invalid(p, addr, "port must be a number from 0 to 65535")}
	}
	return nil
}

// urlOnLoopback reports whether a URL's host is a loopback address.
func urlOnLoopback(s string) bool {
	u, err := url.Parse(s)
	return err == nil && cloud.IsLoopbackHost(u.Hostname())
}

// isPlainHTTP reports whether a URL's scheme is http, in any case.
func isPlainHTTP(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "http"
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}

// positive checks an optional duration that must be above zero if set.
func positive(p *field.Path, d *metav1.Duration) field.ErrorList {
	if d != nil && d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be > 0")}
	}
	return nil
}

// within checks an optional duration against a floor and a ceiling, saying
// why they exist.
func within(p *field.Path, d *metav1.Duration, lo, hi time.Duration, why string) field.ErrorList {
	if d != nil && (d.Duration < lo || d.Duration > hi) {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), fmt.Sprintf("must be at least %s and at most %s: %s", lo, hi, why))}
	}
	return nil
}

// nonNegative checks an optional duration that must not be below zero.
func nonNegative(p *field.Path, d *metav1.Duration) field.ErrorList {
	if d != nil && d.Duration < 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be >= 0")}
	}
	return nil
}

// nonNegativeFloat checks an amount such as a cost cap; NaN and infinity
// are refused too.
func nonNegativeFloat(p *field.Path, v float64) field.ErrorList {
	if !(v >= 0) || math.IsInf(v, 1) {
		return field.ErrorList{field.Invalid(p, v, "must be a number >= 0")}
	}
	return nil
}

// fraction checks a value that must lie in [0, 1], or [0, 1) when open.
func fraction(p *field.Path, v float64, open bool) field.ErrorList {
	if open && !(v >= 0 && v < 1) {
		return field.ErrorList{field.Invalid(p, v, "must be in [0, 1)")}
	}
	if !open && !(v >= 0 && v <= 1) {
		return field.ErrorList{field.Invalid(p, v, "must be in [0, 1]")}
	}
	return nil
}

// validateCloudName checks a name the cloud defines (an instance type, a
// location): printable UTF-8 without spaces, as every cloud's are. Anything
// else is a typo or a broken file, and would reach API calls and labels.
func validateCloudName(p *field.Path, v string) field.ErrorList {
	bad := func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }
	if !utf8.ValidString(v) || strings.IndexFunc(v, bad) >= 0 {
		return field.ErrorList{field.Invalid(p, v, "must be printable, without spaces")}
	}
	return nil
}

// validateText checks a free-form value that reaches a cloud's API (an
// image, a cloud option): printable UTF-8 on one line. A control character
// is a broken file, and would reach API calls, logs and the config written
// back out (YAML refuses it).
func validateText(p *field.Path, v string) field.ErrorList {
	bad := func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }
	if !utf8.ValidString(v) || strings.IndexFunc(v, bad) >= 0 {
		return field.ErrorList{field.Invalid(p, v, "must be printable text on one line")}
	}
	return nil
}

// uniqueStrings checks that a list has no empty and no repeated entries.
func uniqueStrings(p *field.Path, vals []string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, v := range vals {
		switch {
		case v == "":
			errs = append(errs, field.Required(p.Index(i), ""))
		case seen[v]:
			errs = append(errs, field.Duplicate(p.Index(i), v))
		}
		seen[v] = true
	}
	return errs
}

// sortByField orders errors by path, for checks that range over maps.
func sortByField(errs field.ErrorList) field.ErrorList {
	slices.SortStableFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs
}
