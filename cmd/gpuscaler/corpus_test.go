package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// corpusCase is one malformed configuration of testdata/malformed, and
// what every command must say of it.
type corpusCase struct {
	File string `json:"file"`
	// Kind is "datacrunch" for a cluster config given through
	// DATACRUNCH_CLUSTER_CONFIG_FILE with Nodes as --nodes flags, and
	// "kamatera" for an INI cloud config given with --cloud-config;
	// native and ca-verda files are given with --config.
	Kind  string            `json:"kind"`
	Nodes []string          `json:"nodes"`
	Env   map[string]string `json:"env"`
	// DotEnv is written to ./.env before the commands run.
	DotEnv string `json:"dotenv"`
	// Args are more flags for every command (--env-file).
	Args []string `json:"args"`
	// Environment marks a problem of the place the config runs in
	// (credentials, files it names) rather than of the file: config
	// convert, which checks the file alone, is not asked.
	Environment bool `json:"environment"`
	// Want are substrings of the error: the path in the user's own format
	// and the reason.
	Want []string `json:"want"`
}

// corpusSecret is in several files and environments; no output may show it.
const corpusSecret = "hunter2-SECRET-MARKER"

// TestMalformedConfigCorpus runs every file of testdata/malformed through
// validate, config convert and the provider's start-up. Each must be
// refused, within seconds, with the file, the path and the reason, and
// without a panic or an echoed secret.
func TestMalformedConfigCorpus(t *testing.T) {
	dir, err := filepath.Abs("testdata/malformed")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []corpusCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(cases) < 60 || len(files) != len(cases)+1 {
		t.Fatalf("%d cases for %d files; every file needs a case, and the corpus at least 60", len(cases), len(files)-1)
	}
	for _, variable := range []string{"VERDA_CLIENT_ID", "VERDA_CLIENT_SECRET", "VERDA_BASE_URL", "DATACRUNCH_CLUSTER_CONFIG_JSON", "DATACRUNCH_CLUSTER_CONFIG", "DATACRUNCH_CLUSTER_CONFIG_FILE", "DATACRUNCH_STARTUP_SCRIPT_FETCH_URL", "KAMATERA_API_CLIENT_ID", "KAMATERA_API_SECRET", "KAMATERA_API_URL",
		"SCW_ACCESS_KEY", "SCW_SECRET_KEY", "SCW_DEFAULT_PROJECT_ID", "SCW_API_URL", "SCW_PROFILE"} {
		t.Setenv(variable, "")
		os.Unsetenv(variable)
	}
	// No Scaleway profile, and no GCP credentials, of the machine running
	// the tests.
	for _, variable := range []string{"GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT"} {
		t.Setenv(variable, "")
		os.Unsetenv(variable)
	}
	t.Setenv("CLOUDSDK_CONFIG", t.TempDir())
	t.Setenv("SCW_CONFIG_PATH", filepath.Join(t.TempDir(), "no-scw-config.yaml"))
	wd, _ := os.Getwd()
	t.Cleanup(func() { _ = os.Chdir(wd) })
	for _, c := range cases {
		t.Run(c.File, func(t *testing.T) {
			for k, v := range c.Env {
				t.Setenv(k, v)
			}
			work := t.TempDir()
			if err := os.Chdir(work); err != nil {
				t.Fatal(err)
			}
			if c.DotEnv != "" {
				if err := os.WriteFile(".env", []byte(c.DotEnv), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, c.File)
			args := []string{"--config", path}
			if c.Kind == "kamatera" {
				args = []string{"--cloud-config", path}
			}
			if c.Kind == "datacrunch" {
				t.Setenv("DATACRUNCH_CLUSTER_CONFIG_FILE", path)
				args = nil
				for _, n := range c.Nodes {
					args = append(args, "--nodes", n)
				}
			}
			args = append(args, c.Args...)
			for _, command := range [][]string{
				{"validate"}, {"config", "convert"},
				{"provider", "--metrics-address", "0"},
			} {
				name := strings.Join(command[:min(2, len(command))], " ")
				if c.Environment && name == "config convert" {
					continue
				}
				out, err := runCorpusCommand(t, append(command, args...))
				if err == nil {
					t.Errorf("%s accepted it:\n%s", name, out)
					continue
				}
				text := out + err.Error()
				for _, want := range append([]string{c.File}, c.Want...) {
					if !strings.Contains(text, want) {
						t.Errorf("%s: the error does not say %q:\n%s", name, want, text)
					}
				}
				if strings.Contains(text, corpusSecret) {
					t.Errorf("%s echoed a secret:\n%s", name, text)
				}
				if len(text) > 8<<10 {
					t.Errorf("%s: %d bytes of error", name, len(text))
				}
			}
		})
	}
}

// runCorpusCommand runs one command in-process with a deadline: a
// malformed config must be refused, not served.
func runCorpusCommand(t *testing.T, args []string) (string, error) {
	t.Helper()
	out := &lockedBuffer{}
	root := newRootCommand(out, out)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%v panicked: %v", args, r)
				done <- nil
			}
		}()
		done <- root.ExecuteContext(ctx)
	}()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(15 * time.Second):
		t.Fatalf("%v did not return", args)
		return "", nil
	}
}

