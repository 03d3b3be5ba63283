package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestStandbyHandoverHoldsRegistration runs the hook against a real API
// server, with a client that reads Nodes from a cache indexed by provider
// ID as Karpenter's operator does. A Node that registered again with the
// standby pool's taints gets Karpenter's unregistered taint in place of
// the standby one, beside the taints it had, and the registration waits;
// asked again, the hook lets it go on. A Node of a cold launch, and a
// NodeClaim whose Node has not registered, go on at once, untouched.
func TestStandbyHandoverHoldsRegistration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver")
	}
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := indexedClient(t, ctx, env)

	gpu := corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	standby := corev1.Taint{Key: nodegroup.TaintStandby, Effect: corev1.TaintEffectNoSchedule}
	mkNode := func(name string, taints ...corev1.Taint) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "sim://" + name, Taints: taints}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(name string) *karpv1.NodeClaim {
		return &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: karpv1.NodeClaimStatus{ProviderID: "sim://" + name}}
	}
	taints := func(name string) []corev1.Taint {
		var got []corev1.Taint
		testenv.Poll(t, ctx, 50*time.Millisecond, "node "+name+" in the cache", func() bool {
			n := &corev1.Node{}
			if c.Get(ctx, client.ObjectKey{Name: name}, n) != nil {
				return false
			}
			got = n.Spec.Taints
			return true
		})
		return got
	}
	hook := StandbyHandover{Client: c}

	mkNode("from-pool", gpu, standby)
	taints("from-pool")
	res, err := hook.Registered(ctx, claim("from-pool"))
	if err != nil || !res.Requeue {
		t.Fatalf("a Node with the standby taint: %+v, %v; want the registration held", res, err)
	}
	testenv.Poll(t, ctx, 50*time.Millisecond, "the standby taint swapped for the unregistered one", func() bool {
		got := taints("from-pool")
		return !slices.ContainsFunc(got, isStandby) && slices.ContainsFunc(got, func(t corev1.Taint) bool { return t.MatchTaint(&karpv1.UnregisteredNoExecuteTaint) }) &&
			slices.ContainsFunc(got, func(t corev1.Taint) bool { return t.MatchTaint(&gpu) })
	})
	if res, err := hook.Registered(ctx, claim("from-pool")); err != nil || res.Requeue || res.RequeueAfter != 0 {
		t.Fatalf("asked again once swapped: %+v, %v; want the registration to go on", res, err)
	}

	mkNode("cold", karpv1.UnregisteredNoExecuteTaint)
	taints("cold")
	before := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: "cold"}, before); err != nil {
		t.Fatal(err)
	}
	if res, err := hook.Registered(ctx, claim("cold")); err != nil || res.Requeue {
		t.Fatalf("a cold launch's Node: %+v, %v; want the registration to go on", res, err)
	}
	after, err := env.Client.CoreV1().Nodes().Get(ctx, "cold", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a cold launch's Node was written: taints %v", after.Spec.Taints)
	}
	if res, err := hook.Registered(ctx, claim("not-yet")); err != nil || res.Requeue {
		t.Fatalf("a NodeClaim with no Node: %+v, %v; want Karpenter's own answer", res, err)
	}
}

// indexedClient is a client that reads Nodes from an informer cache with
// the "spec.providerID" index Karpenter's operator adds, and writes to the
// API server.
func indexedClient(t *testing.T, ctx context.Context, env *testenv.Env) client.Client {
	t.Helper()
	informers, err := cache.New(env.Config, cache.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := informers.IndexField(ctx, &corev1.Node{}, "spec.providerID", func(o client.Object) []string {
		return []string{o.(*corev1.Node).Spec.ProviderID}
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	c, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
