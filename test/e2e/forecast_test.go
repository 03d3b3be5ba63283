package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/forecast"
	"github.com/gpuscaler/gpuscaler/internal/forecast/configmap"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestNodeProvisionerOrdersAheadOfItsForecast: a pool whose three
// one-GPU pods have come at 9:00 every day for a week (what an earlier
// process learned, in the forecast's ConfigMap on the real API server)
// orders their nodes at 8:52, before any pod exists, within its
// maxExtraHourlyCost: two nodes at 2.29/h under a cap of 5, the third
// once the cap is 7. The learning goes on into the same ConfigMap.
func TestNodeProvisionerOrdersAheadOfItsForecast(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	monday := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	week := 7 * 24 * time.Hour
	clk := clocktesting.NewFakeClock(monday.Add(week + 8*time.Hour + 52*time.Minute))
	var store *configmap.Store
	var learned []byte // what the week taught
	c := startControllerWith(t, ctx, "{bootDelay: 1s, deleteDelay: 1s}",
		"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n",
		func(env *testenv.Env) *provisioner.Forecaster {
			var fc *provisioner.Forecaster
			fc, store, learned = habitForecaster(t, ctx, env, clk, monday)
			return fc
		})
	kube, engine := c.kube, c.engine
	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "inference"}, Spec: v1alpha1.NodeProvisionerSpec{
		NodeGroups: []string{"h100"},
		Forecast:   &v1alpha1.Forecast{MaxExtraHourlyCost: "5"},
	}}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	status := func() v1alpha1.NodeProvisioner {
		var got v1alpha1.NodeProvisioner
		_ = kube.Get(ctx, client.ObjectKey{Name: "inference"}, &got)
		return got
	}
	waitFor(t, ctx, "two nodes ordered ahead under a cap of 5/h", func() bool {
		got := status()
		cond := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionForecasting)
		return engine.Count("e2e") == 2 && got.Status.Forecast != nil && got.Status.Forecast.AheadPods == 2 &&
			cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == provisioner.ForecastOrdering
	})
	got := status()
	if learned := got.Status.Forecast.Learned.Duration; learned < week {
		t.Errorf("status says %s learned, want the week in the ConfigMap", learned)
	}
	waitFor(t, ctx, "a ScaledUp event for the forecast", func() bool {
		evs, err := c.env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=inference"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ScaledUp" && strings.Contains(e.Note, "(forecast)") {
				return true
			}
		}
		return false
	})
	time.Sleep(3 * time.Second) // reconciles come and go: the cap still holds
	if n := engine.Count("e2e"); n != 2 {
		t.Fatalf("%d instances under a cap of two nodes' price", n)
	}

	// change updates the NodeProvisioner, again while the controller's
	// status writes conflict.
	change := func(mutate func(*v1alpha1.NodeProvisioner)) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := status()
			mutate(&got)
			return kube.Update(ctx, &got)
		}); err != nil {
			t.Fatal(err)
		}
	}
	change(func(np *v1alpha1.NodeProvisioner) { np.Spec.Forecast.MaxExtraHourlyCost = "7" })
	waitFor(t, ctx, "the third node once the cap allows it", func() bool {
		return engine.Count("e2e") == 3
	})

	// A new slot: what the pool saw since is saved where the next leader
	// reads it.
	clk.Step(forecast.DefaultSlot)
	change(func(np *v1alpha1.NodeProvisioner) { np.Annotations = map[string]string{"test/poke": "1"} }) // a reconcile now
	waitFor(t, ctx, "the forecast saved into its ConfigMap", func() bool {
		saved, err := store.Load(ctx)
		if err != nil || saved["inference"] == nil {
			return false
		}
		d := forecast.NewDemand()
		return !bytes.Equal(saved["inference"], learned) && d.UnmarshalJSON(saved["inference"]) == nil && d.Learned(clk.Now()) > week
	})
	var cm corev1.ConfigMap
	if err := kube.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "gpuscaler-forecast"}, &cm); err != nil {
		t.Fatal(err)
	}
	if size := len(cm.BinaryData["inference"]); size == 0 || size > 64<<10 {
		t.Errorf("the pool's forecast takes %d bytes in its ConfigMap", size)
	}
}

