package verda

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
)

const (
	testID     = "client-id-1234567890"
	testSecret = "s3cr3t-verda-client-secret"
)

type fixture struct {
	fake   *verdatest.Server
	client *Client
	logs   *bytes.Buffer
}

func newFixture(t testing.TB, fopts verdatest.Options, copts ClientOptions) *fixture {
	t.Helper()
	two := 2
	engine, err := verdatest.NewEngine(sim.Config{
		BootDelay: sim.Duration(300 * time.Millisecond), DeleteDelay: sim.Duration(50 * time.Millisecond),
		DefaultCapacity: &two,
	}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fopts.ClientID, fopts.ClientSecret = testID, testSecret
	fake := verdatest.New(engine, fopts)
	t.Cleanup(fake.Close)
	logs := &bytes.Buffer{}
	copts.BaseURL, copts.ClientID, copts.ClientSecret = fake.URL+"/v1", testID, testSecret
	copts.RetryBase = time.Millisecond
	copts.RequestsPerSecond = 1000
	copts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := NewClient(copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, secret := range []string{testSecret} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("a secret appears in the logs:\n%s", logs.String())
			}
		}
	})
	return &fixture{fake: fake, client: client, logs: logs}
}

func order(host string, spot bool) CreateRequest {
	return CreateRequest{InstanceType: "1H100.80S.30V", Image: "ubuntu-24.04-cuda-12.8-open-docker", Hostname: host,
		Description: "test", LocationCode: "FIN-01", SSHKeyIDs: []string{}, IsSpot: spot}
}

