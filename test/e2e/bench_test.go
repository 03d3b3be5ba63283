package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
)

// BenchmarkPodToFirstOrder measures, on the real test cluster with the
// simulated cloud, the time from creating a GPU pod that fits no node to
// the controller's first create order at the cloud. Every pod stays, so each
// iteration needs a new node.
func BenchmarkPodToFirstOrder(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := startController(b, ctx, "  - {name: h100, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 1000}\n")
	if err := c.kube.Create(ctx, &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"h100"}}}); err != nil {
		b.Fatal(err)
	}
	pods := c.env.Client.CoreV1().Pods("default")
	b.ResetTimer()
	for i := range b.N {
		before := c.engine.Calls()["create"]
		start := time.Now()
		if _, err := pods.Create(ctx, gpuPod(fmt.Sprintf("bench-%d", i)), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for c.engine.Calls()["create"] == before {
			if time.Since(start) > time.Minute {
				b.Fatal("no order within a minute")
			}
			time.Sleep(time.Millisecond)
		}
	}
}
