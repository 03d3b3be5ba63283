package verda

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Price decodes a JSON number or a numeric string: the API sends instance
// type prices as strings ("2.290") and instance prices as numbers.
type Price float64

// UnmarshalJSON accepts 1.5, "1.5", "" and null.
func (p *Price) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) || bytes.Equal(b, []byte(`""`)) {
		*p = 0
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("price %q: %w", b, err)
	}
	*p = Price(f)
	return nil
}

// Instance statuses the API reports.
const (
	StatusNew          = "new"
	StatusOrdered      = "ordered"
	StatusProvisioning = "provisioning"
	StatusValidating   = "validating"
	StatusPending      = "pending"
	StatusRunning      = "running"
	StatusOffline      = "offline"
	StatusDiscontinued = "discontinued"
	StatusDeleting     = "deleting"
	StatusError        = "error"
	StatusNoCapacity   = "no_capacity"
	StatusNotFound     = "notfound"
)

// Instance is the API's instance object (the fields gpuscaler reads).
type Instance struct {
	ID              string    `json:"id"`
	InstanceType    string    `json:"instance_type"`
	Status          string    `json:"status"`
	CreatedAt       time.Time `json:"created_at"`
	IP              *string   `json:"ip"`
	Hostname        string    `json:"hostname"`
	Description     string    `json:"description"`
	Location        string    `json:"location"`
	PricePerHour    Price     `json:"price_per_hour"`
	IsSpot          bool      `json:"is_spot"`
	Contract        string    `json:"contract,omitempty"`
	Pricing         string    `json:"pricing,omitempty"`
	Image           string    `json:"image"`
	StartupScriptID *string   `json:"startup_script_id"`
	SSHKeyIDs       []string  `json:"ssh_key_ids"`
	OSVolumeID      *string   `json:"os_volume_id"`
	Tags            []Tag     `json:"tags,omitempty"`
}

// Tag is a key and value on a resource.
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// Sized is the API's {description, size_in_gigabytes / number_of_*} shape.
type Sized struct {
	Description     string `json:"description"`
	SizeInGigabytes int    `json:"size_in_gigabytes,omitempty"`
	NumberOfCores   int    `json:"number_of_cores,omitempty"`
	NumberOfGPUs    int    `json:"number_of_gpus,omitempty"`
}

// InstanceType is one entry of GET /instance-types.
type InstanceType struct {
	ID           string `json:"id"`
	InstanceType string `json:"instance_type"`
	Model        string `json:"model"`
	Name         string `json:"name"`
	CPU          Sized  `json:"cpu"`
	GPU          Sized  `json:"gpu"`
	GPUMemory    Sized  `json:"gpu_memory"`
	Memory       Sized  `json:"memory"`
	Storage      Sized  `json:"storage"`
	PricePerHour Price  `json:"price_per_hour"`
	SpotPrice    Price  `json:"spot_price"`
	Currency     string `json:"currency"`
	// SupportedOS lists the images the type accepts; empty in the
	// listing for some types (GB300).
	SupportedOS []string `json:"supported_os"`
}

// Availability is one location's entry of GET /instance-availability.
type Availability struct {
	LocationCode   string   `json:"location_code"`
	Availabilities []string `json:"availabilities"`
}

// Location is one entry of GET /locations.
type Location struct {
	Code        string `json:"code"`
	Name        string `json:"name"`
	CountryCode string `json:"country_code"`
}

// Script is a stored startup script.
type Script struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Script    string `json:"script,omitempty"`
	CreatedAt string `json:"created_at,omitempty"`
}

// SSHKey is a stored SSH public key.
type SSHKey struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

// OSVolume is the OS volume of a new instance.
type OSVolume struct {
	Name              string `json:"name"`
	Size              int    `json:"size"`
	OnSpotDiscontinue string `json:"on_spot_discontinue,omitempty"`
}

// CreateRequest is the body of POST /instances.
type CreateRequest struct {
	InstanceType    string    `json:"instance_type"`
	Image           string    `json:"image"`
	Hostname        string    `json:"hostname"`
	Description     string    `json:"description"`
	LocationCode    string    `json:"location_code"`
	SSHKeyIDs       []string  `json:"ssh_key_ids"`
	StartupScriptID *string   `json:"startup_script_id"`
	OSVolume        *OSVolume `json:"os_volume"`
	IsSpot          bool      `json:"is_spot"`
	Contract        string    `json:"contract,omitempty"`
	Pricing         string    `json:"pricing,omitempty"`
	Tags            []Tag     `json:"tags,omitempty"`
}

// ActionRequest is the body of PUT /instances.
type ActionRequest struct {
	Action            string   `json:"action"`
	ID                []string `json:"id"`
	VolumeIDs         []string `json:"volume_ids"`
	DeletePermanently bool     `json:"delete_permanently"`
}

// ActionResult is one instance's result in a PUT /instances answer (its
// keys are camelCase, unlike the rest of the API).
type ActionResult struct {
	Action     string `json:"action"`
	InstanceID string `json:"instanceId"`
	Status     string `json:"status"`
	Error      string `json:"error"`
	StatusCode int    `json:"statusCode"`
}

// apiError is the API's error body.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// decodeRecords decodes a JSON array of API records one at a time, so that
// one record the client cannot read does not cost the whole answer. A
// record that does not decode whole is decoded field by field, keeping
// every field that parses (the others stay at their zero value); lost
// maps the index of each such record to the JSON names of the fields lost.
func decodeRecords[T any](data []byte) (out []T, lost map[int][]string, err error) {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '[' {
		// Not even a list ("null" decodes as an empty one): taken for one,
		// every instance would look gone.
		return nil, nil, errors.New("not a JSON array")
	}
	if json.Unmarshal(data, &out) == nil {
		return out, nil, nil // the usual case: one pass
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, nil, err
	}
	out = make([]T, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &out[i]); err == nil {
			continue
		}
		out[i] = *new(T)
		fields, err := decodeFields(raw, &out[i])
		if err != nil {
			fields = []string{"(not a JSON object)"}
		}
		if lost == nil {
			lost = map[int][]string{}
		}
		lost[i] = fields
	}
	return out, lost, nil
}

// decodeFields decodes a JSON object into the struct v points to, field by
// field, and returns the JSON names of the fields that did not decode.
func decodeFields(raw []byte, v any) ([]string, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, err
	}
	rv := reflect.ValueOf(v).Elem()
	rt := rv.Type()
	var lost []string
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		value, ok := members[name]
		if !ok || name == "" || name == "-" {
			continue
		}
		if err := json.Unmarshal(value, rv.Field(i).Addr().Interface()); err != nil {
			rv.Field(i).SetZero()
			lost = append(lost, name)
		}
	}
	return lost, nil
}
