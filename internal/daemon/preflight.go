package daemon

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
	opts.preflight = &po
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

// unreachable reports whether a kubeconfig is one that only the place the
// process runs in can check: "in-cluster" outside a pod, or any with
// FileOnly.
func (po *PreflightOptions) unreachable(kubeconfig string) bool {
	return po != nil && (po.FileOnly || kubeconfig == InCluster && os.Getenv("KUBERNETES_SERVICE_HOST") == "")
}

// readsFiles reports whether the environment's files and credentials are
// read: always but in a FileOnly preflight.
func (po *PreflightOptions) readsFiles() bool { return po == nil || !po.FileOnly }

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
