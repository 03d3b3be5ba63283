// Package kamateratest is an in-process fake of Kamatera's cloudcli API,
// built on the simulated cloud's engine so that capacity and boot times
// have one source of truth. It follows the shapes the Kamatera
// cluster-autoscaler, the Terraform provider and cloudcli-server use
// (shared/reference/cloud-apis.md §2): AuthClientId/AuthSecret headers,
// {"message"} errors, "No servers found", /server/tags outside /service,
// every mutation answering command ids that the queue (GET /service/queue)
// takes from pending to complete or error with a log, "Name: <server>" in
// a create's log, space-joined lists and "yes"/"no" flags in the create
// body (and the Terraform spellings billingcycle and a numeric ram).
package kamateratest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/fakenet"
	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// account is the engine account every fake server lives in.
const account = "kamatera-account"

// createInfo is a create command's commandInfo in the queue list.
const createInfo = "Create Server"

// tagPattern is what a tag name may be.
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9\-_\s\.]{3,24}$`)

// Datacenters are the fake's datacenters (the engine's locations).
var Datacenters = []string{"EU", "EU-FR", "US-NY2", "IL"}

// CPUType is one CPU type the fake sells in every datacenter, in the
// shape of the capabilities answer.
type CPUType struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CPUCores    []int  `json:"cpuCores"`
	RAMMB       []int  `json:"ramMB"`
}

// CPUTypes are the server configurations the fake sells; the engine knows
// each as the instance type "<cores><type>-<ramMB>", e.g. "4B-8192".
var CPUTypes = []CPUType{
	{ID: "B", Name: "Type B - General Purpose", Description: "dedicated thread, reserved resources",
		CPUCores: []int{1, 2, 4, 8, 16, 32, 48}, RAMMB: []int{1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}},
	{ID: "D", Name: "Type D - Dedicated", Description: "dedicated core",
		CPUCores: []int{2, 4, 8, 16}, RAMMB: []int{2048, 4096, 8192, 16384, 32768, 65536, 131072}},
	{ID: "T", Name: "Type T - Burstable", Description: "burstable thread",
		CPUCores: []int{1, 2, 4, 8}, RAMMB: []int{1024, 2048, 4096, 8192, 16384}},
	{ID: "A", Name: "Type A - Availability", Description: "shared thread, no guarantee",
		CPUCores: []int{1, 2, 4, 8, 16, 32}, RAMMB: []int{1024, 2048, 4096, 8192, 16384, 32768, 65536}},
}

// DiskSizesGB are the disk sizes the fake sells.
var DiskSizesGB = []int{10, 20, 50, 100, 200, 500, 1000}

// TypeName is the engine instance type of a configuration.
func TypeName(cpu string, ram int) string { return cpu + "-" + strconv.Itoa(ram) }

// Catalog returns the configurations as an engine catalog: an hourly price
// of 0.005 per core and 0.003 per GiB.
func Catalog() []cloud.InstanceType {
	var out []cloud.InstanceType
	for _, t := range CPUTypes {
		for _, cores := range t.CPUCores {
			for _, ram := range t.RAMMB {
				price := 0.005*float64(cores) + 0.003*float64(ram/1024)
				out = append(out, cloud.InstanceType{
					Name: TypeName(strconv.Itoa(cores)+t.ID, ram), VCPUs: cores, MemoryGiB: ram / 1024, Arch: "amd64", OnDemandPrice: price,
				})
			}
		}
	}
	return out
}

// NewEngine returns a simulated engine that sells the fake's
// configurations in its datacenters.
func NewEngine(cfg sim.Config, opts sim.Options) (*sim.Engine, error) {
	opts.Catalog = Catalog()
	if len(cfg.Locations) == 0 {
		cfg.Locations = Datacenters
	}
	return sim.NewEngine(cfg, opts)
}

// Options configure a Server.
type Options struct {
	ClientID, Secret string
	// CommandDelay is how long a queued command stays pending; default
	// 50 ms.
	CommandDelay time.Duration
	// InMemory serves the API on in-memory connections that only the
	// Server's Client dials, for tests on a virtual clock (see fakenet).
	InMemory bool
}

// Server is the fake API. Its URL is Server.URL.
type Server struct {
	*httptest.Server
	engine *sim.Engine
	acct   *sim.Cloud
	opts   Options

	mu       sync.Mutex
	servers  map[string]*server // by name
	commands map[string]*command
	nextCmd  int
	calls    map[string]int
	faults   faults.Set
	// failTerminate, when set, is the status and log the next
	// termination's command ends with.
	failTerminate [2]string
	// brokenCreates fail the next create commands, in order.
	brokenCreates []brokenCreate
	// brokenTags are servers whose tag lookups always fail.
	brokenTags map[string]bool
	latency    time.Duration
}

type server struct {
	id, name, datacenter, cpu string
	ram                       int
	tags                      []string
	power                     string
	script                    string
	billing                   string
	createdAt                 time.Time
}

type command struct {
	id, info, server string
	added            time.Time
	// finish runs once when the command leaves pending; it returns the
	// final status and log.
	finish func() (status, log string)
	// finishing is set while finish runs (one poll runs it; the others
	// still see pending).
	finishing bool
	status    string
	log       string
}

// New starts a fake API over an engine built by NewEngine.
func New(engine *sim.Engine, opts Options) *Server {
	if opts.CommandDelay == 0 {
		opts.CommandDelay = 50 * time.Millisecond
	}
	s := &Server{engine: engine, acct: engine.Account(account), opts: opts,
		servers: map[string]*server{}, commands: map[string]*command{}, calls: map[string]int{}}
	s.Server = fakenet.Serve(http.HandlerFunc(s.serve), opts.InMemory)
	return s
}

// Engine returns the simulated engine behind the API.
func (s *Server) Engine() *sim.Engine { return s.engine }

// FailNext makes the next request with method and path answer status with
// {"message": message}.
func (s *Server) FailNext(method, path string, status int, msg string) {
	s.faults.Fail(method, path, func(w http.ResponseWriter) { message(w, status, msg) })
}

// AnswerNext makes the next request with method whose path ends with path
// be answered with status and body as they are, as a changed API or a
// broken proxy would answer.
func (s *Server) AnswerNext(method, path string, status int, body []byte) {
	s.faults.Fail(method, path, faults.Answer(status, body))
}

// LoseNextAnswer makes the API carry out the next request with method
// and path, then drop the connection without answering.
func (s *Server) LoseNextAnswer(method, path string) { s.faults.Lose(method, path) }

// RandomFaults makes rate (0..1) of all requests fail at random, from
// seed: refused with a 429 or a 5xx in the API's shape, carried out with
// the answer lost, or dropped before being carried out (see faults.Set).
// A rate of 0 stops them.
func (s *Server) RandomFaults(rate float64, seed uint64) {
	s.faults.Random(rate, seed,
		func(w http.ResponseWriter) { message(w, http.StatusTooManyRequests, "Too many requests") },
		func(w http.ResponseWriter) { message(w, http.StatusInternalServerError, "Internal server error") },
		func(w http.ResponseWriter) { message(w, http.StatusBadGateway, "Bad gateway") })
}

// Injected returns how many random faults of each kind were injected.
func (s *Server) Injected() map[faults.Kind]int { return s.faults.Injected() }

// Instances returns the servers of the account as the engine holds them
// (those being deleted included: they bill until gone).
func (s *Server) Instances() []cloud.Instance { return s.engine.Instances(account) }

// BreakTags makes every tag lookup of a server fail, as the API's
// "Failed to run command method (serverTags)" does.
func (s *Server) BreakTags(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.brokenTags == nil {
		s.brokenTags = map[string]bool{}
	}
	s.brokenTags[name] = true
}

// brokenCreate is how the next create command fails.
type brokenCreate struct {
	log string
	// leaveServer: the server is made but the command still errors.
	leaveServer bool
}

// FailNextCreate makes the next create's queue command end in error with
// log; with leaveServer the server is made all the same (a half-failed
// create that leaves a billed server behind).
func (s *Server) FailNextCreate(log string, leaveServer bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.brokenCreates = append(s.brokenCreates, brokenCreate{log: log, leaveServer: leaveServer})
}

// breakCreate ends a create command in error, leaving the server or not.
func (s *Server) breakCreate(name, datacenter, cpu string, ram int, sv *server, b brokenCreate) (string, string) {
	if b.leaveServer {
		in, err := s.acct.Create(context.Background(), cloud.CreateSpec{Name: name, Group: groupTag(sv.tags), InstanceType: TypeName(cpu, ram), Location: datacenter, CapacityType: cloud.OnDemand})
		s.mu.Lock()
		defer s.mu.Unlock()
		if err == nil {
			sv.id, sv.createdAt = in.ID, in.CreatedAt
		}
		return "error", b.log
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.servers, name)
	return "error", b.log
}

// SetCommandDelay changes how long the commands queued from now on stay
// pending.
func (s *Server) SetCommandDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.CommandDelay = d
}

// SetLatency adds a delay to every request.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// Calls returns the number of requests per "METHOD /path".
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// Tags returns a server's tags, as the old autoscaler or gpuscaler set
// them.
func (s *Server) Tags(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv, ok := s.servers[name]; ok {
		return append([]string(nil), sv.tags...)
	}
	return nil
}

// Script returns the startup script a server was created with.
func (s *Server) Script(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv, ok := s.servers[name]; ok {
		return sv.script
	}
	return ""
}

// Servers returns the names of the account's servers.
func (s *Server) Servers() []string {
	s.live()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.servers {
		out = append(out, n)
	}
	return out
}

// AddServer puts a server in the account directly, as another tool (or
// the old Kamatera autoscaler) made it.
func (s *Server) AddServer(name, datacenter, cpu string, ram int, tags []string) error {
	in, err := s.acct.Create(context.Background(), cloud.CreateSpec{Name: name, Group: groupTag(tags), InstanceType: TypeName(cpu, ram), Location: datacenter, CapacityType: cloud.OnDemand})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.servers[name] = &server{id: in.ID, name: name, datacenter: datacenter, cpu: cpu, ram: ram, tags: tags, power: "on", createdAt: in.CreatedAt}
	return nil
}

// groupTag is the node group a server's k8scang- tag names, so that the
// engine's view groups servers as the autoscalers do.
func groupTag(tags []string) string {
	for _, t := range tags {
		if g, ok := strings.CutPrefix(t, "k8scang-"); ok {
			return g
		}
	}
	return ""
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls[r.Method+" "+r.URL.Path]++
	latency := s.latency
	s.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	if r.Header.Get("AuthClientId") != s.opts.ClientID || r.Header.Get("AuthSecret") != s.opts.Secret {
		// cloudcli-server only forwards the credentials: the upstream API
		// refuses them, and a GET relays its answer with 200
		// (app/Cloudcli/ProxyServerGet.php returns $res['response']),
		// the body libcloud records for Kamatera in
		// test/compute/fixtures/kamatera/failed_auth.json; a POST fails as
		// any upstream error does (BaseServerRequest::handleRequest).
		if r.Method == http.MethodGet {
			writeJSON(w, http.StatusOK, map[string]any{"errors": []map[string]any{{"code": 1, "info": "you are not logged in"}}})
			return
		}
		message(w, http.StatusInternalServerError, "Failed to run command method (post)")
		return
	}
	s.faults.Serve(w, r, http.HandlerFunc(s.route))
}

// route serves one request.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/service/server":
		s.options(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/service/servers":
		s.list(w)
	case r.Method == http.MethodPost && r.URL.Path == "/server/tags":
		s.tags(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/service/server/info":
		s.info(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/service/server":
		s.create(w, r)
	case r.Method == http.MethodPost && (r.URL.Path == "/service/server/poweroff" || r.URL.Path == "/service/server/poweron"):
		s.power(w, r, strings.TrimPrefix(r.URL.Path, "/service/server/power"))
	case r.Method == http.MethodPost && r.URL.Path == "/service/server/terminate":
		s.terminate(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/service/queue":
		s.queue(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/svc/queue":
		s.queueList(w)
	default:
		message(w, http.StatusNotFound, "Unknown endpoint "+r.URL.Path)
	}
}

// datacenterNames are the fake's datacenters' countries and cities.
var datacenterNames = map[string][2]string{
	"EU": {"The Netherlands", "Amsterdam"}, "EU-FR": {"Germany", "Frankfurt"},
	"US-NY2": {"United States", "New York"}, "IL": {"Israel", "Rosh Haayin"},
}

// options answers GET /service/server?datacenter=1 (the datacenters) and
// ?capabilities=1&datacenter=<id> (what one sells).
func (s *Server) options(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	locations := s.engine.Locations()
	switch {
	case q.Get("capabilities") != "":
		dc := q.Get("datacenter")
		if !slices.Contains(locations, dc) {
			message(w, http.StatusInternalServerError, "Invalid datacenter: "+dc)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"diskSizeGB": DiskSizesGB, "cpuTypes": CPUTypes, "defaultMonthlyTrafficPackage": "t5000",
			"monthlyTrafficPackage": map[string]string{"t5000": "5000GB/month on 10Gbit/sec port", "b20": "20Mbit/sec unmetered on 10Gbit/sec port"},
		})
	case q.Get("datacenter") == "1":
		out := []map[string]string{}
		for _, dc := range locations {
			n := datacenterNames[dc]
			out = append(out, map[string]string{"id": dc, "name": n[0], "category": "", "subCategory": n[1]})
		}
		writeJSON(w, http.StatusOK, out)
	default:
		message(w, http.StatusBadRequest, "Invalid request")
	}
}

func message(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// live forgets the servers the engine no longer has (terminated) and
// returns the engine's view by name.
func (s *Server) live() map[string]cloud.Instance {
	insts := s.engine.Instances(account)
	by := make(map[string]cloud.Instance, len(insts))
	for _, in := range insts {
		if in.State != cloud.StateDeleting {
			by[in.Name] = in
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.servers {
		if _, ok := by[name]; !ok && !s.creating(name) {
			delete(s.servers, name)
		}
	}
	return by
}

// creating reports whether a create command for name is still pending;
// s.mu is held.
func (s *Server) creating(name string) bool {
	for _, c := range s.commands {
		if c.server == name && c.info == createInfo && c.status == "pending" {
			return true
		}
	}
	return false
}

func (s *Server) list(w http.ResponseWriter) {
	live := s.live()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]string{}
	for name, sv := range s.servers {
		if _, ok := live[name]; !ok {
			continue // still being created
		}
		out = append(out, map[string]string{"id": sv.id, "name": name, "datacenter": sv.datacenter, "power": sv.power})
	}
	writeJSON(w, http.StatusOK, out)
}

func nameOf(r *http.Request) string {
	var b struct {
		Name string `json:"name"`
	}
	_ = json.NewDecoder(r.Body).Decode(&b)
	return b.Name
}

// named returns the server a request's {"name"} names, if the engine has
// it (not being created nor terminated).
func (s *Server) named(r *http.Request) (*server, cloud.Instance, bool) {
	sv, in, _, ok := s.namedAs(r)
	return sv, in, ok
}

// namedAs is named with the name asked for.
func (s *Server) namedAs(r *http.Request) (*server, cloud.Instance, string, bool) {
	name := nameOf(r)
	live := s.live()
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.servers[name]
	in, running := live[name]
	return sv, in, name, ok && running
}

func (s *Server) tags(w http.ResponseWriter, r *http.Request) {
	sv, _, name, ok := s.namedAs(r)
	if !ok {
		// ProxyServerHttpPostMethods: the server ids come from a serversInfo
		// by name first.
		message(w, http.StatusInternalServerError, "No servers found (name='"+name+"')")
		return
	}
	s.mu.Lock()
	broken := s.brokenTags[sv.name]
	s.mu.Unlock()
	if broken {
		// cluster-autoscaler's TestApiClientRest_ListServersTagsError.
		message(w, http.StatusInternalServerError, "Failed to run command method (serverTags)")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]string{}
	for _, t := range sv.tags {
		out = append(out, map[string]string{"tagName": t})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	sv, in, ok := s.named(r)
	if !ok {
		message(w, http.StatusInternalServerError, "No servers found")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	price := 0.0
	for _, t := range s.engine.Catalog() {
		if t.Name == in.InstanceType {
			price = t.OnDemandPrice
		}
	}
	writeJSON(w, http.StatusOK, []map[string]any{{
		"id": sv.id, "name": sv.name, "datacenter": sv.datacenter, "power": sv.power, "cpu": sv.cpu, "ram": sv.ram,
		"diskSizes": []int{100}, "networks": []map[string]any{{"network": "wan-" + sv.datacenter, "ips": []string{in.IP}}},
		// cloudcli-server (app/Cloudcli/ProxyServerHttpPostMethods.php)
		// writes the prices as strings, "" when it cannot price the server.
		"billing": sv.billingOrHourly(), "traffic": "t5000", "backup": "0", "managed": "0",
		"priceHourlyOn": strconv.FormatFloat(price, 'f', -1, 64), "priceMonthlyOn": strconv.FormatFloat(price*730, 'f', 2, 64),
	}})
}

// billingOrHourly is the server's billing cycle as ordered; hourly when
// the order named none (the server's default).
func (sv *server) billingOrHourly() string {
	if sv.billing == "" {
		return "hourly"
	}
	return sv.billing
}

// createBody is the create's body. The billing cycle is read by its one
// name, billingcycle, as cloudcli-server reads each field of
// cli_schema/commands/server/create.json by its exact name
// (app/Cloudcli/ProxyServerPost.php); a "billingCycle" is ignored there,
// and the server is billed hourly, its default.
type createBody struct {
	Name         string          `json:"name"`
	Datacenter   string          `json:"datacenter"`
	Image        string          `json:"image"`
	CPU          string          `json:"cpu"`
	RAM          json.RawMessage `json:"ram"`
	Disk         string          `json:"disk"`
	Network      string          `json:"network"`
	Billingcycle string          `json:"billingcycle"`
	Script       string          `json:"script-file"`
	Tag          string          `json:"tag"`
	Quantity     json.RawMessage `json:"quantity"`
	Password     string          `json:"password"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var b createBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		message(w, http.StatusBadRequest, "Invalid request body")
		return
	}
	ram, err := strconv.Atoi(strings.Trim(string(b.RAM), `"`))
	switch {
	case err != nil:
		message(w, http.StatusBadRequest, "Invalid ram value")
		return
	case b.Name == "" || b.Datacenter == "" || b.Image == "" || b.CPU == "":
		message(w, http.StatusBadRequest, "Missing required parameters: name, datacenter, image, cpu")
		return
	case len(b.Name) > 15+13: // the 15-character prefix and "-" plus 12 characters of a UUID
		message(w, http.StatusBadRequest, "Invalid server name: "+b.Name)
		return
	}
	for _, t := range strings.Fields(b.Tag) {
		if !tagPattern.MatchString(t) {
			message(w, http.StatusBadRequest, "Invalid tag name: "+t)
			return
		}
	}
	s.mu.Lock()
	if _, taken := s.servers[b.Name]; taken {
		s.mu.Unlock()
		message(w, http.StatusBadRequest, "Server name already in use: "+b.Name)
		return
	}
	if c := strings.ToLower(strings.TrimSpace(b.Billingcycle)); c != "" && c != "hourly" && c != "monthly" {
		message(w, http.StatusInternalServerError, "Invalid billingcycle value: "+b.Billingcycle)
		return
	}
	sv := &server{name: b.Name, datacenter: b.Datacenter, cpu: b.CPU, ram: ram, tags: strings.Fields(b.Tag), power: "on", script: b.Script,
		billing: strings.ToLower(strings.TrimSpace(b.Billingcycle))}
	s.servers[b.Name] = sv
	broken := s.brokenCreates
	if len(broken) > 0 {
		s.brokenCreates = broken[1:]
	}
	id := s.newCommandLocked(createInfo, b.Name, func() (string, string) {
		if len(broken) > 0 {
			return s.breakCreate(b.Name, b.Datacenter, b.CPU, ram, sv, broken[0])
		}
		in, err := s.acct.Create(context.Background(), cloud.CreateSpec{Name: b.Name, Group: groupTag(strings.Fields(b.Tag)), InstanceType: TypeName(b.CPU, ram), Location: b.Datacenter, CapacityType: cloud.OnDemand})
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			delete(s.servers, b.Name)
			if cloud.IsClass(err, cloud.ErrCapacity) {
				return "error", "Creating server " + b.Name + "\nError: insufficient resources in datacenter " + b.Datacenter
			}
			return "error", "Creating server " + b.Name + "\nError: invalid server configuration: " + err.Error()
		}
		sv.id, sv.createdAt = in.ID, in.CreatedAt
		return "complete", "Creating server\nName: " + b.Name + "\nServer created successfully"
	})
	s.mu.Unlock()
	if b.Password == "__generate__" {
		// The API answers a generated password beside the command ids.
		writeJSON(w, http.StatusOK, map[string]any{"password": GeneratedPassword, "commandIds": []json.Number{json.Number(id)}})
		return
	}
	writeJSON(w, http.StatusOK, []json.Number{json.Number(id)})
}

