package verda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// identity are the instance fields that say whose an instance is.
var identity = map[string]bool{"id": true, "hostname": true, "description": true, "tags": true, "(not a JSON object)": true}

// ListInstances returns every instance of the account not yet deleted. A
// record with a field the client cannot read is kept with that field
// empty, and reported: one odd record must not stop every sync (an
// instance dropped from the list would be taken for gone and replaced).
func (c *Client) ListInstances(ctx context.Context) ([]Instance, error) {
	var raw json.RawMessage
	if err := c.do(ctx, call{op: "list", method: http.MethodGet, path: "/instances", idempotent: true}, &raw); err != nil {
		return nil, err
	}
	out, lost, err := decodeRecords[Instance](raw)
	if err != nil {
		return nil, cloud.Errorf(cloud.ErrTransient, "list", "unreadable answer: %v", err)
	}
	for i, fields := range lost {
		for _, f := range fields {
			if identity[f] {
				// Without it the instance cannot be told ours: dropped from
				// the list it would be taken for gone and replaced, while
				// it runs on. Better no list than a wrong one.
				return nil, cloud.Errorf(cloud.ErrTransient, "list", "instance record %d: its %s cannot be read", i, f)
			}
		}
		c.log.Warn("verda: an instance record has fields the client cannot read; kept without them", "id", out[i].ID, "hostname", out[i].Hostname, "fields", fields)
	}
	return out, nil
}

// GetInstance returns one instance.
func (c *Client) GetInstance(ctx context.Context, id string) (Instance, error) {
	var out Instance
	return out, c.do(ctx, call{op: "get", method: http.MethodGet, path: "/instances/" + url.PathEscape(id), idempotent: true}, &out)
}

// CreateInstance orders an instance and returns its id. When the answer is
// lost after the order may have been taken, it looks the instance up by
// hostname instead of ordering again, and returns cloud.ErrOutcomeUnknown
// only if that look-up fails too.
func (c *Client) CreateInstance(ctx context.Context, req CreateRequest) (string, error) {
	var id string
	err := c.do(ctx, call{op: "create", method: http.MethodPost, path: "/instances", body: req}, &id)
	if !errors.Is(err, cloud.ErrOutcomeUnknown) {
		return id, err
	}
	c.log.Warn("verda: create outcome unknown; looking the instance up by hostname", "hostname", req.Hostname, "error", err)
	insts, lerr := c.ListInstances(ctx)
	if lerr != nil {
		// Only err is wrapped: the look-up's class must not become the
		// create's (a create whose outcome is unknown is never retried).
		return "", fmt.Errorf("%w (look-up failed: %s)", err, lerr.Error())
	}
	for _, in := range insts {
		if in.Hostname == req.Hostname {
			return in.ID, nil
		}
	}
	// The API has no such instance: the order was not taken.
	return "", cloud.NewError(cloud.ErrTransient, "create", fmt.Errorf("order lost before it was taken: %w", err))
}

