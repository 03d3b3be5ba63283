package kamatera

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Server is one row of GET /service/servers.
type Server struct {
	ID         string `json:"id,omitempty"`
	Name       string `json:"name"`
	Datacenter string `json:"datacenter,omitempty"`
	// Power is "on" or "off".
	Power string `json:"power"`
}

// ServerInfo is one entry of POST /service/server/info.
type ServerInfo struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Datacenter string `json:"datacenter"`
	Power      string `json:"power"`
	CPU        string `json:"cpu"`
	RAM        int    `json:"ram"`
	DiskSizes  []int  `json:"diskSizes"`
	Networks   []struct {
		Network string   `json:"network"`
		IPs     []string `json:"ips"`
	} `json:"networks"`
	Billing       string `json:"billing"`
	PriceHourlyOn Price  `json:"priceHourlyOn"`
}

// Price is a price the API writes as a string ("0.0274"), or as "" when
// it could not price the server (cloudcli-server's server info turns its
// numbers into strings); a number is read too. "" and null read as 0.
type Price float64

// UnmarshalJSON implements json.Unmarshaler.
func (p *Price) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		*p = 0
	case float64:
		*p = Price(x)
	case string:
		if strings.TrimSpace(x) == "" {
			*p = 0
			return nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return fmt.Errorf("price %q: %w", x, err)
		}
		*p = Price(f)
	default:
		return fmt.Errorf("price: unexpected %T", v)
	}
	return nil
}

// CreateRequest is the body of POST /service/server, as the seed
// autoscaler sends it: lists (disk, network, tag) are space-joined
// strings, and flags are "yes"/"no".
type CreateRequest struct {
	Name             string `json:"name"`
	Password         string `json:"password"`
	PasswordValidate string `json:"passwordValidate"`
	SSHKey           string `json:"ssh-key"`
	Datacenter       string `json:"datacenter"`
	Image            string `json:"image"`
	CPU              string `json:"cpu"`
	RAM              string `json:"ram"`
	Disk             string `json:"disk"`
	DailyBackup      string `json:"dailybackup"`
	Managed          string `json:"managed"`
	Network          string `json:"network"`
	Quantity         int    `json:"quantity"`
	// BillingCycle is "hourly" or "monthly"; the server reads the field
	// by this exact, lower-case name and bills hourly without it.
	BillingCycle   string `json:"billingcycle"`
	MonthlyPackage string `json:"monthlypackage"`
	PowerOnAfter   string `json:"poweronaftercreate"`
	ScriptFile     string `json:"script-file"`
	UserDataFile   string `json:"userdata-file"`
	Tag            string `json:"tag"`
}

// Command is a queued command's state (GET /service/queue): the fields
// of a queue entry as cloudcli-server's queue detail lists them.
type Command struct {
	ID json.RawMessage `json:"id"`
	// Status is "complete", "error" or "cancelled" once it ended, anything
	// else (pending, executing, progress) while it runs.
	Status      string `json:"status"`
	Log         string `json:"log"`
	Server      string `json:"server"`
	Description string `json:"description"`
}

// QueueEntry is one row of the account's command queue (GET /svc/queue,
// cli_schema/commands/queue/list.json in cloudwm/cloudcli-server): no
// status or log; Command has those.
type QueueEntry struct {
	ID          json.RawMessage `json:"id"`
	CommandInfo string          `json:"commandInfo"`
	ServiceName string          `json:"serviceName"`
	Created     string          `json:"dtCreate"`
}

// IDString is the entry's command id, a number or a string in the answer.
func (e QueueEntry) IDString() string { return strings.Trim(string(e.ID), `"`) }

// ListQueue returns the account's queued and recent commands.
func (c *Client) ListQueue(ctx context.Context) ([]QueueEntry, error) {
	var out []QueueEntry
	return out, c.do(ctx, call{op: "queue-list", method: http.MethodGet, path: "/svc/queue", idempotent: true}, &out)
}

