// Package gcptest is an in-process fake of the GCP Compute API's managed
// instance groups, served to the real client (google.golang.org/api/compute/v1,
// REST) through option.WithEndpoint, and built on the simulated cloud's
// engine so that capacity and boot times have one source of truth. It
// follows shared/reference/cloud-apis.md §4 and §5: protojson bodies
// (camelCase, enum strings, uint64 ids as strings), googleapi error
// bodies, operations PENDING → RUNNING → DONE fetched from the zone
// operations endpoint (errors inside a DONE operation, httpErrorStatusCode
// for failed ones), 400 resourceNotReady while another operation runs on
// the same group,
// managed instances CREATING → NONE as the engine boots them, stock-outs
// and quota reported asynchronously in lastAttempt (the operation itself
// succeeds), deleteInstances lowering targetSize, paging by pageToken.
//
// Where the reference is silent, the answers follow compute/v1's discovery
// document as Google publishes it with its Go SDK
// (google.golang.org/api/compute/v1/compute-api.json, cited below as "the
// discovery document"): a repeated requestId answered with the operation
// it started and carried out once; deleteInstances skipping instances that
// are not members, or already being deleted, when
// skipInstancesOnValidationError is set, failing the operation when not,
// and always for a malformed instance reference or one outside the
// group's zone or region; listManagedInstances paged only for a group
// whose listManagedInstancesResults is PAGINATED (maxResults default
// 500); failed operations carrying httpErrorStatusCode and
// httpErrorMessage beside their errors; stopInstances and startInstances
// (standby pools) as the document describes them: stop only running
// members, start only stopped ones, each moving one from targetSize to
// targetStoppedSize or back, the operation DONE once accepted and the
// member's STOPPING or STARTING action seen through listManagedInstances,
// its targetStatus STOPPED while the group keeps it stopped. A start that
// finds no resources in the zone shows ZONE_RESOURCE_POOL_EXHAUSTED in
// lastAttempt, as a create does (the resource-errors page names restarts
// among what meets it), and the group tries again.
package gcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/fakenet"
	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// account is the engine account every fake instance lives in.
const account = "gcp-account"

// Zones are the fake's zones (the engine's locations).
var Zones = []string{"us-central1-a", "us-central1-b", "europe-west4-a"}

// MachineTypes are the machine types the fake's engine knows, with their
// GPUs (A2, A3 and G2 carry theirs implicitly).
var MachineTypes = []cloud.InstanceType{
	{Name: "g2-standard-8", VCPUs: 8, MemoryGiB: 32, GPUModel: "L4", GPUCount: 1, GPUMemoryGiB: 24, Arch: "amd64"},
	{Name: "a2-highgpu-1g", VCPUs: 12, MemoryGiB: 85, GPUModel: "A100-40GB", GPUCount: 1, GPUMemoryGiB: 40, Arch: "amd64"},
	{Name: "a3-highgpu-8g", VCPUs: 208, MemoryGiB: 1872, GPUModel: "H100-80GB", GPUCount: 8, GPUMemoryGiB: 80, Arch: "amd64"},
	{Name: "n2-standard-8", VCPUs: 8, MemoryGiB: 32, Arch: "amd64"},
}

// NewEngine returns a simulated engine over the fake's zones and machine
// types.
func NewEngine(cfg sim.Config, opts sim.Options) (*sim.Engine, error) {
	opts.Catalog = MachineTypes
	if len(cfg.Locations) == 0 {
		cfg.Locations = Zones
	}
	return sim.NewEngine(cfg, opts)
}

// Options configure a Server.
type Options struct {
	// Project is the only project the fake serves.
	Project string
	// OperationDelay is how long an operation stays PENDING and then
	// RUNNING; default 20 ms each.
	OperationDelay time.Duration
	// GPUQuota caps the GPUs the project may run; 0 = no limit.
	GPUQuota int
	// StopDelay is how long a member stopped by stopInstances shows
	// STOPPING before its VM stops (the operation is DONE at once);
	// default none.
	StopDelay time.Duration
	// NoMemberNames answers managed instances with their instance URL and
	// no name, as cluster-autoscaler's recorded listManagedInstances
	// answers do (cloudprovider/gce/gce_manager_test.go's templates).
	NoMemberNames bool
	// InMemory serves the API on in-memory connections that only the
	// Server's Client dials, for tests on a virtual clock (see fakenet).
	InMemory bool
}

// MemberState is what listManagedInstances says of a member, set by a test
// (SetMemberState) over what the fake would say: a currentAction and an
// instanceStatus of those compute/v1's discovery document enumerates, and
// lastAttempt errors as code and message.
type MemberState struct {
	Action, Status string
	Errors         [][2]string
}

// Server is the fake API; its URL is Server.URL.
type Server struct {
	*httptest.Server
	engine *sim.Engine
	acct   *sim.Cloud
	opts   Options

	mu        sync.Mutex
	igms      map[string]*igm      // by zone/name
	templates map[string]*Template // by link: projects/p/global/instanceTemplates/t, or .../regions/r/...
	ops       map[string]*operation
	// requests are the operations started, by the requestId that started
	// them.
	requests map[string]string
	nextID   int
	calls    map[string]int
	latency  time.Duration
	faults   faults.Set
}

// Template is an instance template: global, or regional when Region is
// set.
type Template struct {
	Name, Region string
	MachineType  string
	// AcceleratorType and AcceleratorCount are its guestAccelerators (one
	// kind, as GKE node pools have), if any.
	AcceleratorType  string
	AcceleratorCount int
	// Metadata are its metadata items (GKE's kube-labels, kube-env).
	Metadata map[string]string
}

type igm struct {
	zone, name, template, machineType, base, description string
	targetSize                                           int
	// targetStoppedSize counts the members the group keeps stopped.
	targetStoppedSize int
	members           map[string]*member // by instance name
	// busy is the operation running on the group, if any.
	busy string
	// paginated: listManagedInstancesResults is PAGINATED (the default,
	// PAGELESS, answers every member in one page).
	paginated bool
}