// GeneratedPassword is the root password the fake answers for a create
// asking "__generate__"; tests check it never reaches a log.
const GeneratedPassword = "Gen3rated-root-pw"

func (s *Server) power(w http.ResponseWriter, r *http.Request, state string) {
	sv, _, ok := s.named(r)
	if !ok {
		message(w, http.StatusInternalServerError, "No servers found")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.newCommandLocked("Power "+state, sv.name, func() (string, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sv.power = state
		return "complete", "Server powered " + state
	})
	writeJSON(w, http.StatusOK, []json.Number{json.Number(id)})
}

// terminate queues the server's termination and answers the command's id
// in a list, as cloudcli-server's multi-server commands answer
// (returnProxyHttpMultiServerPostResponse); the Terraform provider waits
// on it. A termination FailNextTerminate set up ends in error, the server
// kept.
func (s *Server) terminate(w http.ResponseWriter, r *http.Request) {
	sv, in, name, ok := s.namedAs(r)
	if !ok {
		// cloudcli-server's words for a name that matches no server
		// (ProxyServerHttpPostMethods.php).
		message(w, http.StatusInternalServerError, "No servers found (name='"+name+"')")
		return
	}
	s.mu.Lock()
	end := s.failTerminate
	s.failTerminate = [2]string{}
	id := s.newCommandLocked("Terminate server", sv.name, func() (string, string) {
		if end[0] != "" {
			return end[0], end[1]
		}
		if err := s.acct.Delete(context.Background(), in); err != nil {
			return "error", err.Error()
		}
		s.mu.Lock()
		delete(s.servers, sv.name)
		s.mu.Unlock()
		return "complete", "Server terminated"
	})
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, []json.Number{json.Number(id)})
}

