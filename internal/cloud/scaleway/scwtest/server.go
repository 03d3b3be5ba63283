// Package scwtest is an in-process fake of the Scaleway APIs gpuscaler
// uses (Instance v1, Block v1, Marketplace v2), built on the simulated
// cloud's engine so that capacity and boot times have one source of
// truth. It follows shared/reference/cloud-apis.md §3 and §5: the
// X-Auth-Token header; JSON errors with a "type" and an application/json
// Content-Type (the SDK classifies by the type); products/servers paged
// at 50 with X-Total-Count; products/servers/availability with
// "shortage" for out of stock; servers created "stopped" (201), powered
// on by an action answering a task (202), "starting" until the engine
// boots them; cloud-init as raw text/plain user data; servers listed by
// exact tags with X-Total-Count paging; terminate removing the server and
// detaching its sbs volumes, which stay (and bill) until deleted through
// the Block API; DELETE of a stopped server keeping its volumes; the
// gateway's /metadata (or a 404); marketplace local-images resolving
// image labels.
package scwtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
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

// account is the engine account every fake server lives in.
const account = "scaleway-account"

// Images are the marketplace labels the fake resolves, with their ids.
var Images = map[string]string{
	"ubuntu_noble_gpu_os_12": "8d2d7e7c-0000-4000-8000-000000000012",
	"ubuntu_jammy_gpu_os_12": "8d2d7e7c-0000-4000-8000-000000000022",
	"ubuntu_noble":           "8d2d7e7c-0000-4000-8000-000000000024",
}

// NewEngine returns a simulated engine that sells the fake's commercial
// types in its zones.
func NewEngine(cfg sim.Config, opts sim.Options) (*sim.Engine, error) {
	opts.Catalog = Catalog()
	if len(cfg.Locations) == 0 {
		cfg.Locations = Zones
	}
	return sim.NewEngine(cfg, opts)
}

// Options configure a Server.
type Options struct {
	// SecretKey is the X-Auth-Token every request must carry.
	SecretKey string
	// ServerQuota is how many servers the project may have; 0 = no limit.
	ServerQuota int
	// NoMetadata answers /metadata with 404.
	NoMetadata bool
	// InMemory serves the API on in-memory connections that only the
	// Server's Client dials, for tests on a virtual clock (see fakenet).
	InMemory bool
	// IDSeed draws the IDs the fake hands out from a seed (fakeid), so
	// that a campaign replays with the same; 0: random.
	IDSeed uint64
}

// Server is the fake API; its URL is Server.URL.
type Server struct {
	*httptest.Server
	engine *sim.Engine
	acct   *sim.Cloud
	ids    *fakeid.Source
	opts   Options

	mu sync.Mutex
	// creating counts the creates past the quota check, not yet servers.
	creating int
	servers  map[string]*server // by id
	volumes  map[string]*volume // by id
	calls    map[string]int
	faults   faults.Set
	latency  time.Duration
}

type server struct {
	id, name, zone, commercialType, project, image string
	tags                                           []string
	// state is stopped, starting, running or stopping; a starting
	// server runs once the engine has booted it.
	state      string
	userData   map[string]string
	volumeID   string
	createdAt  time.Time
	engineName string
	booted     bool
	// bootCloudInit is the cloud-init the server had when powered on.
	bootCloudInit                 string
	securityGroup, placementGroup string
	publicIP                      bool
}

type volume struct {
	id, name, zone, serverID string
	size                     int64
}