type member struct {
	name, id string
	// zone is where its instance runs: its group's, or for a regional
	// group the zone the fake chose ("" until then).
	zone string
	// metadata is the per-instance config's preserved metadata.
	metadata map[string]string
	// action is the MIG's current action: CREATING, DELETING, STOPPING,
	// STARTING or NONE.
	action string
	// stopped: the group keeps the member stopped (targetStatus STOPPED).
	stopped bool
	// starting: a settle is asking the engine to start it.
	starting bool
	// stopAt is when a member's stop reaches its VM (Options.StopDelay).
	stopAt    time.Time
	lastError string
	// state, when set, is what the list says of the member instead.
	state   *MemberState
	created bool // the engine made its instance
	making  bool // a settle is asking the engine for it
	since   time.Time
}

type operation struct {
	id, name, zone, kind, target string
	start                        time.Time
	// apply runs once when the operation completes; it may return an
	// error code and message for the DONE operation.
	apply   func() (code, message string)
	applied bool
	errCode string
	errMsg  string
	// status is the failed operation's httpErrorStatusCode.
	status int
}

// New starts a fake over an engine built by NewEngine.
func New(engine *sim.Engine, opts Options) *Server {
	if opts.OperationDelay == 0 {
		opts.OperationDelay = 20 * time.Millisecond
	}
	s := &Server{engine: engine, acct: engine.Account(account), opts: opts, igms: map[string]*igm{}, templates: map[string]*Template{},
		ops: map[string]*operation{}, requests: map[string]string{}, calls: map[string]int{}}
	mux := http.NewServeMux()
	base := "/compute/v1/projects/{project}/zones/{zone}/"
	mux.HandleFunc("GET "+base+"instanceGroupManagers/{igm}", s.getIGM)
	mux.HandleFunc("POST "+base+"instanceGroupManagers/{igm}/listManagedInstances", s.listManaged)
	mux.HandleFunc("POST "+base+"instanceGroupManagers/{igm}/createInstances", s.createInstances)
	mux.HandleFunc("POST "+base+"instanceGroupManagers/{igm}/deleteInstances", s.deleteInstances)
	mux.HandleFunc("POST "+base+"instanceGroupManagers/{igm}/resize", s.resize)
	mux.HandleFunc("POST "+base+"instanceGroupManagers/{igm}/stopInstances", s.stopInstances)
	mux.HandleFunc("POST "+base+"instanceGroupManagers/{igm}/startInstances", s.startInstances)
	mux.HandleFunc("GET "+base+"operations/{op}", s.getOperation)
	mux.HandleFunc("GET "+base+"instances", s.listInstances)
	mux.HandleFunc("POST "+base+"instanceGroupManagers", s.insertIGM)
	mux.HandleFunc("DELETE "+base+"instanceGroupManagers/{igm}", s.deleteIGM)
	mux.HandleFunc("GET /compute/v1/projects/{project}/aggregated/instanceGroupManagers", s.aggregatedIGMs)
	// Regional MIGs: the same calls under regions/{region}.
	regional := "/compute/v1/projects/{project}/regions/{region}/"
	mux.HandleFunc("GET "+regional+"instanceGroupManagers/{igm}", s.getIGM)
	mux.HandleFunc("POST "+regional+"instanceGroupManagers/{igm}/listManagedInstances", s.listManaged)
	mux.HandleFunc("POST "+regional+"instanceGroupManagers/{igm}/createInstances", s.createInstances)
	mux.HandleFunc("POST "+regional+"instanceGroupManagers/{igm}/deleteInstances", s.deleteInstances)
	mux.HandleFunc("POST "+regional+"instanceGroupManagers/{igm}/stopInstances", s.stopInstances)
	mux.HandleFunc("POST "+regional+"instanceGroupManagers/{igm}/startInstances", s.startInstances)
	mux.HandleFunc("GET "+regional+"operations/{op}", s.getOperation)
	mux.HandleFunc("GET /compute/v1/projects/{project}/global/instanceTemplates/{t}", s.getTemplate)
	mux.HandleFunc("GET /compute/v1/projects/{project}/regions/{region}/instanceTemplates/{t}", s.getTemplate)
	s.Server = fakenet.Serve(s.middleware(mux), opts.InMemory)
	return s
}

// Engine returns the simulated engine behind the API.
func (s *Server) Engine() *sim.Engine { return s.engine }

// SetGPUQuota caps the GPUs the project may run from now on (Options.GPUQuota).
func (s *Server) SetGPUQuota(gpus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.GPUQuota = gpus
}

// AddGroup creates a managed instance group of a machine type in a zone,
// empty, with a global template of its own name.
func (s *Server) AddGroup(zone, name, machineType string) {
	s.AddGroupFrom(zone, name, s.AddTemplate(Template{Name: name, MachineType: machineType}))
}

// AddTemplate stores an instance template and returns its link.
func (s *Server) AddTemplate(t Template) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	link := "projects/" + s.opts.Project + "/global/instanceTemplates/" + t.Name
	if t.Region != "" {
		link = "projects/" + s.opts.Project + "/regions/" + t.Region + "/instanceTemplates/" + t.Name
	}
	s.templates[link] = &t
	return link
}

// AddGroupFrom creates an empty managed instance group in a zone from a
// template AddTemplate stored. Its instances are of the template's
// machine type: the engine knows the machine types of MachineTypes.
func (s *Server) AddGroupFrom(zone, name, templateLink string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.igms[zone+"/"+name] = &igm{zone: zone, name: name, template: templateLink,
		machineType: s.templates[templateLink].MachineType, base: name, members: map[string]*member{}}
}

// SetDescription sets a group's description, as
// `gcloud compute instance-groups managed update --description` does.
func (s *Server) SetDescription(zone, name, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.igms[zone+"/"+name].description = description
}

// SetPaginated sets a group's listManagedInstancesResults to PAGINATED,
// so that listManagedInstances answers in pages.
func (s *Server) SetPaginated(zone, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.igms[zone+"/"+name].paginated = true
}

