// Package kamatera is gpuscaler's backend for Kamatera servers: a REST
// client of Kamatera's cloudcli API (there is no Go SDK) and, on top of
// it, a cloud.Provider.
package kamatera

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// DefaultBaseURL is Kamatera's cloudcli API (INI key kamatera-api-url).
const DefaultBaseURL = "https://cloudcli.cloudwm.com"

// ClientOptions configure a Client.
type ClientOptions struct {
	BaseURL  string
	ClientID string
	Secret   string
	// HTTPClient defaults to one with a 2-minute timeout.
	HTTPClient *http.Client
	// RequestsPerSecond is the client-side rate limit (burst of as many);
	// default 10.
	RequestsPerSecond float64
	// MaxRetries of idempotent calls on 429, 5xx and network errors;
	// default 5, as the seed autoscaler.
	MaxRetries int
	// RetryBase is the first backoff; it doubles up to 30 s, with jitter.
	// Default 1 s.
	RetryBase time.Duration
	// PollInterval spaces the polls of a queued command: it starts here
	// and grows by half each poll up to 10 s. Default 2 s.
	PollInterval time.Duration
	// CommandTimeout bounds the wait for one queued command; default
	// 40 min, as the seed autoscaler.
	CommandTimeout time.Duration
	// Redact are further secrets (root passwords) kept out of errors and
	// logs, beside the credentials.
	Redact []string
	Logger *slog.Logger
}

// Client calls the Kamatera cloudcli API. It is safe for concurrent use.
type Client struct {
	base    string
	http    *http.Client
	limiter *rate.Limiter
	opts    ClientOptions
	log     *slog.Logger
	redact  *cloud.Redactor
}

// NewClient returns a client; the credentials go in headers of every call.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.ClientID == "" || opts.Secret == "" {
		return nil, errors.New("kamatera: API client ID and secret are required")
	}
	if opts.BaseURL == "" {
		opts.BaseURL = DefaultBaseURL
	}
	if err := cloud.CheckEndpoint(opts.BaseURL); err != nil {
		return nil, fmt.Errorf("kamatera: API URL: %w", err)
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 2 * time.Minute}
	}
	if opts.RequestsPerSecond <= 0 {
		opts.RequestsPerSecond = 10
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 5
	}
	if opts.RetryBase == 0 {
		opts.RetryBase = time.Second
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 2 * time.Second
	}
	if opts.CommandTimeout == 0 {
		opts.CommandTimeout = 40 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Client{
		base:    strings.TrimRight(opts.BaseURL, "/"),
		http:    opts.HTTPClient,
		limiter: cloud.NewRequestLimiter(opts.RequestsPerSecond),
		opts:    opts,
		log:     opts.Logger,
		redact:  cloud.NewRedactor(append([]string{opts.ClientID, opts.Secret}, opts.Redact...)...),
	}, nil
}

// call is one API request.
type call struct {
	op     string
	method string
	path   string
	query  url.Values
	body   any
	// idempotent calls are retried on transient failures; a create is
	// sent once, and a lost answer is ErrOutcomeUnknown.
	idempotent bool
}

// do sends a call and decodes the 200 answer into out.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = json.Marshal(cl.body); err != nil {
			return cloud.NewError(cloud.ErrInvalid, cl.op, err)
		}
	}
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	for attempt := 0; ; attempt++ {
		if err := c.limiter.Wait(ctx); err != nil {
			return cloud.NewError(cloud.ErrTransient, cl.op, err)
		}
		req, err := http.NewRequestWithContext(ctx, cl.method, u, bytes.NewReader(payload))
		if err != nil {
			return cloud.NewError(cloud.ErrInvalid, cl.op, err)
		}
		req.Header.Set("AuthClientId", c.opts.ClientID)
		req.Header.Set("AuthSecret", c.opts.Secret)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "gpuscaler")
		status, data, err := c.send(req)
		switch {
		case err != nil && !cl.idempotent:
			// Sent, perhaps taken: it must be looked up, never sent again.
			return cloud.NewError(cloud.ErrOutcomeUnknown, cl.op, err)
		case err != nil && ctx.Err() != nil:
			return cloud.NewError(cloud.ErrTransient, cl.op, ctx.Err())
		case err != nil:
			err = cloud.NewError(cloud.ErrTransient, cl.op, err)
		case status == http.StatusOK:
			if out == nil {
				return nil
			}
			if err := json.Unmarshal(data, out); err != nil {
				class := cloud.ErrTransient
				if !cl.idempotent {
					class = cloud.ErrOutcomeUnknown
				}
				return cloud.Errorf(class, cl.op, "unreadable answer: %v", err)
			}
			return nil
		default:
			err = c.classify(cl.op, status, data)
			if !cl.idempotent && errors.Is(err, cloud.ErrTransient) && status != http.StatusTooManyRequests {
				// The order may have been taken; it must be looked up.
				return cloud.NewError(cloud.ErrOutcomeUnknown, cl.op, err)
			}
		}
		if !cloud.Retryable(err) || attempt >= c.opts.MaxRetries {
			return err
		}
		c.log.Debug("kamatera: retrying", "op", cl.op, "attempt", attempt+1, "error", err)
		if err := cloud.Backoff(ctx, c.opts.RetryBase, attempt); err != nil {
			return cloud.NewError(cloud.ErrTransient, cl.op, err)
		}
	}
}

// send performs one HTTP exchange.
func (c *Client) send(req *http.Request) (int, []byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, data, nil
}

// apiError is the API's error body.
type apiError struct {
	Message string `json:"message"`
}

// classify turns an error answer into a classed cloud error, its words
// redacted and cut short.
func (c *Client) classify(op string, status int, data []byte) error {
	var ae apiError
	if json.Unmarshal(data, &ae) != nil || ae.Message == "" {
		ae.Message = string(data)
	}
	msg := fmt.Errorf("HTTP %d: %s", status, c.redact.Text(ae.Message))
	switch class := classifyText(ae.Message); {
	case strings.Contains(strings.ToLower(ae.Message), "no servers found"):
		return cloud.NewError(cloud.ErrNotFound, op, msg)
	case errors.Is(class, cloud.ErrCapacity) || errors.Is(class, cloud.ErrQuota):
		return cloud.NewError(class, op, msg)
	case status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500:
		return cloud.NewError(cloud.ErrTransient, op, msg)
	case class != nil:
		return cloud.NewError(class, op, msg)
	default:
		return cloud.NewError(cloud.ErrInvalid, op, msg)
	}
}

// classifyText classes the free text of an error message or a failed
// command's log: Kamatera has no error codes. nil when the text says
// nothing known.
func classifyText(text string) error {
	t := strings.ToLower(text)
	switch {
	case containsAny(t, "insufficient resources", "not enough resources", "no available resources", "out of stock", "no capacity"):
		return cloud.ErrCapacity
	case containsAny(t, "quota", "limit exceeded", "limit reached", "insufficient funds", "insufficient balance", "not enough credit"):
		return cloud.ErrQuota
	case containsAny(t, "invalid", "not allowed", "not supported", "unknown image", "does not exist", "illegal"):
		return cloud.ErrInvalid
	case containsAny(t, "timeout", "timed out", "temporar", "try again", "failed to run command"):
		return cloud.ErrTransient
	}
	return nil
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
