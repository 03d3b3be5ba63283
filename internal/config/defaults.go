package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults for fields left empty, as SetDefaults applies them.
const (
	// DefaultListenAddress is provider.listenAddress: loopback, so nothing
	// off the machine can scale a group until it is exposed on purpose.
	DefaultListenAddress = "127.0.0.1:8086"
	// DefaultMetricsAddress is metrics.address: loopback too.
	DefaultMetricsAddress = "127.0.0.1:9090"
	// DefaultGPULabel is provider.gpuLabel.
	DefaultGPULabel = "gpuscaler.dev/accelerator"
	// DefaultSyncPeriod is sync.period.
	DefaultSyncPeriod = 30 * time.Second
	// DefaultMaxConcurrentCreates is sync.maxConcurrentCreates.
	DefaultMaxConcurrentCreates = 10
	// DefaultRequestsPerSecond is sync.requestsPerSecond: requests per
	// second to one cloud, with a burst of as many. Verda publishes no
	// limit (its SDKs back off on 429, as gpuscaler does); see
	// docs/clouds/verda.md.
	DefaultRequestsPerSecond = 25.0
	// DefaultOfferingBackoff is sync.offeringBackoff.
	DefaultOfferingBackoff = 5 * time.Minute
	// DefaultMaxGroupSize is sync.maxGroupSize.
	DefaultMaxGroupSize = 5000
	// MaxGroupSizeCeiling bounds sync.maxGroupSize itself.
	MaxGroupSizeCeiling = 1000000
	// DefaultListLag is sync.listLag.
	DefaultListLag = time.Minute
	// DefaultMaxIncrease is sync.maxIncrease.
	DefaultMaxIncrease = 1000
	// DefaultCreateRetries is sync.createRetries.
	DefaultCreateRetries = 5
	// DefaultGPUStartupTimeout is nodeGroups[].gpuStartupTimeout.
	DefaultGPUStartupTimeout = 15 * time.Minute
	// DefaultLeakGracePeriod is leakedInstances.gracePeriod.
	DefaultLeakGracePeriod = 30 * time.Minute
	// DefaultLeakAction is leakedInstances.action.
	DefaultLeakAction = LeakActionDelete
	// DefaultCapacityPolicy is nodeGroups[*].capacityPolicy.
	DefaultCapacityPolicy = PolicyOnDemandOnly
	// DefaultManagedBy is nodeGroups[*].managedBy.
	DefaultManagedBy = ManagedByClusterAutoscaler
	// DefaultMIGStrategy is nodeGroups[*].mig.strategy.
	DefaultMIGStrategy = MIGStrategyMixed
	// DefaultBootstrapDelivery is nodeGroups[*].bootstrap.delivery.
	DefaultBootstrapDelivery = DeliveryInline
	// MinSyncPeriod is the shortest sync.period: a shorter one would spend
	// the clouds' rate limits on lists that find nothing new.
	MinSyncPeriod = 100 * time.Millisecond
	// MaxBootstrapTokenTTL is the longest nodeGroups[*].bootstrap.tokenTTL:
	// kubeadm's own default lifetime of a bootstrap token.
	MaxBootstrapTokenTTL = 24 * time.Hour
	// DefaultBootstrapTokenTTL is nodeGroups[*].bootstrap.tokenTTL.
	DefaultBootstrapTokenTTL = time.Hour
	// DefaultSimSeed is clouds.sim.seed.
	DefaultSimSeed = 1
	// DefaultSimCapacity is clouds.sim.defaultCapacity.
	DefaultSimCapacity = 10
	// DefaultSimBootDelay is clouds.sim.bootDelay.
	DefaultSimBootDelay = 20 * time.Second
	// DefaultSimDeleteDelay is clouds.sim.deleteDelay.
	DefaultSimDeleteDelay = 5 * time.Second
	// DefaultSimAPILatency is clouds.sim.apiLatency.
	DefaultSimAPILatency = time.Duration(0)
	// DefaultSimKwok is clouds.sim.kwok.
	DefaultSimKwok = true
)

// DefaultSimLocations returns clouds.sim.locations when none are set: a new
// slice on each call, so callers may keep and change it.
func DefaultSimLocations() []string { return SimCatalogLocations(SimCatalogSim) }

