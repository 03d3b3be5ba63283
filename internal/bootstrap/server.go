package bootstrap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// ScriptPath is where the script server serves: ScriptPath + <token>.
const ScriptPath = "/v1/scripts/"

// ServerOptions configure a script Server.
type ServerOptions struct {
	Clock  clock.Clock
	Logger *slog.Logger
	// InstanceIP, when set, restricts each script to its instance's own
	// address (as the cloud reports it); ok false means not known yet.
	InstanceIP func(node string) (ip string, ok bool)
	// ReissueIP is the instances' addresses for reissued scripts alone,
	// when InstanceIP is not set (scriptServer.bindToInstanceIP off): a
	// reissued token may have been used before the restart, so its script
	// goes only to its instance's address. Without either, nothing is
	// reissued.
	ReissueIP func(node string) (ip string, ok bool)
	// Registerer receives gpuscaler_script_requests_refused_total; nil
	// registers nowhere.
	Registerer prometheus.Registerer
	// Key derives each node's token from the node's name (HMAC-SHA256), so
	// that a process restarted with the same key can put a script back
	// under the token a booting node already carries (Reissue). At least
	// 32 bytes; default a random key of this Server's own.
	Key []byte
}

// MinKeyLength is the shortest ServerOptions.Key accepted.
const MinKeyLength = 32

// refusalLogEvery spaces the log lines about refused requests: a flood of
// bogus tokens costs a counter, not a log line each.
const refusalLogEvery = time.Minute

// Server hands each node its rendered script once, before a deadline, to
// whoever presents the one-time token the node's stub carries. It keeps
// only a hash of each token, and never logs tokens or scripts.
type Server struct {
	opts    ServerOptions
	refused *prometheus.CounterVec
	mu      sync.Mutex
	entries map[string]*entry // by token hash
	// served are the nodes whose script was handed out, until the
	// deadline it had: Reissue never puts those back.
	served map[string]time.Time
	// keyed: the key was given (it outlives the process), so a restarted
	// process can issue the same tokens.
	keyed bool
	// lastSweep is when expired entries were last dropped.
	lastSweep time.Time
	// quiet counts refusals not logged since lastLog, by reason.
	quiet   map[string]int
	lastLog map[string]time.Time
}

type entry struct {
	node    string
	script  string
	expires time.Time
	// reissued: put back after a restart; handed only to the instance's
	// own address, whatever InstanceIP says.
	reissued bool
}

// NewServer returns an empty script server; it is an http.Handler.
func NewServer(opts ServerOptions) (*Server, error) {
	keyed := opts.Key != nil
	switch {
	case opts.Key == nil:
		opts.Key = make([]byte, MinKeyLength)
		if _, err := rand.Read(opts.Key); err != nil {
			return nil, err
		}
	case len(opts.Key) < MinKeyLength:
		return nil, fmt.Errorf("script token key: %d bytes, want at least %d", len(opts.Key), MinKeyLength)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuscaler_script_requests_refused_total",
		Help: "Script-server requests refused, by reason (unknown or used token, expired token, wrong address).",
	}, []string{"reason"})
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(refused)
	}
	return &Server{opts: opts, refused: refused, entries: map[string]*entry{}, served: map[string]time.Time{}, keyed: keyed,
		quiet: map[string]int{}, lastLog: map[string]time.Time{}}, nil
}

