// Package scaleway is gpuscaler's backend for Scaleway Instances, on the
// official Go SDK (github.com/scaleway/scaleway-sdk-go): GPU servers
// (L4, L40S, H100, RTX 3070, P100) ordered zone by zone, booted with
// cloud-init, their block volumes deleted with them.
package scaleway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	scwerrors "github.com/scaleway/scaleway-sdk-go/errors"
	"github.com/scaleway/scaleway-sdk-go/scw"
	"golang.org/x/time/rate"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// DefaultAPIURL is Scaleway's API.
const DefaultAPIURL = "https://api.scaleway.com"

// ClientOptions say how to reach the Scaleway API.
type ClientOptions struct {
	AccessKey, SecretKey string
	// ProjectID is where servers are made and listed.
	ProjectID string
	// APIURL defaults to https://api.scaleway.com (SCW_API_URL).
	APIURL string
	// RequestsPerSecond is the client-side budget for every request
	// (burst of as many); default 10.
	RequestsPerSecond float64
	// Timeout bounds each HTTP exchange; default 60 s.
	Timeout time.Duration
	// Transport carries the requests; default http.DefaultTransport.
	Transport http.RoundTripper
}

// NewClient returns an SDK client whose every request waits on one rate
// limiter and carries the credentials.
func NewClient(opts ClientOptions) (*scw.Client, error) {
	if opts.AccessKey == "" || opts.SecretKey == "" || opts.ProjectID == "" {
		return nil, errors.New("scaleway: access key, secret key and project ID are required")
	}
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	if err := cloud.CheckEndpoint(opts.APIURL); err != nil {
		return nil, fmt.Errorf("scaleway: API URL: %w", err)
	}
	if opts.RequestsPerSecond <= 0 {
		opts.RequestsPerSecond = 10
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	limiter := cloud.NewRequestLimiter(opts.RequestsPerSecond)
	hc := &http.Client{Timeout: opts.Timeout, Transport: &limitedTransport{next: listGuard{next: opts.Transport}, limiter: limiter}}
	return scw.NewClient(
		scw.WithAuth(opts.AccessKey, opts.SecretKey),
		scw.WithDefaultProjectID(opts.ProjectID),
		scw.WithAPIURL(opts.APIURL),
		scw.WithHTTPClient(hc),
		scw.WithUserAgent("gpuscaler"),
	)
}

// limitedTransport makes every request wait for the client's budget.
type limitedTransport struct {
	next    http.RoundTripper
	limiter *rate.Limiter
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(req.Context()); err != nil {
		return nil, err
	}
	return t.next.RoundTrip(req)
}

// serverList is the path of a zone's server list.
var serverList = regexp.MustCompile(`^/instance/v1/zones/[^/]+/servers$`)

// maxListAnswer bounds one page of the server list (100 servers of a few
// KiB each).
const maxListAnswer = 32 << 20

// listGuard refuses a successful answer to the server list that holds no
// list of servers. The SDK would read "{}" or {"servers": null} as an
// empty page, and a project that looks empty has every instance taken for
// gone: its Node deleted and a replacement ordered while it runs on.
type listGuard struct {
	next http.RoundTripper
}

func (g listGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.StatusCode/100 != 2 || !serverList.MatchString(req.URL.Path) {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListAnswer+1))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var page struct {
		Servers json.RawMessage `json:"servers"`
	}
	if len(body) > maxListAnswer || json.Unmarshal(body, &page) != nil || !bytes.HasPrefix(bytes.TrimSpace(page.Servers), []byte("[")) {
		return nil, fmt.Errorf("%w: a %d answer to the server list without a list of servers", errUnreadable, resp.StatusCode)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// classify turns an SDK error into a classed cloud error. The SDK maps the
// API's JSON "type" to typed errors; the rest is classed by status. A
// failure to get an answer at all is transient (the caller decides
// whether a create may have landed).
func classify(op string, err error, redact *cloud.Redactor) error {
	if err == nil {
		return nil
	}
	cause := errors.New(redact.Text(err.Error()))
	var (
		stock     *scw.OutOfStockError
		quota     *scw.QuotasExceededError
		notFound  *scw.ResourceNotFoundError
		transient *scw.TransientStateError
		locked    *scw.ResourceLockedError
		args      *scw.InvalidArgumentsError
		denied    *scw.PermissionsDeniedError
		auth      *scw.DeniedAuthenticationError
		pre       *scw.PreconditionFailedError
		resp      *scw.ResponseError
	)
	switch {
	case errors.As(err, &stock):
		return cloud.NewError(cloud.ErrCapacity, op, cause)
	case errors.As(err, &quota):
		return cloud.NewError(cloud.ErrQuota, op, cause)
	case errors.As(err, &notFound):
		return cloud.NewError(cloud.ErrNotFound, op, cause)
	case errors.As(err, &transient), errors.As(err, &locked), errors.As(err, &pre):
		return cloud.NewError(cloud.ErrTransient, op, cause)
	case errors.As(err, &args), errors.As(err, &denied), errors.As(err, &auth):
		return cloud.NewError(cloud.ErrInvalid, op, cause)
	case errors.As(err, &resp):
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return cloud.NewError(cloud.ErrNotFound, op, cause)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
			return cloud.NewError(cloud.ErrTransient, op, cause)
		default:
			return cloud.NewError(cloud.ErrInvalid, op, cause)
		}
	}
	return cloud.NewError(cloud.ErrTransient, op, cause)
}

// sent reports whether a failed request may have reached the API: no
// answer came (a timeout, a dropped connection) or one saying it broke
// midway (500, 502, 504).
func sent(err error) bool {
	var resp *scw.ResponseError
	if errors.As(err, &resp) {
		return resp.StatusCode == http.StatusInternalServerError || resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout
	}
	var wrapped *scwerrors.Error
	if errors.As(err, &wrapped) {
		// The SDK's own wrapper: no answer, or one it could not read.
		return true
	}
	var sdk scw.SdkError
	// A typed API error (out_of_stock, quotas_exceeded, ...): the API
	// answered and did nothing.
	return !errors.As(err, &sdk)
}

// errUnreadable is an answer the SDK could not make sense of: it panicked
// on it. The request reached the API (see sent).
var errUnreadable = errors.New("the SDK could not read the API's answer")

// sdk runs one SDK call, turning a panic on an answer the SDK could not
// read (it dereferences what it decoded, such as a null server in a list)
// into errUnreadable: a garbled answer is a failed call, not a crashed
// process.
func sdk(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errUnreadable, r)
		}
	}()
	return call()
}

// retry runs an idempotent call until it succeeds, fails for good, or has
// failed transiently attempts times, backing off from base.
func retry(ctx context.Context, log *slog.Logger, op string, redact *cloud.Redactor, attempts int, base time.Duration, call func() error) error {
	for attempt := 0; ; attempt++ {
		err := classify(op, sdk(call), redact)
		if err == nil || !cloud.Retryable(err) || attempt+1 >= attempts {
			return err
		}
		log.Debug("scaleway: retrying", "op", op, "attempt", attempt+1, "error", err)
		if berr := cloud.Backoff(ctx, base, attempt); berr != nil {
			return cloud.NewError(cloud.ErrTransient, op, berr)
		}
	}
}
