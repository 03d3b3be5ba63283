package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCAVerdaUserSwitches runs the provider the way a ca-verda user would:
// their config.yaml, credentials in .env, --config --port --log-level. It
// scales a group over the fake Verda API and checks that no secret reaches
// the (debug) logs.
func TestCAVerdaUserSwitches(t *testing.T) {
	const secret = "ca-verda-secret-0123456789"
	engine, err := verdatest.NewEngine(sim.Config{BootDelay: sim.Duration(50 * time.Millisecond)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "ca-verda-id", ClientSecret: secret})
	defer fake.Close()

	dir := t.TempDir()
	data, err := os.ReadFile("../../internal/config/seedconfig/testdata/ca-verda-readme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The README's script id is a placeholder; this account has no scripts.
	data = bytes.ReplaceAll(data, []byte(`    startup_script_id: "your-startup-script-id"  # Script to join K8s cluster`+"\n"), nil)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("config.yaml", string(data))
	write(".env", "VERDA_CLIENT_ID=ca-verda-id\nVERDA_CLIENT_SECRET="+secret+"\nVERDA_BASE_URL="+fake.URL+"/v1\n")
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chdir(wd) }()

	port := freePort(t)
	logs := &lockedBuffer{}
	root := newRootCommand(logs, logs)
	root.SetArgs([]string{"provider", "--config", "config.yaml", "--port", fmt.Sprint(port), "--log-level", "DEBUG", "--log-format", "text", "--metrics-address", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("provider: %v", err)
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the client secret is in the logs:\n%s", logs.String())
		}
	}()

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ca := pb.NewCloudProviderClient(conn)
	var groups *pb.NodeGroupsResponse
	eventually(t, "the provider to serve", func() bool {
		c, cc := context.WithTimeout(context.Background(), time.Second)
		defer cc()
		groups, err = ca.NodeGroups(c, &pb.NodeGroupsRequest{})
		return err == nil
	})
	if len(groups.GetNodeGroups()) != 1 || groups.GetNodeGroups()[0].GetId() != "gpu-workers" || groups.GetNodeGroups()[0].GetMaxSize() != 10 {
		t.Fatalf("groups = %v", groups)
	}
	if _, err := ca.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "gpu-workers", Delta: 1}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, "the instance ordered", firstOrderWait, func() bool {
		resp, err := ca.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "gpu-workers"})
		return err == nil && len(resp.GetInstances()) == 1 && strings.HasPrefix(resp.GetInstances()[0].GetId(), "verda://gpu-workers-") &&
			engine.Count("verda-account") == 1
	})
	insts := engine.Instances("verda-account")
	if len(insts) != 1 || insts[0].Location != "FIN-03" {
		t.Fatalf("instances at the fake: %+v", insts)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, what, 20*time.Second, cond)
}

// firstOrderWait bounds the wait for a provider's first order: a started
// gpuscaler holds its first orders for sync.listLag (1 min by default;
// the seeds' configurations cannot set it) and one sync period, so that
// the orders of the process before it are counted first.
const firstOrderWait = 3 * time.Minute

func eventuallyWithin(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestCatalogVerda(t *testing.T) {
	engine, err := verdatest.NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine.SetCapacity(cloudKey("1H100.80S.30V", "ICE-01", "spot"), 0)
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "catalog-secret"})
	defer fake.Close()
	t.Setenv("VERDA_CLIENT_ID", "id")
	t.Setenv("VERDA_CLIENT_SECRET", "catalog-secret")
	t.Setenv("VERDA_BASE_URL", fake.URL+"/v1")
	var out bytes.Buffer
	root := newRootCommand(&out, &out)
	root.SetArgs([]string{"catalog", "--cloud", "verda", "--gpu-only"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "1H100.80S.30V ") {
			line = l
		}
	}
	for _, want := range []string{"1x H100-80GB", "2.2900", "0.8015", "FIN-01,FIN-02,FIN-03,ICE-01", "FIN-01,FIN-02,FIN-03 "} {
		if !strings.Contains(line+" ", want) {
			t.Errorf("catalog line %q lacks %q", line, want)
		}
	}
	if strings.Contains(out.String(), "CPU.4V.16G") {
		t.Error("--gpu-only listed a CPU type")
	}
}

func cloudKey(t, loc, ct string) cloud.OfferingKey {
	return cloud.OfferingKey{InstanceType: t, Location: loc, CapacityType: cloud.CapacityType(ct)}
}

// TestValidateOnline: validate --online asks Verda's catalog: a type it
// does not have is refused with its field, and a group whose image the
// type does not accept is warned about, naming the image orders will use.
func TestValidateOnline(t *testing.T) {
	engine, err := verdatest.NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := verdatest.New(engine, verdatest.Options{ClientID: "id", ClientSecret: "online-secret"})
	defer fake.Close()
	t.Setenv("VERDA_CLIENT_ID", "id")
	t.Setenv("VERDA_CLIENT_SECRET", "online-secret")
	t.Setenv("VERDA_BASE_URL", fake.URL+"/v1")
	dir := t.TempDir()
	write := func(name, itype string) string {
		p := filepath.Join(dir, name)
		doc := "clusterName: online\nclouds: {verda: {}}\nnodeGroups:\n  - {name: g, cloud: verda, instanceType: " + itype + ", locations: [FIN-01], maxSize: 1}\n"
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) (string, error) {
		var out lockedBuffer
		root := newRootCommand(&out, &out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	unknown := write("unknown.yaml", "9Z999.1V")
	if out, err := run("validate", "--config", unknown); err != nil {
		t.Fatalf("offline validate asked Verda's catalog: %v\n%s", err, out)
	}
	if out, err := run("validate", "--online", "--config", unknown); err == nil || !strings.Contains(err.Error(), "nodeGroups[0].instanceType") {
		t.Fatalf("online validate of an unknown type: %v\n%s", err, out)
	}
	out, err := run("validate", "--online", "--config", write("v100.yaml", "1V100.6V"))
	if err != nil || !strings.Contains(out, "warning:") || !strings.Contains(out, "nodeGroups[0].image") || !strings.Contains(out, "ubuntu-22.04-cuda-12.0-docker") {
		t.Fatalf("online validate of a V100 group with the default image: %v\n%s", err, out)
	}
	if strings.Contains(out, "online-secret") {
		t.Fatal("validate printed the secret")
	}
}

// Each command shows only its own flags: the gRPC listener's (--port,
// --listen-address, --insecure) belong to provider, and to validate and
// config convert, which check and write its settings; catalog and
// controller neither take nor show them.
func TestListenerFlagsOnlyWhereTheyMatter(t *testing.T) {
	for _, c := range []struct {
		args []string
		has  bool
	}{
		{[]string{"provider"}, true}, {[]string{"validate"}, true}, {[]string{"config", "convert"}, true},
		{[]string{"catalog"}, false}, {[]string{"controller"}, false},
	} {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append(c.args, "--help"))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v --help: %v", c.args, err)
		}
		for _, flag := range []string{"--port", "--listen-address", "--insecure"} {
			if got := strings.Contains(out.String(), flag+" "); got != c.has {
				t.Errorf("%v --help shows %s: %v, want %v", c.args, flag, got, c.has)
			}
		}
		if c.has {
			continue
		}
		root = newRootCommand(&out, &out)
		root.SetArgs(append(c.args, "--insecure"))
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("%v --insecure: %v, want an unknown flag", c.args, err)
		}
	}
}