// ListServers returns every server of the account.
func (c *Client) ListServers(ctx context.Context) ([]Server, error) {
	var raw json.RawMessage
	if err := c.do(ctx, call{op: "list", method: http.MethodGet, path: "/service/servers", idempotent: true}, &raw); err != nil {
		return nil, err
	}
	return decodeList[Server]("list", raw)
}

// decodeList reads an answer that must be a JSON array. "null", or an
// object, decodes as an empty list, which would make every server look
// gone: their Nodes deleted, replacements ordered while they run on.
func decodeList[T any](op string, raw []byte) ([]T, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' {
		if err := relayedError(op, t); err != nil {
			return nil, err
		}
		return nil, cloud.Errorf(cloud.ErrTransient, op, "unreadable answer: not a JSON array")
	}
	var out []T
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, cloud.Errorf(cloud.ErrTransient, op, "unreadable answer: %v", err)
	}
	return out, nil
}

// relayedError reads the upstream API's refusal that cloudcli-server
// relays with HTTP 200 on a GET (app/Cloudcli/ProxyServerGet.php):
// {"errors":[{"code":1,"info":"you are not logged in"}]}, as libcloud's
// Kamatera fixture failed_auth.json records it. Bad credentials are
// invalid (no retry helps); another refusal is classed by its words. nil
// when raw is no such answer.
func relayedError(op string, raw []byte) error {
	var body struct {
		Errors []struct {
			Code int    `json:"code"`
			Info string `json:"info"`
		} `json:"errors"`
	}
	if json.Unmarshal(raw, &body) != nil || len(body.Errors) == 0 {
		return nil
	}
	var infos []string
	for _, e := range body.Errors {
		infos = append(infos, fmt.Sprintf("%s (%d)", e.Info, e.Code))
	}
	text := strings.Join(infos, "; ")
	class := classifyText(text)
	switch {
	case strings.Contains(strings.ToLower(text), "not logged in"):
		class = cloud.ErrInvalid
	case class == nil:
		class = cloud.ErrTransient
	}
	return cloud.Errorf(class, op, "refused: %s", text)
}

// ServerInfo returns a server's details; cloud.ErrNotFound when there is
// no such server.
func (c *Client) ServerInfo(ctx context.Context, name string) (ServerInfo, error) {
	var raw json.RawMessage
	err := c.do(ctx, call{op: "info", method: http.MethodPost, path: "/service/server/info", body: map[string]string{"name": name}, idempotent: true}, &raw)
	if err != nil {
		return ServerInfo{}, err
	}
	// Not found only on a list without it: a lost create is looked up here,
	// and a garbled answer taken for "no such server" would order it again.
	out, err := decodeList[ServerInfo]("info", raw)
	if err != nil {
		return ServerInfo{}, err
	}
	for _, in := range out {
		if in.Name == name {
			return in, nil
		}
	}
	return ServerInfo{}, cloud.Errorf(cloud.ErrNotFound, "info", "no server named %s", name)
}

// ServerTags returns a server's tags (POST /server/tags, outside /service).
func (c *Client) ServerTags(ctx context.Context, name string) ([]string, error) {
	var out []struct {
		TagName string `json:"tagName"`
		// Older answers spelled it "tag name" (the Kamatera autoscaler
		// read that key before it read tagName).
		TagNameSpaced string `json:"tag name"`
	}
	if err := c.do(ctx, call{op: "tags", method: http.MethodPost, path: "/server/tags", body: map[string]string{"name": name}, idempotent: true}, &out); err != nil {
		return nil, err
	}
	tags := make([]string, 0, len(out))
	for _, t := range out {
		switch {
		case t.TagName != "":
			tags = append(tags, t.TagName)
		case t.TagNameSpaced != "":
			tags = append(tags, t.TagNameSpaced)
		}
	}
	return tags, nil
}

// Datacenter is one row of GET /service/server?datacenter=1.
type Datacenter struct {
	ID string `json:"id"`
	// Name is the country; SubCategory the city.
	Name        string `json:"name"`
	Category    string `json:"category"`
	SubCategory string `json:"subCategory"`
}

