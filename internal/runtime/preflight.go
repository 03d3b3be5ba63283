package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// PreflightOptions choose how far Preflight goes.
type PreflightOptions struct {
	// Online asks every cloud for its catalog (with the credentials);
	// otherwise only the simulated cloud, which answers locally, is asked.
	Online bool
	// FileOnly checks the configuration alone, not the environment it
	// would run in: cloud credentials, kubeconfig, TLS and key files are
	// not read (config convert).
	FileOnly bool
}

// Preflight runs the checks start-up runs, and starts nothing: it reads
// the TLS files, builds the runtime (credentials, kubeconfig, bootstrap
// templates, each group's cloudOptions) and resolves every group against
// its cloud's catalog. A config that passes starts, unless a cloud refuses
// it online or a port is taken. The warnings say what the clouds will do
// differently from the configuration (an image a type does not accept).
func Preflight(ctx context.Context, cfg *config.Config, opts Options, po PreflightOptions) (warnings []string, err error) {
	var errs []error
	if t := cfg.Provider.TLS; t.Enabled() && !po.FileOnly {
		errs = append(errs, checkTLS("provider.tls", t, true)...)
	}
	if t := cfg.ScriptServer.TLS; cfg.ScriptServer.ListenAddress != "" && t.CertFile != "" && !po.FileOnly {
		errs = append(errs, checkTLS("scriptServer.tls", t, false)...)
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	cfg = environmentOf(cfg, po.FileOnly)
	if po.FileOnly {
		getenv := opts.Getenv
		opts.Getenv = func(k string) string {
			if credentialVariables[k] {
				return "unread"
			}
			return getenv(k)
		}
	}
	rt, err := Build(ctx, cfg, opts)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	var local []string
	if !po.Online {
		local = []string{config.CloudSim}
		if cfg.Clouds.Sim == nil {
			return nil, errors.Join(errs...)
		}
	}
	if err := rt.Core().Check(ctx, local...); err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rt.Core().Advice(ctx, local...), nil
}

// environmentOf returns cfg without the settings that only the place it
// runs in can check: in a pod's cluster, "in-cluster" access outside a
// pod; with fileOnly, every kubeconfig and credential file too.
func environmentOf(cfg *config.Config, fileOnly bool) *config.Config {
	c := *cfg
	unreachable := func(kubeconfig string) bool {
		return fileOnly || kubeconfig == "in-cluster" && os.Getenv("KUBERNETES_SERVICE_HOST") == ""
	}
	if unreachable(c.Kubeconfig) {
		c.Kubeconfig = ""
	}
	if s := c.Clouds.Sim; s != nil && unreachable(s.Kubeconfig) {
		sim := *s
		sim.Kubeconfig = ""
		c.Clouds.Sim = &sim
	}
	if fileOnly {
		c.ScriptServer.TokenKeyFile = ""
	}
	if v := c.Clouds.Verda; v != nil && fileOnly {
		verda := *v
		verda.ClientIDFile, verda.ClientSecretFile = "", ""
		c.Clouds.Verda = &verda
	}
	return &c
}

// credentialVariables are the variables cloud credentials come from; a
// FileOnly preflight gives the clients a placeholder, and never calls them.
var credentialVariables = map[string]bool{
	"VERDA_CLIENT_ID": true, "VERDA_CLIENT_SECRET": true, "DATACRUNCH_CLIENT_ID": true, "DATACRUNCH_CLIENT_SECRET": true,
}

// checkTLS loads a certificate and key, and a CA bundle when withCA, as the
// listeners would.
func checkTLS(path string, t config.TLSConfig, withCA bool) []error {
	var errs []error
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		errs = append(errs, fmt.Errorf("%s.certFile, %s.keyFile: %w", path, path, err))
	}
	if withCA {
		pem, err := config.ReadFile(t.CACertFile)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s.caCertFile: %w", path, err))
		case !x509.NewCertPool().AppendCertsFromPEM(pem):
			errs = append(errs, fmt.Errorf("%s.caCertFile: %s holds no PEM certificate", path, t.CACertFile))
		}
	}
	return errs
}
