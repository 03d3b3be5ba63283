package provisioner

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/clock"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
	"github.com/gpuscaler/gpuscaler/internal/gpu"
)

// Forecaster learns each pool's GPU demand from what the controller sees
// (pods that run on the pool's nodes or wait for it, by shape), saves it
// every slot, and tells the plan which pods to provision ahead. Safe for
// concurrent use.
type Forecaster struct {
	store forecast.Store
	clock clock.PassiveClock
	met   *forecastMetrics

	mu sync.Mutex
	// ledger holds each pool's Demand; pools what observing it needs.
	ledger *forecast.Ledger
	pools  map[string]*learner
	// lastErr is the store's last error reading, "" after a success.
	lastErr string
}

// learner is a pool's Demand (the ledger's) and what observing it needs.
type learner struct {
	demand *forecast.Demand
	// pending are the pods seen waiting last time: a pod not among them
	// arrived since.
	pending map[types.UID]bool
	// exemplar is the last pod seen of each shape: the pods provisioned
	// ahead are made in its likeness (selectors, tolerations, requests).
	exemplar map[forecast.Shape]*corev1.Pod
	// trusted is what Demand.Trusted said last, by shape.
	trusted map[forecast.Shape]bool
}

// NewForecaster returns a Forecaster that keeps pools' demand in store (nil:
// in memory only) on the clock given (nil: the real one), its metrics
// registered with reg (nil: none).
func NewForecaster(store forecast.Store, clk clock.PassiveClock, reg prometheus.Registerer) (*Forecaster, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	met, err := newForecastMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Forecaster{store: store, clock: clk, met: met, ledger: forecast.NewLedger(store), pools: map[string]*learner{}}, nil
}

// forecastMetrics are the forecast's gauges, by pool.
type forecastMetrics struct {
	pods, expected, ahead, ordering *prometheus.GaugeVec
}

func newForecastMetrics(reg prometheus.Registerer) (*forecastMetrics, error) {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"pool"})
	}
	m := &forecastMetrics{
		pods:     gauge("gpuscaler_forecast_actual_pods", "GPU pods running on or waiting for a NodeProvisioner's nodes."),
		expected: gauge("gpuscaler_forecast_expected_pods", "GPU pods a NodeProvisioner's forecast expected to run or wait now."),
		ahead:    gauge("gpuscaler_forecast_ahead_pods", "Pods a NodeProvisioner's last plan provisioned ahead of its forecast."),
		ordering: gauge("gpuscaler_forecast_ordering", "1 while a NodeProvisioner orders ahead of its forecast."),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.pods, m.expected, m.ahead, m.ordering} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("forecast metrics: %w", err)
		}
	}
	return m, nil
}

// Outlook is what a pool's forecast says at one reconcile.
type Outlook struct {
	// Learned is how long the pool's demand has been observed; Pods how
	// many of its pods run or wait; Expected how many the forecast
	// expected (NaN before it has seen this time of day).
	Learned  time.Duration
	Pods     int
	Expected float64
	// Ahead are the pods to provision ahead of demand, in the order to
	// serve them; nil while the pool does not order ahead (see Reason).
	// Soon are those of them expected within the forecast's
	// standbyLeadTime: served from standby pools now (OrdersAhead).
	Ahead, Soon []*corev1.Pod
	// Reason is why the pool orders ahead or not (the Forecasting
	// condition's reason) and Message says more.
	Reason, Message string
	// Whole is set when the forecast orders ahead for every shape of pod
	// the pool has seen (none missed): the capacity it keeps covers the
	// pool, not some of its pods.
	Whole bool
	// Lost and Regained are the shapes whose forecasts stopped or began
	// to hit well enough to order on, at this reconcile.
	Lost, Regained []forecast.Shape
	// NewError is set when the store failed otherwise than last time.
	NewError bool
}

