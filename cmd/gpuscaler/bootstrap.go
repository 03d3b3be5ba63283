package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/bootstrap"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// tokenReapPeriod is how often used and expired join tokens are deleted.
const tokenReapPeriod = 30 * time.Second

// bootstrapParts are the bootstrap pieces a process runs.
type bootstrapParts struct {
	renderer   *bootstrap.Renderer
	background []func(context.Context) error
	// instanceIP is set once the core exists; the script server asks it.
	instanceIP func(string) (string, bool)
}

// newBootstrap builds the renderer, the in-process script server and the
// token reaper that the config asks for.
func newBootstrap(cfg *config.Config, cs *clouds, log *slog.Logger) (*bootstrapParts, error) {
	parts := &bootstrapParts{}
	needed := false
	for _, g := range cfg.NodeGroups {
		needed = needed || g.Bootstrap != nil
	}
	if !needed {
		return parts, nil
	}
	opts := bootstrap.Options{Kube: cs.kube, Logger: log.With("component", "bootstrap")}
	if ss := cfg.ScriptServer; ss.ListenAddress != "" {
		sopts := bootstrap.ServerOptions{Logger: log.With("component", "script-server")}
		if ss.BindToInstanceIP {
			sopts.InstanceIP = func(node string) (string, bool) {
				if parts.instanceIP == nil {
					return "", false
				}
				return parts.instanceIP(node)
			}
		}
		srv := bootstrap.NewServer(sopts)
		opts.Server, opts.ServerURL = srv, ss.URL
		parts.background = append(parts.background, func(ctx context.Context) error {
			return serveScripts(ctx, srv, ss, log)
		})
	}
	r, err := bootstrap.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	parts.renderer = r
	if cs.kube != nil {
		parts.background = append(parts.background, func(ctx context.Context) error {
			t := time.NewTicker(tokenReapPeriod)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				if n, err := bootstrap.ReapTokens(ctx, cs.kube, time.Now()); err != nil {
					log.Warn("join token clean-up failed; will retry", "error", err)
				} else if n > 0 {
					log.Info("deleted used or expired join tokens", "count", n)
				}
			}
		})
	}
	return parts, nil
}

// serveScripts runs the script server, over TLS when certificates are set.
func serveScripts(ctx context.Context, srv *bootstrap.Server, ss config.ScriptServerConfig, log *slog.Logger) error {
	lis, err := net.Listen("tcp", ss.ListenAddress)
	if err != nil {
		return fmt.Errorf("scriptServer.listenAddress: %w", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	if ss.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(ss.TLS.CertFile, ss.TLS.KeyFile)
		if err != nil {
			return fmt.Errorf("scriptServer.tls: %w", err)
		}
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		lis = tls.NewListener(lis, hs.TLSConfig)
	}
	log.Info("serving startup scripts", "address", lis.Addr().String(), "tls", ss.TLS.CertFile != "")
	err = serveHTTP(ctx, hs, lis)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
