package externalgrpc

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"

	"github.com/gpuscaler/gpuscaler/internal/serve"
)

// handshakeLogEvery is how often a refused handshake is logged; the rest
// are counted.
const handshakeLogEvery = time.Minute

// errAuthenticatedFull is why a connection that finished its handshake
// is closed: the authenticated tier is at its cap.
var errAuthenticatedFull = errors.New("too many authenticated connections")

// admitting wraps the server's transport credentials: a connection that
// completes the handshake moves to the listener's authenticated tier
// (serve.Handshakes); a refused handshake is counted and logged.
type admitting struct {
	credentials.TransportCredentials
	refused *prometheus.CounterVec
	log     *slog.Logger
	quiet   *serve.QuietLog
}

func newAdmitting(inner credentials.TransportCredentials, reg prometheus.Registerer, log *slog.Logger) (*admitting, error) {
	a := &admitting{TransportCredentials: inner, log: log, quiet: serve.NewQuietLog(handshakeLogEvery),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_grpc_handshakes_refused_total",
			Help: "gRPC connections refused in their handshake, by reason " +
				"(failed: no valid client certificate, a wrong name, or no handshake in time; " +
				"authenticated-full: too many authenticated connections).",
		}, []string{"reason"})}
	if reg != nil {
		if err := reg.Register(a.refused); err != nil {
			return nil, fmt.Errorf("register gRPC handshake metrics: %w", err)
		}
	}
	return a, nil
}

// ServerHandshake runs the inner handshake and admits the connection.
func (a *admitting) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := a.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		a.refuse("failed", raw, err)
		return nil, nil, err
	}
	if !serve.Authenticated(raw) {
		_ = c.Close()
		a.refuse("authenticated-full", raw, errAuthenticatedFull)
		return nil, nil, errAuthenticatedFull
	}
	return c, info, nil
}

// refuse counts a refused handshake and logs each reason at most once a
// minute.
func (a *admitting) refuse(reason string, raw net.Conn, err error) {
	a.refused.WithLabelValues(reason).Inc()
	ok, quiet := a.quiet.Allow(reason)
	if !ok {
		return
	}
	a.log.Warn("refused a gRPC connection in its handshake", "reason", reason, "peer", raw.RemoteAddr().String(),
		"error", err, "alsoSinceLastLog", quiet)
}

// Clone keeps the wrapper.
func (a *admitting) Clone() credentials.TransportCredentials {
	return &admitting{TransportCredentials: a.TransportCredentials.Clone(), refused: a.refused, log: a.log, quiet: a.quiet}
}
