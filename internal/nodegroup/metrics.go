package nodegroup

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Metrics are the node-group core's Prometheus series. One process shares
// them between the cores of its configurations (Options.Metrics), so that
// counters count on across a reload.
type Metrics struct {
	apiCalls        *prometheus.CounterVec
	apiLatency      *prometheus.HistogramVec
	instances       *prometheus.GaugeVec
	targetSize      *prometheus.GaugeVec
	scaleUpFailures *prometheus.CounterVec
	hourlySpend     *prometheus.GaugeVec
	leaked          *prometheus.CounterVec
	deleteFailures  *prometheus.CounterVec
	vanished        *prometheus.CounterVec
	// created and deleted count the nodes added and removed: instances
	// made for an order, and instances gone after gpuscaler deleted them.
	created      *prometheus.CounterVec
	deleted      *prometheus.CounterVec
	minSize      *prometheus.GaugeVec
	maxSize      *prometheus.GaugeVec
	lastSync     *prometheus.GaugeVec
	refusedMoves *prometheus.CounterVec
	// targetMismatches counts checkLocked's findings.
	targetMismatches *prometheus.CounterVec
	unknownGroup     *prometheus.GaugeVec
	foreign          *prometheus.GaugeVec
	orphans          *prometheus.CounterVec
	stockOuts        *prometheus.CounterVec
	costLimit        *prometheus.GaugeVec
	startup          *prometheus.HistogramVec
	gpuGap           *prometheus.HistogramVec
	stages           *prometheus.HistogramVec
	gpuTimeouts      *prometheus.CounterVec
	// standbyStarts counts standby instances started for demand, by
	// result (ok, failed: a fresh order was placed instead).
	standbyStarts *prometheus.CounterVec
	// standbyStartup is startup's counterpart for instances started from
	// a standby pool, from the start.
	standbyStartup *prometheus.HistogramVec
	// standbyOldest is when each group's oldest stopped standby instance
	// was ordered (0 with none): its age is time() minus it.
	standbyOldest *prometheus.GaugeVec
}

// Steps of a node's start-up, the step label of
// gpuscaler_node_startup_duration_seconds.
const (
	stepRegistered = "registered"
	stepReady      = "ready"
	stepGPUs       = "gpus"
)

// Stages of gpuscaler_node_startup_stage_seconds, each from the end of
// the one before.
const (
	stageBoot  = "boot"
	stageReady = "ready"
	stageGPUs  = "gpus"
)

// startupBuckets span a CPU node's half minute to a GPU node that takes
// most of an hour (drivers, images, MIG repartitioning).
var startupBuckets = []float64{15, 30, 45, 60, 90, 120, 180, 240, 300, 420, 600, 900, 1200, 1800, 2700, 3600}

// gapBuckets span the device plugin's start-up after Ready.
var gapBuckets = []float64{1, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800}