// Forecasting condition reasons.
const (
	ForecastDisabled    = "Disabled"
	ForecastLearning    = "Learning"
	ForecastMissing     = "Missing"
	ForecastOrdering    = "OrderingAhead"
	ForecastUnavailable = "StoreUnavailable"
)

// Observe learns a pool's demand now, pending and running its GPU pods,
// and returns its outlook under spec (nil: learning only). A store that
// cannot be read leaves the pool unlearned (rather than overwrite what it
// holds) and says so in the outlook.
func (f *Forecaster) Observe(ctx context.Context, pool string, spec *v1alpha1.Forecast, pending, running []*corev1.Pod) Outlook {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	if err := f.ledger.Load(ctx, now); err != nil {
		out := Outlook{Reason: ForecastUnavailable, Message: err.Error(), Expected: math.NaN(), NewError: err.Error() != f.lastErr}
		f.lastErr = err.Error()
		return out
	}
	f.lastErr = ""
	l := f.pools[pool]
	if l == nil {
		l = &learner{demand: f.ledger.Of(pool), pending: map[types.UID]bool{}, exemplar: map[forecast.Shape]*corev1.Pod{},
			trusted: map[forecast.Shape]bool{}}
		f.pools[pool] = l
	}
	count := map[forecast.Shape]int{}
	seen := make(map[types.UID]bool, len(pending))
	for _, p := range pending {
		s := ShapeOf(p)
		count[s]++
		seen[p.UID] = true
		if !l.pending[p.UID] {
			l.demand.Arrive(now, s)
		}
		l.exemplar[s] = p
	}
	l.pending = seen
	for _, p := range running {
		s := ShapeOf(p)
		count[s]++
		if l.exemplar[s] == nil {
			l.exemplar[s] = p
		}
	}
	l.demand.Observe(now, count)
	out := Outlook{Learned: l.demand.Learned(now), Expected: math.NaN()}
	for _, n := range count {
		out.Pods += n
	}
	if v, ok := l.demand.Expected(now); ok {
		out.Expected = v
	}
	for _, s := range l.demand.Shapes() {
		trusted := l.demand.Trusted(s)
		switch {
		case trusted && !l.trusted[s]:
			out.Regained = append(out.Regained, s)
		case !trusted && l.trusted[s]:
			out.Lost = append(out.Lost, s)
		}
		l.trusted[s] = trusted
	}
	f.outlook(&out, l, spec, now)
	f.met.pods.WithLabelValues(pool).Set(float64(out.Pods))
	if math.IsNaN(out.Expected) {
		f.met.expected.DeleteLabelValues(pool)
	} else {
		f.met.expected.WithLabelValues(pool).Set(out.Expected)
	}
	return out
}

// outlook decides whether the pool orders ahead now, and of what.
func (f *Forecaster) outlook(out *Outlook, l *learner, spec *v1alpha1.Forecast, now time.Time) {
	maxExtra, _ := MaxExtraHourlyCost(spec)
	// The CRD defaults them alike; an object written before it did has
	// none.
	trainFor, lead := config.DefaultForecastTrainFor, config.DefaultForecastLeadTime
	if spec != nil && spec.TrainFor != nil {
		trainFor = spec.TrainFor.Duration
	}
	if spec != nil && spec.LeadTime != nil && spec.LeadTime.Duration > 0 {
		lead = spec.LeadTime.Duration
	}
	switch {
	case maxExtra <= 0:
		out.Reason, out.Message = ForecastDisabled, "learning only: forecast.maxExtraHourlyCost is unset or 0"
		return
	case out.Learned < trainFor:
		out.Reason, out.Message = ForecastLearning, fmt.Sprintf("learned %s of %s", out.Learned.Truncate(time.Minute), trainFor)
		return
	}
	var untrusted []string
	for _, s := range l.demand.Shapes() {
		if !l.demand.Trusted(s) {
			untrusted = append(untrusted, shapeString(s))
		}
	}
	for _, w := range l.demand.Ahead(now, lead, Coverage(spec)) {
		for i := range w.Pods {
			out.Ahead = append(out.Ahead, expectedPod(w.Shape, l.exemplar[w.Shape], i))
		}
	}
	for _, w := range l.demand.Ahead(now, StandbyLeadTime(spec, lead), Coverage(spec)) {
		for i := range w.Pods {
			out.Soon = append(out.Soon, expectedPod(w.Shape, l.exemplar[w.Shape], i))
		}
	}
	switch {
	case len(untrusted) > 0 && len(untrusted) == len(l.demand.Shapes()):
		out.Reason = ForecastMissing
		out.Message = fmt.Sprintf("forecasts of %v missed by more than %.0f%% of arrivals beyond chance: reacting only", untrusted, forecast.MaxMiss*100)
	case len(untrusted) > 0:
		out.Reason = ForecastOrdering
		out.Message = fmt.Sprintf("ordering ahead; forecasts of %v miss: reacting for those", untrusted)
	default:
		out.Reason, out.Message, out.Whole = ForecastOrdering, "ordering ahead", l.demand.AllTrusted()
	}
}

