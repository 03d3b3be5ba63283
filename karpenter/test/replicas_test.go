package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
)

// TestTwoOperatorReplicas runs two operators against the fake of Verda's
// API: only the Lease holder orders, so each pending pod gets one machine;
// when the leader dies the standby takes over, adopts the machines, and
// still orders one per NodeClaim; with no pods left, every machine goes.
func TestTwoOperatorReplicas(t *testing.T) {
	t.Parallel()
	env, kube := startCluster(t)
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Second), DeleteDelay: sim.Duration(time.Second)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "secret"})
	t.Cleanup(fake.Close)
	// The machines' kubelets: each running instance registers its Node
	// with the provider ID the Verda backend gives it and Karpenter's
	// unregistered taint; kwok keeps it Ready.
	types := map[string]cloud.InstanceType{}
	for _, it := range verdatest.Catalog() {
		types[it.Name] = it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubelets := sim.NewKubelets(engine, "verda-fake", func() ([]sim.Machine, error) {
		var out []sim.Machine
		for _, in := range engine.Instances("verda-account") {
			if in.State == cloud.StateRunning {
				out = append(out, sim.Machine{Name: in.Name, ProviderID: "verda://" + in.Name, IP: in.IP, Type: types[in.InstanceType],
					Taints: []corev1.Taint{karpv1.UnregisteredNoExecuteTaint}})
			}
		}
		return out, nil
	}, env.Client, sim.RegistrarOptions{Kwok: true})
	go func() { _ = kubelets.Run(ctx) }()

	cfgPath := filepath.Join(env.Dir, "gpuscaler.yaml")
	write(t, cfgPath, fmt.Sprintf(`
clusterName: karpenter-replicas
kubeconfig: %q
metrics: {address: "0"}
sync: {period: 2s}
clouds:
  verda: {endpoint: %q}
nodeGroups:
  - {name: tpl, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 0, maxSize: 1, managedBy: karpenter}
`, env.Kubeconfig, fake.URL+"/v1"))
	creds := []string{"VERDA_CLIENT_ID=id", "VERDA_CLIENT_SECRET=secret"}
	kills := map[string]func(){
		"replica-a": startNamedOperator(t, env, "replica-a", cfgPath, creds...),
		"replica-b": startNamedOperator(t, env, "replica-b", cfgPath, creds...),
	}
	live := func() int {
		n := 0
		for _, in := range engine.Instances("verda-account") {
			if in.State != cloud.StateDeleting {
				n++
			}
		}
		return n
	}
	creates := func() int { return fake.Calls()[http.MethodPost+" /instances"] }

	apply(t, ctx, kube, &v1alpha1.GPUNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "h100"},
		Spec: v1alpha1.GPUNodeClassSpec{Cloud: "verda", Locations: []string{"FIN-01"}}})
	apply(t, ctx, kube, nodePool("gpu", "h100",
		karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"1H100.80S.30V"}},
		karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}}))
	trainers := deployment("trainers", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
	two := int32(2)
	trainers.Spec.Replicas = &two
	apply(t, ctx, kube, trainers)
	running := func(n int) func() bool {
		return func() bool {
			var pods corev1.PodList
			if kube.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{"app": "trainers"}) != nil {
				return false
			}
			r := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					r++
				}
			}
			return r == n
		}
	}
	waitFor(t, ctx, "two trainers Running", running(2))
	time.Sleep(5 * time.Second) // the standby would have ordered by now
	if n, c := live(), creates(); n != 2 || c != 2 {
		t.Fatalf("with two replicas: %d machines, %d create calls; want 2 and 2", n, c)
	}

	// The leader dies; the standby takes the Lease, finds the machines and
	// orders the third pod's only.
	// Both replicas run on one host, so the Lease's holder (host and a
	// random suffix) does not say which: the leader's log does.
	var leaders []string
	for name := range kills {
		data, err := os.ReadFile(filepath.Join(env.Dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "leading: the node-group core runs") {
			leaders = append(leaders, name)
		}
	}
	if len(leaders) != 1 {
		t.Fatalf("replicas whose core runs: %v; want exactly one", leaders)
	}
	kills[leaders[0]]()
	three := int32(3)
	if err := kube.Get(ctx, client.ObjectKeyFromObject(trainers), trainers); err != nil {
		t.Fatal(err)
	}
	trainers.Spec.Replicas = &three
	if err := kube.Update(ctx, trainers); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "three trainers Running under the new leader", running(3))
	time.Sleep(5 * time.Second)
	if n, c := live(), creates(); n != 3 || c != 3 {
		t.Fatalf("after failover: %d machines, %d create calls; want 3 and 3", n, c)
	}
	if err := kube.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "trainers", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "every machine deleted", func() bool { return len(engine.Instances("verda-account")) == 0 })
}
