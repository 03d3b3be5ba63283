package simulate

// BuiltinPool is the pool simulate runs when no --config is given: spot
// H100s that fall back to on-demand, and eight-GPU nodes for jobs that
// need them, on the simulated cloud with Verda's catalog and prices, and
// the boots, starts and stopped price of facts.go (TestBuiltinPoolPlaysTheFacts
// keeps the two alike).
const BuiltinPool = `clusterName: simulate
clouds:
  sim:
    locations: [FIN-01, FIN-02, FIN-03]
    defaultCapacity: 60
    spotReclaimRate: 0.02
    # The pessimistic end of public figures, or estimates where none
    # exist (facts.go; docs/simulate.md cites each).
    bootDelay: 4m30s
    bootDelayP95: 7m30s
    startDelay: 1m
    startDelayP95: 4m30s
    startFailureRate: 0.2
    stoppedPrice: 0.0466
nodeGroups:
  - {name: h100-spot, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01, FIN-02], capacityPolicy: prefer-spot, maxSize: 200}
  - {name: h100x8, cloud: sim, instanceType: 8H100.80S.176V, locations: [FIN-03], maxSize: 20}
  - {name: a100-mig, cloud: sim, instanceType: 1A100.22V, locations: [FIN-01], maxSize: 20, mig: {profile: all-1g.10gb, strategy: mixed}}
`