// habitForecaster is a Forecaster on clk whose store, a ConfigMap on
// env's API server, holds what a week from monday of the "inference"
// pool's habit taught an earlier process: three one-GPU pods arrive at
// 9:00 every day and run until 17:00. It returns the store and what it
// holds too.
func habitForecaster(t *testing.T, ctx context.Context, env *testenv.Env, clk *clocktesting.FakeClock, monday time.Time) (*provisioner.Forecaster, *configmap.Store, []byte) {
	t.Helper()
	store := &configmap.Store{ConfigMaps: env.Client.CoreV1().ConfigMaps(metav1.NamespaceDefault), Name: "gpuscaler-forecast"}
	d := forecast.NewDemand()
	shape := forecast.Shape{GPUs: 1}
	for now := monday; now.Before(monday.Add(7 * 24 * time.Hour)); now = now.Add(time.Minute) {
		running := 0
		if h := now.Sub(monday) % (24 * time.Hour); h >= 9*time.Hour && h < 17*time.Hour {
			running = 3
			if h == 9*time.Hour {
				for range 3 {
					d.Arrive(now, shape)
				}
			}
		}
		d.Observe(now, map[forecast.Shape]int{shape: running})
	}
	learned, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Save(ctx, map[string][]byte{"inference": learned}); err != nil {
		t.Fatal(err)
	}
	fc, err := provisioner.NewForecaster(store, clk, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return fc, store, learned
}

// TestForecastLetsIdleNodesGoSooner: at 13:00, when the pool's learned
// habit expects no pod to arrive, a node left idle goes after the
// forecast's scaleDownDelay (2 s), not the pool's (10 min): the forecast
// vouches for the pool. With the same spec but nothing to be ordered
// ahead (maxExtraHourlyCost "0"), the forecast only learns, and the idle
// node waits out the pool's delay.
func TestForecastLetsIdleNodesGoSooner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, maxExtra string
		goes           bool
	}{{"vouched", "5", true}, {"learning only", "0", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			monday := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
			clk := clocktesting.NewFakeClock(monday.Add(7*24*time.Hour + 13*time.Hour))
			c := startControllerWith(t, ctx, "{bootDelay: 1s, deleteDelay: 1s}",
				"  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 10}\n",
				func(env *testenv.Env) *provisioner.Forecaster {
					fc, _, _ := habitForecaster(t, ctx, env, clk, monday)
					return fc
				})
			createNP(t, ctx, c, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "inference"}, Spec: v1alpha1.NodeProvisionerSpec{
				NodeGroups:     []string{"h100"},
				ScaleDownDelay: &metav1.Duration{Duration: 10 * time.Minute},
				Forecast:       &v1alpha1.Forecast{MaxExtraHourlyCost: tc.maxExtra, ScaleDownDelay: &metav1.Duration{Duration: 2 * time.Second}},
			}})
			pods := c.env.Client.CoreV1().Pods("default")
			if _, err := pods.Create(ctx, gpuPod("job"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, ctx, "the pod running on its node", func() bool {
				p, err := pods.Get(ctx, "job", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodRunning && nodeCount(ctx, c, "h100") == 1
			})
			if err := pods.Delete(ctx, "job", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
			if tc.goes {
				waitFor(t, ctx, "the idle node gone", func() bool {
					return nodeCount(ctx, c, "h100") == 0 && c.engine.Count("e2e") == 0
				})
				return
			}
			time.Sleep(15 * time.Second)
			if n := c.engine.Count("e2e"); n != 1 {
				t.Fatalf("%d instances 15 s into a 10-minute scaleDownDelay, want the idle one", n)
			}
		})
	}
}
