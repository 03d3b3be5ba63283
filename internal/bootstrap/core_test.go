package bootstrap_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuscaler/gpuscaler/internal/bootstrap"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup/coretest"
)

// TestEveryOrderGetsItsScript: the core renders each instance's script
// before ordering it, and the script registers the node with exactly the
// labels and taints of the group's template.
func TestEveryOrderGetsItsScript(t *testing.T) {
	cfg, err := config.Parse([]byte(`
clusterName: test
kubeconfig: in-cluster
sync: {period: 100ms, requestsPerSecond: 1000}
clouds: {sim: {bootDelay: 10ms}}
nodeGroups:
  - name: a100
    cloud: sim
    instanceType: 1A100.22V
    locations: [FIN-01]
    maxSize: 3
    mig: {profile: all-1g.10gb}
    labels: {team: research}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
    bootstrap: {method: k3s, server: "https://10.0.0.1:6443", version: v1.33.4+k3s1, tokenSecretRef: {namespace: kube-system, name: k3s, key: token}}
`))
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "k3s"}, Data: map[string][]byte{"token": []byte("k3s-join-secret")}})
	engine, err := sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mgr, stop := startCore(t, cfg, engine, bootstrap.Options{Kube: kube})
	defer stop()
	ctx := context.Background()
	if err := mgr.IncreaseSize(ctx, "a100", 2); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for engine.Count("test") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("instances not ordered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tmpl, err := mgr.Template("a100")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for k, v := range tmpl.Labels {
		want = append(want, k+"="+v)
	}
	sort.Strings(want)
	for _, in := range engine.Instances("test") {
		script, ok := engine.UserData(in.Name)
		if !ok {
			t.Fatalf("no user data for %s", in.Name)
		}
		for _, s := range []string{
			"--kubelet-arg=provider-id=" + in.ProviderID,
			"--kubelet-arg=node-labels=" + strings.Join(want, ","),
			"--kubelet-arg=register-with-taints=nvidia.com/gpu=present:NoSchedule",
			"nvidia-smi mig -i \"$gpu\" -cgi 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb -C",
			"k3s-join-secret",
		} {
			if !strings.Contains(script, s) {
				t.Errorf("%s's script lacks %q", in.Name, s)
			}
		}
	}
}

