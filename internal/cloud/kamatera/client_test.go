package kamatera

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera/kamateratest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

const (
	testID     = "kamatera-client-id"
	testSecret = "kamatera-s3cr3t-value"
)

type fixture struct {
	fake   *kamateratest.Server
	client *Client
	logs   *bytes.Buffer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	two := 2
	engine, err := kamateratest.NewEngine(sim.Config{BootDelay: sim.Duration(10 * time.Millisecond), DeleteDelay: sim.Duration(0), DefaultCapacity: &two}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := kamateratest.New(engine, kamateratest.Options{ClientID: testID, Secret: testSecret, CommandDelay: 20 * time.Millisecond})
	t.Cleanup(fake.Close)
	logs := &bytes.Buffer{}
	client, err := NewClient(ClientOptions{BaseURL: fake.URL, ClientID: testID, Secret: testSecret, RequestsPerSecond: 1000,
		RetryBase: time.Millisecond, PollInterval: 5 * time.Millisecond, CommandTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if strings.Contains(logs.String(), testSecret) {
			t.Errorf("the secret reached the logs:\n%s", logs.String())
		}
	})
	return &fixture{fake: fake, client: client, logs: logs}
}

func order(name, datacenter string) CreateRequest {
	return CreateRequest{Name: name, Password: "__generate__", PasswordValidate: "__generate__", Datacenter: datacenter,
		Image: "ubuntu_server_24.04_64-bit", CPU: "2A", RAM: "4096", Disk: "size=100", DailyBackup: "no", Managed: "no",
		Network: "name=wan,ip=auto", BillingCycle: "hourly", PowerOnAfter: "yes", ScriptFile: "#!/bin/bash\necho hi\n",
		Tag: "k8sca-prod k8scang-ng1"}
}

// TestServerLifecycle: create through the queue, list, tags, info, power
// off, terminate, and a terminated server is gone (terminating it again is
// success, its info not found).
func TestServerLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cmd, _, err := f.client.CreateServer(ctx, order("ng1-0a1b2c3d4e5", "EU"))
	if err != nil {
		t.Fatal(err)
	}
	log, err := f.client.WaitCommand(ctx, cmd)
	if err != nil || !strings.Contains(log, "Name: ng1-0a1b2c3d4e5") {
		t.Fatalf("create command: %q, %v", log, err)
	}
	servers, err := f.client.ListServers(ctx)
	if err != nil || len(servers) != 1 || servers[0].Name != "ng1-0a1b2c3d4e5" || servers[0].Power != "on" {
		t.Fatalf("list: %+v, %v", servers, err)
	}
	tags, err := f.client.ServerTags(ctx, "ng1-0a1b2c3d4e5")
	if err != nil || !slices.Equal(tags, []string{"k8sca-prod", "k8scang-ng1"}) {
		t.Fatalf("tags: %v, %v", tags, err)
	}
	info, err := f.client.ServerInfo(ctx, "ng1-0a1b2c3d4e5")
	if err != nil || info.CPU != "2A" || info.RAM != 4096 || info.Datacenter != "EU" || info.PriceHourlyOn <= 0 {
		t.Fatalf("info: %+v, %v", info, err)
	}
	if f.fake.Script("ng1-0a1b2c3d4e5") != "#!/bin/bash\necho hi\n" {
		t.Fatal("the script did not reach the server")
	}
	off, err := f.client.PowerOff(ctx, "ng1-0a1b2c3d4e5")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.WaitCommand(ctx, off); err != nil {
		t.Fatal(err)
	}
	if servers, _ := f.client.ListServers(ctx); len(servers) != 1 || servers[0].Power != "off" {
		t.Fatalf("after power off: %+v", servers)
	}
	if err := f.client.Terminate(ctx, "ng1-0a1b2c3d4e5"); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Terminate(ctx, "ng1-0a1b2c3d4e5"); err != nil {
		t.Fatalf("terminating a gone server: %v", err)
	}
	if _, err := f.client.ServerInfo(ctx, "ng1-0a1b2c3d4e5"); !errors.Is(err, cloud.ErrNotFound) {
		t.Fatalf("info of a gone server: %v", err)
	}
	if servers, _ := f.client.ListServers(ctx); len(servers) != 0 {
		t.Fatalf("after terminate: %+v", servers)
	}
}