// Datacenters returns the datacenters the account can order in.
func (c *Client) Datacenters(ctx context.Context) ([]Datacenter, error) {
	var out []Datacenter
	q := url.Values{"datacenter": {"1"}}
	return out, c.do(ctx, call{op: "datacenters", method: http.MethodGet, path: "/service/server", query: q, idempotent: true}, &out)
}

// Capabilities is what a datacenter sells (GET
// /service/server?capabilities=1&datacenter=<id>): CPU types with their
// core counts and RAM sizes, disk sizes and traffic packages.
type Capabilities struct {
	CPUTypes []CPUType `json:"cpuTypes"`
	// DiskSizeGB are the disk sizes a disk spec may ask for.
	DiskSizeGB []int `json:"diskSizeGB"`
	// MonthlyTrafficPackage maps package ids to their descriptions.
	MonthlyTrafficPackage        map[string]string `json:"monthlyTrafficPackage"`
	DefaultMonthlyTrafficPackage string            `json:"defaultMonthlyTrafficPackage"`
}

// CPUType is one CPU type of a datacenter ("A", "B", "D", "T").
type CPUType struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CPUCores    []int  `json:"cpuCores"`
	RAMMB       []int  `json:"ramMB"`
}

// Capabilities returns what a datacenter sells.
func (c *Client) Capabilities(ctx context.Context, datacenter string) (Capabilities, error) {
	var out Capabilities
	q := url.Values{"capabilities": {"1"}, "datacenter": {datacenter}}
	return out, c.do(ctx, call{op: "capabilities", method: http.MethodGet, path: "/service/server", query: q, idempotent: true}, &out)
}

// CreateServer orders one server and returns its command id (the order
// runs in the queue: see WaitCommand). It is sent once: when the answer is
// lost, ErrOutcomeUnknown says the server must be looked up by name.
//
// A generated root password ("__generate__") comes back too: it is
// neither logged nor kept, only returned so that the command's log can be
// cleaned of it (see WaitCommand).
func (c *Client) CreateServer(ctx context.Context, req CreateRequest) (command, password string, err error) {
	req.Quantity = 1
	var raw json.RawMessage
	if err := c.do(ctx, call{op: "create", method: http.MethodPost, path: "/service/server", body: req}, &raw); err != nil {
		return "", "", err
	}
	var generated struct {
		Password string `json:"password"`
	}
	if len(raw) > 0 && raw[0] == '{' {
		_ = json.Unmarshal(raw, &generated)
	}
	ids, err := commandIDs(raw)
	if err != nil || len(ids) != 1 {
		return "", generated.Password, cloud.Errorf(cloud.ErrOutcomeUnknown, "create", "unreadable answer (%d command ids): %v", len(ids), err)
	}
	return ids[0], generated.Password, nil
}

// PowerOff powers a server off and returns the command id.
func (c *Client) PowerOff(ctx context.Context, name string) (string, error) {
	return c.power(ctx, "poweroff", name)
}

// PowerOn powers a server on and returns the command id.
func (c *Client) PowerOn(ctx context.Context, name string) (string, error) {
	return c.power(ctx, "poweron", name)
}

func (c *Client) power(ctx context.Context, action, name string) (string, error) {
	var raw json.RawMessage
	if err := c.do(ctx, call{op: action, method: http.MethodPost, path: "/service/server/" + action, body: map[string]string{"name": name}, idempotent: true}, &raw); err != nil {
		return "", err
	}
	ids, err := commandIDs(raw)
	if err != nil || len(ids) == 0 {
		return "", cloud.Errorf(cloud.ErrTransient, action, "unreadable answer: %v", err)
	}
	return ids[0], nil
}

