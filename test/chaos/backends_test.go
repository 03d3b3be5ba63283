package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera/kamateratest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
)

// backend is one cloud a campaign runs against: the simulated cloud
// itself, or a cloud's client over its fake REST API (which keeps its
// instances in a simulated engine, the campaign's view of the truth).
type backend struct {
	name string
	cfg  *config.Config
	// provider builds the cloud's provider as a new process would: a new
	// client, nothing cached.
	provider func(log *slog.Logger) cloud.Provider
	// bootstrap renders the instances' startup scripts; nil for none.
	bootstrap nodegroup.Bootstrapper
	// instances are the cloud's instances of the cluster, named as the
	// core names them.
	instances func() []cloud.Instance
	// providerID is the provider ID an instance's kubelet registers
	// with, as its cloud's startup script gives it; nil: the listed one.
	providerID func(cloud.Instance) string
	// faults turns the injected faults on and off; injected describes
	// what was injected.
	faults   func(on bool)
	injected func() string
	// lose takes an instance away behind gpuscaler's back (a spot reclaim,
	// a host lost); false when it cannot.
	lose func(name string) bool
	// leftovers describes what instances left behind at the cloud (startup
	// scripts, volumes) once the campaign settled; "" for nothing.
	leftovers func() string
	// settleAfter is how long after the faults stop the cloud may still
	// hold leftovers (a startup script is kept until its instance booted).
	settleAfter time.Duration
	// prices are the hourly prices by instance type and capacity type;
	// stoppedPrice a standby pool's stopped instance's.
	prices       map[string]float64
	stoppedPrice float64
	// engine holds the cloud's instances and capacity (behind its fake
	// API, if any): the campaign sells offerings out through it.
	engine *sim.Engine
	// parked tells an instance being deleted from the stopped state
	// (billed as its disk); engine.Parked unless the fake renames.
	parked func(name string) bool
	// latency sets what every API call takes (reloads read a slow cloud
	// ahead); nil where it cannot change.
	latency func(d time.Duration)
	// lostAfter is how long the backend may list an instance the
	// campaign stopped behind its back as still starting (Scaleway tells
	// a server someone powered off from one being started only after its
	// StartGrace): its NotReady Node is not known for a stopped one's
	// until then.
	lostAfter time.Duration
}

// backends are the campaigns' clouds, by name.
var backends = map[string]func(t *testing.T, seed uint64, inMemory bool) *backend{
	sim.Name:      simBackend,
	verda.Name:    verdaBackend,
	kamatera.Name: kamateraBackend,
	scaleway.Name: scalewayBackend,
	gcp.Name:      gcpBackend,
}

// campaignSync keeps every period short so that a campaign takes seconds:
// syncs every 100 ms, leaks collected after 1 s.
const campaignSync = `
clusterName: chaos
sync: {period: 100ms, requestsPerSecond: 100000, maxConcurrentCreates: 4, offeringBackoff: 300ms, createRetries: 3}
leakedInstances: {gracePeriod: 1s}
`

// simGroups are the simulated cloud's groups: one with a standby pool, one
// with minSize 1 and spot first, one of 8-GPU machines.
const simGroups = `
clouds:
  sim: {bootDelay: 40ms, deleteDelay: 30ms, startDelay: 10ms, startFailureRate: 0.2, defaultCapacity: 6} # offeringCapacity
nodeGroups:
  - {name: a, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], maxSize: 6, standby: {size: 1, warmFor: 1ms}}
  - {name: b, cloud: sim, instanceType: 1A100.22V, locations: [FIN-01], capacityPolicy: prefer-spot, minSize: 1, maxSize: 4, standby: {size: 1, warmFor: 1ms, refillAfter: 2s}}
  - {name: c, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 2}
`

// offeringCapacity is how many instances each offering holds at every
// campaign's cloud (defaultCapacity), unless the campaign sold it out.
const offeringCapacity = 6

// campaignConfig is the simulated cloud's campaign config, also the
// outage drill's.
const campaignConfig = campaignSync + simGroups

// faults are the campaign's cloud failures while it acts.
const (
	// faultRate is the share of API calls that fail.
	faultRate = 0.2
	// unknownRate is the share of the simulated cloud's creates that take
	// effect but whose answer is lost (the fakes lose a third of their
	// faults' answers after carrying the request out).
	unknownRate = 0.15
	// listLag keeps the simulated cloud's accepted orders out of its lists
	// for a while, as a real cloud's eventually consistent listing does.
	listLag = 60 * time.Millisecond
	// resolveAfter is how long the core waits for a list to show an order
	// (lost answer or fresh instance): longer than listLag, as the
	// default minute is longer than a real cloud's lag.
	resolveAfter = 300 * time.Millisecond
	// fakeLatency is each fake API call's latency.
	fakeLatency = time.Millisecond
)

