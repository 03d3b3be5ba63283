// Package verdatest is an in-process fake of the Verda REST API, built on
// the simulated cloud's engine so that capacity, boot times and stock-outs
// have one source of truth. It follows the API's documented shapes, status
// codes and quirks: expiring bearer tokens and 401s, create answering 202
// with a bare id, statuses moving ordered → provisioning → running, delete
// taking "id" as a string or an array, /sshkeys and /ssh-keys, is_spot and
// isSpot, string prices, {code,message} errors, 503 "Not enough resources"
// and 400 "... limit exceeded".
package verdatest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/fakeid"
	"github.com/gpuscaler/gpuscaler/internal/cloud/fakenet"
	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// account is the engine account every fake instance lives in.
const account = "verda-account"

// Options configure a Server.
type Options struct {
	ClientID, ClientSecret string
	// TokenTTL is the access token lifetime (expires_in); default 1h.
	TokenTTL time.Duration
	// InstanceLimit is the account's instance quota; default 1000.
	InstanceLimit int
	// ScriptLimit is the startup-script quota; default 100, as documented.
	ScriptLimit int
	// IgnoreScriptPaging answers every GET /scripts with the first page and
	// no paging headers, as the SDK's plain GET sees it, or a proxy that
	// strips query parameters.
	IgnoreScriptPaging bool
	// CreateAnswersJSON answers creates (instances and scripts) with the
	// new object as JSON, the other form the API uses, instead of the bare
	// id as text.
	CreateAnswersJSON bool
	// InMemory serves the API on in-memory connections that only the
	// Server's Client dials, for tests on a virtual clock (see fakenet).
	InMemory bool
	// IDSeed draws the IDs the fake hands out from a seed (fakeid), so
	// that a campaign replays with the same; 0: random.
	IDSeed uint64
}

// Server is the fake API. Its URL is Server.URL.
type Server struct {
	*httptest.Server
	engine *sim.Engine
	acct   *sim.Cloud
	ids    *fakeid.Source
	opts   Options

	mu        sync.Mutex
	tokens    map[string]time.Time // access token -> expiry
	refreshes map[string]bool
	meta      map[string]*meta // instance id -> what the engine does not keep
	gone      []*meta          // metadata of deleted instances, for DeleteVolumes
	// volumes are the account's volumes that still exist (and bill), by
	// id: OS volumes live on after their instance when a delete keeps
	// them (volume_ids []) or a discontinue detaches them (keep_detached).
	volumes map[string]bool
	byName  map[string]string  // hostname -> instance id
	scripts map[string]*script // by id
	calls   map[string]int
	faults  []fault
	// random fails requests at random (RandomFaults).
	random   faults.Set
	latency  time.Duration
	hangNext map[string]time.Duration
	// overrides replace fields of an instance's record (by hostname) with
	// raw JSON, for records the real API sends oddly.
	overrides map[string]map[string]json.RawMessage
	// deleteFaults fail the next deletes of an instance (by hostname) in
	// the per-instance results, leaving it running.
	deleteFaults map[string][]deleteFault
}

type deleteFault struct {
	status  int
	message string
}

type meta struct {
	id, hostname, description, image, contract, pricing string
	scriptID                                            *string
	sshKeyIDs                                           []string
	tags                                                []tag
	createdAt                                           time.Time
	pendingSince                                        time.Time
	// lost is "offline" or "discontinued" once the instance stopped for
	// good while still in the account (until it is deleted).
	lost string
	// deleteVolumes is the volume_ids of the last delete asked for it.
	deleteVolumes json.RawMessage
	// volumeID is its OS volume; onSpotDiscontinue that volume's fate
	// when the instance is discontinued.
	volumeID, onSpotDiscontinue string
}

type tag struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

type script struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Script    string `json:"script"`
	CreatedAt string `json:"created_at"`
}

type fault struct {
	method, path string
	status       int
	body         string
}

// New starts a fake API over a simulated engine built by NewEngine (its
// catalog must be the recorded listing the fake serves).
func New(engine *sim.Engine, opts Options) *Server {
	have := map[string]bool{}
	for _, t := range engine.Catalog() {
		have[t.Name] = true
	}
	for _, t := range Catalog() {
		if !have[t.Name] {
			panic("verdatest: the engine lacks " + t.Name + "; build it with verdatest.NewEngine")
		}
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.InstanceLimit == 0 {
		opts.InstanceLimit = 1000
	}
	if opts.ScriptLimit == 0 {
		opts.ScriptLimit = 100
	}
	s := &Server{
		engine: engine, acct: engine.Account(account), opts: opts, ids: fakeid.New(opts.IDSeed),
		tokens: map[string]time.Time{}, refreshes: map[string]bool{}, meta: map[string]*meta{},
		byName: map[string]string{}, scripts: map[string]*script{}, calls: map[string]int{}, hangNext: map[string]time.Duration{},
	}
	s.Server = fakenet.Serve(http.HandlerFunc(s.serve), opts.InMemory)
	return s
}

// Engine returns the simulated engine behind the API.
func (s *Server) Engine() *sim.Engine { return s.engine }

// SetInstanceLimit sets the account's instance quota from now on
// (Options.InstanceLimit).
func (s *Server) SetInstanceLimit(instances int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.InstanceLimit = instances
}

// FailNext makes the next request matching method and path prefix answer
// with status and body instead of being served.
func (s *Server) FailNext(method, pathPrefix string, status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, fault{method, pathPrefix, status, body})
}