// FailNext makes the next request with method whose path ends with
// pathSuffix fail with a googleapi error.
func (s *Server) FailNext(method, pathSuffix string, status int, reason, message string) {
	s.faults.Fail(method, pathSuffix, func(w http.ResponseWriter) { apiError(w, status, reason, message) })
}

// FailNextAfter carries out the next request with method whose path ends
// with pathSuffix, then answers it with a googleapi error, as a front end
// that gave up after Compute accepted the request.
func (s *Server) FailNextAfter(method, pathSuffix string, status int, reason, message string) {
	s.faults.FailAfter(method, pathSuffix, func(w http.ResponseWriter) { apiError(w, status, reason, message) })
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
			apiError(w, http.StatusTooManyRequests, "rateLimitExceeded", "Rate Limit Exceeded")
		},
		func(w http.ResponseWriter) {
			apiError(w, http.StatusServiceUnavailable, "backendError", "Internal error. Please try again.")
		},
		func(w http.ResponseWriter) {
			apiError(w, http.StatusInternalServerError, "backendError", "Internal error")
		})
}

// Injected returns how many random faults of each kind were injected.
func (s *Server) Injected() map[faults.Kind]int { return s.faults.Injected() }

// Project returns the project's instances as the engine holds them,
// named as the MIGs name them (the engine's "<name>.<zone>" cut).
func (s *Server) Project() []cloud.Instance {
	insts := s.engine.Instances(account)
	for i := range insts {
		insts[i].Name, _, _ = strings.Cut(insts[i].Name, ".")
	}
	return insts
}

// Parked reports whether a member's VM is being deleted from the stopped
// state, billed as its disk until gone (sim.Engine.Parked).
func (s *Server) Parked(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.igms {
		if _, ok := g.members[name]; ok && s.engine.Parked(engineName(g, name)) {
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

// Calls returns the number of requests per "METHOD /last/path/segments".
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// Instances returns the members of a group by name, with their current
// action.
func (s *Server) Instances(zone, name string) map[string]string {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	if g, ok := s.igms[zone+"/"+name]; ok {
		for n, m := range g.members {
			out[n] = m.action
		}
	}
	return out
}

// Metadata returns an instance's per-instance metadata (its startup
// script, when one was given).
func (s *Server) Metadata(zone, group, name string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.igms[zone+"/"+group]; ok {
		if m, ok := g.members[name]; ok {
			return m.metadata
		}
	}
	return nil
}

// TargetSize returns a group's target size.
func (s *Server) TargetSize(zone, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.igms[zone+"/"+name]; ok {
		return g.targetSize
	}
	return -1
}

// Stopped returns the members a group keeps stopped (a standby pool's),
// by name, with its targetStoppedSize.
func (s *Server) Stopped(zone, name string) (names []string, targetStoppedSize int) {
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.igms[zone+"/"+name]
	if !ok {
		return nil, -1
	}
	for n, m := range g.members {
		if m.stopped && m.action == "NONE" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, g.targetStoppedSize
}

func (s *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(r.URL.Path, "/")
		key := r.Method + " " + parts[len(parts)-1]
		if len(parts) > 2 && parts[len(parts)-2] == "operations" {
			key = r.Method + " operations"
		} else if len(parts) > 2 && parts[len(parts)-2] == "instanceGroupManagers" {
			key = r.Method + " instanceGroupManager"
		} else if len(parts) > 2 && parts[len(parts)-2] == "instanceTemplates" {
			key = r.Method + " instanceTemplate"
		}
		s.mu.Lock()
		s.calls[key]++
		latency := s.latency
		s.mu.Unlock()
		if latency > 0 {
			time.Sleep(latency)
		}
		// /compute/v1/projects/{project}/...: the fake serves one project.
		if len(parts) > 4 && parts[3] == "projects" && parts[4] != s.opts.Project {
			apiError(w, http.StatusForbidden, "forbidden", "Required 'compute.instanceGroupManagers.get' permission for 'projects/"+parts[4]+"'")
			return
		}
		s.faults.Serve(w, r, next)
	})
}

// apiError writes a googleapi error body.
func apiError(w http.ResponseWriter, status int, reason, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": status, "message": message, "errors": []map[string]string{{"message": message, "domain": "global", "reason": reason}},
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// group finds the group a request names, answering 404 itself.
func (s *Server) group(w http.ResponseWriter, r *http.Request) (*igm, bool) {
	s.mu.Lock()
	g, ok := s.igms[location(r)+"/"+r.PathValue("igm")]
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource 'projects/%s/%s/instanceGroupManagers/%s' was not found",
			r.PathValue("project"), scope(location(r)), r.PathValue("igm")))
		return nil, false
	}
	return g, true
}

func (s *Server) getIGM(w http.ResponseWriter, r *http.Request) {
	g, ok := s.group(w, r)
	if !ok {
		return
	}
	s.settle()
	s.mu.Lock()
	defer s.mu.Unlock()
	actions := map[string]int{"none": 0, "creating": 0, "deleting": 0}
	for _, m := range g.members {
		actions[strings.ToLower(m.action)]++
	}
	where := "zone" // a regional MIG says its region instead
	if regional(g.zone) {
		where = "region"
	}
	paging := "PAGELESS"
	if g.paginated {
		paging = "PAGINATED"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"kind": "compute#instanceGroupManager", "id": "4" + strconv.Itoa(len(g.name)*1000003), "name": g.name,
		where:              "https://www.googleapis.com/compute/v1/projects/" + s.opts.Project + "/" + scope(g.zone),
		"instanceTemplate": "https://www.googleapis.com/compute/v1/" + g.template, "baseInstanceName": g.base, "description": g.description,
		"targetSize": g.targetSize, "targetStoppedSize": g.targetStoppedSize, "currentActions": actions, "status": map[string]any{"isStable": actions["creating"] == 0 && actions["deleting"] == 0},
		"listManagedInstancesResults": paging,
	})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	link := "projects/" + r.PathValue("project") + "/global/instanceTemplates/" + r.PathValue("t")
	if region := r.PathValue("region"); region != "" {
		link = "projects/" + r.PathValue("project") + "/regions/" + region + "/instanceTemplates/" + r.PathValue("t")
	}
	s.mu.Lock()
	t, ok := s.templates[link]
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "notFound", "The resource '"+link+"' was not found")
		return
	}
	props := map[string]any{"machineType": t.MachineType}
	if t.AcceleratorType != "" {
		props["guestAccelerators"] = []map[string]any{{"acceleratorType": t.AcceleratorType, "acceleratorCount": t.AcceleratorCount}}
	}
	if len(t.Metadata) > 0 {
		keys := make([]string, 0, len(t.Metadata))
		for k := range t.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		items := make([]map[string]string, 0, len(keys))
		for _, k := range keys {
			items = append(items, map[string]string{"key": k, "value": t.Metadata[k]})
		}
		props["metadata"] = map[string]any{"fingerprint": "a1b2c3d4e5f=", "items": items}
	}
	body := map[string]any{"kind": "compute#instanceTemplate", "id": "7" + strconv.Itoa(len(link)*7919), "name": t.Name,
		"selfLink": "https://www.googleapis.com/compute/v1/" + link, "properties": props}
	if t.Region != "" {
		body["region"] = "https://www.googleapis.com/compute/v1/projects/" + s.opts.Project + "/regions/" + t.Region
	}
	writeJSON(w, http.StatusOK, body)
}

