// Package verda is gpuscaler's backend for Verda (formerly DataCrunch): a
// REST client written against the public API (no Go SDK is served by the
// module proxy) and a cloud.Provider on top of it.
package verda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// DefaultBaseURL is Verda's API; https://api.datacrunch.io/v1 still answers
// for accounts made before the rename.
const DefaultBaseURL = "https://api.verda.com/v1"

// ClientOptions configure a Client.
type ClientOptions struct {
	BaseURL      string
	ClientID     string
	ClientSecret string
	// HTTPClient defaults to one with a 30 s timeout.
	HTTPClient *http.Client
	// RequestsPerSecond is the client-side rate limit; default 10.
	RequestsPerSecond float64
	// MaxRetries of idempotent calls on 408, 429, 5xx and network errors;
	// default 4.
	MaxRetries int
	// RetryBase is the first backoff; it doubles up to 30 s, with jitter.
	// Default 1 s.
	RetryBase time.Duration
	Logger    *slog.Logger
}

// Client calls the Verda REST API. It is safe for concurrent use.
type Client struct {
	base    string
	http    *http.Client
	limiter *rate.Limiter
	opts    ClientOptions
	log     *slog.Logger
	// redact hides the credentials and tokens in anything the API echoes.
	redact *cloud.Redactor

	mu      sync.Mutex
	token   string
	refresh string
	expiry  time.Time
}

// NewClient returns a client; it authenticates on first use.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.ClientID == "" || opts.ClientSecret == "" {
		return nil, errors.New("verda: client ID and secret are required")
	}
	if opts.BaseURL == "" {
		opts.BaseURL = DefaultBaseURL
	}
	if err := cloud.CheckEndpoint(opts.BaseURL); err != nil {
		return nil, fmt.Errorf("verda: base URL: %w", err)
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.RequestsPerSecond <= 0 {
		opts.RequestsPerSecond = 10
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 4
	}
	if opts.RetryBase == 0 {
		opts.RetryBase = time.Second
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
		redact:  cloud.NewRedactor(opts.ClientID, opts.ClientSecret),
	}, nil
}

// tokenRenewMargin renews a token this long before it expires.
const tokenRenewMargin = 30 * time.Second

// bearer returns a valid access token, renewing it before expiry with the
// refresh token, or with the client credentials when that fails.
func (c *Client) bearer(ctx context.Context, force bool) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !force && c.token != "" && time.Now().Add(tokenRenewMargin).Before(c.expiry) {
		return c.token, nil
	}
	if c.refresh != "" {
		err := c.grant(ctx, map[string]string{"grant_type": "refresh_token", "refresh_token": c.refresh})
		if err == nil {
			return c.token, nil
		}
		c.log.Info("verda: token refresh failed, signing in again", "error", err)
	}
	err := c.grant(ctx, map[string]string{
		"grant_type": "client_credentials", "client_id": c.opts.ClientID, "client_secret": c.opts.ClientSecret,
	})
	if err != nil {
		return "", err
	}
	return c.token, nil
}

// grant asks POST /oauth2/token for a token; c.mu is held.
func (c *Client) grant(ctx context.Context, body map[string]string) error {
	var out struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int    `json:"expires_in"`
	}
	b, _ := json.Marshal(body)
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/oauth2/token", bytes.NewReader(b))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "gpuscaler")
		status, _, data, err := c.send(ctx, req)
		if err == nil && status == http.StatusOK {
			if err := json.Unmarshal(data, &out); err != nil || out.AccessToken == "" {
				return cloud.Errorf(cloud.ErrTransient, "auth", "token response unreadable")
			}
			c.token, c.refresh = out.AccessToken, out.RefreshToken
			c.redact.Add(out.AccessToken)
			c.redact.Add(out.RefreshToken)
			c.expiry = time.Now().Add(time.Duration(out.ExpiresIn) * time.Second)
			return nil
		}
		if err == nil {
			err = c.classify("auth", status, data)
		}
		if !cloud.Retryable(err) || attempt >= c.opts.MaxRetries {
			return err
		}
		if err := cloud.Backoff(ctx, c.opts.RetryBase, attempt); err != nil {
			return err
		}
	}
}

// call is one API request.
type call struct {
	op     string
	method string
	path   string
	query  url.Values
	body   any
	// idempotent calls are retried; others return ErrOutcomeUnknown when
	// the answer is lost after the request may have left.
	idempotent bool
	// header, when set, receives the headers of the answer decoded.
	header *http.Header
}