// FailNextTerminate makes the next termination's queued command end in
// error with log; the server stays.
func (s *Server) FailNextTerminate(log string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failTerminate = [2]string{"error", log}
}

// CancelNextTerminate makes the next termination's queued command end
// cancelled (a status of Kamatera's OpenAPI, as
// GeorgeS1995/kamatera-autoscaler's types.go lists it); the server stays.
func (s *Server) CancelNextTerminate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failTerminate = [2]string{"cancelled", ""}
}

// newCommandLocked queues a command that ends after CommandDelay; s.mu is
// held.
// Command ids are JSON numbers, as the real queue answers them
// (cli_schema/commands/queue/list.json marks id a number;
// GeorgeS1995/kamatera-autoscaler's types.go, checked against the live
// API; libcloud's fixtures answer [12345]).
func (s *Server) newCommandLocked(info, server string, finish func() (string, string)) string {
	s.nextCmd++
	id := fmt.Sprintf("%d", 9000000+s.nextCmd)
	c := &command{id: id, info: info, server: server, finish: finish, status: "pending", added: time.Now()}
	s.commands[id] = c
	// The queue runs the command whether or not anyone polls it, as the
	// real one does (a create whose answer was lost still makes a server).
	time.AfterFunc(s.opts.CommandDelay, func() { s.run(c) })
	return id
}