// insertIGM creates a managed instance group from a template the fake
// has; the operation makes it.
func (s *Server) insertIGM(w http.ResponseWriter, r *http.Request) {
	if s.repeated(w, r) {
		return
	}
	var b struct {
		Name, BaseInstanceName, InstanceTemplate, Description string
		TargetSize                                            int
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Name == "" {
		apiError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.name': ''.")
		return
	}
	link := b.InstanceTemplate[max(0, strings.Index(b.InstanceTemplate, "projects/")):]
	zone := r.PathValue("zone")
	s.mu.Lock()
	t, known := s.templates[link]
	_, taken := s.igms[zone+"/"+b.Name]
	s.mu.Unlock()
	switch {
	case taken:
		apiError(w, http.StatusConflict, "alreadyExists", "The resource 'projects/"+s.opts.Project+"/zones/"+zone+"/instanceGroupManagers/"+b.Name+"' already exists")
		return
	case !known:
		apiError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.instanceTemplate': '"+b.InstanceTemplate+"'. The URL is malformed or the resource does not exist.")
		return
	}
	// The new group is busy with its own insert, as GCP's would be.
	g := &igm{zone: zone, name: b.Name, template: link, machineType: t.MachineType, base: b.BaseInstanceName, description: b.Description,
		members: map[string]*member{}}
	s.startOperation(w, r, g, "insert", func() (string, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, taken := s.igms[zone+"/"+b.Name]; !taken {
			s.igms[zone+"/"+b.Name] = g
		}
		return "", ""
	})
}

// deleteIGM deletes a managed instance group and, as GCP does, its
// instances.
func (s *Server) deleteIGM(w http.ResponseWriter, r *http.Request) {
	if s.repeated(w, r) {
		return
	}
	g, ok := s.group(w, r)
	if !ok {
		return
	}
	s.startOperation(w, r, g, "delete", func() (string, string) {
		s.mu.Lock()
		delete(s.igms, g.zone+"/"+g.name)
		var names []string
		for n := range g.members {
			names = append(names, engineName(g, n))
		}
		s.mu.Unlock()
		for _, n := range names {
			for _, in := range s.engine.Instances(account) {
				if in.Name == n {
					_ = s.acct.Delete(context.Background(), in)
				}
			}
		}
		return "", ""
	})
}

// aggregatedIGMs lists every zone's managed instance groups (one page).
func (s *Server) aggregatedIGMs(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	items := map[string]any{}
	byZone := map[string][]map[string]any{}
	for _, g := range s.igms {
		byZone[g.zone] = append(byZone[g.zone], map[string]any{"name": g.name, "zone": s.zoneURL(g.zone), "description": g.description,
			"instanceTemplate": "https://www.googleapis.com/compute/v1/" + g.template, "baseInstanceName": g.base, "targetSize": g.targetSize})
	}
	s.mu.Unlock()
	for _, z := range Zones {
		if l, ok := byZone[z]; ok {
			items["zones/"+z] = map[string]any{"instanceGroupManagers": l}
		} else {
			items["zones/"+z] = map[string]any{"warning": map[string]any{"code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope 'zones/" + z + "' on this page."}}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "compute#instanceGroupManagerAggregatedList", "items": items})
}

// Groups returns the zone/name of every managed instance group.
func (s *Server) Groups() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.igms {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// location is the zone or region a request names.
func location(r *http.Request) string {
	if z := r.PathValue("zone"); z != "" {
		return z
	}
	return r.PathValue("region")
}

// regional reports whether a location is a region (us-central1) rather
// than a zone (us-central1-a).
func regional(loc string) bool { return strings.Count(loc, "-") == 1 }

// scope is a location's path: zones/<z> or regions/<r>.
func scope(loc string) string {
	if regional(loc) {
		return "regions/" + loc
	}
	return "zones/" + loc
}

// AddRegionalGroup creates an empty regional managed instance group of a
// machine type, whose instances go to the region's zones of Zones, the
// first with room first.
func (s *Server) AddRegionalGroup(region, name, machineType string) {
	link := s.AddTemplate(Template{Name: name, MachineType: machineType})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.igms[region+"/"+name] = &igm{zone: region, name: name, template: link, machineType: machineType, base: name, members: map[string]*member{}}
}

func (s *Server) zoneURL(zone string) string {
	return "https://www.googleapis.com/compute/v1/projects/" + s.opts.Project + "/zones/" + zone
}

// live returns the engine's instances by name. Callers hold s.mu, so that
// no member is made or removed between the read and what they decide.
func (s *Server) live() map[string]cloud.Instance {
	live := map[string]cloud.Instance{}
	for _, in := range s.engine.Instances(account) {
		live[in.Name] = in
	}
	return live
}

// settle moves members along with the engine: creating ones whose
// instance the engine could not make (a stock-out) are retried, as a MIG
// does, with the error in lastAttempt; booted ones have no action left;
// deleted ones leave.
func (s *Server) settle() {
	s.mu.Lock()
	live := s.live()
	var retry, restart []*member
	var retryGroup, restartGroup []*igm
	var stop []cloud.Instance
	for _, g := range s.igms {
		for name, m := range g.members {
			in, ok := live[engineName(g, name)]
			switch {
			case m.action == "CREATING" && !m.created && !m.making:
				m.making = true
				retry, retryGroup = append(retry, m), append(retryGroup, g)
			case m.action == "CREATING" && ok && in.State == cloud.StateRunning:
				m.action, m.lastError = "NONE", ""
			case m.action == "DELETING" && !ok:
				delete(g.members, name)
			case m.action == "STOPPING" && ok && in.State == cloud.StateStopped:
				m.action = "NONE"
			case m.action == "STOPPING" && ok && in.State == cloud.StateRunning && !m.stopAt.IsZero() && !time.Now().Before(m.stopAt):
				m.stopAt = time.Time{}
				stop = append(stop, in)
			case m.action == "STARTING" && ok && in.State == cloud.StateRunning:
				m.action, m.lastError = "NONE", ""
			case m.action == "STARTING" && ok && in.State == cloud.StateStopped && !m.starting:
				m.starting = true
				restart, restartGroup = append(restart, m), append(restartGroup, g)
			}
		}
	}
	s.mu.Unlock()
	for i, m := range retry {
		s.make(retryGroup[i], m)
	}
	for i, m := range restart {
		s.start(restartGroup[i], m)
	}
	for _, in := range stop {
		_ = s.acct.Stop(context.Background(), in)
	}
}

// start asks the engine to start a member's stopped instance; no
// resources left in its zone are left in lastAttempt, and a later settle
// tries again, as a MIG does.
func (s *Server) start(g *igm, m *member) {
	s.mu.Lock()
	name := engineName(g, m.name)
	s.mu.Unlock()
	var err error
	for _, in := range s.engine.Instances(account) {
		if in.Name == name {
			err = s.acct.Start(context.Background(), in)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m.starting = false
	switch {
	case err == nil:
	case cloud.IsClass(err, cloud.ErrCapacity):
		zone := m.zone
		if zone == "" {
			zone = g.zone
		}
		m.lastError = "ZONE_RESOURCE_POOL_EXHAUSTED: The zone 'projects/" + s.opts.Project + "/zones/" + zone + "' does not have enough resources available to fulfill the request."
	default:
		m.lastError = "UNKNOWN: " + err.Error()
	}
}

// make asks the engine for a member's instance; a stock-out or quota is
// left in lastAttempt. A member deleted meanwhile has its new instance
// deleted, as a MIG does.
func (s *Server) make(g *igm, m *member) {
	s.mu.Lock()
	defer func() {
		s.mu.Lock()
		m.making = false
		s.mu.Unlock()
	}()
	if q := s.opts.GPUQuota; q > 0 {
		used := 0
		for _, in := range s.engine.Instances(account) {
			for _, t := range MachineTypes {
				if t.Name == in.InstanceType && in.State != cloud.StateDeleting {
					used += t.GPUCount
				}
			}
		}
		for _, t := range MachineTypes {
			if t.Name == g.machineType && t.GPUCount > 0 && used+t.GPUCount > q {
				m.lastError = "QUOTA_EXCEEDED: Quota 'NVIDIA_GPUS' exceeded. Limit: " + strconv.Itoa(q) + " in region"
				s.mu.Unlock()
				return
			}
		}
	}
	zones := []string{g.zone}
	if regional(g.zone) {
		zones = nil
		for _, z := range Zones {
			if strings.HasPrefix(z, g.zone+"-") {
				zones = append(zones, z)
			}
		}
	}
	s.mu.Unlock()
	var err error
	var in cloud.Instance
	zone := ""
	for _, zone = range zones {
		in, err = s.acct.Create(context.Background(), cloud.CreateSpec{Name: m.name + "." + zone, Group: g.name, InstanceType: g.machineType, Location: zone, CapacityType: cloud.OnDemand})
		if !cloud.IsClass(err, cloud.ErrCapacity) {
			break
		}
	}
	s.mu.Lock()
	if err == nil && (g.members[m.name] != m || m.action != "CREATING") {
		s.mu.Unlock()
		_ = s.acct.Delete(context.Background(), in)
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	switch {
	case err == nil:
		m.created, m.lastError, m.zone = true, "", zone
	case cloud.IsClass(err, cloud.ErrCapacity):
		// An instance's URL is zonal: a regional group's member keeps the
		// zone its last attempt was in, so it can be named to delete it.
		m.zone = zone
		m.lastError = "ZONE_RESOURCE_POOL_EXHAUSTED: The zone 'projects/" + s.opts.Project + "/zones/" + zone + "' does not have enough resources available to fulfill the request."
	default:
		m.lastError = "UNKNOWN: " + err.Error()
	}
}

func (s *Server) managedJSON(g *igm, m *member) map[string]any {
	status := "RUNNING"
	if m.action == "CREATING" {
		status = ""
		if m.created {
			status = "PROVISIONING"
		}
	}
	if m.action == "DELETING" || m.action == "STOPPING" {
		status = "STOPPING"
	}
	target := "RUNNING"
	switch {
	case m.stopped && m.action == "NONE":
		// The discovery document's TERMINATED: "stopped (either by
		// explicit action or underlying failure)".
		status, target = "TERMINATED", "STOPPED"
	case m.stopped:
		target = "STOPPED"
	case m.action == "STARTING":
		status = "STAGING"
		if m.lastError != "" {
			status = "TERMINATED"
		}
	}
	out := map[string]any{
		"id": m.id, "name": m.name, "currentAction": m.action, "targetStatus": target,
	}
	if s.opts.NoMemberNames {
		delete(out, "name")
	}
	if len(m.metadata) > 0 {
		// The discovery document's ManagedInstance.preservedStateFromConfig:
		// "[Output Only] Preserved state applied from per-instance config
		// for this instance", whose metadata is a map of key to value
		// (PreservedState.metadata).
		out["preservedStateFromConfig"] = map[string]any{"metadata": m.metadata}
	}
	if zone := map[bool]string{true: m.zone, false: g.zone}[regional(g.zone)]; zone != "" {
		out["instance"] = s.zoneURL(zone) + "/instances/" + m.name
	}
	var errs []map[string]string
	if m.lastError != "" {
		code, msg, _ := strings.Cut(m.lastError, ": ")
		errs = append(errs, map[string]string{"code": code, "message": msg})
	}
	if st := m.state; st != nil {
		out["currentAction"], status, errs = st.Action, st.Status, nil
		for _, e := range st.Errors {
			errs = append(errs, map[string]string{"code": e[0], "message": e[1]})
		}
	}
	if status != "" {
		out["instanceStatus"] = status
	}
	if len(errs) > 0 {
		out["lastAttempt"] = map[string]any{"errors": map[string]any{"errors": errs}}
	}
	return out
}

// SetMemberState makes listManagedInstances say st of a group's member
// from now on.
func (s *Server) SetMemberState(zone, group, name string, st MemberState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.igms[zone+"/"+group].members[name]; m != nil {
		m.state = &st
	}
}

func (s *Server) listManaged(w http.ResponseWriter, r *http.Request) {
	g, ok := s.group(w, r)
	if !ok {
		return
	}
	s.settle()
	s.mu.Lock()
	names := make([]string, 0, len(g.members))
	for n := range g.members {
		names = append(names, n)
	}
	sort.Strings(names)
	// The discovery document: maxResults and pageToken are ignored unless
	// the group's listManagedInstancesResults is PAGINATED; maxResults is
	// 0 to 500, 500 by default.
	from, per := 0, len(names)
	if g.paginated {
		from, _ = strconv.Atoi(r.URL.Query().Get("pageToken"))
		per = 500
		if v := r.URL.Query().Get("maxResults"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 500 {
				s.mu.Unlock()
				apiError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'maxResults': '"+v+"'. Must be less than or equal to 500")
				return
			}
			if n > 0 {
				per = n
			}
		}
	}
	from = min(from, len(names))
	to := min(from+per, len(names))
	out := make([]any, 0, to-from)
	for _, n := range names[from:to] {
		out = append(out, s.managedJSON(g, g.members[n]))
	}
	s.mu.Unlock()
	body := map[string]any{"managedInstances": out}
	if to < len(names) {
		body["nextPageToken"] = strconv.Itoa(to)
	}
	writeJSON(w, http.StatusOK, body)
}

// mutation starts a request that changes a group's members: a repeated
// requestId is answered with its operation (repeated), the group must
// exist, and the body decodes into body. ok is false once answered.
func (s *Server) mutation(w http.ResponseWriter, r *http.Request, body any) (*igm, bool) {
	if s.repeated(w, r) {
		return nil, false
	}
	g, ok := s.group(w, r)
	if !ok {
		return nil, false
	}
	if err := json.NewDecoder(r.Body).Decode(body); err != nil {
		apiError(w, http.StatusBadRequest, "invalid", "Invalid JSON payload")
		return nil, false
	}
	return g, true
}

// repeated answers a mutation whose requestId started an operation
// before with that operation, and reports true: the discovery document's
// requestId, "the server will know to ignore the request if it has
// already been completed". An id that is not a UUID, or the zero UUID, is
// refused, as the document requires.
func (s *Server) repeated(w http.ResponseWriter, r *http.Request) bool {
	id := r.URL.Query().Get("requestId")
	if id == "" {
		return false
	}
	if u, err := uuid.Parse(id); err != nil || u == uuid.Nil {
		apiError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'requestId': '"+id+"'. The request ID must be a valid UUID, not the zero UUID.")
		return true
	}
	s.mu.Lock()
	op := s.ops[s.requests[id]]
	var body map[string]any
	if op != nil {
		body = s.operationJSON(op)
	}
	s.mu.Unlock()
	if op == nil {
		return false
	}
	writeJSON(w, http.StatusOK, body)
	return true
}

// startOperation queues an operation on a group, or answers 400
// resourceNotReady while another runs on it. The request's requestId, if
// any, names it for repeats (see repeated).
func (s *Server) startOperation(w http.ResponseWriter, r *http.Request, g *igm, kind string, apply func() (string, string)) {
	s.mu.Lock()
	if g.busy != "" {
		if op := s.ops[g.busy]; op != nil && !op.applied {
			s.mu.Unlock()
			// shared/reference/cloud-apis.md §5: resourceNotReady is a 400.
			apiError(w, http.StatusBadRequest, "resourceNotReady", "The resource 'projects/"+s.opts.Project+"/"+scope(g.zone)+"/instanceGroupManagers/"+g.name+"' is not ready")
			return
		}
	}
	s.nextID++
	op := &operation{id: strconv.Itoa(7000000000000000000 + s.nextID), name: fmt.Sprintf("operation-%d-%s", s.nextID, kind), zone: g.zone,
		kind: "compute.instanceGroupManagers." + kind, target: "https://www.googleapis.com/compute/v1/projects/" + s.opts.Project + "/" + scope(g.zone) + "/instanceGroupManagers/" + g.name, start: time.Now(), apply: apply}
	s.ops[op.name] = op
	if id := r.URL.Query().Get("requestId"); id != "" {
		s.requests[id] = op.name
	}
	g.busy = op.name
	body := s.operationJSON(op)
	s.mu.Unlock()
	// The operation runs whether or not anyone polls it.
	time.AfterFunc(2*s.opts.OperationDelay, func() { s.finish(op) })
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) finish(op *operation) {
	s.mu.Lock()
	if op.applied {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	code, msg := op.apply()
	s.mu.Lock()
	op.applied, op.errCode, op.errMsg = true, code, msg
	if code != "" {
		op.status = statusOf(code)
	}
	s.mu.Unlock()
}

func (s *Server) operationJSON(op *operation) map[string]any {
	status := "PENDING"
	switch age := time.Since(op.start); {
	case op.applied:
		status = "DONE"
	case age >= s.opts.OperationDelay:
		status = "RUNNING"
	}
	out := map[string]any{"kind": "compute#operation", "id": op.id, "name": op.name,
		"operationType": op.kind, "targetLink": op.target, "status": status, "progress": map[bool]int{true: 100, false: 0}[op.applied]}
	if regional(op.zone) {
		out["region"] = "https://www.googleapis.com/compute/v1/projects/" + s.opts.Project + "/regions/" + op.zone
	} else {
		out["zone"] = s.zoneURL(op.zone)
	}
	if op.applied && op.errCode != "" {
		// The discovery document's Operation: a failed one carries the
		// HTTP status it failed with and its message ("NOT FOUND").
		out["error"] = map[string]any{"errors": []map[string]string{{"code": op.errCode, "message": op.errMsg}}}
		out["httpErrorStatusCode"] = op.status
		out["httpErrorMessage"] = strings.ToUpper(http.StatusText(op.status))
	}
	return out
}

// statusOf is the HTTP status an operation that failed with code carries.
func statusOf(code string) int {
	switch {
	case strings.HasSuffix(code, "NOT_FOUND"):
		return http.StatusNotFound
	case strings.HasSuffix(code, "ALREADY_EXISTS"):
		return http.StatusConflict
	case code == "QUOTA_EXCEEDED":
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	op, ok := s.ops[r.PathValue("op")]
	var body map[string]any
	if ok {
		body = s.operationJSON(op)
	}
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "notFound", "The resource 'operations/"+r.PathValue("op")+"' was not found")
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) createInstances(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Instances []struct {
			Name           string `json:"name"`
			PreservedState struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"preservedState"`
		} `json:"instances"`
	}
	g, ok := s.mutation(w, r, &b)
	if !ok {
		return
	}
	if len(b.Instances) == 0 {
		apiError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.instances': ''. At least one instance is required.")
		return
	}
	s.mu.Lock()
	for _, in := range b.Instances {
		if _, taken := g.members[in.Name]; taken {
			s.mu.Unlock()
			apiError(w, http.StatusConflict, "alreadyExists", "The resource '"+in.Name+"' already exists")
			return
		}
	}
	s.mu.Unlock()
	s.startOperation(w, r, g, "createInstances", func() (string, string) {
		var made []*member
		s.mu.Lock()
		for _, in := range b.Instances {
			s.nextID++
			// making: this operation makes it; settle must not make it
			// a second time meanwhile (one VM per member, as a MIG).
			m := &member{name: in.Name, id: strconv.Itoa(8100000000000000000 + s.nextID), action: "CREATING", since: time.Now(),
				metadata: in.PreservedState.Metadata, making: true}
			g.members[in.Name] = m
			g.targetSize++
			made = append(made, m)
		}
		s.mu.Unlock()
		for _, m := range made {
			s.make(g, m)
		}
		return "", ""
	})
}

func (s *Server) deleteInstances(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Instances []string `json:"instances"`
		Skip      bool     `json:"skipInstancesOnValidationError"`
	}
	g, ok := s.mutation(w, r, &b)
	if !ok {
		return
	}
	s.startOperation(w, r, g, "deleteInstances", func() (string, string) {
		// The discovery document's skipInstancesOnValidationError: a
		// malformed reference, or one outside the group's zone or
		// region, always fails the operation; an instance that is not a
		// member, or is being deleted already, fails it unless skipped.
		names, code, msg := s.memberRefs(g, b.Instances)
		if code != "" {
			return code, msg
		}
		if !b.Skip {
			if invalid := s.notDeletable(g, names); len(invalid) > 0 {
				return "RESOURCE_NOT_FOUND", "The instances " + strings.Join(invalid, ", ") + " are not members of the group or are being deleted"
			}
		}
		s.removeMembers(g, names)
		return "", ""
	})
}

// memberRef is the instance name a deleteInstances reference names, if it
// is well formed ("zones/<zone>/instances/<name>", possibly behind
// "projects/<project>/" or the full URL) and in the group's zone, or one
// of its region's.
func (s *Server) memberRef(g *igm, ref string) (string, bool) {
	_, rest, ok := strings.Cut(ref, "zones/")
	if !ok {
		return "", false
	}
	zone, name, ok := strings.Cut(rest, "/instances/")
	if !ok || zone == "" || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	if regional(g.zone) {
		return name, strings.HasPrefix(zone, g.zone+"-")
	}
	return name, zone == g.zone
}

// memberRefs are the instance names of references (memberRef), or the
// error code and message that fail the operation at the first malformed
// one, or one outside the group's zone or region.
func (s *Server) memberRefs(g *igm, refs []string) (names []string, code, msg string) {
	for _, ref := range refs {
		name, ok := s.memberRef(g, ref)
		if !ok {
			return nil, "INVALID_FIELD_VALUE", "Invalid value for field 'instances': '" + ref + "'. The URL is malformed or outside the group's " + scope(g.zone)
		}
		names = append(names, name)
	}
	return names, "", ""
}

// notDeletable returns the names that are not members of g or whose
// member is being deleted already.
func (s *Server) notDeletable(g *igm, names []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range names {
		if m, ok := g.members[n]; !ok || m.action == "DELETING" {
			out = append(out, n)
		}
	}
	return out
}

// removeMembers takes members out of a group as deleteInstances does: the
// target size drops by one each and their instances are deleted. It
// returns the names that are not members.
func (s *Server) removeMembers(g *igm, names []string) (missing []string) {
	var gone []cloud.Instance
	// The engine is read under the lock: a member made between a read
	// before it and the lock would leave the group with its instance
	// still running, in no group's list.
	s.mu.Lock()
	live := s.live()
	for _, name := range names {
		m, ok := g.members[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		if m.action != "DELETING" {
			if m.stopped {
				g.targetStoppedSize--
			} else {
				g.targetSize--
			}
			m.action, m.stopped = "DELETING", false
		}
		if in, ok := live[engineName(g, name)]; ok {
			gone = append(gone, in)
		} else {
			delete(g.members, name)
		}
	}
	s.mu.Unlock()
	for _, in := range gone {
		_ = s.acct.Delete(context.Background(), in)
	}
	return missing
}

// Lose deletes a running member out of its group behind the client's back,
// as someone's deleteInstances from the console would; false when no group
// has a running member of that name.
func (s *Server) Lose(name string) bool {
	s.mu.Lock()
	var from *igm
	for _, g := range s.igms {
		if m, ok := g.members[name]; ok && m.action == "NONE" {
			from = g
		}
	}
	s.mu.Unlock()
	return from != nil && len(s.removeMembers(from, []string{name})) == 0
}

func (s *Server) resize(w http.ResponseWriter, r *http.Request) {
	if s.repeated(w, r) {
		return
	}
	g, ok := s.group(w, r)
	if !ok {
		return
	}
	size, err := strconv.Atoi(r.URL.Query().Get("size"))
	if err != nil || size < 0 {
		apiError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'size'")
		return
	}
	s.startOperation(w, r, g, "resize", func() (string, string) {
		s.mu.Lock()
		var made []*member
		for g.targetSize < size {
			s.nextID++
			name := fmt.Sprintf("%s-%04x", g.base, s.nextID)
			m := &member{name: name, id: strconv.Itoa(8100000000000000000 + s.nextID), action: "CREATING", since: time.Now(), making: true}
			g.members[name] = m
			g.targetSize++
			made = append(made, m)
		}
		// Shrinking deletes the newest members first.
		var live []*member
		for _, m := range g.members {
			if m.action != "DELETING" {
				live = append(live, m)
			}
		}
		sort.Slice(live, func(i, j int) bool { return live[i].since.After(live[j].since) })
		var drop []string
		for i := 0; i < len(live)-size; i++ {
			live[i].action = "DELETING"
			drop = append(drop, live[i].name)
		}
		g.targetSize = size
		s.mu.Unlock()
		for _, m := range made {
			s.make(g, m)
		}
		for _, in := range s.engine.Instances(account) {
			for _, name := range drop {
				if in.Name == engineName(g, name) {
					_ = s.acct.Delete(context.Background(), in)
				}
			}
		}
		return "", ""
	})
}

// engineName is a member's instance in the engine: instance names are
// unique per zone, not per project.
func engineName(g *igm, name string) string {
	if m, ok := g.members[name]; ok && m.zone != "" {
		return name + "." + m.zone
	}
	return name + "." + g.zone
}

// listInstances answers a zone's instances with their internal address
// (instances.list; one page).
func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	zone := r.PathValue("zone")
	var items []any
	for _, in := range s.engine.Instances(account) {
		if in.Location != zone || in.State != cloud.StateRunning {
			continue
		}
		name := strings.TrimSuffix(in.Name, "."+zone)
		items = append(items, map[string]any{"kind": "compute#instance", "name": name, "zone": s.zoneURL(zone), "status": "RUNNING",
			"networkInterfaces": []map[string]any{{"name": "nic0", "networkIP": in.IP}}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "compute#instanceList", "items": items})
}

// stopInstances stops running members and keeps them stopped: each moves
// from targetSize to targetStoppedSize. The discovery document: "You can
// only specify instances that are running in this request"; what GCP
// answers otherwise is not recorded, and the fake fails the operation.
func (s *Server) stopInstances(w http.ResponseWriter, r *http.Request) {
	s.power(w, r, "stopInstances", func(g *igm, m *member) {
		m.stopped, m.action = true, "STOPPING"
		g.targetSize--
		g.targetStoppedSize++
	})
}

// startInstances starts stopped members: each moves from
// targetStoppedSize to targetSize ("you can only specify instances that
// are stopped"). The engine starts them at the next settle.
func (s *Server) startInstances(w http.ResponseWriter, r *http.Request) {
	s.power(w, r, "startInstances", func(g *igm, m *member) {
		m.stopped, m.action, m.lastError = false, "STARTING", ""
		g.targetStoppedSize--
		g.targetSize++
	})
}

// power runs a stopInstances or startInstances: every instance named must
// be a member that move accepts, or the operation fails and none moves.
// Stopped instances stop in the engine at once.
func (s *Server) power(w http.ResponseWriter, r *http.Request, kind string, move func(*igm, *member)) {
	var b struct {
		Instances []string `json:"instances"`
	}
	g, ok := s.mutation(w, r, &b)
	if !ok {
		return
	}
	if len(b.Instances) == 0 {
		apiError(w, http.StatusBadRequest, "invalid", "Invalid value for field 'resource.instances': ''. At least one instance is required.")
		return
	}
	s.startOperation(w, r, g, kind, func() (string, string) {
		names, code, msg := s.memberRefs(g, b.Instances)
		if code != "" {
			return code, msg
		}
		s.mu.Lock()
		for _, n := range names {
			if m, ok := g.members[n]; !ok {
				s.mu.Unlock()
				return "RESOURCE_NOT_FOUND", "The instance " + n + " is not a member of the group"
			} else if m.stopped == (kind == "stopInstances") || m.action != "NONE" {
				s.mu.Unlock()
				return "INVALID_FIELD_VALUE", "The instance " + n + " is not " + map[bool]string{true: "running", false: "stopped"}[kind == "stopInstances"]
			}
		}
		var stop []string
		for _, n := range names {
			move(g, g.members[n])
			if kind == "stopInstances" && s.opts.StopDelay > 0 {
				g.members[n].stopAt = time.Now().Add(s.opts.StopDelay) // a later settle stops it
			} else if kind == "stopInstances" {
				stop = append(stop, engineName(g, n))
			}
		}
		s.mu.Unlock()
		for _, in := range s.engine.Instances(account) {
			if slices.Contains(stop, in.Name) {
				_ = s.acct.Stop(context.Background(), in)
			}
		}
		return "", ""
	})
}