// New starts a fake API over an engine built by NewEngine.
func New(engine *sim.Engine, opts Options) *Server {
	s := &Server{engine: engine, acct: engine.Account(account), opts: opts, ids: fakeid.New(opts.IDSeed),
		servers: map[string]*server{}, volumes: map[string]*volume{}, calls: map[string]int{}}
	mux := http.NewServeMux()
	// The API gateway's metadata, which the SDK asks for on every list
	// until it gets a non-empty answer (the values are not recorded; only
	// their presence matters to the SDK). Options.NoMetadata answers 404,
	// which the SDK ignores.
	mux.HandleFunc("GET /metadata", func(w http.ResponseWriter, _ *http.Request) {
		if opts.NoMetadata {
			apiError(w, http.StatusNotFound, "not_found", "not found", nil)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"platform": "scaleway", "partition": "scaleway", "domain": "scaleway.com"})
	})
	mux.HandleFunc("GET /instance/v1/zones/{zone}/products/servers", s.productServers)
	mux.HandleFunc("GET /instance/v1/zones/{zone}/products/servers/availability", s.availability)
	mux.HandleFunc("GET /instance/v1/zones/{zone}/servers", s.listServers)
	mux.HandleFunc("POST /instance/v1/zones/{zone}/servers", s.createServer)
	mux.HandleFunc("GET /instance/v1/zones/{zone}/servers/{id}", s.getServer)
	mux.HandleFunc("DELETE /instance/v1/zones/{zone}/servers/{id}", s.deleteServer)
	mux.HandleFunc("PATCH /instance/v1/zones/{zone}/servers/{id}", s.updateServer)
	mux.HandleFunc("POST /instance/v1/zones/{zone}/servers/{id}/action", s.action)
	mux.HandleFunc("GET /instance/v1/zones/{zone}/servers/{id}/user_data", s.userDataKeys)
	mux.HandleFunc("GET /instance/v1/zones/{zone}/servers/{id}/user_data/{key}", s.getUserData)
	mux.HandleFunc("PATCH /instance/v1/zones/{zone}/servers/{id}/user_data/{key}", s.setUserData)
	mux.HandleFunc("DELETE /instance/v1/zones/{zone}/servers/{id}/user_data/{key}", s.deleteUserData)
	mux.HandleFunc("GET /marketplace/v2/local-images", s.localImages)
	mux.HandleFunc("GET /block/v1/zones/{zone}/volumes", s.listVolumes)
	mux.HandleFunc("GET /block/v1/zones/{zone}/volumes/{id}", s.getVolume)
	mux.HandleFunc("DELETE /block/v1/zones/{zone}/volumes/{id}", s.deleteVolume)
	s.Server = fakenet.Serve(s.middleware(mux), opts.InMemory)
	return s
}

// Engine returns the simulated engine behind the API.
func (s *Server) Engine() *sim.Engine { return s.engine }

// SetServerQuota caps the project's servers from now on (Options.ServerQuota).
func (s *Server) SetServerQuota(servers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.ServerQuota = servers
}

// FailNext makes the next request with method whose path ends with
// pathSuffix answer status with an error of type typ.
func (s *Server) FailNext(method, pathSuffix string, status int, typ, message string) {
	s.faults.Fail(method, pathSuffix, func(w http.ResponseWriter) { apiError(w, status, typ, message, nil) })
}

// AnswerNext makes the next request with method whose path ends with
// pathSuffix get status and body as they are, without being carried out:
// an answer the real API would not give, from a broken proxy or a changed
// API (fuzz tests).
func (s *Server) AnswerNext(method, pathSuffix string, status int, body []byte) {
	s.faults.Fail(method, pathSuffix, faults.Answer(status, body))
}

// LoseNextAnswer makes the API carry out the next request with method
// whose path ends with pathSuffix, then drop the connection unanswered.
func (s *Server) LoseNextAnswer(method, pathSuffix string) { s.faults.Lose(method, pathSuffix) }

// RandomFaults makes rate (0..1) of all requests fail at random, from
// seed: refused with a 429 or a 5xx in the API's shape, carried out with
// the answer lost, or dropped before being carried out (see faults.Set).
// A rate of 0 stops them.
func (s *Server) RandomFaults(rate float64, seed uint64) {
	s.faults.Random(rate, seed,
		func(w http.ResponseWriter) {
			apiError(w, http.StatusTooManyRequests, "too_many_requests", "too many requests", nil)
		},
		func(w http.ResponseWriter) {
			apiError(w, http.StatusInternalServerError, "internal_error", "internal error", nil)
		},
		func(w http.ResponseWriter) {
			apiError(w, http.StatusServiceUnavailable, "service_unavailable", "service unavailable", nil)
		})
}

// Injected returns how many random faults of each kind were injected.
func (s *Server) Injected() map[faults.Kind]int { return s.faults.Injected() }

// Instances returns the account's servers as cloud instances: named as
// created, in the group their tags name, stopped or stopping ones
// included (they bill until deleted).
func (s *Server) Instances() []cloud.Instance {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	states := map[string]cloud.InstanceState{"starting": cloud.StatePending, "running": cloud.StateRunning,
		"stopping": cloud.StateDeleting, "stopped": cloud.StateStopped}
	var out []cloud.Instance
	for _, sv := range s.servers {
		out = append(out, cloud.Instance{ID: sv.id, Name: sv.name, Group: groupTag(sv.tags), InstanceType: sv.commercialType,
			Location: sv.zone, CapacityType: cloud.OnDemand, State: states[sv.state], CreatedAt: sv.createdAt,
			Standby: sv.state == "stopped" && slices.Contains(sv.tags, "gpuscaler-standby")})
	}
	return out
}