// DeleteInstances deletes instances; volumeIDs nil keeps the API default
// (the OS volume goes, other volumes are detached). The API answers 204
// when all is done, or 202/207 with a result per instance: the ids whose
// result is an error are sent again (transient failures, with backoff),
// and an id that keeps failing is returned as an error naming it. An id
// the API does not know is gone, which is what was asked.
func (c *Client) DeleteInstances(ctx context.Context, ids []string, volumeIDs []string) error {
	pending := ids
	var failed []error
	for attempt := 0; ; attempt++ {
		var text string // 204 has no body; 202 and 207 a result per instance
		body := ActionRequest{Action: "delete", ID: pending, VolumeIDs: volumeIDs}
		err := c.do(ctx, call{op: "delete", method: http.MethodPut, path: "/instances", body: body, idempotent: true}, &text)
		if errors.Is(err, cloud.ErrNotFound) && len(pending) == 1 {
			return nil
		}
		if err != nil {
			return err
		}
		var results []ActionResult
		if text != "" {
			if err := json.Unmarshal([]byte(text), &results); err != nil {
				return cloud.Errorf(cloud.ErrTransient, "delete", "unreadable answer: %v", err)
			}
		}
		pending, failed = nil, nil
		retryable := true
		for _, r := range results {
			if r.Status != "error" && r.StatusCode < 400 || r.StatusCode == http.StatusNotFound {
				continue
			}
			e := c.classify("delete", r.StatusCode, mustJSON(apiError{Message: r.Error}))
			failed = append(failed, fmt.Errorf("instance %s: %w", r.InstanceID, e))
			pending = append(pending, r.InstanceID)
			retryable = retryable && cloud.Retryable(e)
		}
		if len(pending) == 0 {
			return nil
		}
		if !retryable || attempt >= c.opts.MaxRetries {
			return errors.Join(failed...)
		}
		c.log.Debug("verda: some deletes failed; sending them again", "ids", pending, "attempt", attempt+1)
		if err := cloud.Backoff(ctx, c.opts.RetryBase, attempt); err != nil {
			return err
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// InstanceTypes returns the catalog; records are read as ListInstances
// reads instances.
func (c *Client) InstanceTypes(ctx context.Context) ([]InstanceType, error) {
	var raw json.RawMessage
	if err := c.do(ctx, call{op: "instance_types", method: http.MethodGet, path: "/instance-types", idempotent: true}, &raw); err != nil {
		return nil, err
	}
	out, lost, err := decodeRecords[InstanceType](raw)
	if err != nil {
		return nil, cloud.Errorf(cloud.ErrTransient, "instance_types", "unreadable answer: %v", err)
	}
	for i, fields := range lost {
		c.log.Warn("verda: an instance type has fields the client cannot read; kept without them", "type", out[i].InstanceType, "fields", fields)
	}
	return out, nil
}

// Availability returns which types can be ordered now in each location.
func (c *Client) Availability(ctx context.Context, spot bool) ([]Availability, error) {
	var out []Availability
	q := url.Values{"is_spot": {strconv.FormatBool(spot)}}
	return out, c.do(ctx, call{op: "availability", method: http.MethodGet, path: "/instance-availability", query: q, idempotent: true}, &out)
}

// Locations returns the datacenters.
func (c *Client) Locations(ctx context.Context) ([]Location, error) {
	var out []Location
	return out, c.do(ctx, call{op: "locations", method: http.MethodGet, path: "/locations", idempotent: true}, &out)
}

// CreateScript stores a startup script and returns its id.
func (c *Client) CreateScript(ctx context.Context, name, script string) (string, error) {
	var id string
	body := map[string]string{"name": name, "script": script}
	return id, c.do(ctx, call{op: "create_script", method: http.MethodPost, path: "/scripts", body: body}, &id)
}

// Script listing: pages of scriptPageSize, at most maxScriptPages of them.
// An account holds at most 100 scripts, so one page is the rule; the cap
// only stops a service that keeps answering full pages.
const (
	scriptPageSize = 100
	maxScriptPages = 10
)

// ListScripts returns the stored startup scripts, page by page. It stops
// on a short page, once X-Total-Count scripts are read, on a page that
// adds no script not seen before (a service, or a proxy, that ignores the
// paging parameters answers the same page again), or after maxScriptPages.
func (c *Client) ListScripts(ctx context.Context) ([]Script, error) {
	var all []Script
	seen := map[string]bool{}
	for page := 1; page <= maxScriptPages; page++ {
		var out []Script
		var hdr http.Header
		q := url.Values{"page": {strconv.Itoa(page)}, "pageSize": {strconv.Itoa(scriptPageSize)}}
		if err := c.do(ctx, call{op: "list_scripts", method: http.MethodGet, path: "/scripts", query: q, idempotent: true, header: &hdr}, &out); err != nil {
			return nil, err
		}
		added := 0
		for _, s := range out {
			if !seen[s.ID] {
				seen[s.ID] = true
				all = append(all, s)
				added++
			}
		}
		total, err := strconv.Atoi(hdr.Get("X-Total-Count"))
		hasTotal := err == nil
		if len(out) < scriptPageSize || added == 0 || hasTotal && len(all) >= total {
			return all, nil
		}
	}
	c.log.Warn("verda: the script list did not end within the page cap; using what was read", "pages", maxScriptPages, "scripts", len(all))
	return all, nil
}

// DeleteScript deletes a startup script; one already gone is success.
func (c *Client) DeleteScript(ctx context.Context, id string) error {
	err := c.do(ctx, call{op: "delete_script", method: http.MethodDelete, path: "/scripts/" + url.PathEscape(id), idempotent: true}, nil)
	if errors.Is(err, cloud.ErrNotFound) {
		return nil
	}
	return err
}

// ListSSHKeys returns the account's SSH keys.
func (c *Client) ListSSHKeys(ctx context.Context) ([]SSHKey, error) {
	var out []SSHKey
	return out, c.do(ctx, call{op: "list_ssh_keys", method: http.MethodGet, path: "/sshkeys", idempotent: true}, &out)
}
