package cloudprovider_test

import (
	"context"
	"testing"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/karpenter/apis/v1alpha1"
	"github.com/gpuscaler/gpuscaler/karpenter/cloudprovider"
)

// offersCore answers Offers with Verda's recorded catalog (55 types) in
// four locations under both capacity types, as the core holds it; the
// other calls are not used by GetInstanceTypes.
type offersCore struct {
	cloudprovider.Core
	offers nodegroup.Offers
}

func (c *offersCore) Offers(string, []string) (nodegroup.Offers, bool) { return c.offers, true }

func verdaOffers() nodegroup.Offers {
	o := nodegroup.Offers{Cloud: "verda", Types: verdatest.Catalog(), Regions: map[string]string{}, Version: nodegroup.Version{Epoch: 1, N: 1}}
	for _, loc := range []string{"FIN-01", "FIN-02", "FIN-03", "ICE-01"} {
		o.Regions[loc] = loc
		for _, t := range o.Types {
			for _, ct := range []cloud.CapacityType{cloud.OnDemand, cloud.Spot} {
				if p := t.Price(ct); p > 0 {
					o.Offerings = append(o.Offerings, cloud.Offering{InstanceType: t.Name, Location: loc, CapacityType: ct, Price: p, Available: true})
				}
			}
		}
	}
	return o
}

func benchProvider(b *testing.B, core *offersCore) (*cloudprovider.CloudProvider, *karpv1.NodePool) {
	started := make(chan struct{})
	close(started)
	p := cloudprovider.New(cloudprovider.Options{Kube: kubeWith(readyClass("all", v1alpha1.GPUNodeClassSpec{Cloud: "verda"})), Core: inforce.Fixed[cloudprovider.Core](core), Started: started,
		Templates: func(string) (config.NodeGroup, bool) { return config.NodeGroup{}, false }})
	pool := &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
		NodeClassRef: &karpv1.NodeClassReference{Group: "gpuscaler.dev", Kind: "GPUNodeClass", Name: "all"}}}}}
	return p, pool
}

// BenchmarkGetInstanceTypes is Karpenter's call on every provisioning and
// disruption pass, with nothing changed since the last: no cloud call, the
// class read from the client and the built types returned.
func BenchmarkGetInstanceTypes(b *testing.B) {
	p, pool := benchProvider(b, &offersCore{offers: verdaOffers()})
	ctx := context.Background()
	types, err := p.GetInstanceTypes(ctx, pool)
	if err != nil || len(types) != 55 {
		b.Fatalf("%d types, %v", len(types), err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.GetInstanceTypes(ctx, pool); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetInstanceTypesRebuild is the call after the core's offerings
// changed (a refresh, a stock-out): every instance type built again.
func BenchmarkGetInstanceTypesRebuild(b *testing.B) {
	core := &offersCore{offers: verdaOffers()}
	p, pool := benchProvider(b, core)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		core.offers.Version.N++
		if _, err := p.GetInstanceTypes(ctx, pool); err != nil {
			b.Fatal(err)
		}
	}
}
