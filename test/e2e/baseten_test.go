package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/provisioner"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// basetenManifest is a NodeProvisioner as Baseten's users run it today,
// over two GKE node pools' MIGs (one per zone).
const basetenManifest = `apiVersion: compute.baseten.co/v1alpha1
kind: NodeProvisioner
metadata:
  name: l4-pool
  namespace: node-provisioner
spec:
  existingInstanceGroupNames:
    - gke-prod-l4-pool-a-grp
    - zones/us-central1-b/instanceGroupManagers/gke-prod-l4-pool-b-grp
  minGPUUtilizationPercent: 50
  minUnutilizedGPUNodes: 1
  scaleDownDelay: 2s
`

// TestBasetenNodeProvisionerOnGCP: a Baseten NodeProvisioner manifest,
// converted by `gpuscaler config convert` and applied, drives the real
// controller binary over GCP's fake API with no node group in its config:
// the two MIGs' templates give the machine type, the node labels (the
// Baseten provisioner-name label among them) and taints. A pending GPU pod
// that selects the pool by that label gets a node from zero: the first
// zone's MIG is stocked out (its instance reports it in lastAttempt), so
// the order moves to the second zone's MIG; one spare node is kept
// (minUnutilizedGPUNodes); once the pod goes, the pool shrinks back to the
// spare. The MIGs' target sizes follow, and nothing is left half-made.
func TestBasetenNodeProvisionerOnGCP(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/crds"}})
	const project, zoneA, zoneB = "baseten-prod", "us-central1-a", "us-central1-b"
	engine, err := gcptest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Second), DeleteDelay: sim.Duration(time.Second)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine.SetCapacity(cloud.OfferingKey{InstanceType: "g2-standard-8", Location: zoneA, CapacityType: cloud.OnDemand}, 0)
	fake := gcptest.New(engine, gcptest.Options{Project: project})
	t.Cleanup(fake.Close)
	tmpl := fake.AddTemplate(gcptest.Template{Name: "gke-prod-l4-pool-7f3a", MachineType: "g2-standard-8", Metadata: map[string]string{
		"kube-labels": "cloud.google.com/gke-nodepool=l4-pool,cloud.google.com/gke-accelerator=nvidia-l4," + provisioner.LabelProvisionerName + "=l4-pool",
		"kube-env":    "CLUSTER_NAME: prod\nNODE_TAINTS: nvidia.com/gpu=present:NoSchedule\n",
	}})
	fake.AddGroupFrom(zoneA, "gke-prod-l4-pool-a-grp", tmpl)
	fake.AddGroupFrom(zoneB, "gke-prod-l4-pool-b-grp", tmpl)
	// Handed over both ways the docs name: one MIG marked in its
	// description, the other listed in the config.
	fake.SetDescription(zoneA, "gke-prod-l4-pool-a-grp", "GKE node pool l4-pool; gpuscaler.dev/cluster=prod")
	go func() { _ = fake.Kubelets(env.Client, sim.RegistrarOptions{Kwok: true}).Run(ctx) }()

	dir := t.TempDir()
	manifest := filepath.Join(dir, "baseten.yaml")
	writeFile(t, manifest, basetenManifest)
	converted, err := exec.CommandContext(ctx, gpuscalerBin, "config", "convert", manifest).Output()
	if err != nil {
		t.Fatalf("config convert: %v", err)
	}
	var np v1alpha1.NodeProvisioner
	if err := yaml.UnmarshalStrict(converted, &np); err != nil {
		t.Fatalf("converted manifest: %v\n%s", err, converted)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`
clusterName: prod
kubeconfig: %q
sync: {period: 1s, listLag: 2s} # the fake MIGs list what they were asked for at once
clouds:
  gcp: {project: %s, endpoint: %q, zone: %s, adoptInstanceGroups: [zones/us-central1-b/instanceGroupManagers/gke-prod-l4-pool-b-grp]}
`, env.Kubeconfig, project, fake.URL, zoneA))
	addr := loopback(t)
	startGPUScalerLogged(t, env, "baseten", addr, nil, "controller", "--config", cfgPath, "--metrics-address", addr, "--leader-elect=false")

	kube := controllerClient(t, env)
	if err := kube.Create(ctx, &np); err != nil {
		t.Fatal(err)
	}
	pod := gpuPod("infer-0")
	pod.Spec.NodeSelector = map[string]string{provisioner.LabelProvisionerName: "l4-pool"}
	if _, err := env.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pod Running on a zone-b node, and one spare node", func() bool {
		p, err := env.Client.CoreV1().Pods("default").Get(ctx, "infer-0", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && len(readyGPUNodes(ctx, env.Client)) == 2
	})
	for _, n := range readyGPUNodes(ctx, env.Client) {
		if !strings.HasPrefix(n.Spec.ProviderID, "gce://"+project+"/"+zoneB+"/") || n.Labels[provisioner.LabelProvisionerName] != "l4-pool" {
			t.Errorf("node %s: provider ID %s, labels %v", n.Name, n.Spec.ProviderID, n.Labels)
		}
	}
	if a, b := fake.TargetSize(zoneA, "gke-prod-l4-pool-a-grp"), fake.TargetSize(zoneB, "gke-prod-l4-pool-b-grp"); a != 0 || b != 2 {
		t.Errorf("target sizes: zone a %d, zone b %d; want 0 (stocked out, its instance taken out) and 2", a, b)
	}
	if len(fake.Instances(zoneA, "gke-prod-l4-pool-a-grp")) != 0 {
		t.Errorf("the stocked-out MIG keeps members: %v", fake.Instances(zoneA, "gke-prod-l4-pool-a-grp"))
	}
	if err := env.Client.CoreV1().Pods("default").Delete(ctx, "infer-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pool back to its one spare node", func() bool {
		return len(readyGPUNodes(ctx, env.Client)) == 1 && fake.TargetSize(zoneB, "gke-prod-l4-pool-b-grp") == 1 &&
			len(fake.Instances(zoneB, "gke-prod-l4-pool-b-grp")) == 1
	})
	var got v1alpha1.NodeProvisioner
	if err := kube.Get(ctx, client.ObjectKey{Name: "l4-pool"}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Groups) != 2 || got.Status.Groups[0].Name != "gke-prod-l4-pool-a-grp" {
		t.Errorf("status groups %+v; want the two MIGs' groups, zone a first", got.Status.Groups)
	}
}