// parse parses a campaign config and, for a cloud that gives prices, caps
// its spend (see capSpend). Kamatera gives none: a cap there is refused at
// start (TestCostCapWithoutPricesIsRefused).
func parse(t *testing.T, doc string, catalog []cloud.InstanceType, priced bool) (*config.Config, map[string]float64) {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	prices := map[string]float64{}
	for _, it := range catalog {
		prices[priceKey(it.Name, cloud.OnDemand)] = it.OnDemandPrice
		if it.SpotPrice > 0 {
			prices[priceKey(it.Name, cloud.Spot)] = it.SpotPrice
		}
	}
	if priced {
		capSpend(cfg, prices)
	}
	return cfg, prices
}

// capSpend sets the cluster's maxHourlyCost to 70 % of what every group at
// its maxSize on demand would cost, and the first group's to 60 % of its
// own: the caps bind during a campaign.
func capSpend(cfg *config.Config, prices map[string]float64) {
	total := 0.0
	for i := range cfg.NodeGroups {
		g := &cfg.NodeGroups[i]
		most := float64(g.MaxSize) * prices[priceKey(g.InstanceType, cloud.OnDemand)]
		total += most
		if i == 0 {
			g.MaxHourlyCost = 0.6 * most
		}
	}
	cfg.MaxHourlyCost = 0.7 * total
}

func priceKey(instanceType string, ct cloud.CapacityType) string {
	return instanceType + "/" + string(ct)
}

func simBackend(t *testing.T, seed uint64, _ bool) *backend { // in process: no API to serve
	cfg, err := config.Parse([]byte(campaignConfig))
	if err != nil {
		t.Fatal(err)
	}
	// The engine draws its faults, lost answers and stock-outs from the
	// campaign's seed, as the fakes do theirs.
	simCfg := daemon.SimConfig(*cfg.Clouds.Sim)
	simCfg.Seed = int64(seed)
	engine, err := sim.NewEngine(simCfg, sim.Options{OutcomeUnknownRate: unknownRate, ListLag: listLag})
	if err != nil {
		t.Fatal(err)
	}
	cfg, prices := parse(t, campaignConfig, engine.Catalog(), true)
	b := &backend{name: sim.Name, cfg: cfg, prices: prices, engine: engine, stoppedPrice: engine.StoppedPrice(cloud.OfferingKey{}),
		provider:  func(*slog.Logger) cloud.Provider { return engine.Account(cfg.ClusterName) },
		instances: func() []cloud.Instance { return engine.Instances(cfg.ClusterName) },
		lose:      func(name string) bool { return engine.Reclaim(name) == nil },
		leftovers: func() string { return "" },
		latency:   engine.SetLatency,
	}
	b.faults = func(on bool) {
		if on {
			engine.SetFaultRate(faultRate)
			engine.SetOutcomeUnknownRate(unknownRate)
		} else {
			engine.SetFaultRate(0)
			engine.SetOutcomeUnknownRate(0)
		}
	}
	b.injected = func() string {
		return fmt.Sprintf("503 on %.0f %% of calls, %.0f %% of creates with a lost answer", 100*faultRate, 100*unknownRate)
	}
	return b
}

// script stands in for the bootstrap renderer: every instance gets a
// script holding a join token.
type script struct{}

func (script) UserData(_ context.Context, spec cloud.CreateSpec) (string, error) {
	return "#!/bin/bash\nJOIN_TOKEN=join-token-for-" + spec.Name + "\n", nil
}

// randomFaults is a fake API that fails requests at random.
type randomFaults interface {
	RandomFaults(rate float64, seed uint64)
	Injected() map[faults.Kind]int
}

// withFaults makes b's faults a fake's random ones, from seed.
func withFaults(fake randomFaults, seed uint64, b *backend) *backend {
	b.faults = func(on bool) {
		if on {
			fake.RandomFaults(faultRate, seed)
		} else {
			fake.RandomFaults(0, 0)
		}
	}
	b.injected = func() string { return injected(fake.Injected()) }
	return b
}

func injected(counts map[faults.Kind]int) string {
	return fmt.Sprintf("%d refused (429/5xx), %d carried out with the answer lost, %d dropped",
		counts[faults.Answered], counts[faults.Lost], counts[faults.Dropped])
}