// run ends a pending command once.
func (s *Server) run(c *command) {
	s.mu.Lock()
	if c.status != "pending" || c.finishing {
		s.mu.Unlock()
		return
	}
	c.finishing = true
	s.mu.Unlock()
	status, log := c.finish()
	s.mu.Lock()
	c.status, c.log = status, log
	s.mu.Unlock()
}

// queueList answers GET /svc/queue: the account's commands, unfiltered,
// with the fields of cli_schema/commands/queue/list.json in
// cloudwm/cloudcli-server ("Create Server" is the commandInfo
// Kamatera/cloudcli-server-kubernetes's find_server_command_in_queue
// looks for, with serviceName the server's name).
func (s *Server) queueList(w http.ResponseWriter) {
	s.mu.Lock()
	out := make([]map[string]any, 0, len(s.commands))
	for _, c := range s.commands {
		done := ""
		if c.status != "pending" {
			done = c.added.Add(s.opts.CommandDelay).Format("2006-01-02 15:04:05")
		}
		out = append(out, map[string]any{"id": json.Number(c.id), "commandInfo": c.info, "serviceName": c.server,
			"dtCreate": c.added.Format("2006-01-02 15:04:05"), "dtExecute": "", "dtComplete": done, "exitCode": "", "progress": ""})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) queue(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	s.mu.Lock()
	c, ok := s.commands[id]
	if !ok {
		s.mu.Unlock()
		message(w, http.StatusInternalServerError, "Command not found")
		return
	}
	// The fields of cli_schema/commands/queue/detail.json in
	// cloudwm/cloudcli-server. A running command goes pending, executing,
	// then progress with part of its log, as libcloud's Kamatera fixtures
	// record (test/compute/fixtures/kamatera/queue_12345-1..4.json).
	status, log := c.status, c.log
	if status == "pending" {
		switch age := time.Since(c.added); {
		case age >= s.opts.CommandDelay*2/3:
			status = "progress"
			if c.info == createInfo {
				log = "Name: " + c.server + "\nCreating..."
			}
		case age >= s.opts.CommandDelay/3:
			status = "executing"
		}
	}
	out := []map[string]any{{"id": json.Number(c.id), "status": status, "log": log, "server": c.server, "description": c.info,
		"added": c.added.Format("2006-01-02 15:04:05"), "executed": "", "completed": ""}}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}
