package simulate

import "time"

// The timings and prices a run plays when nothing sets them: each is the
// pessimistic end of what public sources say, or an estimate where none
// does (docs/simulate.md#where-the-defaults-come-from cites each). The
// built-in pool's clouds.sim carries the cloud's part (BuiltinPool); the
// GPU start-ups are the run's (Options).
const (
	// FactBootDelay is the median time from an order to a registered
	// Node: a GPU VM coming up on GCE (codalab-worksheets#4042: "the VM
	// came up (4.5 minutes)"); FactBootDelayP95 its 95th percentile,
	// the upper end the cml maintainers give for a GCE T4 runner
	// (iterative/cml#1084: "7:30 is on the upper end").
	FactBootDelay    = 4*time.Minute + 30*time.Second
	FactBootDelayP95 = 7*time.Minute + 30*time.Second
	// FactGPUStartup is the time from a registered Node to allocatable
	// GPUs: the NVIDIA driver installed by a DaemonSet (codalab#4042:
	// 4.5 minutes; NVIDIA/gpu-operator#707: "around 3-5 minutes" on a
	// node's reboot).
	FactGPUStartup = 4*time.Minute + 30*time.Second
	// FactStandbyGPUStartup is the same after a stopped instance starts:
	// the containerized driver is installed again on every restart
	// (NVIDIA/gpu-operator#424), so the pessimistic end is a cold start's.
	FactStandbyGPUStartup = FactGPUStartup
	// FactStartDelay and FactStartDelayP95 are a stopped instance's start
	// to a registered Node: no cloud publishes it, an estimate. A start
	// boots the OS as a create does (general-purpose GCE VMs boot in about
	// 25 s to a minute: "Move fast and break the cloud", 2018) after
	// finding a host with the GPUs again; its tail is taken as long as a
	// create's median.
	FactStartDelay    = time.Minute
	FactStartDelayP95 = FactBootDelay
	// FactStartFailureRate is the chance a start is refused for want of
	// capacity, beside the offering's capacity running out: a stopped
	// instance gives its GPUs back (GCE "create, restart, or update" can
	// meet ZONE_RESOURCE_POOL_EXHAUSTED; Scaleway's power-off releases the
	// node to the pool). No cloud publishes a rate: an estimate.
	FactStartFailureRate = 0.2
	// FactImageGB is the size of the image a built-in trace's pods run,
	// and FactPullRate the rate a node pulls at, in MB/s: "7 to 10
	// minutes" for a 10 GB image on a fresh node (Tensorfuse, "Why do
	// GPU containers take so long to start?", measured with the stock
	// snapshotter); the pessimistic end, 10 GB in 10 minutes. Inference
	// images run larger still (tritonserver:24.06-py3 is 15.5 GB,
	// triton-inference-server/server#7474).
	FactImageGB  = 10.0
	FactPullRate = FactImageGB * 1000 / 600
	// FactStoppedPrice is a stopped instance's hourly price, its disk: 200
	// GiB (an estimate of a GPU node's OS and image disk) of GCE pd-ssd at
	// $0.17 per GiB-month (GCE disk pricing), 730 hours a month.
	FactStoppedPrice = 200 * 0.17 / 730
)