// Terminate deletes a server, powered on or not, and waits for the queued
// command that does it (the API answers its id, as for a create): a
// command that ends in error is an error with its log, the server still
// there and billing. One already gone is success.
func (c *Client) Terminate(ctx context.Context, name string) error {
	body := map[string]any{"name": name, "force": true}
	var raw json.RawMessage
	err := c.do(ctx, call{op: "terminate", method: http.MethodPost, path: "/service/server/terminate", body: body, idempotent: true}, &raw)
	if errors.Is(err, cloud.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	ids, err := commandIDs(raw)
	if err != nil || len(ids) == 0 {
		return cloud.Errorf(cloud.ErrTransient, "terminate", "unreadable answer: %v", err)
	}
	_, err = c.WaitCommand(ctx, ids[0])
	return err
}

// Command returns a queued command's state.
func (c *Client) Command(ctx context.Context, id string) (Command, error) {
	var out []Command
	q := url.Values{"id": {id}}
	if err := c.do(ctx, call{op: "queue", method: http.MethodGet, path: "/service/queue", query: q, idempotent: true}, &out); err != nil {
		return Command{}, err
	}
	if len(out) != 1 {
		return Command{}, cloud.Errorf(cloud.ErrTransient, "queue", "%d entries for command %s, want 1", len(out), id)
	}
	return out[0], nil
}

// ErrCommandFailed marks a queued command that ended in error: unlike a
// failure to follow it, the command is over.
var ErrCommandFailed = errors.New("failed")

// WaitCommand polls a queued command until it completes (its log is
// returned) or fails: a failed command is an error classed by its log
// (capacity, quota, invalid configuration; otherwise transient), with the
// log's words, redacted. It gives up after ClientOptions.CommandTimeout.
//
// A failed wait says nothing of a create's outcome: whoever waits on a
// create must look the server up before ordering again.
//
// secrets are further values (a generated password) kept out of the error.
func (c *Client) WaitCommand(ctx context.Context, id string, secrets ...string) (string, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.opts.CommandTimeout)
	defer cancel()
	interval := c.opts.PollInterval
	for {
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return "", cloud.NewError(cloud.ErrTransient, "queue", parent.Err())
			}
			return "", cloud.Errorf(cloud.ErrTransient, "queue", "command %s did not end within %s", id, c.opts.CommandTimeout)
		case <-time.After(interval):
		}
		cmd, err := c.Command(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return "", err
		}
		switch cmd.Status {
		case "complete":
			return cmd.Log, nil
		case "error", "cancelled":
			// cancelled ends a command as error does: Kamatera's OpenAPI
			// statuses as GeorgeS1995/kamatera-autoscaler's types.go lists
			// them (initializing, progress, started, complete, error,
			// cancelled), both failures.
			return c.redactLog(cmd.Log, secrets), c.commandFailure(id, cmd, secrets...)
		}
		interval = min(interval+interval/2, 10*time.Second)
	}
}

// commandFailure is the error of a command that ended in error, classed
// by its log (capacity, quota, invalid configuration; otherwise
// transient), with the log's words, redacted.
func (c *Client) commandFailure(id string, cmd Command, secrets ...string) error {
	class := classifyText(cmd.Log)
	if class == nil {
		class = cloud.ErrTransient
	}
	return cloud.NewError(class, "queue", fmt.Errorf("command %s (%s): %w: %s", id, strings.TrimSpace(cmd.Description+" "+cmd.Server),
		ErrCommandFailed, c.redactLog(cmd.Log, secrets)))
}

// redactLog keeps secrets (a generated password) and credentials out of
// a command's log.
func (c *Client) redactLog(log string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			log = strings.ReplaceAll(log, s, "[redacted]")
		}
	}
	return c.redact.Text(log)
}

// commandIDs reads a mutation's answer: ["id", ...] (ids as strings or
// numbers), or {"commandIds": [...], "password": "..."}.
func commandIDs(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var obj struct {
			CommandIDs []json.RawMessage `json:"commandIds"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, err
		}
		return idStrings(obj.CommandIDs), nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	return idStrings(list), nil
}

func idStrings(raws []json.RawMessage) []string {
	out := make([]string, 0, len(raws))
	for _, r := range raws {
		var s string
		if json.Unmarshal(r, &s) == nil {
			out = append(out, s)
			continue
		}
		out = append(out, strings.TrimSpace(string(r)))
	}
	return out
}