// TestScriptSurvivesRestart: an instance ordered just before gpuscaler
// restarts still gets its script: the new process, with the same token
// key, puts it back under the token the instance's stub carries when its
// first list finds the instance without a Node.
func TestScriptSurvivesRestart(t *testing.T) {
	tpl := filepath.Join(t.TempDir(), "join.sh.tmpl")
	if err := os.WriteFile(tpl, []byte("#!/bin/sh\necho joining {{.NodeName}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
clusterName: test
sync: {period: 100ms, requestsPerSecond: 1000}
scriptServer: {listenAddress: "127.0.0.1:0", url: "http://127.0.0.1:1"}
clouds: {sim: {bootDelay: 1h}}
nodeGroups:
  - name: g
    cloud: sim
    instanceType: 1V100.6V
    locations: [FIN-01]
    maxSize: 3
    bootstrap: {method: custom, templateFile: ` + tpl + `, delivery: server}
`))
	if err != nil {
		t.Fatal(err)
	}
	engine, err := sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	// core starts a core over a process's script server (a config reload
	// starts another over the same server); process starts a process: its
	// keyed script server and a core.
	core := func(srv *bootstrap.Server) (*bootstrap.Server, *nodegroup.Manager, func()) {
		mgr, stop := startCore(t, cfg, engine, bootstrap.Options{Server: srv, ServerURL: "http://scripts.test"})
		return srv, mgr, stop
	}
	process := func(key []byte) (*bootstrap.Server, *nodegroup.Manager, func()) {
		// httptest.NewRequest comes from 192.0.2.1: the instance's address
		// here, to which alone a reissued script goes.
		srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Key: key, Logger: slog.New(slog.DiscardHandler),
			ReissueIP: func(string) (string, bool) { return "192.0.2.1", true }})
		if err != nil {
			t.Fatal(err)
		}
		return core(srv)
	}
	_, mgr, stop := process(key)
	if err := mgr.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the order", func() bool { return engine.Count("test") == 1 })
	stop() // gpuscaler restarts while the instance boots

	in := engine.Instances("test")[0]
	stub, _ := engine.UserData(in.Name)
	i := strings.Index(stub, bootstrap.ScriptPath)
	if i < 0 {
		t.Fatalf("no script URL in the stub:\n%s", stub)
	}
	path := strings.Fields(strings.Trim(stub[i:], `'"`))[0]
	path = strings.TrimRight(path, `'"`)
	fetch := func(srv *bootstrap.Server) (int, string) {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}

	srv, _, stop := process(key)
	defer stop()
	var code int
	var body string
	waitUntil(t, "the script put back", func() bool { code, body = fetch(srv); return code == http.StatusOK })
	if body != "#!/bin/sh\necho joining "+in.Name+"\n" {
		t.Fatalf("reissued script %q", body)
	}
	if code, _ := fetch(srv); code != http.StatusNotFound {
		t.Fatalf("the reissued script was served twice: %d", code)
	}
	stop()
	_, _, stopReload := core(srv) // a config reload: a new core, the same server
	defer stopReload()
	time.Sleep(300 * time.Millisecond)
	if code, _ := fetch(srv); code != http.StatusNotFound {
		t.Fatalf("a reload put back a script that was handed out: %d", code)
	}

	other, _, stopOther := process([]byte("another key, another process ok!"))
	defer stopOther()
	time.Sleep(300 * time.Millisecond)
	if code, _ := fetch(other); code != http.StatusNotFound {
		t.Fatalf("a process with another key served the script: %d", code)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startCore starts the node-group core of cfg over the engine's "test"
// account, rendering with a renderer of ropts; stop stops it.
func startCore(t *testing.T, cfg *config.Config, engine *sim.Engine, ropts bootstrap.Options) (*nodegroup.Manager, func()) {
	t.Helper()
	return startCoreWith(t, cfg, engine, ropts, nil)
}

// startCoreWith is startCore with the renderer's logger (for the core
// too) and an event sink.
func startCoreWith(t *testing.T, cfg *config.Config, engine *sim.Engine, ropts bootstrap.Options, events nodegroup.EventSink) (*nodegroup.Manager, func()) {
	t.Helper()
	if ropts.Logger == nil {
		ropts.Logger = slog.New(slog.DiscardHandler)
	}
	log := ropts.Logger
	r, err := bootstrap.New(cfg, ropts)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := nodegroup.New(cfg, map[string]cloud.Provider{"sim": engine.Account("test")},
		nodegroup.Options{Logger: log, Registerer: prometheus.NewRegistry(), Bootstrap: r, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return mgr, func() { cancel(); mgr.Wait() }
}

// eventLog keeps the core's Events as text.
type eventLog struct {
	mu  sync.Mutex
	all strings.Builder
}

func (e *eventLog) Event(ev nodegroup.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(&e.all, "%+v\n", ev)
}

func (e *eventLog) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.all.String()
}

// leaks returns the first 4-byte piece of secret found in text.
func leaks(text, secret string) (string, bool) {
	for i := 0; i+4 <= len(secret); i++ {
		if strings.Contains(text, secret[i:i+4]) {
			return secret[i : i+4], true
		}
	}
	return "", false
}

// A join token Secret made with kubectl --from-file ends in a newline: the
// token is used without it. One that is not a token at all fails the
// order, and no log line, Event or instance error holds a byte of it,
// only the Secret's name and key.
func TestJoinTokenNeverLeaks(t *testing.T) {
	const good, bad = "abcdef.0123456789abcdef", "qwerty.Hunter2-is-my-pw"
	for _, tc := range []struct{ name, value string }{
		{"newline-ended", good + "\n"},
		{"not a token", bad + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`
clusterName: test
kubeconfig: in-cluster
sync: {period: 100ms, requestsPerSecond: 1000}
clouds: {sim: {bootDelay: 10ms}}
nodeGroups:
  - name: h100
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01]
    maxSize: 3
    bootstrap: {method: kubeadm, server: "10.0.0.1:6443", caCertHash: "sha256:0000000000000000000000000000000000000000000000000000000000000abc", tokenSecretRef: {namespace: kube-system, name: join, key: token}}
`))
			if err != nil {
				t.Fatal(err)
			}
			kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "join"},
				Data: map[string][]byte{"token": []byte(tc.value)}})
			engine, err := sim.NewEngine(daemon.SimConfig(*cfg.Clouds.Sim), sim.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var logs coretest.LogBuffer
			events := &eventLog{}
			mgr, stop := startCoreWith(t, cfg, engine,
				bootstrap.Options{Kube: kube, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, events)
			defer stop()
			ctx := context.Background()
			err = mgr.IncreaseSize(ctx, "h100", 1)
			deadline := time.Now().Add(10 * time.Second)
			for tc.value == good+"\n" && engine.Count("test") < 1 {
				if time.Now().After(deadline) {
					t.Fatalf("no instance ordered: %v\n%s", err, logs.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if tc.value == good+"\n" {
				script, _ := engine.UserData(engine.Instances("test")[0].Name)
				if !strings.Contains(script, `token: "`+good+`"`) {
					t.Errorf("the script does not join with the token, trimmed:\n%s", script)
				}
				return
			}
			var instErrs strings.Builder
			for time.Now().Before(deadline) && !strings.Contains(events.String()+logs.String(), "kube-system/join") {
				time.Sleep(5 * time.Millisecond)
			}
			insts, _ := mgr.Instances("h100")
			for _, in := range insts {
				instErrs.WriteString(in.ErrorMessage + "\n")
			}
			all := fmt.Sprint(err) + "\n" + logs.String() + events.String() + instErrs.String()
			if !strings.Contains(all, `kube-system/join, key "token"`) {
				t.Errorf("nothing names the Secret and its key:\n%s", all)
			}
			if piece, ok := leaks(all, bad); ok {
				t.Errorf("%q of the token is in an error, a log line or an Event:\n%s", piece, all)
			}
		})
	}
}
