package kamatera

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/faults"
)

// FuzzAnswers answers the client's calls with arbitrary bodies and status
// codes, as a broken proxy or a changed API would. The client must never
// panic; a list of servers that is not a JSON array is an error, never an
// empty account (every server would look gone); and a garbled answer to a
// server's lookup is never "no such server" (a lost create would be
// ordered again).
func FuzzAnswers(f *testing.F) {
	fx := newFixture(f)
	for _, s := range []struct {
		which  uint8
		status uint16
		body   string
	}{
		{0, 200, `[]`}, {0, 200, `null`}, {0, 200, `{}`}, {0, 200, ``}, {0, 200, `[{"id": 1, "name": []}]`},
		{1, 200, `null`}, {1, 200, `[{"name": 3}]`}, {1, 200, `{"message": "x"}`},
		{2, 200, `{"tags": null}`}, {3, 200, `[{"id": "EU", "subCategory": 7}]`}, {4, 200, `{"cpuTypes": "x"}`},
		{5, 200, `[1, "x", {"a": []}]`}, {5, 200, `{"commandIds": "nope"}`}, {6, 200, `[{"id": {}, "status": 5}]`},
		{0, 500, `{"message": "Failed to run command method (servers)"}`}, {1, 429, ``}, {6, 404, `<html>`},
	} {
		f.Add(s.which, s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, which uint8, status uint16, body []byte) {
		code := faults.Status(status)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		notList := code < 300 && !faults.IsJSONArray(body)
		switch which % 7 {
		case 0:
			fx.fake.AnswerNext(http.MethodGet, "/service/servers", code, body)
			if _, err := fx.client.ListServers(ctx); err == nil && notList {
				t.Fatalf("a %d answer %q that is not a list was taken for one", code, body)
			}
		case 1:
			fx.fake.AnswerNext(http.MethodPost, "/service/server/info", code, body)
			if _, err := fx.client.ServerInfo(ctx, "fuzz-1"); errors.Is(err, cloud.ErrNotFound) && notList {
				t.Fatalf("a %d answer %q was taken for no such server: %v", code, body, err)
			}
		case 2:
			fx.fake.AnswerNext(http.MethodPost, "/server/tags", code, body)
			_, _ = fx.client.ServerTags(ctx, "fuzz-1")
		case 3:
			fx.fake.AnswerNext(http.MethodGet, "/service/server", code, body)
			_, _ = fx.client.Datacenters(ctx)
		case 4:
			fx.fake.AnswerNext(http.MethodGet, "/service/server", code, body)
			_, _ = fx.client.Capabilities(ctx, "EU")
		case 5:
			fx.fake.AnswerNext(http.MethodPost, "/service/server", code, body)
			_, _, _ = fx.client.CreateServer(ctx, order("fuzz-2", "EU"))
		case 6:
			fx.fake.AnswerNext(http.MethodGet, "/service/queue", code, body)
			_, _ = fx.client.Command(ctx, "1")
		}
	})
}