func verdaBackend(t *testing.T, seed uint64, inMemory bool) *backend {
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(40 * time.Millisecond), DeleteDelay: sim.Duration(30 * time.Millisecond),
		DefaultCapacity: ptr(offeringCapacity)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "verda-secret", InMemory: inMemory, IDSeed: seed})
	t.Cleanup(fake.Close)
	fake.SetLatency(fakeLatency)
	cfg, prices := parse(t, campaignSync+`
clouds:
  verda: {}
nodeGroups:
  - {name: a, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], maxSize: 6}
  - {name: b, cloud: verda, instanceType: 1A100.22V, locations: [FIN-01], capacityPolicy: prefer-spot, minSize: 1, maxSize: 4}
  - {name: c, cloud: verda, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 2}
`, engine.Catalog(), true)
	return withFaults(fake, seed, &backend{name: verda.Name, cfg: cfg, prices: prices, bootstrap: script{}, engine: engine,
		provider: func(log *slog.Logger) cloud.Provider {
			api, err := verda.NewClient(verda.ClientOptions{BaseURL: fake.URL + "/v1", ClientID: "id", ClientSecret: "verda-secret",
				RequestsPerSecond: 100000, RetryBase: time.Millisecond, Logger: log, HTTPClient: httpClient(fake.Server)})
			if err != nil {
				t.Fatal(err)
			}
			return verda.New(api, verda.Options{ClusterName: cfg.ClusterName, Logger: log, ScriptGrace: 200 * time.Millisecond,
				OfflineGrace: 100 * time.Millisecond, HTTPClient: httpClient(fake.Server)})
		},
		instances:  func() []cloud.Instance { return fake.Instances() },
		providerID: func(in cloud.Instance) string { return cloud.ProviderID(verda.Name, in.Name) },
		// A spot instance reclaimed is discontinued: listed, stopped,
		// until deleted.
		lose: func(name string) bool { return fake.Stop(name, "discontinued") },
		leftovers: func() string {
			if n := fake.ScriptCount(); n > 0 {
				return fmt.Sprintf("%d startup scripts in the script store", n)
			}
			return ""
		},
		settleAfter: time.Second,
		latency:     fake.SetLatency,
	})
}

