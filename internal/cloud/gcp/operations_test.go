package gcp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp/gcptest"
)

// The behaviours of Compute's operations and MIG calls that the discovery
// document states (google.golang.org/api/compute/v1/compute-api.json, as
// gcptest cites it), met by the provider as a real project would.

var l4 = cloud.CreateSpec{Group: "l4", InstanceType: "g2-standard-8", Location: "us-central1-a", CapacityType: cloud.OnDemand}

// A mutation Compute carried out but answered with a 503 is sent again
// with the same requestId; Compute answers the repeat with the first
// request's operation and does not carry it out again: one instance, the
// MIG's target size raised once, and the create reported made.
func TestRepeatedRequestIsCarriedOutOnce(t *testing.T) {
	fake, prov, _ := oneMIG(t, gcptest.Options{})
	ctx := context.Background()
	fake.FailNextAfter(http.MethodPost, "/createInstances", http.StatusServiceUnavailable, "backendError", "Backend Error")
	spec := l4
	spec.Name = "l4-0"
	if _, err := prov.Create(ctx, spec); err != nil {
		t.Fatalf("create answered 503 after it was carried out: %v", err)
	}
	if n := fake.Calls()["POST createInstances"]; n != 2 {
		t.Errorf("%d createInstances calls, want 2 (the retry)", n)
	}
	if n := fake.TargetSize("us-central1-a", "gpu-l4"); n != 1 {
		t.Errorf("target size %d after one create, want 1", n)
	}

	fake.FailNextAfter(http.MethodPost, "/deleteInstances", http.StatusServiceUnavailable, "backendError", "Backend Error")
	in := spec
	if err := prov.Delete(ctx, cloud.Instance{Name: in.Name, Group: in.Group, Location: in.Location, ProviderID: "gce://" + project + "/us-central1-a/l4-0"}); err != nil {
		t.Fatalf("delete answered 503 after it was carried out: %v", err)
	}
	if n := fake.TargetSize("us-central1-a", "gpu-l4"); n != 0 {
		t.Errorf("target size %d after the delete, want 0", n)
	}
}

// Deleting an instance that is no longer a member (deleted already, by
// another replica or a lost answer's retry) succeeds: the provider asks
// Compute to skip instances that fail validation, as cluster-autoscaler
// does, and Compute then does.
func TestDeleteOfANonMemberSucceeds(t *testing.T) {
	fake, prov, _ := oneMIG(t, gcptest.Options{})
	ctx := context.Background()
	spec := l4
	spec.Name = "l4-0"
	if _, err := prov.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := prov.Delete(ctx, cloud.Instance{Name: "gone-7", Group: "l4", Location: "us-central1-a", ProviderID: "gce://" + project + "/us-central1-a/gone-7"}); err != nil {
		t.Fatalf("delete of a non-member: %v", err)
	}
	if n := fake.TargetSize("us-central1-a", "gpu-l4"); n != 1 {
		t.Errorf("target size %d, want 1: the member was touched", n)
	}
}

// A failed operation is classed by every error it carries, not its first:
// a quota error behind another is quota (the group backs off), whatever
// the HTTP status beside them.
func TestFailedOperationIsClassedByEveryError(t *testing.T) {
	fake, prov, _ := oneMIG(t, gcptest.Options{})
	done := func(status int, errs string) []byte {
		return fmt.Appendf(nil, `{"kind":"compute#operation","name":"operation-1","zone":"https://www.googleapis.com/compute/v1/projects/%s/zones/us-central1-a",
"status":"DONE","progress":100,"httpErrorStatusCode":%d,"httpErrorMessage":%q,"error":{"errors":[%s]}}`, project, status, http.StatusText(status), errs)
	}
	for i, tc := range []struct {
		name   string
		status int
		errs   string
		want   error
	}{
		{"quota behind another", http.StatusForbidden, `{"code":"SOME_ERROR","message":"first"},{"code":"QUOTA_EXCEEDED","message":"Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 8.0 in region us-central1."}`, cloud.ErrQuota},
		{"stock-out behind another", http.StatusServiceUnavailable, `{"code":"SOME_ERROR","message":"first"},{"code":"ZONE_RESOURCE_POOL_EXHAUSTED","message":"The zone does not have enough resources"}`, cloud.ErrCapacity},
		{"not found in a 400", http.StatusBadRequest, `{"code":"SOME_ERROR","message":"first"},{"code":"RESOURCE_NOT_FOUND","message":"The resource was not found"}`, cloud.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The create's first poll of its operation reads it DONE and failed.
			fake.AnswerNext(http.MethodGet, "", http.StatusOK, done(tc.status, tc.errs))
			spec := l4
			spec.Name = fmt.Sprintf("l4-%d", i)
			_, err := prov.Create(context.Background(), spec)
			if !errors.Is(err, tc.want) {
				t.Errorf("create: %v, want %v", err, tc.want)
			}
		})
	}
}

// A MIG whose listManagedInstancesResults is PAGINATED answers 500
// members a page; every page is read, and a member past the first page is
// no vanished instance.
func TestPaginatedMIGIsListedWhole(t *testing.T) {
	fake, prov, clients := oneMIG(t, gcptest.Options{})
	fake.SetPaginated("us-central1-a", "gpu-l4")
	ctx := context.Background()
	op, err := clients.Compute.InstanceGroupManagers.Resize(project, "us-central1-a", "gpu-l4", 501).Context(ctx).Do()
	if err != nil {
		t.Fatal(err)
	}
	for op.Status != "DONE" {
		time.Sleep(5 * time.Millisecond)
		if op, err = clients.Compute.ZoneOperations.Get(project, "us-central1-a", op.Name).Context(ctx).Do(); err != nil {
			t.Fatal(err)
		}
	}
	list, err := prov.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range list {
		if in.Group == "l4" {
			n++
		}
	}
	if n != 501 {
		t.Errorf("%d members listed, want 501", n)
	}
	if calls := fake.Calls()["POST listManagedInstances"]; calls < 2 {
		t.Errorf("%d listManagedInstances calls: the second page was not read", calls)
	}
}
