package verda

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda/verdatest"
)

// FuzzAnswers answers the client's reads with arbitrary bodies and status
// codes, as a broken proxy or a changed API would. The client must never
// panic, and a list must never come back shorter than the account is by
// accident: an answer to GET /instances that is not a JSON array is an
// error (an empty list would make every instance look gone, their Nodes
// deleted and replacements ordered while they run on).
func FuzzAnswers(f *testing.F) {
	fx := newFixture(f, verdatest.Options{}, ClientOptions{})
	for _, s := range []struct {
		which  uint8
		status uint16
		body   string
	}{
		{0, 200, `[]`}, {0, 200, `null`}, {0, 200, `{}`}, {0, 200, ``}, {0, 200, `[{"id": 1}]`}, {0, 200, `[null, 3, "x"]`},
		{0, 200, `[{"id":"a","hostname":"h","created_at":"2026-01-01T00:00:00Z","ip":{"x":1},"status":7}]`},
		{1, 200, `[{"instance_type":"1H100.80S.30V","price_per_hour":"nope","gpu":{"number_of_gpus":-1}}]`},
		{2, 200, `[{"location_code":"FIN-01","availabilities":null}]`}, {3, 200, `{"a":1}`},
		{4, 200, `[{"id":"s","name":1}]`}, {5, 200, `{"id":5}`}, {5, 202, `"plain-id"`}, {6, 200, `[1,2]`},
		{0, 500, `{"code":"internal","message":"x"}`}, {0, 429, ``}, {1, 404, `<html>`},
	} {
		f.Add(s.which, s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, which uint8, status uint16, body []byte) {
		code := faults.Status(status)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		switch which % 7 {
		case 0:
			fx.fake.FailNext(http.MethodGet, "/instances", code, string(body))
			_, err := fx.client.ListInstances(ctx)
			if err == nil && code < 300 && !faults.IsJSONArray(body) {
				t.Fatalf("a %d answer %q that is not a list was taken for one", code, body)
			}
		case 1:
			fx.fake.FailNext(http.MethodGet, "/instance-types", code, string(body))
			_, _ = fx.client.InstanceTypes(ctx)
		case 2:
			fx.fake.FailNext(http.MethodGet, "/instance-availability", code, string(body))
			_, _ = fx.client.Availability(ctx, which%2 == 0)
		case 3:
			fx.fake.FailNext(http.MethodGet, "/locations", code, string(body))
			_, _ = fx.client.Locations(ctx)
		case 4:
			fx.fake.FailNext(http.MethodGet, "/scripts", code, string(body))
			_, _ = fx.client.ListScripts(ctx)
		case 5:
			fx.fake.FailNext(http.MethodPost, "/instances", code, string(body))
			_, _ = fx.client.CreateInstance(ctx, order("fuzz-1", false))
		case 6:
			fx.fake.FailNext(http.MethodGet, "/instances/", code, string(body))
			_, _ = fx.client.GetInstance(ctx, "00000000-0000-0000-0000-000000000000")
		}
	})
}
