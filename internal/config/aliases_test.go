package config

import (
	"strings"
	"testing"
)

// The clouds' old keys still read, into the one vocabulary every cloud
// now shares (endpoint, secretFile, project), each with a note; a config
// written back has only the new keys.
func TestOldKeysReadIntoNewOnes(t *testing.T) {
	cfg, err := Parse([]byte(`
clusterName: c
clouds:
  verda: {baseURL: "https://api.datacrunch.io/v1", clientSecretFile: /s/verda}
  kamatera: {baseURL: "https://cloudcli.example.com", image: ubuntu}
  scaleway: {projectID: 22222222-2222-4222-8222-222222222222, apiURL: "https://api.example.com", secretKeyFile: /s/scw}
  gcp: {project: p, credentialsFile: /s/gcp.json}
nodeGroups:
  - {name: v, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Clouds
	for _, kv := range [][2]string{
		{c.Verda.Endpoint, "https://api.datacrunch.io/v1"}, {c.Verda.SecretFile, "/s/verda"},
		{c.Kamatera.Endpoint, "https://cloudcli.example.com"},
		{c.Scaleway.Project, "22222222-2222-4222-8222-222222222222"}, {c.Scaleway.Endpoint, "https://api.example.com"}, {c.Scaleway.SecretFile, "/s/scw"},
		{c.GCP.SecretFile, "/s/gcp.json"},
	} {
		if kv[0] != kv[1] {
			t.Errorf("got %q, want %q", kv[0], kv[1])
		}
	}
	if c.Verda.BaseURL != "" || c.Scaleway.APIURL != "" || c.GCP.CredentialsFile != "" {
		t.Error("an old key is still set: config convert would write it")
	}
	notes := strings.Join(cfg.Deprecated, "\n")
	for _, want := range []string{"clouds.verda.baseURL is deprecated: use clouds.verda.endpoint", "clouds.scaleway.projectID is deprecated: use clouds.scaleway.project",
		"clouds.gcp.credentialsFile is deprecated: use clouds.gcp.secretFile", "clouds.kamatera.baseURL", "clouds.verda.clientSecretFile", "clouds.scaleway.apiURL", "clouds.scaleway.secretKeyFile"} {
		if !strings.Contains(notes, want) {
			t.Errorf("no note %q in:\n%s", want, notes)
		}
	}
}

// An old key and its new one with different values is an error naming
// the old key; the same value twice is accepted.
func TestOldAndNewKeyDisagree(t *testing.T) {
	base := "clusterName: c\nnodeGroups:\n  - {name: v, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 1}\n"
	_, err := Parse([]byte(base + "clouds:\n  verda: {baseURL: \"https://a.example.com/v1\", endpoint: \"https://b.example.com/v1\"}\n"))
	if err == nil || !strings.Contains(err.Error(), "clouds.verda.baseURL") || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("baseURL and endpoint apart: %v", err)
	}
	if _, err := Parse([]byte(base + "clouds:\n  verda: {baseURL: \"https://a.example.com/v1\", endpoint: \"https://a.example.com/v1\"}\n")); err != nil {
		t.Fatalf("the same value under both keys: %v", err)
	}
}