// HangNext makes the next request with method and path prefix take effect,
// then wait d before answering, as a request whose answer times out.
func (s *Server) HangNext(method, pathPrefix string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangNext[method+" "+pathPrefix] = d
}

// OverrideField makes every record of the instance named hostname carry
// raw (any JSON) as field, as a record the real API sends in a form the
// client does not expect.
func (s *Server) OverrideField(hostname, field, raw string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overrides == nil {
		s.overrides = map[string]map[string]json.RawMessage{}
	}
	if s.overrides[hostname] == nil {
		s.overrides[hostname] = map[string]json.RawMessage{}
	}
	s.overrides[hostname][field] = json.RawMessage(raw)
}

// FailDeleteOf makes the next times deletes of the instance named hostname
// fail in PUT /instances' per-instance results (a 207 answer, or the
// result array of a 202 when every id fails this way), with statusCode and
// message, leaving the instance running; the other ids of the request are
// deleted.
func (s *Server) FailDeleteOf(hostname string, times, statusCode int, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleteFaults == nil {
		s.deleteFaults = map[string][]deleteFault{}
	}
	for range times {
		s.deleteFaults[hostname] = append(s.deleteFaults[hostname], deleteFault{statusCode, message})
	}
}

// takeDeleteFault pops the next delete fault of an instance.
func (s *Server) takeDeleteFault(hostname string) (deleteFault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.deleteFaults[hostname]
	if len(q) == 0 {
		return deleteFault{}, false
	}
	s.deleteFaults[hostname] = q[1:]
	return q[0], true
}

// Stop puts a running instance in status (offline: a host lost or shut
// down; discontinued: a spot instance reclaimed; or any status the API
// reports, such as no_capacity) until it is deleted; "" brings it back.
// The engine's capacity is not given back, as the instance still exists.
func (s *Server) Stop(hostname, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.byName[hostname]
	if !ok {
		return false
	}
	m := s.meta[id]
	m.lost = status
	if status == "discontinued" && m.volumeID != "" {
		switch m.onSpotDiscontinue {
		case "delete_permanently", "move_to_trash":
			delete(s.volumes, m.volumeID)
			m.volumeID = ""
		default: // keep_detached: the volume stays, detached
			m.volumeID = ""
		}
	}
	return true
}

// Volumes returns how many volumes the account holds.
func (s *Server) Volumes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.volumes)
}

// DeleteVolumes returns the volume_ids (raw JSON: null, [] or a list) of
// the last delete asked for the instance named hostname; ok is false when
// none was asked for.
func (s *Server) DeleteVolumes(hostname string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.gone {
		if m.hostname == hostname && m.deleteVolumes != nil {
			return string(m.deleteVolumes), true
		}
	}
	if id, ok := s.byName[hostname]; ok && s.meta[id].deleteVolumes != nil {
		return string(s.meta[id].deleteVolumes), true
	}
	return "", false
}

// SetLatency adds a delay to every request.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// ExpireTokens invalidates every access token, as their expiry would.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
}

// RevokeRefreshTokens invalidates every refresh token (and access token),
// so clients must sign in with their credentials again.
func (s *Server) RevokeRefreshTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
	s.refreshes = map[string]bool{}
}

// Calls returns the number of requests per "METHOD /path-pattern".
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// ScriptCount returns how many startup scripts the account holds.
func (s *Server) ScriptCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.scripts)
}

// Scripts returns the stored scripts' contents.
func (s *Server) Scripts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, sc := range s.scripts {
		out = append(out, sc.Script)
	}
	return out
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	s.mu.Lock()
	s.calls[r.Method+" "+pattern(path)]++
	latency := s.latency
	var injected *fault
	for i, f := range s.faults {
		if f.method == r.Method && strings.HasPrefix(path, f.path) {
			injected = &f
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
			break
		}
	}
	var hang time.Duration
	for k, d := range s.hangNext {
		if strings.HasPrefix(r.Method+" "+path, k) {
			hang = d
			delete(s.hangNext, k)
			break
		}
	}
	s.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	if injected != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(injected.status)
		_, _ = w.Write([]byte(injected.body))
		return
	}
	if hang > 0 {
		rec := httptest.NewRecorder()
		s.route(rec, r, path)
		time.Sleep(hang) // the client gives up first; the effect stays
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	s.random.Serve(w, r, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.route(w, r, path) }))
}