// Report records what the plan made of a pool's outlook: ahead of its
// pods were provisioned for. It saves what every pool learned once a slot.
func (f *Forecaster) Report(ctx context.Context, pool string, out Outlook, ahead int) error {
	f.met.ahead.WithLabelValues(pool).Set(float64(ahead))
	ordering := 0.0
	if out.Reason == ForecastOrdering {
		ordering = 1
	}
	f.met.ordering.WithLabelValues(pool).Set(ordering)
	return f.save(ctx, false)
}

// Forget drops what a pool learned: the pool is gone.
func (f *Forecaster) Forget(ctx context.Context, pool string) error {
	f.mu.Lock()
	delete(f.pools, pool)
	known := f.ledger.Forget(pool)
	f.mu.Unlock()
	for _, g := range []*prometheus.GaugeVec{f.met.pods, f.met.expected, f.met.ahead, f.met.ordering} {
		g.DeleteLabelValues(pool)
	}
	if !known {
		return nil
	}
	return f.save(ctx, true)
}

// save writes every pool's Demand to the store, once a slot unless
// force; the write happens outside the lock.
func (f *Forecaster) save(ctx context.Context, force bool) error {
	f.mu.Lock()
	now := f.clock.Now()
	due, ok, err := f.ledger.Due(now, force, nil)
	f.mu.Unlock()
	if err != nil || !ok {
		return err
	}
	if err := f.store.Save(ctx, due); err != nil {
		return fmt.Errorf("save the forecasts: %w", err)
	}
	f.mu.Lock()
	f.ledger.Saved(now)
	f.mu.Unlock()
	return nil
}

// ShapeOf is a pod's shape of demand: its whole GPUs, or its MIG devices
// ("1g.10gb", or "2x1g.10gb" for two).
func ShapeOf(p *corev1.Pod) forecast.Shape {
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	s := forecast.Shape{GPUs: int(req.Name(gpu.ResourceGPU, "").Value())}
	var migs []string
	for name, q := range req {
		if dev, ok := cutMIG(name); ok && q.Sign() > 0 {
			if n := q.Value(); n > 1 {
				dev = strconv.FormatInt(n, 10) + "x" + dev
			}
			migs = append(migs, dev)
		}
	}
	sort.Strings(migs)
	if len(migs) > 0 {
		s.MIG = migs[0]
	}
	return s
}

func cutMIG(name corev1.ResourceName) (string, bool) {
	if _, ok := gpu.GPUFraction(name); !ok || name == gpu.ResourceGPU {
		return "", false
	}
	return string(name[len(gpu.MIGResourcePrefix):]), true
}

func shapeString(s forecast.Shape) string {
	if s.MIG != "" {
		return "mig-" + s.MIG
	}
	return strconv.Itoa(s.GPUs) + "-gpu"
}

