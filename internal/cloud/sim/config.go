package sim

import "time"

// Config shapes the simulated world. Nil and zero fields take the
// defaults (DefaultSeed, DefaultCapacity, DefaultBootDelay, ...); the
// config file's clouds.sim section is turned into one by the runtime.
type Config struct {
	// Seed makes stock-outs, faults and reclaims repeatable.
	Seed int64
	// Locations the simulated cloud offers.
	Locations []string
	// DefaultCapacity is how many instances each offering holds.
	DefaultCapacity *int
	// Capacity overrides DefaultCapacity per offering.
	Capacity []Capacity
	// BootDelay is the time from create to running, DeleteDelay from
	// delete to gone; APILatency is added to every API call.
	BootDelay, DeleteDelay, APILatency *time.Duration
	// BootDelayP95 and StartDelayP95, when longer than BootDelay and
	// StartDelay, make each boot and start a draw of its own: log-normal,
	// with the delay as its median and this as its 95th percentile.
	BootDelayP95, StartDelayP95 *time.Duration
	// FaultRate is the fraction (0..1) of API calls that fail transiently.
	FaultRate float64
	// SpotReclaimRate is the chance (0..1) per hour that a running spot
	// instance is reclaimed.
	SpotReclaimRate float64
	// StartDelay is the time from starting a stopped instance to running
	// (DefaultStartDelay); StartFailureRate the chance (0..1) that a start
	// is refused for want of capacity; StoppedPrice what a stopped
	// instance costs per hour (DefaultStoppedPrice).
	StartDelay       *time.Duration
	StartFailureRate float64
	StoppedPrice     *float64
	// RefusalRetried plays a cloud that goes on trying a start it refused
	// for capacity, as a GCE MIG does: RefusedStaysStopped is false, and
	// the core deletes such an instance rather than keep it stopped.
	RefusalRetried bool
}

// Capacity sets the capacity of matching offerings; empty fields match
// everything.
type Capacity struct {
	InstanceType string
	Location     string
	CapacityType string
	Count        int
}

// Duration returns a pointer to d, for Config's optional durations.
func Duration(d time.Duration) *time.Duration { return &d }