// sweepLocked drops expired entries, at most once a minute.
func (s *Server) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Minute {
		return
	}
	s.lastSweep = now
	for k, e := range s.entries {
		if now.After(e.expires) {
			delete(s.entries, k)
		}
	}
	for node, until := range s.served {
		if now.After(until) {
			delete(s.served, node)
		}
	}
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// token is a node's one-time token: node names are never reused (each
// has a random suffix), so neither is a token.
func (s *Server) token(node string) string {
	mac := hmac.New(sha256.New, s.opts.Key)
	mac.Write([]byte("gpuscaler script token\x00" + node))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// Register stores a node's script until ttl from now, and returns the
// one-time token for it.
func (s *Server) Register(node, script string, ttl time.Duration) string {
	token := s.token(node)
	s.store(token, &entry{node: node, script: script, expires: s.opts.Clock.Now().Add(ttl)})
	return token
}

// Reissue puts a node's script back until expires (the deadline of its
// first registration), under the token Register gave it: for a node that
// was booting while the process restarted. It reports false, storing
// nothing, when the deadline has passed, when this server handed the
// node's script out already, or when its key is not one a restarted
// process shares (ServerOptions.Key unset).
func (s *Server) Reissue(node, script string, expires time.Time) bool {
	if !s.keyed || !s.opts.Clock.Now().Before(expires) || s.opts.InstanceIP == nil && s.opts.ReissueIP == nil {
		return false
	}
	s.mu.Lock()
	_, served := s.served[node]
	s.mu.Unlock()
	if served {
		return false
	}
	s.store(s.token(node), &entry{node: node, script: script, expires: expires, reissued: true})
	return true
}

// Keyed reports whether the server's tokens outlive the process (its key
// was given), so that Reissue can work.
func (s *Server) Keyed() bool { return s.keyed }

func (s *Server) store(token string, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.opts.Clock.Now())
	s.entries[hashToken(token)] = e
}

// Forget drops whatever is stored for a node (its order failed, or its
// instance is gone).
func (s *Server) Forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.entries {
		if e.node == node {
			delete(s.entries, k)
		}
	}
}

// Pending returns how many scripts wait to be fetched, expired ones dropped.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock.Now()
	for k, e := range s.entries {
		if now.After(e.expires) {
			delete(s.entries, k)
		}
	}
	return len(s.entries)
}

// refusal counts a refused request, and logs it unless one of the same
// reason was logged within refusalLogEvery; the next line says how many
// went unlogged.
func (s *Server) refusal(node, remote, reason string) {
	s.refused.WithLabelValues(reason).Inc()
	now := s.opts.Clock.Now()
	s.mu.Lock()
	if now.Sub(s.lastLog[reason]) < refusalLogEvery {
		s.quiet[reason]++
		s.mu.Unlock()
		return
	}
	quiet := s.quiet[reason]
	s.quiet[reason], s.lastLog[reason] = 0, now
	s.mu.Unlock()
	s.opts.Logger.Warn("startup script refused", "node", node, "remote", remote, "reason", reason, "alsoRefusedSinceLastLine", quiet)
}

// ServeHTTP answers GET ScriptPath<token> with the script, once. Every
// refusal is the same 404 with no content, so a wrong, used or expired
// token reveals nothing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, ScriptPath)
	if r.Method != http.MethodGet || !ok || token == "" {
		http.NotFound(w, r)
		return
	}
	remote, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		remote = r.RemoteAddr
	}
	key := hashToken(token)
	s.mu.Lock()
	e, found := s.entries[key]
	reason := ""
	switch {
	case !found:
		reason = "unknown or used token"
	case s.opts.Clock.Now().After(e.expires):
		reason = "expired token"
		delete(s.entries, key)
	case s.opts.InstanceIP != nil:
		if ip, known := s.opts.InstanceIP(e.node); !known || ip != remote {
			reason = "request not from the instance's address"
		}
	case e.reissued:
		if ip, known := s.opts.ReissueIP(e.node); !known || ip != remote {
			reason = "reissued script asked for from another address than the instance's"
		}
	}
	if reason == "" {
		delete(s.entries, key) // one use
		s.served[e.node] = e.expires
	}
	s.mu.Unlock()
	if reason != "" {
		node := ""
		if found {
			node = e.node
		}
		s.refusal(node, remote, reason)
		http.NotFound(w, r)
		return
	}
	s.opts.Logger.Info("startup script handed out", "node", e.node, "remote", remote)
	w.Header().Set("Content-Type", "text/x-shellscript")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(e.script))
}