func kamateraBackend(t *testing.T, seed uint64, inMemory bool) *backend {
	engine, err := kamateratest.NewEngine(sim.Config{BootDelay: sim.Duration(40 * time.Millisecond), DeleteDelay: sim.Duration(30 * time.Millisecond),
		DefaultCapacity: ptr(offeringCapacity)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := kamateratest.New(engine, kamateratest.Options{ClientID: "id", Secret: "kamatera-secret", CommandDelay: 20 * time.Millisecond, InMemory: inMemory})
	t.Cleanup(fake.Close)
	fake.SetLatency(fakeLatency)
	const net = `cloudOptions: {networks: "name=wan,ip=auto"}`
	cfg, prices := parse(t, campaignSync+`
clouds:
  kamatera: {}
nodeGroups:
  - {name: a, cloud: kamatera, instanceType: 2A-4096, locations: [EU, EU-FR], image: ubuntu, maxSize: 6, `+net+`}
  - {name: b, cloud: kamatera, instanceType: 4B-8192, locations: [EU], image: ubuntu, minSize: 1, maxSize: 4, `+net+`}
  - {name: c, cloud: kamatera, instanceType: 8A-16384, locations: [EU-FR], image: ubuntu, maxSize: 2, `+net+`}
`, engine.Catalog(), false)
	return withFaults(fake, seed, &backend{name: kamatera.Name, cfg: cfg, prices: prices, bootstrap: script{}, engine: engine,
		provider: func(log *slog.Logger) cloud.Provider {
			api, err := kamatera.NewClient(kamatera.ClientOptions{BaseURL: fake.URL, ClientID: "id", Secret: "kamatera-secret",
				RequestsPerSecond: 100000, RetryBase: time.Millisecond, PollInterval: 5 * time.Millisecond, Logger: log,
				HTTPClient: httpClient(fake.Server)})
			if err != nil {
				t.Fatal(err)
			}
			return kamatera.New(api, kamatera.Options{ClusterName: cfg.ClusterName, Datacenters: []string{"EU", "EU-FR"},
				Passwords: map[string]string{"a": "Root-pass-1", "b": "Root-pass-1", "c": "Root-pass-1"}, LostCreateWindow: time.Second, Logger: log})
		},
		instances:  func() []cloud.Instance { return fake.Instances() },
		providerID: func(in cloud.Instance) string { return cloud.ProviderID(kamatera.Name, in.Name) },
		lose:       func(name string) bool { return engine.Reclaim(name) == nil },
		leftovers:  func() string { return "" },
		latency:    fake.SetLatency,
	})
}

// scalewayStartGrace is the campaigns' scaleway.Options.StartGrace.
const scalewayStartGrace = 500 * time.Millisecond

func scalewayBackend(t *testing.T, seed uint64, inMemory bool) *backend {
	engine, err := scwtest.NewEngine(sim.Config{BootDelay: sim.Duration(40 * time.Millisecond), DeleteDelay: sim.Duration(30 * time.Millisecond),
		StartDelay: ptr(10 * time.Millisecond), StartFailureRate: 0.2, DefaultCapacity: ptr(offeringCapacity)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const (
		accessKey = "SCWCHAOS0000000000XX"
		secretKey = "11111111-2222-4333-8444-555555555555"
		projectID = "66666666-7777-4888-9999-000000000000"
	)
	fake := scwtest.New(engine, scwtest.Options{SecretKey: secretKey, InMemory: inMemory, IDSeed: seed})
	t.Cleanup(fake.Close)
	var latency func(time.Duration)
	if !inMemory {
		// On the virtual clock the fake answers at once: the SDK holds a
		// lock per server across each update's request (instance_utils.go's
		// lockServer), and a goroutine waiting on a mutex is not durably
		// blocked, so a holder that sleeps through the latency would stop
		// the bubble's clock for good.
		fake.SetLatency(fakeLatency)
		latency = fake.SetLatency
	}
	cfg, prices := parse(t, campaignSync+`
clouds:
  scaleway: {}
nodeGroups:
  - {name: a, cloud: scaleway, instanceType: L4-1-24G, locations: [fr-par-2, nl-ams-1], maxSize: 6, standby: {size: 1, warmFor: 1ms}}
  - {name: b, cloud: scaleway, instanceType: L40S-1-48G, locations: [fr-par-2], minSize: 1, maxSize: 4, standby: {size: 1, warmFor: 1ms, refillAfter: 2s}}
  - {name: c, cloud: scaleway, instanceType: H100-2-80G, locations: [fr-par-2], maxSize: 2}
`, engine.Catalog(), true)
	return withFaults(fake, seed, &backend{name: scaleway.Name, cfg: cfg, prices: prices, bootstrap: script{}, engine: engine,
		stoppedPrice: (&scaleway.Cloud{}).StoppedPrice(cloud.OfferingKey{}),
		provider: func(log *slog.Logger) cloud.Provider {
			c, err := scaleway.NewClient(scaleway.ClientOptions{AccessKey: accessKey, SecretKey: secretKey, ProjectID: projectID,
				APIURL: fake.URL, RequestsPerSecond: 100000, Transport: fake.Client().Transport})
			if err != nil {
				t.Fatal(err)
			}
			return scaleway.New(c, scaleway.Options{ClusterName: cfg.ClusterName, ProjectID: projectID, Zones: []string{"fr-par-2", "nl-ams-1"},
				StartGrace: scalewayStartGrace, RetryBase: time.Millisecond, Secrets: []string{secretKey}, Logger: log})
		},
		instances:  func() []cloud.Instance { return fake.Instances() },
		providerID: func(in cloud.Instance) string { return scaleway.ProviderID(in.Location, in.ID) },
		lose:       func(name string) bool { return fake.Lose(name) },
		leftovers: func() string {
			if v, s := fake.VolumeCount(), fake.ServerCount(); v != s {
				return fmt.Sprintf("%d volumes for %d servers; attached to none: %v", v, s, fake.OrphanVolumes())
			}
			return ""
		},
		latency:   latency,
		lostAfter: scalewayStartGrace,
	})
}

// gcpBackend runs GCP's backend over its fake Compute API: each group is
// a managed instance group per zone, whose instances the backend creates
// by name. An instance is taken away as someone deleting it out of its
// MIG from the console would (GCP has no spot MIGs here to reclaim, and a
// MIG recreates a VM lost to a host failure itself, under its name).
func gcpBackend(t *testing.T, seed uint64, inMemory bool) *backend {
	engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(40 * time.Millisecond), DeleteDelay: sim.Duration(30 * time.Millisecond),
		StartDelay: ptr(10 * time.Millisecond), StartFailureRate: 0.2, DefaultCapacity: ptr(offeringCapacity)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const project = "chaos-project"
	fake := gcptest.New(engine, gcptest.Options{Project: project, OperationDelay: 5 * time.Millisecond, InMemory: inMemory})
	t.Cleanup(fake.Close)
	fake.SetLatency(fakeLatency)
	doc := campaignSync + `
clouds:
  gcp: {project: ` + project + `}
nodeGroups:
  - {name: a, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1-a, us-central1-b], maxSize: 6, standby: {size: 1, warmFor: 1ms}}
  - {name: b, cloud: gcp, instanceType: a2-highgpu-1g, locations: [us-central1-a], minSize: 1, maxSize: 4, standby: {size: 1, warmFor: 1ms, refillAfter: 2s}}
  - {name: c, cloud: gcp, instanceType: g2-standard-8, locations: [europe-west4-a], maxSize: 2}
`
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range cfg.NodeGroups {
		for _, z := range g.Locations {
			fake.AddGroup(z, g.Name, g.InstanceType)
		}
	}
	build := func(log *slog.Logger) *gcp.Cloud {
		clients, err := gcp.NewClients(context.Background(), gcp.ClientOptions{Endpoint: fake.URL, NoAuth: true, HTTPClient: httpClient(fake.Server)})
		if err != nil {
			t.Fatal(err)
		}
		groups := map[string]gcp.Group{}
		for _, g := range cfg.NodeGroups {
			groups[g.Name] = gcp.NewGroup(g.Name, g.InstanceType, g.Locations, g.CloudOptions)
		}
		return gcp.New(clients, gcp.Options{Project: project, ClusterName: cfg.ClusterName, Groups: groups, PollInterval: 5 * time.Millisecond,
			CreateWatch: time.Second, Logger: log})
	}
	// The prices are the backend's own (GCP's API gives none; the backend
	// carries a list).
	catalog, err := build(slog.New(slog.DiscardHandler)).InstanceTypes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg, prices := parse(t, doc, catalog, true)
	return withFaults(fake, seed, &backend{name: gcp.Name, cfg: cfg, prices: prices, engine: engine,
		stoppedPrice: (&gcp.Cloud{}).StoppedPrice(cloud.OfferingKey{}),
		provider:     func(log *slog.Logger) cloud.Provider { return build(log) },
		instances:    func() []cloud.Instance { return fake.Project() },
		providerID:   func(in cloud.Instance) string { return "gce://" + project + "/" + in.Location + "/" + in.Name },
		parked:       fake.Parked, // the engine's names carry the zone
		lose:         fake.Lose,
		leftovers:    func() string { return "" },
		latency:      fake.SetLatency,
	})
}

func ptr[T any](v T) *T { return &v }

// httpClient is a client of a fake's API, through the fake's own
// transport (which dials its in-memory connections when it has them),
// with the 30 s timeout of the clouds' default clients.
func httpClient(fake *httptest.Server) *http.Client {
	return &http.Client{Transport: fake.Client().Transport, Timeout: 30 * time.Second}
}

// spend is what the cloud's instances cost per hour, in all and by group.
func (b *backend) spend() (total float64, byGroup map[string]float64) {
	byGroup = map[string]float64{}
	for _, in := range b.instances() {
		p := b.price(in)
		total += p
		byGroup[in.Group] += p
	}
	return total, byGroup
}

// price is what an instance costs per hour.
func (b *backend) price(in cloud.Instance) float64 {
	if in.State == cloud.StateStopped && in.Standby || in.State == cloud.StateDeleting && b.isParked(in.Name) {
		return b.stoppedPrice // a standby pool's, or one deleted stopped: its disk
	}
	return b.prices[priceKey(in.InstanceType, in.CapacityType)]
}

// isParked reports whether an instance is being deleted from the stopped
// state.
func (b *backend) isParked(name string) bool {
	if b.parked != nil {
		return b.parked(name)
	}
	return b.engine.Parked(name)
}

// priced describes a group's instances at the cloud (every group's for
// ""), each with its state and hourly price, for a spend violation.
func (b *backend) priced(group string) string {
	insts := b.instances()
	slices.SortFunc(insts, byInstanceName)
	var out []string
	for _, in := range insts {
		if group == "" || in.Group == group {
			out = append(out, fmt.Sprintf("%s (%s, %s, %.2f/h)", in.Name, in.CapacityType, in.State, b.price(in)))
		}
	}
	return strings.Join(out, ", ")
}

// describe names the backend's campaign parameters, for logs.
func (b *backend) describe() string {
	var groups []string
	for _, g := range b.cfg.NodeGroups {
		groups = append(groups, g.Name)
	}
	return b.name + " (" + strings.Join(groups, ", ") + ")"
}