func TestEveryCall(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	ctx := context.Background()
	types, err := f.client.InstanceTypes(ctx)
	if err != nil || len(types) == 0 {
		t.Fatalf("instance types: %v, %v", len(types), err)
	}
	var h100 InstanceType
	for _, it := range types {
		if it.InstanceType == "1H100.80S.30V" {
			h100 = it
		}
	}
	if h100.PricePerHour != 2.29 || h100.SpotPrice != 0.8015 || h100.GPU.NumberOfGPUs != 1 {
		t.Fatalf("string prices or GPUs not decoded: %+v", h100)
	}
	if got := convertType(h100); got.GPUModel != "H100-80GB" || got.GPUMemoryGiB != 80 || got.VCPUs != 30 {
		t.Fatalf("converted %+v", got)
	}
	for _, spot := range []bool{false, true} {
		av, err := f.client.Availability(ctx, spot)
		if err != nil || len(av) != 4 || len(av[0].Availabilities) == 0 {
			t.Fatalf("availability(spot=%v) = %v, %v", spot, av, err)
		}
	}
	locs, err := f.client.Locations(ctx)
	if err != nil || len(locs) != 4 {
		t.Fatalf("locations = %v, %v", locs, err)
	}
	keys, err := f.client.ListSSHKeys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("ssh keys = %v, %v", keys, err)
	}
	sid, err := f.client.CreateScript(ctx, "s1", "#!/bin/bash\necho hi\n")
	if err != nil || sid == "" {
		t.Fatalf("create script: %q, %v", sid, err)
	}
	scripts, err := f.client.ListScripts(ctx)
	if err != nil || len(scripts) != 1 || scripts[0].ID != sid {
		t.Fatalf("scripts = %v, %v", scripts, err)
	}
	id, err := f.client.CreateInstance(ctx, order("node-a", false))
	if err != nil || id == "" {
		t.Fatalf("create: %q, %v", id, err)
	}
	in, err := f.client.GetInstance(ctx, id)
	if err != nil || in.Hostname != "node-a" || in.Status != StatusOrdered {
		t.Fatalf("get = %+v, %v", in, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for in.Status != StatusRunning {
		if time.Now().After(deadline) {
			t.Fatalf("instance stuck in %s", in.Status)
		}
		time.Sleep(20 * time.Millisecond)
		in, _ = f.client.GetInstance(ctx, id)
	}
	list, err := f.client.ListInstances(ctx)
	if err != nil || len(list) != 1 || list[0].IP == nil {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := f.client.DeleteInstances(ctx, []string{id}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.client.DeleteScript(ctx, sid); err != nil {
		t.Fatal(err)
	}
	if err := f.client.DeleteScript(ctx, sid); err != nil {
		t.Fatalf("deleting a gone script: %v", err)
	}
	if _, err := f.client.GetInstance(ctx, "nope"); !errors.Is(err, cloud.ErrNotFound) {
		t.Fatalf("unknown instance: %v", err)
	}
}

func TestTokenExpiryMidRun(t *testing.T) {
	f := newFixture(t, verdatest.Options{TokenTTL: time.Hour}, ClientOptions{})
	ctx := context.Background()
	if _, err := f.client.ListInstances(ctx); err != nil {
		t.Fatal(err)
	}
	f.fake.ExpireTokens()
	if _, err := f.client.ListInstances(ctx); err != nil {
		t.Fatalf("after the token expired: %v", err)
	}
	if n := f.fake.Calls()["POST /oauth2/token"]; n != 2 {
		t.Fatalf("%d token requests, want 2", n)
	}
}

func TestRefreshFallsBackToCredentials(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	ctx := context.Background()
	if _, err := f.client.ListInstances(ctx); err != nil {
		t.Fatal(err)
	}
	f.fake.RevokeRefreshTokens()
	if _, err := f.client.ListInstances(ctx); err != nil {
		t.Fatalf("after refresh tokens were revoked: %v", err)
	}
	// sign-in, refresh (refused), sign-in again
	if n := f.fake.Calls()["POST /oauth2/token"]; n != 3 {
		t.Fatalf("%d token requests, want 3", n)
	}
}

func TestTokenRenewedBeforeExpiry(t *testing.T) {
	// A 20 s token is inside the 30 s renewal margin: every call renews it,
	// with the refresh token, before the API ever answers 401.
	f := newFixture(t, verdatest.Options{TokenTTL: 20 * time.Second}, ClientOptions{})
	ctx := context.Background()
	for range 3 {
		if _, err := f.client.Locations(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.fake.Calls()["POST /oauth2/token"]; n != 3 {
		t.Fatalf("%d token requests, want 3", n)
	}
}

func TestBadCredentials(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	bad, _ := NewClient(ClientOptions{BaseURL: f.fake.URL + "/v1", ClientID: "x", ClientSecret: "y", RetryBase: time.Millisecond})
	if _, err := bad.ListInstances(context.Background()); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("bad credentials: %v", err)
	}
}

func TestRetries(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	ctx := context.Background()
	f.fake.FailNext(http.MethodGet, "/instances", http.StatusTooManyRequests, `{"code":"rate_limited","message":"slow down"}`)
	f.fake.FailNext(http.MethodGet, "/instances", http.StatusBadGateway, `bad gateway`)
	if _, err := f.client.ListInstances(ctx); err != nil {
		t.Fatalf("429 and 502 then success: %v", err)
	}
	if n := f.fake.Calls()["GET /instances"]; n != 3 {
		t.Fatalf("%d list calls, want 3", n)
	}
	// A create refused with 429 did nothing and is sent again.
	f.fake.FailNext(http.MethodPost, "/instances", http.StatusTooManyRequests, `{"code":"rate_limited","message":"slow down"}`)
	if _, err := f.client.CreateInstance(ctx, order("node-429", false)); err != nil {
		t.Fatal(err)
	}
	// 400 is never retried.
	f.fake.FailNext(http.MethodGet, "/locations", http.StatusBadRequest, `{"code":"invalid_request","message":"bad"}`)
	if _, err := f.client.Locations(ctx); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("400: %v", err)
	}
	if n := f.fake.Calls()["GET /locations"]; n != 1 {
		t.Fatalf("400 retried: %d calls", n)
	}
}

func TestErrorClasses(t *testing.T) {
	f := newFixture(t, verdatest.Options{InstanceLimit: 2}, ClientOptions{})
	ctx := context.Background()
	for _, h := range []string{"a", "b"} {
		if _, err := f.client.CreateInstance(ctx, order(h, true)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.client.CreateInstance(ctx, order("c", false)); !errors.Is(err, cloud.ErrQuota) {
		t.Fatalf("instance limit: %v", err)
	}
	f2 := newFixture(t, verdatest.Options{}, ClientOptions{})
	for _, h := range []string{"a", "b"} {
		if _, err := f2.client.CreateInstance(ctx, order(h, true)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := f2.client.CreateInstance(ctx, order("c", true))
	if !errors.Is(err, cloud.ErrCapacity) || !strings.Contains(err.Error(), "Not enough resources") {
		t.Fatalf("stock-out: %v", err)
	}
	bad := order("d", false)
	bad.LocationCode = ""
	if _, err := f2.client.CreateInstance(ctx, bad); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("missing location: %v", err)
	}
}

// TestCreateTimeoutMakesOneInstance: the API takes the order but the
// answer never arrives in time; the client finds the instance by hostname
// instead of ordering it again.
func TestCreateTimeoutMakesOneInstance(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
	f.fake.HangNext(http.MethodPost, "/instances", time.Second)
	id, err := f.client.CreateInstance(context.Background(), order("slow-node", false))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	list, err := f.client.ListInstances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id || list[0].Hostname != "slow-node" {
		t.Fatalf("after a timed-out create the account holds %+v", list)
	}
	if n := f.fake.Calls()["POST /instances"]; n != 1 {
		t.Fatalf("the order was sent %d times", n)
	}
}

func TestCreateServerErrorIsLookedUp(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	// A 500 without effect: the look-up finds nothing, so the error is
	// transient and the caller may order again.
	f.fake.FailNext(http.MethodPost, "/instances", http.StatusInternalServerError, `{"code":"server_error","message":"boom"}`)
	_, err := f.client.CreateInstance(context.Background(), order("x", false))
	if !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("500 on create: %v", err)
	}
	if n := f.fake.Calls()["POST /instances"]; n != 1 {
		t.Fatalf("a 500 create was re-sent blindly: %d", n)
	}
}

// TestErrorsAreRedacted: an endpoint (a misconfigured proxy, a debugging
// echo service) that answers with the request it got must not put the
// client secret or the token into errors, and a huge body is cut short.
func TestErrorsAreRedacted(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	ctx := context.Background()
	if _, err := f.client.Locations(ctx); err != nil { // signs in
		t.Fatal(err)
	}
	f.client.mu.Lock()
	token := f.client.token
	f.client.mu.Unlock()
	echo := `{"code":"bad_request","message":"you sent client_secret=` + testSecret + ` with Bearer ` + token + `"}`
	f.fake.FailNext(http.MethodGet, "/locations", http.StatusBadRequest, echo)
	_, err := f.client.Locations(ctx)
	if err == nil {
		t.Fatal("400 accepted")
	}
	for _, s := range []string{testSecret, token} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error echoes a secret: %v", err)
		}
	}
	if !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("error lost the API's words: %v", err)
	}
	f.fake.FailNext(http.MethodGet, "/locations", http.StatusBadRequest, strings.Repeat("<html>", 10000)+testSecret)
	_, err = f.client.Locations(ctx)
	if err == nil || len(err.Error()) > 2*cloud.MaxErrorText || strings.Contains(err.Error(), testSecret) {
		t.Errorf("a 60 kB answer went into the error whole (%d bytes)", len(err.Error()))
	}
}

// TestPlaintextEndpointRefused: credentials never travel over plain http,
// except to loopback (tests' fakes).
func TestPlaintextEndpointRefused(t *testing.T) {
	for url, ok := range map[string]bool{
		"https://api.verda.com/v1":           true,
		"http://127.0.0.1:8080/v1":           true,
		"http://localhost:8080/v1":           true,
		"http://[::1]:8080/v1":               true,
		"http://api.verda.com/v1":            false,
		"http://10.0.0.5/v1":                 false,
		"ftp://api.verda.com/v1":             false,
		"https://user:pass@api.verda.com/v1": false,
		"https://passKEY0123@api.verda.com":  false,
		"https:///v1":                        false,
	} {
		_, err := NewClient(ClientOptions{BaseURL: url, ClientID: testID, ClientSecret: testSecret})
		if (err == nil) != ok {
			t.Errorf("%s: err = %v, want ok=%v", url, err, ok)
		}
		if err != nil && strings.Contains(err.Error(), "pass") {
			t.Errorf("%s: error echoes the password: %v", url, err)
		}
	}
}

// TestOneOddRecordDoesNotSinkTheList: an instance record whose created_at
// (or any field) the client cannot read is kept without that field; the
// other records are untouched, and the list succeeds.
func TestOneOddRecordDoesNotSinkTheList(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	ctx := context.Background()
	for _, h := range []string{"good-1", "odd-1"} {
		if _, err := f.client.CreateInstance(ctx, order(h, false)); err != nil {
			t.Fatal(err)
		}
	}
	f.fake.OverrideField("odd-1", "created_at", `"yesterday at noon"`)
	f.fake.OverrideField("odd-1", "ssh_key_ids", `"not-a-list"`)
	insts, err := f.client.ListInstances(ctx)
	if err != nil {
		t.Fatalf("one odd record failed the list: %v", err)
	}
	byName := map[string]Instance{}
	for _, in := range insts {
		byName[in.Hostname] = in
	}
	odd, good := byName["odd-1"], byName["good-1"]
	if odd.ID == "" || odd.InstanceType == "" || !odd.CreatedAt.IsZero() {
		t.Fatalf("the odd record lost more than its bad fields: %+v", odd)
	}
	if good.CreatedAt.IsZero() {
		t.Fatalf("the good record was damaged: %+v", good)
	}
	if !strings.Contains(f.logs.String(), "created_at") {
		t.Errorf("the odd record was not reported:\n%s", f.logs.String())
	}
	// Without its hostname an instance cannot be told ours: no list at all
	// rather than one that makes it look gone.
	f.fake.OverrideField("odd-1", "hostname", `42`)
	if _, err := f.client.ListInstances(ctx); !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("a record without a readable hostname: %v", err)
	}
}

// TestPartlyFailedDeletes: PUT /instances answers a result per instance; an
// id whose result is an error is sent again, and one that keeps failing is
// an error naming it, never a silent success while it runs on.
func TestPartlyFailedDeletes(t *testing.T) {
	f := newFixture(t, verdatest.Options{}, ClientOptions{})
	ctx := context.Background()
	ids := map[string]string{}
	for i, h := range []string{"d-1", "d-2", "d-3", "d-4"} {
		id, err := f.client.CreateInstance(ctx, order(h, i >= 2)) // the account holds 2 of each
		if err != nil {
			t.Fatal(err)
		}
		ids[h] = id
	}
	running := func(h string) bool {
		for _, in := range f.fake.Engine().Instances("verda-account") {
			if in.Name == h && in.State != cloud.StateDeleting {
				return true
			}
		}
		return false
	}
	// One transient per-instance failure: retried, both go.
	f.fake.FailDeleteOf("d-1", 1, http.StatusInternalServerError, "internal error")
	if err := f.client.DeleteInstances(ctx, []string{ids["d-1"], ids["d-2"]}, nil); err != nil {
		t.Fatalf("a delete that failed once for one id: %v", err)
	}
	if running("d-1") || running("d-2") {
		t.Fatal("an instance survived a delete reported done")
	}
	// One that keeps failing: an error naming it, and it still runs.
	f.fake.FailDeleteOf("d-3", 100, http.StatusInternalServerError, "internal error")
	err := f.client.DeleteInstances(ctx, []string{ids["d-3"]}, nil)
	if err == nil || !strings.Contains(err.Error(), ids["d-3"]) || !errors.Is(err, cloud.ErrTransient) {
		t.Fatalf("a delete that keeps failing: %v", err)
	}
	if !running("d-3") {
		t.Fatal("the instance is gone though its delete failed")
	}
	// A refusal is not retried.
	f.fake.FailDeleteOf("d-4", 1, http.StatusBadRequest, "Instance is locked")
	calls := f.fake.Calls()["PUT /instances"]
	if err := f.client.DeleteInstances(ctx, []string{ids["d-4"]}, nil); !errors.Is(err, cloud.ErrInvalid) {
		t.Fatalf("a refused delete: %v", err)
	}
	if n := f.fake.Calls()["PUT /instances"] - calls; n != 1 {
		t.Fatalf("a refused delete was sent %d times", n)
	}
}

// TestCreateAnswersInBothForms: creates answer the bare id as text or the
// new object as JSON; either way the client returns the id.
func TestCreateAnswersInBothForms(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		f := newFixture(t, verdatest.Options{CreateAnswersJSON: asJSON}, ClientOptions{})
		ctx := context.Background()
		id, err := f.client.CreateInstance(ctx, order("both-forms", false))
		if err != nil {
			t.Fatal(err)
		}
		in, err := f.client.GetInstance(ctx, id)
		if err != nil || in.Hostname != "both-forms" {
			t.Fatalf("JSON=%v: create returned %q, which finds %+v (%v)", asJSON, id, in, err)
		}
		sid, err := f.client.CreateScript(ctx, "s", "#!/bin/sh\n")
		if err != nil || len(sid) != 36 {
			t.Fatalf("JSON=%v: script id %q (%v)", asJSON, sid, err)
		}
		if err := f.client.DeleteScript(ctx, sid); err != nil || f.fake.ScriptCount() != 0 {
			t.Fatalf("JSON=%v: the script id does not delete its script: %v", asJSON, err)
		}
	}
}
