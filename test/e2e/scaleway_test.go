package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/bootstrap"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestNodeProvisionerScalesFromZeroOnScaleway: the NodeProvisioner over
// an L4 group on Scaleway's fake API, with the real bootstrap renderer
// (k3s, token from a Secret, cloud-init): three pending one-GPU pods get
// three servers, whose kubelets register from the flags in their
// cloud-init (provider ID scaleway://<zone>/<id>, labels, taints), and
// the pods run. Deleting the pool deletes every server and volume.
func TestNodeProvisionerScalesFromZeroOnScaleway(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := testenv.Start(t, testenv.Options{ControllerManager: true, Scheduler: true, Kwok: true, CRDDirs: []string{"../../deploy/crds"}})
	log := slog.New(slog.DiscardHandler)
	const secretKey, projectID = "11111111-2222-4333-8444-555555555555", "22222222-2222-4222-8222-222222222222"
	if _, err := env.Client.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "k3s-join", Namespace: "kube-system"},
		StringData: map[string]string{"token": "K10e2etoken::server:abcdef"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
clusterName: e2e
kubeconfig: ` + env.Kubeconfig + `
sync: {period: 1s, listLag: 2s} # the fake lists every server it made at once
clouds:
  scaleway: {}
nodeGroups:
  - name: l4
    cloud: scaleway
    instanceType: L4-1-24G
    locations: [fr-par-2, nl-ams-1]
    maxSize: 6
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    bootstrap:
      method: k3s
      server: https://10.0.0.1:6443
      version: v1.33.4+k3s1   # the test's API server is no k3s server
      tokenSecretRef: {namespace: kube-system, name: k3s-join, key: token}
`))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := scwtest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Second), DeleteDelay: sim.Duration(time.Second)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := scwtest.New(engine, scwtest.Options{SecretKey: secretKey})
	defer fake.Close()
	scw, err := scaleway.NewClient(scaleway.ClientOptions{AccessKey: "SCWACCESSKEY0000TEST", SecretKey: secretKey, ProjectID: projectID, APIURL: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	prov := scaleway.New(scw, scaleway.Options{ClusterName: "e2e", ProjectID: projectID, Zones: []string{"fr-par-2", "nl-ams-1"}, Logger: log})
	renderer, err := bootstrap.New(cfg, bootstrap.Options{Kube: env.Client, Logger: log,
		Formats: map[string]bootstrap.Format{scaleway.Name: bootstrap.FormatCloudInit}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, kube := runController(t, ctx, env, cfg, map[string]cloud.Provider{scaleway.Name: prov}, renderer, nil)
	kubelets := fake.Kubelets(env.Client, sim.RegistrarOptions{Kwok: true, Logger: log})
	go func() { _ = kubelets.Run(runCtx) }()

	np := &v1alpha1.NodeProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "l4"}, Spec: v1alpha1.NodeProvisionerSpec{NodeGroups: []string{"l4"}}}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := env.Client.CoreV1().Pods("default").Create(ctx, gpuPod(fmt.Sprintf("infer-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "3 pods Running on 3 Scaleway nodes", func() bool {
		pods, err := env.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 3 && len(readyGPUNodes(ctx, env.Client)) == 3
	})
	servers := fake.Servers()
	if len(servers) != 3 {
		t.Fatalf("%d servers for 3 one-GPU pods", len(servers))
	}
	for _, n := range readyGPUNodes(ctx, env.Client) {
		if !strings.HasPrefix(n.Spec.ProviderID, "scaleway://fr-par-2/") || n.Labels["gpuscaler.dev/node-group"] != "l4" ||
			n.Labels["nvidia.com/gpu.product"] != "NVIDIA-L4" || !hasTaint(n, "nvidia.com/gpu") {
			t.Errorf("node %s: providerID %s labels %v taints %v", n.Name, n.Spec.ProviderID, n.Labels, n.Spec.Taints)
		}
	}
	for _, sv := range servers {
		if strings.Contains(sv.BootCloudInit, secretKey) || !strings.Contains(sv.BootCloudInit, "#cloud-config") {
			t.Errorf("cloud-init of %s holds a Scaleway key, or is no cloud-config", sv.Name)
		}
	}
	if err := kube.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "every server and volume deleted and the NodeProvisioner gone", func() bool {
		var got v1alpha1.NodeProvisioner
		err := kube.Get(ctx, client.ObjectKey{Name: "l4"}, &got)
		return fake.ServerCount() == 0 && fake.VolumeCount() == 0 && apierrors.IsNotFound(err)
	})
}
