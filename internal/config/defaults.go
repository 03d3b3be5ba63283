package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults for fields left empty.
const (
	DefaultListenAddress        = ":8086"
	DefaultMetricsAddress       = ":9090"
	DefaultGPULabel             = "gpuscaler.dev/accelerator"
	DefaultSyncPeriod           = 30 * time.Second
	DefaultMaxConcurrentCreates = 10
	DefaultRequestsPerSecond    = 10.0
	DefaultOfferingBackoff      = 5 * time.Minute
	DefaultCreateRetries        = 5
	DefaultLeakGracePeriod      = 30 * time.Minute
	DefaultLeakAction           = LeakActionDelete
	DefaultCapacityPolicy       = PolicyOnDemandOnly
	DefaultMIGStrategy          = MIGStrategyMixed
	DefaultSimSeed              = 1
	DefaultSimCapacity          = 10
	DefaultSimBootDelay         = 20 * time.Second
	DefaultSimDeleteDelay       = 5 * time.Second
	DefaultBootstrapTokenTTL    = time.Hour
)

// DefaultSimLocations are the simulated cloud's locations when none are set.
func DefaultSimLocations() []string { return []string{"FIN-01", "FIN-02", "FIN-03", "ICE-01"} }

// SetDefaults fills every empty field that has a default.
func SetDefaults(c *Config) {
	setString(&c.Provider.ListenAddress, DefaultListenAddress)
	setString(&c.Provider.GPULabel, DefaultGPULabel)
	setString(&c.Metrics.Address, DefaultMetricsAddress)
	setDuration(&c.Sync.Period, DefaultSyncPeriod)
	setDuration(&c.Sync.OfferingBackoff, DefaultOfferingBackoff)
	if c.Sync.MaxConcurrentCreates == 0 {
		c.Sync.MaxConcurrentCreates = DefaultMaxConcurrentCreates
	}
	if c.Sync.RequestsPerSecond == 0 {
		c.Sync.RequestsPerSecond = DefaultRequestsPerSecond
	}
	setInt(&c.Sync.CreateRetries, DefaultCreateRetries)
	setDuration(&c.LeakedInstances.GracePeriod, DefaultLeakGracePeriod)
	setString(&c.LeakedInstances.Action, DefaultLeakAction)
	if s := c.Clouds.Sim; s != nil {
		if s.Seed == 0 {
			s.Seed = DefaultSimSeed
		}
		if len(s.Locations) == 0 {
			s.Locations = DefaultSimLocations()
		}
		setInt(&s.DefaultCapacity, DefaultSimCapacity)
		setDuration(&s.BootDelay, DefaultSimBootDelay)
		setDuration(&s.DeleteDelay, DefaultSimDeleteDelay)
		setDuration(&s.APILatency, 0)
		if s.Kwok == nil {
			t := true
			s.Kwok = &t
		}
	}
	for i := range c.NodeGroups {
		g := &c.NodeGroups[i]
		setString(&g.CapacityPolicy, DefaultCapacityPolicy)
		setString(&g.ManagedBy, ManagedByClusterAutoscaler)
		if g.MIG != nil {
			setString(&g.MIG.Strategy, DefaultMIGStrategy)
		}
		if b := g.Bootstrap; b != nil {
			setString(&b.Delivery, DeliveryInline)
			setDuration(&b.TokenTTL, DefaultBootstrapTokenTTL)
		}
	}
}

func setString(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

func setInt(p **int, def int) {
	if *p == nil {
		*p = &def
	}
}

func setDuration(p **metav1.Duration, def time.Duration) {
	if *p == nil {
		*p = &metav1.Duration{Duration: def}
	}
}
