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
			Help: "Owned instances found leaked (unregistered past the grace period, or in no group), by cloud and action taken.",
		}, []string{"cloud", "action"}),
	}
	if reg != nil {
		reg.MustRegister(m.apiCalls, m.apiLatency, m.instances, m.targetSize, m.scaleUpFailures, m.hourlySpend, m.leaked)
	}
	return m
}