// NewMetrics makes the core's series and registers them with reg (nil:
// nowhere).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		apiCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_cloud_api_calls_total",
			Help: "Cloud API calls by cloud, operation and result class.",
		}, []string{"cloud", "operation", "result"}),
		apiLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuscaler_cloud_api_call_duration_seconds",
			Help:    "Cloud API call latency by cloud and operation.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"cloud", "operation"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_nodegroup_instances",
			Help: "Instances by node group and state (creating, running, deleting, failed, standby).",
		}, []string{"group", "state"}),
		targetSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_nodegroup_target_size",
			Help: "Target size by node group.",
		}, []string{"group"}),
		scaleUpFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_scale_up_failures_total",
			Help: "Instances that could not be created, by node group and reason.",
		}, []string{"group", "reason"}),
		hourlySpend: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_hourly_spend",
			Help: "Hourly price of the instances a node group holds, by node group and the currency of its cloud's prices (ISO 4217).",
		}, []string{"group", "currency"}),
		leaked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_leaked_instances_total",
			Help: "Instances of managed groups found leaked (never registered as a node, or a second instance under one name), by cloud and action taken.",
		}, []string{"cloud", "action"}),
		deleteFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_delete_failures_total",
			Help: "Instance deletes that gave up after their retries, by cloud and error class; a later sync tries again.",
		}, []string{"cloud", "reason"}),
		vanished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_instances_vanished_total",
			Help: "Instances lost without gpuscaler deleting them (spot reclaims, hosts lost, external deletes), by node group.",
		}, []string{"group"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_instances_created_total",
			Help: "Instances the cloud made for gpuscaler's orders (nodes added), by node group (\"\" for the launch API's, Karpenter's) and reason: " +
				"scale-up (ordered for a group's target: a front end's scale-up, minSize, a replacement), standby (ordered for a standby pool), launch (the launch API's).",
		}, []string{"group", "reason"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_instances_deleted_total",
			Help: "Instances gone after gpuscaler deleted them (nodes removed), by node group (\"\" for the launch API's) and reason: " +
				"failed (an order, a start or a registration that failed), standby (a standby pool's member let go), launch (the launch API's caller terminated it), " +
				"scale-down (the rest: a front end's delete, a lowered target, past maxSize); those lost otherwise are gpuscaler_instances_vanished_total.",
		}, []string{"group", "reason"}),
		minSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_nodegroup_min_size",
			Help: "Each node group's minSize in the configuration in force.",
		}, []string{"group"}),
		maxSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_nodegroup_max_size",
			Help: "Each node group's maxSize in the configuration in force.",
		}, []string{"group"}),
		lastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_cloud_last_sync_timestamp_seconds",
			Help: "When each cloud's last successful list started (Unix seconds): reads answer from what it showed.",
		}, []string{"cloud"}),
		unknownGroup: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_unknown_group_instances",
			Help: "Instances of this cluster whose node group this configuration does not know; they are left alone.",
		}, []string{"cloud"}),
		foreign: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_foreign_install_instances",
			Help: "Instances of this cluster name that another gpuscaler install ordered (ownership.installID); they are left alone.",
		}, []string{"cloud"}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_orphan_nodes_deleted_total",
			Help: "NotReady Nodes gpuscaler deleted because their cloud no longer has their instance (gone while no gpuscaler ran), by cloud.",
		}, []string{"cloud"}),
		stockOuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_stockouts_total",
			Help: "Orders refused for want of capacity, by offering; the offering is then skipped for sync.offeringBackoff.",
		}, []string{"cloud", "instance_type", "location", "capacity_type"}),
		costLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_hourly_cost_limit",
			Help: "The configured maxHourlyCost, by node group and currency; group=\"\" is the cluster-wide cap. Absent where none is set.",
		}, []string{"group", "currency"}),
		startup: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuscaler_node_startup_duration_seconds",
			Help:    "Time from an instance's order to its Node registered, Ready, and (GPU groups) GPUs allocatable, by node group (\"\" for launched instances) and step.",
			Buckets: startupBuckets,
		}, []string{"group", "step"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpuscaler_node_startup_stage_seconds",
			Help: "The stages of a node's start-up, each on its own, by node group and stage: boot (the order, or a standby start, to the Node registered: " +
				"the cloud's boot and the kubelet's join), ready (registered to Ready: networking, the node's own checks), gpus (Ready to GPUs allocatable: drivers, device plugin).",
			Buckets: startupBuckets,
		}, []string{"group", "stage"}),
		gpuGap: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuscaler_gpu_startup_gap_seconds",
			Help:    "Time from a GPU Node turning Ready to its GPUs allocatable (driver and device plugin start-up), by node group.",
			Buckets: gapBuckets,
		}, []string{"group"}),
		gpuTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_gpu_startup_timeouts_total",
			Help: "GPU nodes that registered but showed no GPUs within their group's gpuStartupTimeout, by node group; their instances are deleted and replaced.",
		}, []string{"group"}),
		refusedMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_member_transitions_refused_total",
			Help: "Member phase changes the lifecycle does not have (out of deleting, back to creating), refused, by node group, from and to phase; any is a bug to report.",
		}, []string{"group", "from", "to"}),
		standbyStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_standby_starts_total",
			Help: "Standby instances started for demand, by node group and result (ok; failed: the instance was deleted and a fresh one ordered at once).",
		}, []string{"group", "result"}),
		standbyStartup: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuscaler_standby_start_duration_seconds",
			Help:    "Time from a standby instance's start to its Node registered, Ready, and (GPU groups) GPUs allocatable, by node group and step: gpuscaler_node_startup_duration_seconds for instances started from a standby pool.",
			Buckets: startupBuckets,
		}, []string{"group", "step"}),
		standbyOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_standby_oldest_created_timestamp_seconds",
			Help: "When the oldest stopped instance of a node group's standby pool was ordered, in Unix seconds; 0 when the pool holds none. Its age is time() minus this; maxAge replaces it.",
		}, []string{"group"}),
		targetMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_target_mismatches_total",
			Help: "Changes after which a node group's target and its live members disagreed, by node group; any is a bug to report.",
		}, []string{"group"}),
	}
	if reg != nil {
		reg.MustRegister(m.apiCalls, m.apiLatency, m.instances, m.targetSize, m.scaleUpFailures, m.hourlySpend, m.leaked,
			m.deleteFailures, m.vanished, m.created, m.deleted, m.minSize, m.maxSize, m.lastSync, m.unknownGroup, m.foreign, m.orphans, m.stockOuts, m.costLimit, m.startup, m.stages, m.gpuGap, m.gpuTimeouts, m.refusedMoves, m.targetMismatches, m.standbyStarts, m.standbyStartup, m.standbyOldest)
	}
	return m
}