// The simulated cloud's catalogs (clouds.sim.catalog).
const (
	SimCatalogSim      = "sim"
	SimCatalogVerda    = CloudVerda
	SimCatalogGCP      = CloudGCP
	SimCatalogScaleway = CloudScaleway
)

// SimCatalogs returns the catalogs clouds.sim.catalog may name.
func SimCatalogs() []string {
	return []string{SimCatalogSim, SimCatalogVerda, SimCatalogGCP, SimCatalogScaleway}
}

// SimCatalogLocations returns the locations a catalog's GPU types are
// sold in (the catalogs package's; a test keeps the two alike), the
// simulated cloud's when it names none.
func SimCatalogLocations(catalog string) []string {
	switch catalog {
	case SimCatalogGCP:
		return []string{"us-central1-a", "us-central1-b", "us-central1-c", "europe-west4-a"}
	case SimCatalogScaleway:
		return []string{"fr-par-2", "pl-waw-2", "fr-par-1"}
	default: // sim and verda: Verda's location codes
		return []string{"FIN-01", "FIN-02", "FIN-03", "ICE-01"}
	}
}

// SetDefaults fills every empty field that has a default. It is idempotent
// and leaves set fields alone; it does not validate.
func SetDefaults(c *Config) {
	setString(&c.Provider.ListenAddress, DefaultListenAddress)
	setString(&c.Provider.GPULabel, DefaultGPULabel)
	setString(&c.Metrics.Address, DefaultMetricsAddress)
	setDuration(&c.Sync.Period, DefaultSyncPeriod)
	setDuration(&c.Sync.OfferingBackoff, DefaultOfferingBackoff)
	setDuration(&c.Sync.ListLag, DefaultListLag)
	if c.Sync.MaxConcurrentCreates == 0 {
		c.Sync.MaxConcurrentCreates = DefaultMaxConcurrentCreates
	}
	if c.Sync.RequestsPerSecond == 0 {
		c.Sync.RequestsPerSecond = DefaultRequestsPerSecond
	}
	setPtr(&c.Sync.CreateRetries, DefaultCreateRetries)
	if c.Sync.MaxGroupSize == 0 {
		c.Sync.MaxGroupSize = DefaultMaxGroupSize
	}
	if c.Sync.MaxIncrease == 0 {
		c.Sync.MaxIncrease = DefaultMaxIncrease
	}
	setDuration(&c.LeakedInstances.GracePeriod, DefaultLeakGracePeriod)
	if ss := &c.ScriptServer; ss.URL != "" && ss.BindToInstanceIP == nil {
		bind := !urlOnLoopback(ss.URL)
		ss.BindToInstanceIP = &bind
	}
	setString(&c.LeakedInstances.Action, DefaultLeakAction)
	if s := c.Clouds.Sim; s != nil {
		setSimDefaults(s)
	}
	for i := range c.NodeGroups {
		g := &c.NodeGroups[i]
		setString(&g.CapacityPolicy, DefaultCapacityPolicy)
		setString(&g.ManagedBy, DefaultManagedBy)
		setDuration(&g.GPUStartupTimeout, DefaultGPUStartupTimeout)
		if g.MIG != nil {
			setString(&g.MIG.Strategy, DefaultMIGStrategy)
		}
		if b := g.Bootstrap; b != nil {
			setString(&b.Delivery, DefaultBootstrapDelivery)
			setDuration(&b.TokenTTL, DefaultBootstrapTokenTTL)
		}
	}
}

func setSimDefaults(s *SimConfig) {
	if s.Seed == 0 {
		s.Seed = DefaultSimSeed
	}
	setString(&s.Catalog, SimCatalogSim)
	if len(s.Locations) == 0 {
		s.Locations = SimCatalogLocations(s.Catalog)
	}
	setPtr(&s.DefaultCapacity, DefaultSimCapacity)
	setDuration(&s.BootDelay, DefaultSimBootDelay)
	setDuration(&s.DeleteDelay, DefaultSimDeleteDelay)
	setDuration(&s.APILatency, DefaultSimAPILatency)
	setPtr(&s.Kwok, DefaultSimKwok)
}

func setString(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

// setPtr points an unset optional field at its own copy of def.
func setPtr[T any](p **T, def T) {
	if *p == nil {
		*p = &def
	}
}

func setDuration(p **metav1.Duration, def time.Duration) {
	if *p == nil {
		*p = &metav1.Duration{Duration: def}
	}
}
