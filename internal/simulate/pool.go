package simulate

import (
	"errors"
	"fmt"
	"strings"
)

// The built-in pools, by the catalog they play (Pool).
const (
	PoolSim      = "sim"
	PoolVerda    = "verda"
	PoolGCP      = "gcp"
	PoolScaleway = "scaleway"
	PoolKamatera = "kamatera"
)

// ErrNoPool is the error of a --pool no built-in pool is for.
var ErrNoPool = errors.New("no built-in pool")

// Pools returns the built-in pools' names, the default first.
func Pools() []string { return []string{PoolSim, PoolVerda, PoolGCP, PoolScaleway, PoolKamatera} }

// BuiltinPool is the pool simulate runs when no --config is given: spot
// H100s that fall back to on-demand, and eight-GPU nodes for jobs that
// need them, on the simulated cloud with its own catalog, modelled on
// Verda's, and the boots, starts and stopped price of facts.go
// (TestBuiltinPoolPlaysTheFacts keeps the two alike).
var BuiltinPool = mustPool(PoolSim)

// facts is the clouds.sim part every built-in pool shares: the
// pessimistic end of public figures, or estimates where none exist
// (facts.go; docs/simulate.md cites each). The stopped price is GCE
// pd-ssd's, the dearest of the clouds' disks, for every pool.
const facts = `    bootDelay: 4m30s
    bootDelayP95: 7m30s
    startDelay: 1m
    startDelayP95: 4m30s
    startFailureRate: 0.2
    stoppedPrice: 0.0466
`

// multiGPUTaints keep a pool's eight-GPU group for the pods of several
// GPUs (MultiGPUTaint).
const multiGPUTaints = `taints: [{key: ` + MultiGPUTaint + `, value: "true", effect: NoSchedule}]`

// Pool returns a built-in pool's config: the same three kinds of group,
// one-GPU nodes for inference, eight-GPU nodes for the jobs that ask for
// them (tainted for them alone), and MIG slices, on the instance types
// of the cloud whose catalog it plays (clouds.sim.catalog), where that
// cloud sells them.
func Pool(name string) (string, error) {
	head := func(catalog, capacity string) string {
		return "clusterName: simulate\nclouds:\n  sim:\n    catalog: " + catalog + "\n" + capacity +
			"    # The pessimistic end of public figures, or estimates where none\n" +
			"    # exist (facts.go; docs/simulate.md cites each).\n" + facts + "nodeGroups:\n"
	}
	switch name {
	case PoolSim, PoolVerda:
		// Verda's spot H100s fall back to on-demand; the same types on the
		// simulated cloud's own catalog, or on Verda's recorded one, where
		// a stopped instance bills in full: no standby (validate says why).
		return head(name, "    locations: [FIN-01, FIN-02, FIN-03]\n    defaultCapacity: 60\n    spotReclaimRate: 0.02\n") +
			`  - {name: h100-spot, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], capacityPolicy: prefer-spot, maxSize: 200}
  - {name: h100x8, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 20, ` + multiGPUTaints + `}
  - {name: a100-mig, cloud: sim, instanceType: 1A100.22V, locations: [FIN-01], maxSize: 20, mig: {profile: all-1g.10gb, strategy: mixed}}
`, nil
	case PoolGCP:
		// On demand: the catalog records no spot prices. L4s for inference
		// (G2), H100 eight-GPU nodes (A3 High), A100 80 GB for MIG (A2
		// Ultra), in us-central1's zones.
		return head(name, "    defaultCapacity: 120\n") +
			`  - {name: l4, cloud: sim, instanceType: g2-standard-8, locations: [us-central1-a, us-central1-b], maxSize: 200}
  - {name: h100x8, cloud: sim, instanceType: a3-highgpu-8g, locations: [us-central1-c], maxSize: 20, ` + multiGPUTaints + `}
  - {name: a100-mig, cloud: sim, instanceType: a2-ultragpu-1g, locations: [us-central1-a], maxSize: 20, mig: {profile: all-1g.10gb, strategy: mixed}}
`, nil
	case PoolScaleway:
		// Scaleway sells no spot. H100 PCIe for inference and MIG, H100
		// SXM eight-GPU nodes, in the zones that sell them.
		return head(name, "    defaultCapacity: 120\n") +
			`  - {name: h100, cloud: sim, instanceType: H100-1-80G, locations: [fr-par-2, pl-waw-2], maxSize: 200}
  - {name: h100x8, cloud: sim, instanceType: H100-SXM-8-80G, locations: [fr-par-2], maxSize: 20, ` + multiGPUTaints + `}
  - {name: h100-mig, cloud: sim, instanceType: H100-1-80G, locations: [fr-par-2], maxSize: 20, mig: {profile: all-1g.10gb, strategy: mixed}}
`, nil
	case PoolKamatera:
		return "", fmt.Errorf("%w on kamatera: Kamatera's catalog sells no GPU server types (shared/reference/cloud-apis.md §2), so a pool there cannot place a GPU pod", ErrNoPool)
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrNoPool, name, strings.Join(Pools(), ", "))
}

func mustPool(name string) string {
	p, err := Pool(name)
	if err != nil {
		panic(err)
	}
	return p
}