// Lose powers off the server named name behind the autoscaler's back (a
// host lost); false when there is none.
func (s *Server) Lose(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sv := range s.servers {
		if sv.name == name && sv.state == "running" {
			sv.state = "stopped"
			return true
		}
	}
	return false
}

// SetLatency adds a delay to every request.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// Calls returns the number of requests per "METHOD /path", with ids and
// zones in the path replaced by {id} and {zone}.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// ServerCount and VolumeCount count what the project holds (and pays for).
func (s *Server) ServerCount() int {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.servers)
}

// VolumeCount counts the project's block volumes, attached or not.
func (s *Server) VolumeCount() int {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.volumes)
}

// OrphanVolumes names the project's volumes attached to no server that
// exists: what a server's delete left behind, billed until deleted.
func (s *Server) OrphanVolumes() []string {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, v := range s.volumes {
		if _, ok := s.servers[v.serverID]; !ok {
			out = append(out, v.name+" ("+v.id+")")
		}
	}
	sort.Strings(out)
	return out
}

// ServerView is what tests read of a server.
type ServerView struct {
	ID, Name, Zone, CommercialType, State, Image string
	Tags                                         []string
	// CloudInit is the user data the API holds now; BootCloudInit what it
	// held when the server was powered on.
	CloudInit, BootCloudInit string
	VolumeType               string
	// SecurityGroup and PlacementGroup are the ids the order named;
	// PublicIP whether it asked for a dynamic public address.
	SecurityGroup, PlacementGroup string
	PublicIP                      bool
	VolumeSize                    int64
}

// Servers returns the project's servers.
func (s *Server) Servers() []ServerView {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ServerView
	for _, sv := range s.servers {
		v := ServerView{ID: sv.id, Name: sv.name, Zone: sv.zone, CommercialType: sv.commercialType, State: sv.state,
			Image: sv.image, Tags: slices.Clone(sv.tags), CloudInit: sv.userData["cloud-init"], BootCloudInit: sv.bootCloudInit,
			SecurityGroup: sv.securityGroup, PlacementGroup: sv.placementGroup, PublicIP: sv.publicIP}
		if vol, ok := s.volumes[sv.volumeID]; ok {
			v.VolumeType, v.VolumeSize = "sbs_volume", vol.size
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PowerOff stops a running server behind the autoscaler's back (as a
// user or a host failure might).
func (s *Server) PowerOff(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv, ok := s.servers[id]; ok {
		sv.state = "stopped"
	}
}

// AddServer puts a server in a project directly, as another tool made
// it (running, with an sbs boot volume).
func (s *Server) AddServer(project, zone, name, commercialType string, tags []string) (string, error) {
	in, err := s.acct.Create(context.Background(), cloud.CreateSpec{Name: name, InstanceType: commercialType, Location: zone, CapacityType: cloud.OnDemand})
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sv := &server{id: s.ids.UUID(), name: name, zone: zone, commercialType: commercialType, project: project, tags: tags, state: "starting",
		userData: map[string]string{}, createdAt: in.CreatedAt, engineName: name}
	vol := &volume{id: s.ids.UUID(), name: name + "-boot", zone: zone, serverID: sv.id, size: 20 * 1000 * 1000 * 1000}
	sv.volumeID = vol.id
	s.servers[sv.id], s.volumes[vol.id] = sv, vol
	return sv.id, nil
}

func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls[r.Method+" "+templatePath(r.URL.Path)]++
		latency := s.latency
		s.mu.Unlock()
		if latency > 0 {
			time.Sleep(latency)
		}
		if r.Header.Get("X-Auth-Token") != s.opts.SecretKey {
			apiError(w, http.StatusUnauthorized, "denied_authentication", "authentication is denied", map[string]any{"method": "api_key", "reason": "invalid_argument"})
			return
		}
		s.faults.Serve(w, r, next)
	})
}

// templatePath replaces ids and zones in a path, for Calls.
func templatePath(p string) string {
	parts := strings.Split(p, "/")
	for i, part := range parts {
		switch {
		case i > 0 && parts[i-1] == "zones":
			parts[i] = "{zone}"
		case len(part) == 36 && strings.Count(part, "-") == 4:
			parts[i] = "{id}"
		}
	}
	return strings.Join(parts, "/")
}