// TestBadDotEnvOnlyFailsWhatReadsIt: a malformed .env in the working
// directory does not stop a config that reads no credentials (the
// simulated cloud), and validate accepts a good file with it there.
func TestBadDotEnvOnlyFailsWhatReadsIt(t *testing.T) {
	wd, _ := os.Getwd()
	t.Cleanup(func() { _ = os.Chdir(wd) })
	example, err := filepath.Abs("../../examples/sim-quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(".env", []byte("not a pair\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCorpusCommand(t, []string{"validate", "--config", example})
	if err != nil || !strings.Contains(out, "valid") {
		t.Fatalf("validate with a bad .env beside a sim config: %v\n%s", err, out)
	}
}

// TestDotEnvOnlyWhenAsked: a native config reads no file of the working
// directory unless --env-file names it; a ca-verda config.yaml reads
// ./.env, as ca-verda did.
func TestDotEnvOnlyWhenAsked(t *testing.T) {
	wd, _ := os.Getwd()
	t.Cleanup(func() { _ = os.Chdir(wd) })
	for _, v := range []string{"VERDA_CLIENT_ID", "VERDA_CLIENT_SECRET", "DATACRUNCH_CLIENT_ID", "DATACRUNCH_CLIENT_SECRET"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	if err := os.Chdir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	native := "clusterName: c\nclouds:\n  verda: {}\nnodeGroups:\n  - {name: v, cloud: verda, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 1}\n"
	if err := os.WriteFile("gpuscaler.yaml", []byte(native), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(".env", []byte("not a pair\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCorpusCommand(t, []string{"validate", "--config", "gpuscaler.yaml"})
	if err != nil && strings.Contains(err.Error(), ".env") {
		t.Errorf("a native config read ./.env unasked: %v\n%s", err, out)
	}
	out, err = runCorpusCommand(t, []string{"validate", "--config", "gpuscaler.yaml", "--env-file", ".env"})
	if err == nil || !strings.Contains(err.Error(), ".env:1") {
		t.Errorf("--env-file .env: %v\n%s", err, out)
	}
}

// An old key of the clouds section is accepted with a warning that names
// the new one.
func TestOldKeyWarns(t *testing.T) {
	t.Setenv("KAMATERA_API_CLIENT_ID", "id")
	t.Setenv("KAMATERA_API_SECRET", "secret")
	path := filepath.Join(t.TempDir(), "gpuscaler.yaml")
	doc := "clusterName: c\nclouds:\n  kamatera: {baseURL: \"https://cloudcli.example.com\", image: ubuntu}\nnodeGroups:\n  - {name: k, cloud: kamatera, instanceType: 4B8192, locations: [EU], maxSize: 1}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	root := newRootCommand(out, out)
	root.SetArgs([]string{"validate", "--config", path})
	err := root.Execute()
	if err != nil || !strings.Contains(out.String(), "clouds.kamatera.baseURL is deprecated: use clouds.kamatera.endpoint") {
		t.Fatalf("validate with an old key: %v\n%s", err, out)
	}
}