// do sends a call and decodes a 2xx answer into out (a *string receives the
// raw text). It retries idempotent calls on transient failures, renews the
// token once on 401, and returns errors classed as cloud errors.
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
	reauthed := false
	for attempt := 0; ; attempt++ {
		token, err := c.bearer(ctx, false)
		if err != nil {
			return err
		}
		if err := c.limiter.Wait(ctx); err != nil {
			return cloud.NewError(cloud.ErrTransient, cl.op, err)
		}
		req, err := http.NewRequestWithContext(ctx, cl.method, u, bytes.NewReader(payload))
		if err != nil {
			return cloud.NewError(cloud.ErrInvalid, cl.op, err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("User-Agent", "gpuscaler")
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		status, hdr, data, err := c.send(ctx, req)
		switch {
		case err != nil && !cl.idempotent && !errors.Is(err, errNotSent):
			return cloud.NewError(cloud.ErrOutcomeUnknown, cl.op, err)
		case err != nil:
			err = cloud.NewError(cloud.ErrTransient, cl.op, err)
		case status == http.StatusUnauthorized && !reauthed:
			reauthed = true
			if _, err := c.bearer(ctx, true); err != nil {
				return err
			}
			attempt--
			continue
		case status >= 200 && status < 300:
			if cl.header != nil {
				*cl.header = hdr
			}
			err := decode(cl.op, data, out)
			if err != nil && !cl.idempotent {
				// The order was taken but its answer is unreadable: it
				// must be looked up, never sent again.
				return cloud.NewError(cloud.ErrOutcomeUnknown, cl.op, err)
			}
			return err
		default:
			err = c.classify(cl.op, status, data)
			// A non-idempotent call is retried only when the API said it did
			// nothing (429, 503); after 408, 500, 502 or 504 the order may
			// have been taken, so it must be looked up, not sent again.
			if !cl.idempotent && errors.Is(err, cloud.ErrTransient) &&
				status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
				return cloud.NewError(cloud.ErrOutcomeUnknown, cl.op, err)
			}
		}
		if !cloud.Retryable(err) || attempt >= c.opts.MaxRetries {
			return err
		}
		c.log.Debug("verda: retrying", "op", cl.op, "attempt", attempt+1, "error", err)
		if err := cloud.Backoff(ctx, c.opts.RetryBase, attempt); err != nil {
			return err
		}
	}
}

// errNotSent marks a request that failed before any byte reached the API.
var errNotSent = errors.New("request not sent")

// send performs one HTTP exchange.
func (c *Client) send(ctx context.Context, req *http.Request) (int, http.Header, []byte, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return 0, nil, nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		if ctx.Err() != nil {
			return 0, nil, nil, ctx.Err()
		}
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, data, nil
}

func decode(op string, data []byte, out any) error {
	switch v := out.(type) {
	case nil:
		return nil
	case *string:
		// A create answers the new id as bare text, or the new object as
		// JSON (both forms are in use); the caller wants the id.
		text := strings.TrimSpace(string(data))
		if strings.HasPrefix(text, "{") {
			var obj struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal([]byte(text), &obj); err != nil || obj.ID == "" {
				return cloud.Errorf(cloud.ErrTransient, op, "unreadable answer: no id in the object")
			}
			*v = obj.ID
			return nil
		}
		*v = strings.Trim(text, `"`)
		return nil
	default:
		if err := json.Unmarshal(data, out); err != nil {
			return cloud.Errorf(cloud.ErrTransient, op, "unreadable answer: %v", err)
		}
		return nil
	}
}

// classify turns an error answer into a classed cloud error. The API's
// words are redacted (an endpoint that echoes the request would otherwise
// put the client secret into logs) and cut short.
func (c *Client) classify(op string, status int, data []byte) error {
	var ae apiError
	if json.Unmarshal(data, &ae) != nil || ae.Message == "" {
		ae.Message = string(data)
	}
	lower := strings.ToLower(ae.Message)
	msg := fmt.Errorf("HTTP %d %s: %s", status, c.redact.Text(ae.Code), c.redact.Text(ae.Message))
	switch {
	case status == http.StatusServiceUnavailable && strings.Contains(lower, "not enough resources"):
		return cloud.NewError(cloud.ErrCapacity, op, msg)
	case status == http.StatusNotFound:
		return cloud.NewError(cloud.ErrNotFound, op, msg)
	case ae.Code == "insufficient_funds" || strings.Contains(lower, "limit exceeded") || strings.Contains(lower, "quota"):
		return cloud.NewError(cloud.ErrQuota, op, msg)
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		return cloud.NewError(cloud.ErrTransient, op, msg)
	default:
		return cloud.NewError(cloud.ErrInvalid, op, msg)
	}
}