// TestFailedCommandIsClassedByItsLog: a create whose queued command errors
// (no capacity in the datacenter) is a capacity error carrying the log.
func TestFailedCommandIsClassedByItsLog(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.fake.Engine().SetCapacity(cloud.OfferingKey{InstanceType: kamateratest.TypeName("2A", 4096), Location: "IL", CapacityType: cloud.OnDemand}, 0)
	cmd, _, err := f.client.CreateServer(ctx, order("ng1-full", "IL"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.WaitCommand(ctx, cmd)
	if !errors.Is(err, cloud.ErrCapacity) || !strings.Contains(err.Error(), "insufficient resources") {
		t.Fatalf("a create the datacenter cannot hold: %v", err)
	}
	if len(f.fake.Servers()) != 0 {
		t.Fatal("a failed create left a server")
	}
}

// TestRetriesAndErrors: reads are retried on 5xx, a create never is (a lost
// answer is outcome-unknown); bad credentials are refused at once; an
// echoed secret never reaches an error.
func TestRetriesAndErrors(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.fake.FailNext(http.MethodGet, "/service/servers", http.StatusInternalServerError, "Failed to run command method (servers)")
	if _, err := f.client.ListServers(ctx); err != nil {
		t.Fatalf("a 500 then success: %v", err)
	}
	if n := f.fake.Calls()["GET /service/servers"]; n != 2 {
		t.Fatalf("%d list calls, want 2", n)
	}
	f.fake.FailNext(http.MethodPost, "/service/server", http.StatusInternalServerError, "upstream error")
	if _, _, err := f.client.CreateServer(ctx, order("ng1-lost", "EU")); !errors.Is(err, cloud.ErrOutcomeUnknown) {
		t.Fatalf("a create answered 500: %v", err)
	}
	if n := f.fake.Calls()["POST /service/server"]; n != 1 {
		t.Fatalf("a create was sent %d times", n)
	}
	f.fake.FailNext(http.MethodGet, "/service/servers", http.StatusBadRequest, "bad AuthSecret "+testSecret)
	_, err := f.client.ListServers(ctx)
	if !errors.Is(err, cloud.ErrInvalid) || strings.Contains(err.Error(), testSecret) {
		t.Fatalf("an echoing 400: %v", err)
	}
	bad, _ := NewClient(ClientOptions{BaseURL: f.fake.URL, ClientID: testID, Secret: "wrong-secret", RetryBase: time.Millisecond})
	calls := f.fake.Calls()["GET /service/servers"]
	if _, err := bad.ListServers(ctx); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("bad credentials: %v", err)
	}
	if n := f.fake.Calls()["GET /service/servers"] - calls; n != 1 {
		t.Fatalf("bad credentials were sent %d times", n)
	}
	if _, err := NewClient(ClientOptions{BaseURL: "http://cloudcli.example.com", ClientID: testID, Secret: testSecret}); err == nil {
		t.Fatal("a plain-http API URL off loopback was accepted")
	}
}

// TestCommandIDForms: mutations answer ["id"], [123] or
// {"commandIds": [...], "password": "..."}.
func TestCommandIDForms(t *testing.T) {
	for raw, want := range map[string]string{
		`["9000001"]`: "9000001",
		`[9000002]`:   "9000002",
		`{"password":"p","commandIds":["9000003"]}`: "9000003",
	} {
		ids, err := commandIDs(json.RawMessage(raw))
		if err != nil || len(ids) != 1 || ids[0] != want {
			t.Errorf("%s: %v, %v", raw, ids, err)
		}
	}
}

// The server info answer writes prices as strings ("0.0274", or "" when
// the server cannot be priced), as cloudcli-server does: every server must
// still be read, with its type and address.
func TestServerInfoPricesAreStrings(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want Price
	}{{`"0.0274"`, 0.0274}, {`""`, 0}, {`null`, 0}, {`0.5`, 0.5}} {
		var info ServerInfo
		if err := json.Unmarshal([]byte(`{"name":"s","cpu":"2A","ram":4096,"priceHourlyOn":`+c.raw+`}`), &info); err != nil || info.PriceHourlyOn != c.want || info.CPU != "2A" {
			t.Errorf("priceHourlyOn %s: %+v, %v", c.raw, info, err)
		}
	}
	var info ServerInfo
	if err := json.Unmarshal([]byte(`{"priceHourlyOn":"about a dollar"}`), &info); err == nil {
		t.Error("a price that is no number was read")
	}
}

// A monthly order is billed monthly: the create body names the field the
// server reads, billingcycle (with billingCycle the server bills hourly).
func TestMonthlyOrderIsBilledMonthly(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	req := order("ng1-0a1b2c3d4e6", "EU")
	req.BillingCycle, req.MonthlyPackage = "monthly", "t5000"
	cmd, _, err := f.client.CreateServer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.WaitCommand(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	info, err := f.client.ServerInfo(ctx, "ng1-0a1b2c3d4e6")
	if err != nil || info.Billing != "monthly" {
		t.Fatalf("billing %q, %v; want monthly", info.Billing, err)
	}
}

// A termination whose queued command ends in error is an error carrying
// the command's log, and the server is still there: a failed delete is
// never taken for done while the server bills.
func TestFailedTerminateIsReported(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cmd, _, err := f.client.CreateServer(ctx, order("ng1-0a1b2c3d4e7", "EU"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.WaitCommand(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	f.fake.FailNextTerminate("Server is locked by another operation")
	err = f.client.Terminate(ctx, "ng1-0a1b2c3d4e7")
	if err == nil || !errors.Is(err, ErrCommandFailed) || !strings.Contains(err.Error(), "locked by another operation") {
		t.Fatalf("a failed termination: %v", err)
	}
	if servers, _ := f.client.ListServers(ctx); len(servers) != 1 {
		t.Fatalf("after a failed termination: %+v", servers)
	}
	// A command cancelled at Kamatera ends the wait as a failure: polled
	// on, it would hold the delete for CommandTimeout (40 minutes).
	f.fake.CancelNextTerminate()
	if err := f.client.Terminate(ctx, "ng1-0a1b2c3d4e7"); !errors.Is(err, ErrCommandFailed) {
		t.Fatalf("a cancelled termination: %v", err)
	}
	if err := f.client.Terminate(ctx, "ng1-0a1b2c3d4e7"); err != nil {
		t.Fatalf("terminating again: %v", err)
	}
	if servers, _ := f.client.ListServers(ctx); len(servers) != 0 {
		t.Fatalf("after terminate: %+v", servers)
	}
}
