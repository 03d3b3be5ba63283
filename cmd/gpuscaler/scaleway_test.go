package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway/scwtest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
)

const (
	scwSecret  = "11111111-2222-4333-8444-555555555555"
	scwProject = "22222222-2222-4222-8222-222222222222"
)

func scalewayFake(t *testing.T) *scwtest.Server {
	t.Helper()
	engine, err := scwtest.NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine.SetCapacity(cloud.OfferingKey{InstanceType: "H100-1-80G", Location: "fr-par-1", CapacityType: cloud.OnDemand}, 0)
	fake := scwtest.New(engine, scwtest.Options{SecretKey: scwSecret})
	t.Cleanup(fake.Close)
	return fake
}

// TestCatalogScaleway lists the GPU types of every GPU zone with seed
// 004's variables: GPU model and memory from gpu_info, prices, and where
// each is in stock.
func TestCatalogScaleway(t *testing.T) {
	fake := scalewayFake(t)
	t.Setenv("SCW_ACCESS_KEY", "SCWACCESSKEY0000TEST")
	t.Setenv("SCW_SECRET_KEY", scwSecret)
	t.Setenv("SCW_DEFAULT_PROJECT_ID", scwProject)
	t.Setenv("SCW_DEFAULT_REGION", "fr-par")
	t.Setenv("SCW_DEFAULT_ZONE", "fr-par-1")
	t.Setenv("SCW_API_URL", fake.URL)
	var out bytes.Buffer
	root := newRootCommand(&out, &out)
	root.SetArgs([]string{"catalog", "--cloud", "scaleway", "--gpu-only"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "H100-1-80G ") {
			line = l
		}
	}
	for _, want := range []string{"1x H100-80GB", "80GiB", " 24 ", "240GiB", "2.7300", "fr-par-2,nl-ams-1,pl-waw-2 "} {
		if !strings.Contains(line+" ", want) {
			t.Errorf("catalog line %q lacks %q", line, want)
		}
	}
	if strings.Contains(out.String(), "PRO2-S") {
		t.Error("--gpu-only listed a CPU type")
	}
}

// TestScalewayProfile: without SCW_ACCESS_KEY and SCW_SECRET_KEY the keys
// and project come from the Scaleway config file's profile.
func TestScalewayProfile(t *testing.T) {
	fake := scalewayFake(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	profile := "access_key: SCWXXXXXXXXXXXXXXXXX\nsecret_key: 00000000-0000-4000-8000-000000000000\n" +
		"profiles:\n  gpu:\n    access_key: SCWACCESSKEY0000TEST\n    secret_key: " + scwSecret + "\n    default_project_id: " + scwProject + "\n    api_url: " + fake.URL + "\n"
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"SCW_ACCESS_KEY", "SCW_SECRET_KEY", "SCW_DEFAULT_PROJECT_ID", "SCW_API_URL"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("SCW_CONFIG_PATH", path)
	t.Setenv("SCW_PROFILE", "gpu")
	var out bytes.Buffer
	root := newRootCommand(&out, &out)
	root.SetArgs([]string{"catalog", "--cloud", "scaleway", "--gpu-only"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "L40S-8-48G") || strings.Contains(out.String(), scwSecret) {
		t.Fatalf("catalog from the profile:\n%s", out.String())
	}
}