// apiError writes an error as the API does: JSON with its type, and the
// Content-Type the SDK needs to read it.
func apiError(w http.ResponseWriter, status int, typ, message string, extra map[string]any) {
	body := map[string]any{"type": typ, "message": message}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// page reads page and per_page (default 50, at most 100) and returns the
// slice bounds of a list of n.
func page(r *http.Request, n, defaultPer int, perKey string) (int, int) {
	p, _ := strconv.Atoi(r.URL.Query().Get("page"))
	per, _ := strconv.Atoi(r.URL.Query().Get(perKey))
	if p < 1 {
		p = 1
	}
	if per < 1 {
		per = defaultPer
	}
	per = min(per, 100)
	from := min((p-1)*per, n)
	return from, min(from+per, n)
}

func (s *Server) zoneOK(w http.ResponseWriter, r *http.Request) (string, bool) {
	zone := r.PathValue("zone")
	if !slices.Contains(s.engine.Locations(), zone) {
		apiError(w, http.StatusNotFound, "unknown_resource", "zone "+zone+" not found", nil)
		return "", false
	}
	return zone, true
}

func (s *Server) productServers(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.zoneOK(w, r); !ok {
		return
	}
	names := make([]string, 0, len(serverTypes))
	for _, t := range serverTypes {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	from, to := page(r, len(names), 50, "per_page")
	out := map[string]any{}
	for _, n := range names[from:to] {
		t, _ := typeNamed(n)
		out[n] = typeJSON(t)
	}
	w.Header().Set("X-Total-Count", strconv.Itoa(len(names)))
	writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}

func (s *Server) availability(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.zoneOK(w, r)
	if !ok {
		return
	}
	offs, err := s.engine.Offerings(r.Context())
	if err != nil {
		apiError(w, http.StatusServiceUnavailable, "service_unavailable", err.Error(), nil)
		return
	}
	out := map[string]any{}
	for _, o := range offs {
		if o.Location != zone || o.CapacityType != cloud.OnDemand {
			continue
		}
		a := "available"
		if !o.Available {
			a = "shortage"
		}
		out[o.InstanceType] = map[string]string{"availability": a}
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": out, "total_count": len(out)})
}

// settle moves servers along with the engine: starting ones that booted
// run, stopping ones the engine let go are removed and their volumes
// detached.
func (s *Server) settle() {
	live := map[string]cloud.Instance{}
	for _, in := range s.engine.Instances(account) {
		live[in.Name] = in
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sv := range s.servers {
		in, ok := live[sv.engineName]
		switch {
		case sv.state == "starting" && ok && in.State == cloud.StateRunning:
			sv.state, sv.booted = "running", true
		case sv.state == "stopping" && !ok: // the engine let it go (its delete delay passed)
			delete(s.servers, id)
			if vol, ok := s.volumes[sv.volumeID]; ok {
				vol.serverID = "" // detached: it stays, and bills, until deleted
			}
		}
	}
}

func (s *Server) view(sv *server) map[string]any {
	vols := map[string]any{}
	if vol, ok := s.volumes[sv.volumeID]; ok {
		vols["0"] = map[string]any{"id": vol.id, "name": vol.name, "volume_type": "sbs_volume", "size": vol.size, "boot": true,
			"zone": vol.zone, "state": "available", "server": map[string]string{"id": sv.id, "name": sv.name}}
	}
	actions := map[string][]string{"stopped": {"poweron", "backup"}, "running": {"poweroff", "terminate", "reboot", "stop_in_place", "backup"},
		"starting": {}, "stopping": {}}[sv.state]
	out := map[string]any{
		"id": sv.id, "name": sv.name, "hostname": sv.name, "organization": sv.project, "project": sv.project, "tags": sv.tags,
		"commercial_type": sv.commercialType, "creation_date": sv.createdAt.UTC().Format(time.RFC3339Nano),
		"modification_date": sv.createdAt.UTC().Format(time.RFC3339Nano), "state": sv.state, "state_detail": "",
		"zone": sv.zone, "arch": "x86_64", "volumes": vols, "allowed_actions": actions, "dynamic_ip_required": true,
		"boot_type": "local", "protected": false, "public_ips": []any{}, "private_nics": []any{}, "maintenances": []any{},
		"image": map[string]any{"id": sv.image, "name": sv.image},
	}
	if sv.booted && sv.state == "running" {
		ip := map[string]any{"id": sv.id, "address": "51.15.0." + strconv.Itoa(1+int(sv.createdAt.UnixNano()%250)), "dynamic": true, "family": "inet"}
		out["public_ip"], out["public_ips"] = ip, []any{ip}
	}
	return out
}

func (s *Server) listServers(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.zoneOK(w, r)
	if !ok {
		return
	}
	s.settle()
	q := r.URL.Query()
	var want []string
	if t := q.Get("tags"); t != "" {
		want = strings.Split(t, ",")
	}
	name, project := q.Get("name"), q.Get("project")
	s.mu.Lock()
	var match []*server
	for _, sv := range s.servers {
		if sv.zone != zone || (name != "" && !strings.Contains(sv.name, name)) || (project != "" && sv.project != project) {
			continue
		}
		all := true
		for _, t := range want {
			all = all && slices.Contains(sv.tags, t)
		}
		if all {
			match = append(match, sv)
		}
	}
	sort.Slice(match, func(i, j int) bool { return match[i].createdAt.After(match[j].createdAt) })
	from, to := page(r, len(match), 50, "per_page")
	out := make([]any, 0, to-from)
	for _, sv := range match[from:to] {
		out = append(out, s.view(sv))
	}
	s.mu.Unlock()
	w.Header().Set("X-Total-Count", strconv.Itoa(len(match)))
	writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}

// createBody is what POST …/servers reads.
type createBody struct {
	Name           string   `json:"name"`
	CommercialType string   `json:"commercial_type"`
	Image          string   `json:"image"`
	Project        string   `json:"project"`
	Tags           []string `json:"tags"`
	SecurityGroup  string   `json:"security_group"`
	PlacementGroup string   `json:"placement_group"`
	DynamicIP      *bool    `json:"dynamic_ip_required"`
	Volumes        map[string]struct {
		Boot       *bool  `json:"boot"`
		Name       string `json:"name"`
		Size       int64  `json:"size"`
		VolumeType string `json:"volume_type"`
	} `json:"volumes"`
}

func (s *Server) createServer(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.zoneOK(w, r)
	if !ok {
		return
	}
	var b createBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_arguments", "invalid argument(s)", nil)
		return
	}
	invalid := func(arg, reason, help string) {
		apiError(w, http.StatusBadRequest, "invalid_arguments", "invalid argument(s)", map[string]any{
			"details": []map[string]string{{"argument_name": arg, "reason": reason, "help_message": help}}})
	}
	if b.CommercialType == "" {
		invalid("commercial_type", "required", "required key not provided")
		return
	}
	if _, ok := typeNamed(b.CommercialType); !ok {
		invalid("commercial_type", "constraint", "unknown commercial type "+b.CommercialType)
		return
	}
	if !slices.Contains(valuesOf(Images), b.Image) {
		apiError(w, http.StatusNotFound, "not_found", "resource is not found", map[string]any{"resource": "instance_image", "resource_id": b.Image})
		return
	}
	boot, hasBoot := b.Volumes["0"]
	if isGPU(b.CommercialType) && (!hasBoot || boot.VolumeType != "sbs_volume") {
		invalid("volumes.0.volume_type", "constraint", b.CommercialType+" boots from block storage only (sbs_volume)")
		return
	}
	s.settle()
	s.mu.Lock()
	if q := s.opts.ServerQuota; q > 0 && len(s.servers)+s.creating >= q {
		s.mu.Unlock()
		apiError(w, http.StatusForbidden, "quotas_exceeded", "quota(s) exceeded for this resource", map[string]any{
			"details": []map[string]any{{"resource": "instances", "quota": q, "current": q}}})
		return
	}
	// The quota counts this server from here: concurrent creates cannot
	// both pass the check, as at Scaleway.
	s.creating++
	s.mu.Unlock()
	created := false
	defer func() {
		if !created {
			s.mu.Lock()
			s.creating--
			s.mu.Unlock()
		}
	}()
	engineName := b.Name + "-" + s.ids.UUID()[:8] // names need not be unique at Scaleway
	in, err := s.acct.Create(r.Context(), cloud.CreateSpec{Name: engineName, Group: groupTag(b.Tags), InstanceType: b.CommercialType, Location: zone, CapacityType: cloud.OnDemand})
	switch {
	case cloud.IsClass(err, cloud.ErrCapacity):
		apiError(w, http.StatusPreconditionFailed, "out_of_stock", "resource is out of stock", map[string]any{"resource": b.CommercialType})
		return
	case err != nil:
		apiError(w, http.StatusInternalServerError, "internal_error", err.Error(), nil)
		return
	}
	size := int64(20 * 1000 * 1000 * 1000)
	if hasBoot && boot.Size > 0 {
		size = boot.Size
	}
	s.mu.Lock()
	sv := &server{id: s.ids.UUID(), name: b.Name, zone: zone, commercialType: b.CommercialType, project: b.Project, image: b.Image,
		tags: b.Tags, state: "stopped", userData: map[string]string{}, createdAt: in.CreatedAt, engineName: engineName,
		securityGroup: b.SecurityGroup, placementGroup: b.PlacementGroup, publicIP: b.DynamicIP == nil || *b.DynamicIP}
	volName := boot.Name
	if volName == "" {
		volName = b.Name + "-boot"
	}
	vol := &volume{id: s.ids.UUID(), name: volName, zone: zone, serverID: sv.id, size: size}
	sv.volumeID = vol.id
	s.servers[sv.id], s.volumes[vol.id] = sv, vol
	s.creating--
	created = true
	out := s.view(sv)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"server": out})
}

// groupTag is the group a gpuscaler group tag names, so that the engine's
// view groups servers as the autoscaler does.
func groupTag(tags []string) string {
	for _, t := range tags {
		if g, ok := strings.CutPrefix(t, "gpuscaler-group="); ok {
			return g
		}
	}
	return ""
}

func valuesOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// lookup finds the server a request names, answering not_found itself.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*server, bool) {
	zone, ok := s.zoneOK(w, r)
	if !ok {
		return nil, false
	}
	s.settle()
	s.mu.Lock()
	sv, ok := s.servers[r.PathValue("id")]
	s.mu.Unlock()
	if !ok || sv.zone != zone {
		apiError(w, http.StatusNotFound, "not_found", "resource is not found", map[string]any{"resource": "instance_server", "resource_id": r.PathValue("id")})
		return nil, false
	}
	return sv, true
}

