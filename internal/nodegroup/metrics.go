package nodegroup

import "github.com/prometheus/client_golang/prometheus"

// metrics are the node-group core's Prometheus series.
type metrics struct {
	apiCalls        *prometheus.CounterVec
	apiLatency      *prometheus.HistogramVec
	instances       *prometheus.GaugeVec
	targetSize      *prometheus.GaugeVec
	scaleUpFailures *prometheus.CounterVec
	hourlySpend     *prometheus.GaugeVec
	leaked          *prometheus.CounterVec
	deleteFailures  *prometheus.CounterVec
	vanished        *prometheus.CounterVec
	unknownGroup    *prometheus.GaugeVec
	stockOuts       *prometheus.CounterVec
	costLimit       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
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
			Help: "Instances by node group and state (creating, running, deleting, failed).",
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
			Help: "Hourly price of the instances a node group holds, in the cloud's currency.",
		}, []string{"group"}),
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
		unknownGroup: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_unknown_group_instances",
			Help: "Instances of this cluster whose node group this configuration does not know; they are left alone.",
		}, []string{"cloud"}),
		stockOuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscaler_stockouts_total",
			Help: "Orders refused for want of capacity, by offering; the offering is then skipped for sync.offeringBackoff.",
		}, []string{"cloud", "instance_type", "location", "capacity_type"}),
		costLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscaler_hourly_cost_limit",
			Help: "The configured maxHourlyCost, by node group; group=\"\" is the cluster-wide cap. Absent where none is set.",
		}, []string{"group"}),
	}
	if reg != nil {
		reg.MustRegister(m.apiCalls, m.apiLatency, m.instances, m.targetSize, m.scaleUpFailures, m.hourlySpend, m.leaked,
			m.deleteFailures, m.vanished, m.unknownGroup, m.stockOuts, m.costLimit)
	}
	return m
}
