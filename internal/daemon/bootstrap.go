package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/bootstrap"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/serve"
)

// tokenReapPeriod is how often used and expired join tokens are deleted.
const tokenReapPeriod = 30 * time.Second

// newScriptServer builds the process's script server when the config asks
// for one; it lives as long as the process, across reloads. instanceIP
// answers from the core in force.
func newScriptServer(cfg *config.Config, instanceIP func(string) (string, bool), reg prometheus.Registerer, opts Options) (*bootstrap.Server, error) {
	ss, log := cfg.ScriptServer, opts.Logger
	if ss.ListenAddress == "" {
		return nil, nil
	}
	sopts := bootstrap.ServerOptions{Logger: log.With("component", "script-server"), Registerer: reg}
	if ss.BindToInstanceIP != nil && *ss.BindToInstanceIP {
		sopts.InstanceIP = instanceIP
	} else {
		sopts.ReissueIP = instanceIP // a reissued token may have been used: its instance's address only
	}
	if ss.TokenKeyFile != "" && opts.preflight.readsFiles() {
		key, err := cloud.ReadSecretFile(ss.TokenKeyFile)
		if err != nil {
			return nil, fmt.Errorf("scriptServer.tokenKeyFile: %w", err)
		}
		sopts.Key = key
	} else {
		log.Info("scriptServer.tokenKeyFile is not set: a node still booting when gpuscaler restarts will not get its script")
	}
	srv, err := bootstrap.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("scriptServer.tokenKeyFile: %w", err)
	}
	return srv, nil
}

// newRenderer builds one configuration's renderer, or nil when no group
// has a bootstrap section.
func newRenderer(cfg *config.Config, cs *clouds, srv *bootstrap.Server, log *slog.Logger) (*bootstrap.Renderer, error) {
	needed := false
	for _, g := range cfg.NodeGroups {
		needed = needed || g.Bootstrap != nil
	}
	if !needed {
		return nil, nil
	}
	opts := bootstrap.Options{Kube: cs.kube, Tokens: cs.tokens, KubeUnchecked: cs.kubeUnchecked, Logger: log.With("component", "bootstrap"),
		// Scaleway boots its servers with cloud-init user data.
		Formats: map[string]bootstrap.Format{config.CloudScaleway: bootstrap.FormatCloudInit}}
	if srv != nil {
		opts.Server, opts.ServerURL = srv, cfg.ScriptServer.URL
		if ca := cfg.ScriptServer.TLS.CACertFile; ca != "" {
			data, err := config.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("scriptServer.tls.caCertFile: %w", err)
			}
			opts.ServerCA = data
		}
	}
	return bootstrap.New(cfg, opts)
}

// reapTokens deletes used and expired join tokens until ctx is done: the
// tokens of the Nodes that joined within the longest token lifetime, by
// name (gpuscaler lists no Secret).
func reapTokens(ctx context.Context, cs *clouds, log *slog.Logger) error {
	every(ctx, tokenReapPeriod, func() {
		now := time.Now()
		if n, err := cs.tokens.Reap(ctx, now, cs.nodes.Joined(now.Add(-config.MaxBootstrapTokenTTL))); err != nil {
			log.Warn("join token clean-up failed; will retry", "error", err)
		} else if n > 0 {
			log.Info("deleted used or expired join tokens", "count", n)
		}
	})
	return nil
}

// every calls fn once per period until ctx is done.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// serveScripts runs the script server, over TLS when certificates are set,
// until ctx is done. Failing to listen is an error the process stops on.
func serveScripts(ctx context.Context, srv *bootstrap.Server, ss config.ScriptServerConfig, ev *serve.Evictions, log *slog.Logger) error {
	lis, err := net.Listen("tcp", ss.ListenAddress)
	if err != nil {
		return fmt.Errorf("scriptServer.listenAddress: %w", err)
	}
	hs := serve.HTTP(srv, serve.Limits{Evicted: ev.For("scripts")})
	if ss.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(ss.TLS.CertFile, ss.TLS.KeyFile)
		if err != nil {
			_ = lis.Close()
			return fmt.Errorf("scriptServer.tls: %w", err)
		}
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		lis = tls.NewListener(lis, hs.TLSConfig)
	}
	if ss.Insecure && strings.HasPrefix(ss.URL, "http:") {
		log.Warn("scriptServer.insecure: nodes fetch their scripts, join tokens included, over plain http; anyone on the path can read them", "url", ss.URL)
	}
	log.Info("serving startup scripts", "address", lis.Addr().String(), "tls", ss.TLS.CertFile != "")
	err = serve.Run(ctx, hs, lis)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
