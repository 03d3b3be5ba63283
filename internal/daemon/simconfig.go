package daemon

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/catalogs"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// SimConfig turns the config file's clouds.sim section into the simulated
// cloud's own Config (the cloud knows nothing of the config file).
func SimConfig(c config.SimConfig) sim.Config {
	out := sim.Config{
		Seed: c.Seed, Locations: c.Locations, DefaultCapacity: c.DefaultCapacity,
		BootDelay: duration(c.BootDelay), DeleteDelay: duration(c.DeleteDelay), APILatency: duration(c.APILatency),
		FaultRate: c.FaultRate, SpotReclaimRate: c.SpotReclaimRate,
		StartDelay: duration(c.StartDelay), StartFailureRate: c.StartFailureRate, StoppedPrice: c.StoppedPrice,
		BootDelayP95: duration(c.BootDelayP95), StartDelayP95: duration(c.StartDelayP95),
		// GCP's catalog comes with GCP's MIGs, which go on trying a start
		// they refused (cloud/gcp's RefusedStaysStopped).
		RefusalRetried: c.Catalog == catalogs.GCP,
	}
	for _, k := range c.Capacity {
		out.Capacity = append(out.Capacity, sim.Capacity{InstanceType: k.InstanceType, Location: k.Location, CapacityType: k.CapacityType, Count: k.Count})
	}
	return out
}

// SimCatalog returns the instance types and prices the simulated cloud
// sells, from the config file's clouds.sim.catalog.
func SimCatalog(c config.SimConfig) ([]cloud.InstanceType, error) {
	cat, err := catalogs.Named(c.Catalog)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return cat.Types, nil
}

// SimGPUStartup is the GPU start-up the simulated cloud's kubelets play
// out, from the config file's clouds.sim section.
func SimGPUStartup(c config.SimConfig) sim.GPUStartup {
	out := sim.GPUStartup{Flaps: c.ReadyFlaps, Failures: c.GPUFailures}
	if c.GPUReadyDelay != nil {
		out.ReadyDelay = c.GPUReadyDelay.Duration
	}
	if c.MIGReadyDelay != nil {
		out.MIGDelay = c.MIGReadyDelay.Duration
	}
	return out
}

func duration(d *metav1.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	return sim.Duration(d.Duration)
}