// resetGauges drops every gauge's series: a core that starts in place of
// another (a reload) publishes its own groups' again, and a group the
// reload removed leaves none behind. Counters and histograms count on.
func (m *Metrics) resetGauges() {
	for _, g := range []*prometheus.GaugeVec{m.instances, m.targetSize, m.hourlySpend, m.unknownGroup, m.foreign, m.costLimit, m.minSize, m.maxSize} {
		g.Reset()
	}
}

// failureReasons are the reason label values of
// gpuscaler_scale_up_failures_total.
var failureReasons = []string{CodeOutOfResources, CodeQuotaExceeded, CodeInvalidConfig, CodeCostLimit, CodeCreateFailed,
	CodeNeverRegistered, "InstanceFailed"}

// deleteReasons are the reason label values of
// gpuscaler_delete_failures_total (classLabel's answers).
var deleteReasons = []string{"capacity", "quota", "not_found", "invalid", "outcome_unknown", "transient"}

// preset creates the series of every group a configuration manages and
// every cloud it uses, at zero, so that dashboards and alerts see them
// (and rate() counts the first failure) before anything happens.
func (m *Metrics) preset(cfg *config.Config, manage func(string) bool) {
	clouds := map[string]bool{}
	for _, g := range cfg.NodeGroups {
		if manage != nil && !manage(g.Name) {
			continue
		}
		clouds[g.Cloud] = true
		for _, state := range memberStates {
			m.instances.WithLabelValues(g.Name, state)
		}
		m.targetSize.WithLabelValues(g.Name)
		m.vanished.WithLabelValues(g.Name)
		for _, reason := range failureReasons {
			m.scaleUpFailures.WithLabelValues(g.Name, reason)
		}
		for _, step := range []string{stepRegistered, stepReady, stepGPUs} {
			m.startup.WithLabelValues(g.Name, step)
		}
		m.gpuGap.WithLabelValues(g.Name)
		for _, stage := range []string{stageBoot, stageReady, stageGPUs} {
			m.stages.WithLabelValues(g.Name, stage)
		}
		m.gpuTimeouts.WithLabelValues(g.Name)
		m.targetMismatches.WithLabelValues(g.Name)
		for _, result := range []string{"ok", "failed"} {
			m.standbyStarts.WithLabelValues(g.Name, result)
		}
		for _, step := range []string{stepRegistered, stepReady, stepGPUs} {
			m.standbyStartup.WithLabelValues(g.Name, step)
		}
		m.standbyOldest.WithLabelValues(g.Name)
		for _, ct := range capacityTypes(g.CapacityPolicy) {
			for _, loc := range g.Locations {
				m.stockOuts.WithLabelValues(g.Cloud, g.InstanceType, loc, string(ct))
			}
		}
	}
	for c := range clouds {
		m.leaked.WithLabelValues(c, cfg.LeakedInstances.Action)
		for _, reason := range deleteReasons {
			m.deleteFailures.WithLabelValues(c, reason)
		}
		m.unknownGroup.WithLabelValues(c)
	}
}

// Reasons of gpuscaler_instances_created_total and
// gpuscaler_instances_deleted_total.
const (
	ReasonScaleUp   = "scale-up"
	ReasonScaleDown = "scale-down"
	ReasonStandby   = "standby"
	ReasonLaunch    = "launch"
	ReasonFailed    = "failed"
)

// createdReason is why a member's instance was ordered: for a standby
// pool, for the launch API, or for its group's target.
func (s *store) createdReason(g *group, mem *member) string {
	switch {
	case g == s.launches:
		return ReasonLaunch
	case mem.standby != standbyNone:
		return ReasonStandby
	}
	return ReasonScaleUp
}

// deletedReason is why a deleted member's instance went: it failed (an
// order, a start, a registration), it was a standby pool's, the launch
// API's caller terminated it, or else it was scaled down.
func (s *store) deletedReason(g *group, mem *member) string {
	switch {
	case g == s.launches:
		return ReasonLaunch
	case mem.peek().errCode != "" || mem.phase == phaseFailed:
		return ReasonFailed
	case mem.standby != standbyNone:
		return ReasonStandby
	}
	return ReasonScaleDown
}
