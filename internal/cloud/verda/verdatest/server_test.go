package verdatest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

// TestQuirks checks the documented quirks clients meet, with raw HTTP.
func TestQuirks(t *testing.T) {
	engine, err := NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(engine, Options{ClientID: "id", ClientSecret: "secret"})
	defer s.Close()
	do := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, s.URL+"/v1"+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("GET", "/instances", "", ""); code != 401 || !strings.Contains(body, `"code":"unauthorized_request"`) {
		t.Fatalf("no bearer: %d %s", code, body)
	}
	code, body := do("POST", "/oauth2/token", "", `{"grant_type":"client_credentials","client_id":"id","client_secret":"secret"}`)
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &tok) != nil || tok.AccessToken == "" || tok.ExpiresIn != 3600 {
		t.Fatalf("token: %d %s", code, body)
	}
	token := tok.AccessToken

	// Create answers 202 with a bare id, and accepts the nulls SDKs send.
	code, id := do("POST", "/instances", token, `{"instance_type":"1V100.6V","image":"ubuntu-22.04","hostname":"h1","description":"d",
		"location_code":"FIN-01","ssh_key_ids":[],"startup_script_id":null,"os_volume":null,"is_spot":false,"coupon":null}`)
	if code != 202 || strings.ContainsAny(id, `"{`) || len(id) != 36 {
		t.Fatalf("create: %d %q", code, id)
	}
	if code, body := do("POST", "/instances", token, `{"instance_type":"1V100.6V","image":"u","hostname":"h2","description":"d","location_code":null}`); code != 400 {
		t.Fatalf("null location_code: %d %s", code, body)
	}
	// Instance prices are numbers, type prices strings.
	if _, body := do("GET", "/instances/"+id, token, ""); !strings.Contains(body, `"price_per_hour":0.1381`) || !strings.Contains(body, `"status":"ordered"`) {
		t.Fatalf("instance: %s", body)
	}
	if _, body := do("GET", "/instance-types", token, ""); !strings.Contains(strings.ReplaceAll(body, " ", ""), `"price_per_hour":"0.1381"`) {
		t.Fatal("type prices are not strings")
	}
	// Both availability spellings.
	for _, q := range []string{"?is_spot=true", "?isSpot=true"} {
		if code, body := do("GET", "/instance-availability/1V100.6V"+q+"&location_code=FIN-01", token, ""); code != 200 || strings.TrimSpace(body) != "true" {
			t.Fatalf("availability %s: %d %s", q, code, body)
		}
	}
	// Both SSH-key paths.
	for _, p := range []string{"/sshkeys", "/ssh-keys"} {
		if code, _ := do("GET", p, token, ""); code != 200 {
			t.Fatalf("%s: %d", p, code)
		}
	}
	// GET /scripts/{id} answers an array of one.
	_, sid := do("POST", "/scripts", token, `{"name":"n","script":"#!/bin/sh"}`)
	if _, body := do("GET", "/scripts/"+sid, token, ""); !strings.HasPrefix(strings.TrimSpace(body), "[{") {
		t.Fatalf("script by id: %s", body)
	}
	// Delete takes "id" as a string; deleting it again is 404.
	if code, body := do("PUT", "/instances", token, `{"action":"delete","id":"`+id+`","volume_ids":null}`); code != 202 {
		t.Fatalf("delete with a string id: %d %s", code, body)
	}
	if code, _ := do("PUT", "/instances", token, `{"action":"delete","id":["nope"],"volume_ids":[]}`); code != 404 {
		t.Fatalf("delete unknown: %d", code)
	}
}

// TestCatalogIsTheRecordedListing: the fake serves the recorded real
// listing as it is, its engine can create every type in it at the recorded
// prices, and the committed copy is the reference recording.
func TestCatalogIsTheRecordedListing(t *testing.T) {
	engine, err := NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(engine, Options{ClientID: "id", ClientSecret: "secret"})
	defer s.Close()
	token := signIn(t, s)
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/instance-types", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var served, recorded []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&served); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(instanceTypesJSON, &recorded); err != nil {
		t.Fatal(err)
	}
	if len(served) != 55 || !reflect.DeepEqual(served, recorded) {
		t.Fatalf("the fake serves %d types that differ from the recorded listing", len(served))
	}
	byName := map[string]cloud.InstanceType{}
	for _, ct := range engine.Catalog() {
		byName[ct.Name] = ct
	}
	for _, r := range recorded {
		name := r["instance_type"].(string)
		ct, ok := byName[name]
		p, _ := strconv.ParseFloat(r["price_per_hour"].(string), 64)
		gpus := int(r["gpu"].(map[string]any)["number_of_gpus"].(float64))
		if !ok || ct.OnDemandPrice != p || ct.GPUCount != gpus || gpus > 0 && ct.GPUModel == "" {
			t.Errorf("%s: the engine has %+v", name, ct)
		}
	}
	// Beside a checkout, the project's shared/ folder holds the recording.
	if ref, err := os.ReadFile("../../../../../shared/reference/verda/instance-types.json"); err == nil && !bytes.Equal(ref, instanceTypesJSON) {
		t.Error("the committed listing differs from shared/reference/verda/instance-types.json")
	}
}

// signIn returns an access token from the fake.
func signIn(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Post(s.URL+"/v1/oauth2/token", "application/json",
		strings.NewReader(`{"grant_type":"client_credentials","client_id":"id","client_secret":"secret"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("sign in: %v", err)
	}
	return tok.AccessToken
}
