// Package testenv gives tests a real, small Kubernetes cluster: etcd,
// kube-apiserver and, on request, kube-controller-manager, kube-scheduler
// and kwok (which plays the kubelets of fake Nodes). Everything runs as
// local processes on free loopback ports, from binaries hack/testbins
// builds, and is torn down when the test ends, passed or failed.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options choose the components beyond etcd and kube-apiserver.
type Options struct {
	// ControllerManager runs kube-controller-manager: node lifecycle (it
	// lifts the not-ready taint), garbage collection, service accounts.
	ControllerManager bool
	// Scheduler runs kube-scheduler, so pods are bound to nodes.
	Scheduler bool
	// Kwok runs kwok for Nodes annotated kwok.x-k8s.io/node=fake: it keeps
	// them Ready and moves the pods bound to them to Running.
	Kwok bool
	// CRDDirs are folders of CustomResourceDefinition YAML files to apply.
	CRDDirs []string
}

// Env is a running cluster.
type Env struct {
	// Config reaches the API server as cluster admin.
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of a kubeconfig file for Config, for
	// subprocesses.
	Kubeconfig string
	// Dir is the environment's temporary folder.
	Dir string

	t     testing.TB
	bins  string
	mu    sync.Mutex
	procs []*process
	logs  []namedLog
	// api runs kube-apiserver (RestartAPIServer); its proc is guarded by mu.
	api apiServer
}

type namedLog struct{ name, path string }

// startTimeout bounds the start of the whole environment.
const startTimeout = 3 * time.Minute

// Start runs a cluster for the test and registers its teardown. It fails
// the test if a component cannot start. Under `go test -short` (the quick
// inner loop, `make test-unit`) the test is skipped; `make test` and CI
// never pass -short.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real cluster: run without -short (make test)")
	}
	bins := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		dir, err := os.MkdirTemp("", "gpuscaler-testenv-")
		if err != nil {
			t.Fatal(err)
		}
		e := &Env{Dir: dir, t: t, bins: bins}
		err = e.start(ctx, opts)
		if err == nil {
			t.Cleanup(e.stop)
			return e
		}
		// A port another process took between freePort and the
		// component's bind: a new cluster on new ports.
		e.stop()
		if attempt == startAttempts || ctx.Err() != nil {
			t.Fatalf("test cluster (attempt %d): %v", attempt, err)
		}
		t.Logf("test cluster did not start (attempt %d), starting another: %v", attempt, err)
	}
}

// startAttempts is how many clusters Start tries before it gives up.
const startAttempts = 3

func (e *Env) start(ctx context.Context, opts Options) error {
	etcdURL, err := e.startEtcd(ctx)
	if err != nil {
		return err
	}
	if err := e.startAPIServer(ctx, etcdURL); err != nil {
		return err
	}
	if opts.ControllerManager {
		if err := e.startControllerManager(ctx); err != nil {
			return err
		}
	}
	if opts.Scheduler {
		if err := e.startScheduler(ctx); err != nil {
			return err
		}
	}
	if opts.Kwok {
		if err := e.startKwok(ctx); err != nil {
			return err
		}
	}
	for _, d := range opts.CRDDirs {
		if err := e.applyCRDs(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// AddLog adds a log file to the dump printed when the test fails, for
// components the test runs itself (gpuscaler, for one).
func (e *Env) AddLog(name, path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.logs = append(e.logs, namedLog{name, path})
}

// PIDs returns the process IDs of the running components.
func (e *Env) PIDs() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]int, len(e.procs))
	for i, p := range e.procs {
		out[i] = p.cmd.Process.Pid
	}
	return out
}

// run starts a component and records it for teardown and log dumps.
func (e *Env) run(name string, bin string, args ...string) (*process, error) {
	return e.runWithEnv(name, bin, nil, args...)
}

// runWithEnv is run with environ added to the process's environment.
func (e *Env) runWithEnv(name string, bin string, environ []string, args ...string) (*process, error) {
	logPath := filepath.Join(e.Dir, name+".log")
	p, err := startProcess(name, logPath, filepath.Join(e.bins, bin), environ, args...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.logs = append(e.logs, namedLog{name, logPath})
	e.mu.Unlock()
	return p, nil
}

// stop dumps the logs of a failed test, then ends every process (last
// started first) and removes the folder.
func (e *Env) stop() {
	e.mu.Lock()
	procs, logs := e.procs, e.logs
	e.mu.Unlock()
	if e.t.Failed() {
		for _, l := range logs {
			e.t.Logf("---- %s log (last 150 lines) ----\n%s", l.name, tail(l.path, 150))
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(10 * time.Second)
	}
	if os.Getenv("GPUSCALER_TESTENV_KEEP") == "" {
		_ = os.RemoveAll(e.Dir)
	} else {
		e.t.Logf("test cluster folder kept: %s", e.Dir)
	}
}

// ports are the loopback ports this test process handed out. A port is
// free once its listener closes, and the kernel may pick it again for the
// next caller; tests that run clusters in parallel (t.Parallel) would then
// start two components on one port, or one cluster's kube-apiserver on
// another's etcd. Ports are a resource of the whole process, so the record
// is too.
var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// freePort returns a loopback port nothing listens on now and that this
// process has not handed out before.
func freePort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		ports.Lock()
		fresh := !ports.given[port]
		ports.given[port] = true
		ports.Unlock()
		// Closed only after the port is recorded, so that no other caller
		// in this process can be handed it meanwhile.
		l.Close()
		if fresh {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no loopback port that was not handed out already in 100 tries")
}

// LoopbackAddress returns a free loopback address (127.0.0.1:port) for a
// component the test runs itself, one no other test of the process is
// given.
func LoopbackAddress(t testing.TB) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// waitFor polls check until it succeeds, the process dies, or ctx ends.
func waitFor(ctx context.Context, p *process, what string, check func(context.Context) error) error {
	var last error
	for {
		if ok, err := p.exited(); ok {
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("%s exited while waiting for %s: %w\n%s", p.name, what, err, tail(p.log, 40))
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: timed out waiting for %s: %w\n%s", p.name, what, last, tail(p.log, 40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