func (s *Server) getServer(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	out := s.view(sv)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"server": out})
}

// updateServer changes a server's tags and name, the fields gpuscaler
// updates: PATCH …/servers/{id} with the new tag list whole, answered with
// the server (scaleway-sdk-go v1.39.0 api/instance/v1: updateServer's
// method and path, UpdateServerRequest's `name` and `tags`,
// UpdateServerResponse's `server`). A field left out keeps its value.
func (s *Server) updateServer(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	var b struct {
		Name *string   `json:"name"`
		Tags *[]string `json:"tags"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_arguments", "invalid argument(s)", nil)
		return
	}
	s.mu.Lock()
	if b.Tags != nil {
		sv.tags = slices.Clone(*b.Tags)
	}
	if b.Name != nil {
		sv.name = *b.Name
	}
	out := s.view(sv)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"server": out})
}

func (s *Server) deleteServer(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	if sv.state != "stopped" {
		state := sv.state
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, "invalid_request_error", "instance must be powered off to be deleted (state: "+state+")", nil)
		return
	}
	delete(s.servers, sv.id)
	if vol, ok := s.volumes[sv.volumeID]; ok {
		vol.serverID = "" // a deleted server keeps its volumes
	}
	s.mu.Unlock()
	s.dropEngine(sv)
	w.WriteHeader(http.StatusNoContent)
}

// dropEngine lets the engine's instance of a server go.
func (s *Server) dropEngine(sv *server) {
	for _, in := range s.engine.Instances(account) {
		if in.Name == sv.engineName {
			_ = s.acct.Delete(context.Background(), in)
		}
	}
}

func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	var b struct {
		Action string `json:"action"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Action == "" {
		apiError(w, http.StatusBadRequest, "invalid_arguments", "invalid argument(s)", map[string]any{
			"details": []map[string]string{{"argument_name": "action", "reason": "required", "help_message": "required key not provided"}}})
		return
	}
	s.mu.Lock()
	state := sv.state
	switch {
	case b.Action == "poweron" && state == "stopped":
		sv.state, sv.bootCloudInit = "starting", sv.userData["cloud-init"]
	case b.Action == "terminate" && (state == "running" || state == "starting"):
		sv.state = "stopping"
	case b.Action == "poweroff" && state == "running":
		sv.state = "stopped"
	default:
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("action %s not allowed in state %s", b.Action, state), nil)
		return
	}
	s.mu.Unlock()
	if b.Action == "terminate" {
		s.dropEngine(sv)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	writeJSON(w, http.StatusAccepted, map[string]any{"task": map[string]any{
		"id": s.ids.UUID(), "description": "server_" + b.Action, "status": "pending", "progress": 0, "started_at": now,
		"href_from": "/servers/" + sv.id + "/action", "href_result": "/servers/" + sv.id, "zone": sv.zone,
	}})
}

func (s *Server) userDataKeys(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	keys := []string{}
	for k := range sv.userData {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	sort.Strings(keys)
	writeJSON(w, http.StatusOK, map[string]any{"user_data": keys})
}

func (s *Server) getUserData(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	v, has := sv.userData[r.PathValue("key")]
	s.mu.Unlock()
	if !has {
		apiError(w, http.StatusNotFound, "not_found", "resource is not found", map[string]any{"resource": "instance_user_data", "resource_id": r.PathValue("key")})
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, v)
}

func (s *Server) setUserData(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "user data must be sent as text/plain, not "+ct, nil)
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	s.mu.Lock()
	sv.userData[r.PathValue("key")] = string(data)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteUserData(w http.ResponseWriter, r *http.Request) {
	sv, ok := s.lookup(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	_, had := sv.userData[r.PathValue("key")]
	delete(sv.userData, r.PathValue("key"))
	s.mu.Unlock()
	if !had {
		apiError(w, http.StatusNotFound, "not_found", "resource is not found", map[string]any{"resource": "instance_user_data", "resource_id": r.PathValue("key")})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) localImages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	label, zone := q.Get("image_label"), q.Get("zone")
	var out []any
	if id, ok := Images[label]; ok && slices.Contains(s.engine.Locations(), zone) {
		types := make([]string, 0, len(serverTypes))
		for _, t := range serverTypes {
			types = append(types, t.Name)
		}
		out = append(out, map[string]any{"id": id, "arch": "x86_64", "zone": zone, "compatible_commercial_types": types,
			"label": label, "type": "instance_sbs"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"local_images": out, "total_count": len(out)})
}

func (s *Server) volumeView(v *volume) map[string]any {
	status, refs := "available", []any{}
	if v.serverID != "" {
		status = "in_use"
		refs = append(refs, map[string]any{"id": s.ids.UUID(), "product_resource_type": "instance_server", "product_resource_id": v.serverID,
			"type": "exclusive", "status": "attached"})
	}
	return map[string]any{"id": v.id, "name": v.name, "type": "sbs_5k", "size": v.size, "status": status, "references": refs,
		"zone": v.zone, "tags": []string{}, "project_id": ""}
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	zone, ok := s.zoneOK(w, r)
	if !ok {
		return
	}
	s.settle()
	name := r.URL.Query().Get("name")
	s.mu.Lock()
	var match []*volume
	for _, v := range s.volumes {
		if v.zone == zone && (name == "" || strings.Contains(v.name, name)) {
			match = append(match, v)
		}
	}
	sort.Slice(match, func(i, j int) bool { return match[i].id < match[j].id })
	from, to := page(r, len(match), 50, "page_size")
	out := make([]any, 0, to-from)
	for _, v := range match[from:to] {
		out = append(out, s.volumeView(v))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"volumes": out, "total_count": len(match)})
}

func (s *Server) volumeNamed(w http.ResponseWriter, r *http.Request) (*volume, bool) {
	zone, ok := s.zoneOK(w, r)
	if !ok {
		return nil, false
	}
	s.settle()
	s.mu.Lock()
	v, ok := s.volumes[r.PathValue("id")]
	s.mu.Unlock()
	if !ok || v.zone != zone {
		apiError(w, http.StatusNotFound, "not_found", "resource is not found", map[string]any{"resource": "volume", "resource_id": r.PathValue("id")})
		return nil, false
	}
	return v, true
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, ok := s.volumeNamed(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	out := s.volumeView(v)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	v, ok := s.volumeNamed(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.serverID != "" {
		apiError(w, http.StatusPreconditionFailed, "precondition_failed", "volume is in use by a server", map[string]any{"precondition": "resource_still_in_use"})
		return
	}
	delete(s.volumes, v.id)
	w.WriteHeader(http.StatusNoContent)
}
