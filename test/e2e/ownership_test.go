package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// TestTwoInstallsShareNoInstances runs two installs of gpuscaler with the
// same clusterName on one cloud account (the Verda API's fake, served
// from this test), as two clusters whose operators both kept the chart's
// old default would. The first records its install ID, the kube-system
// namespace's UID read from the real API server, on the instance it
// orders; the second, started with another ID, reads it back from the
// cloud and refuses to start, naming both; told to take the first over,
// it starts and keeps the instance.
func TestTwoInstallsShareNoInstances(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{})
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(time.Second)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "secret", CreateAnswersJSON: true, IgnoreScriptPaging: true})
	t.Cleanup(fake.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, err := env.Client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := daemon.InstallIDOf(string(ns.UID))
	config := func(name, ownership string) string {
		p := filepath.Join(t.TempDir(), name+".yaml")
		writeFile(t, p, fmt.Sprintf(`
clusterName: shared
kubeconfig: %q
provider: {listenAddress: %q}
sync: {period: 1s, listLag: 2s}
leakedInstances: {gracePeriod: 1h}
ownership: %s
clouds:
  verda: {endpoint: %q}
nodeGroups:
  - {name: h100, cloud: verda, instanceType: 1H100.80S.30V, locations: [FIN-01], minSize: 1, maxSize: 4}
`, env.Kubeconfig, loopback(t), ownership, fake.URL+"/v1"))
		return p
	}
	creds := []string{"VERDA_CLIENT_ID=id", "VERDA_CLIENT_SECRET=secret"}
	live := func() []cloud.Instance {
		var out []cloud.Instance
		for _, in := range engine.Instances("verda-account") {
			if in.State != cloud.StateDeleting {
				out = append(out, in)
			}
		}
		return out
	}
	addr := loopback(t)
	firstInstall := startGPUScalerLogged(t, env, "first", addr, creds, "provider", "--config", config("first", "{}"), "--metrics-address", addr)
	waitFor(t, ctx, "the first install's instance", func() bool { return len(live()) == 1 })
	firstInstall.kill()
	ordered := live()[0].Name

	// The second install: another ID, the same cluster name.
	cmd := exec.CommandContext(ctx, gpuscalerBin, "provider", "--config", config("second", "{installID: second1}"),
		"--metrics-address", loopback(t))
	cmd.Env = append(cmd.Environ(), creds...)
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the second install started beside the first's instance (%v):\n%s", err, out)
	}
	for _, want := range []string{"install " + first, "this install is second1", ordered, "ownership.takeOver"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if n := len(live()); n != 1 {
		t.Fatalf("%d instances after the refused start, want the first's 1", n)
	}

	// Told to take the first install over, it starts and keeps the
	// instance: nothing ordered, nothing deleted.
	addr = loopback(t)
	startGPUScalerLogged(t, env, "second", addr, creds, "provider", "--config",
		config("second-takes-over", fmt.Sprintf("{installID: second1, takeOver: [%s]}", first)), "--metrics-address", addr)
	time.Sleep(5 * time.Second) // five syncs
	if got := live(); len(got) != 1 || got[0].Name != ordered || engine.Calls()["create"] != 1 {
		t.Fatalf("after the take-over: %d instances, %d creates; want the first's %s alone", len(got), engine.Calls()["create"], ordered)
	}
}