// expectedPod is the i-th pod of a shape expected ahead of demand: a copy
// of the last pod seen of the shape (so that it needs the same nodes), or,
// with none seen since the process started, a pod asking for the shape's
// GPUs and tolerating every taint.
func expectedPod(s forecast.Shape, exemplar *corev1.Pod, i int) *corev1.Pod {
	name := fmt.Sprintf("forecast-%s-%d", shapeString(s), i)
	unschedulable := corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}
	if exemplar != nil {
		spec := *exemplar.Spec.DeepCopy()
		spec.NodeName = ""
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: exemplar.Namespace, Labels: exemplar.Labels}, Spec: spec, Status: unschedulable}
	}
	res := corev1.ResourceList{}
	if s.MIG != "" {
		n, dev := int64(1), s.MIG
		if count, rest, ok := cutCount(s.MIG); ok {
			n, dev = count, rest
		}
		res[gpu.MIGResourceName(dev)] = *resource.NewQuantity(n, resource.DecimalSI)
	} else {
		res[gpu.ResourceGPU] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
		Status: unschedulable,
	}
}

// cutCount splits "2x1g.10gb" into 2 and "1g.10gb".
func cutCount(mig string) (int64, string, bool) {
	count, dev, ok := strings.Cut(mig, "x")
	n, err := strconv.ParseInt(count, 10, 64)
	return n, dev, ok && err == nil
}

// observe feeds the pool's forecast what runs on its nodes and waits for
// them, and reports changes of its trust in Events while it may order.
func (r *Reconciler) observe(ctx context.Context, np *v1alpha1.NodeProvisioner, nodes []*corev1.Node, pods, pending []*corev1.Pod,
	groupOf func(*corev1.Node) string) Outlook {
	if r.Forecaster == nil {
		return Outlook{}
	}
	inPool := map[string]bool{}
	for _, n := range nodes {
		if groupOf(n) != "" {
			inPool[n.Name] = true
		}
	}
	var running []*corev1.Pod
	for _, p := range pods {
		if inPool[p.Spec.NodeName] && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded &&
			p.Status.Phase != corev1.PodFailed && gpu.PodRequestsGPUs(p) {
			running = append(running, p)
		}
	}
	out := r.Forecaster.Observe(ctx, np.Name, np.Spec.Forecast, pending, running)
	if maxExtra, _ := MaxExtraHourlyCost(np.Spec.Forecast); maxExtra > 0 {
		for _, s := range out.Lost {
			r.Recorder.Eventf(np, nil, corev1.EventTypeWarning, "ForecastMissing", "Forecast",
				"forecasts of %s pods missed by more than %.0f%% of arrivals beyond chance: reacting only for them", shapeString(s), forecast.MaxMiss*100)
		}
		for _, s := range out.Regained {
			r.Recorder.Eventf(np, nil, corev1.EventTypeNormal, "ForecastTrusted", "Forecast", "forecasts of %s pods hit: ordering ahead for them", shapeString(s))
		}
	}
	if out.NewError {
		r.Logger.Warn("forecast unavailable: the pool reacts only until its store can be read", "pool", np.Name, "error", out.Message)
	}
	return out
}

// setForecastStatus writes a pool's outlook into its status.
func setForecastStatus(np *v1alpha1.NodeProvisioner, out Outlook, ahead int) {
	st := &v1alpha1.ForecastStatus{Learned: metav1.Duration{Duration: out.Learned.Truncate(time.Second)}, Pods: int32(out.Pods), AheadPods: int32(ahead)}
	if !math.IsNaN(out.Expected) {
		v := int32(math.Round(out.Expected))
		st.ExpectedPods = &v
	}
	np.Status.Forecast = st
	apimeta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionForecasting,
		Status: conditionStatus(out.Reason == ForecastOrdering), Reason: out.Reason, Message: out.Message, ObservedGeneration: np.Generation})
}