// RandomFaults makes rate (0..1) of all requests fail at random, from
// seed: refused with a 429 or a 5xx in the API's shape (a 503 on a create
// reads as no capacity, as the real API's does), carried out with the
// answer lost, or dropped before being carried out (see faults.Set). A
// rate of 0 stops them.
func (s *Server) RandomFaults(rate float64, seed uint64) {
	s.random.Random(rate, seed,
		func(w http.ResponseWriter) {
			apiError(w, http.StatusTooManyRequests, "too_many_requests", "Too many requests")
		},
		func(w http.ResponseWriter) {
			apiError(w, http.StatusInternalServerError, "server_error", "Internal server error")
		},
		func(w http.ResponseWriter) {
			apiError(w, http.StatusServiceUnavailable, "service_unavailable", "Service temporarily unavailable")
		})
}

// Injected returns how many random faults of each kind were injected.
func (s *Server) Injected() map[faults.Kind]int { return s.random.Injected() }

// Instances returns the account's instances, named by hostname; one that
// stopped for good (Stop) is cloud.StateStopped: it bills until deleted.
func (s *Server) Instances() []cloud.Instance {
	insts, metas := s.live()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, in := range insts {
		if m := metas[in.Name]; m != nil && m.lost != "" {
			insts[i].State = cloud.StateStopped
		}
	}
	return insts
}

// pattern folds ids out of a path for call counting.
func pattern(path string) string {
	parts := strings.Split(path, "/")
	if len(parts) > 2 && (parts[1] == "instances" || parts[1] == "scripts" || parts[1] == "sshkeys" || parts[1] == "ssh-keys") {
		parts[2] = "{id}"
	}
	return strings.Join(parts, "/")
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, path string) {
	if path == "/oauth2/token" && r.Method == http.MethodPost {
		s.token(w, r)
		return
	}
	if !s.authorized(r) {
		apiError(w, http.StatusUnauthorized, "unauthorized_request", "Invalid or expired access token")
		return
	}
	switch {
	case path == "/instances" && r.Method == http.MethodGet:
		s.listInstances(w, r)
	case path == "/instances" && r.Method == http.MethodPost:
		s.createInstance(w, r)
	case path == "/instances" && r.Method == http.MethodPut:
		s.action(w, r)
	case strings.HasPrefix(path, "/instances/") && r.Method == http.MethodGet:
		s.getInstance(w, strings.TrimPrefix(path, "/instances/"))
	case path == "/instance-types" && r.Method == http.MethodGet:
		s.instanceTypes(w)
	case path == "/instance-availability" && r.Method == http.MethodGet:
		s.availability(w, r, "")
	case strings.HasPrefix(path, "/instance-availability/") && r.Method == http.MethodGet:
		s.availability(w, r, strings.TrimPrefix(path, "/instance-availability/"))
	case path == "/locations" && r.Method == http.MethodGet:
		s.locations(w)
	case path == "/scripts" || strings.HasPrefix(path, "/scripts/"):
		s.scriptsAPI(w, r, strings.TrimPrefix(strings.TrimPrefix(path, "/scripts"), "/"))
	case path == "/sshkeys" || path == "/ssh-keys":
		writeJSON(w, http.StatusOK, []map[string]string{{"id": "12345dc1-a5d2-4972-ae4e-d429115d055b", "name": "ops", "key": "ssh-ed25519 AAAA ops", "fingerprint": "SHA256:fake"}})
	default:
		apiError(w, http.StatusNotFound, "not_found", "no route "+r.Method+" "+path)
	}
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	var req map[string]string
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "not valid json")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch req["grant_type"] {
	case "client_credentials":
		if req["client_id"] != s.opts.ClientID || req["client_secret"] != s.opts.ClientSecret {
			apiError(w, http.StatusUnauthorized, "unauthorized_request", "Invalid client id or client secret")
			return
		}
	case "refresh_token":
		if !s.refreshes[req["refresh_token"]] {
			apiError(w, http.StatusUnauthorized, "unauthorized_request", "Invalid refresh token")
			return
		}
		delete(s.refreshes, req["refresh_token"])
	default:
		apiError(w, http.StatusBadRequest, "invalid_request", "unsupported grant type")
		return
	}
	access, refresh := s.ids.UUID(), s.ids.UUID()
	s.tokens[access] = time.Now().Add(s.opts.TokenTTL)
	s.refreshes[refresh] = true
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": access, "refresh_token": refresh, "token_type": "Bearer",
		"expires_in": int(s.opts.TokenTTL.Seconds()), "scope": "cloud-api-v1",
	})
}

func (s *Server) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.tokens[tok]
	return ok && time.Now().Before(exp)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func isSpot(r *http.Request) bool {
	q := r.URL.Query()
	v := q.Get("is_spot")
	if v == "" {
		v = q.Get("isSpot")
	}
	b, _ := strconv.ParseBool(v)
	return b
}
