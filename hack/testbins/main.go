// Command testbins builds the Kubernetes components the test suite runs
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
// the helm CLI) from the Go module proxy, at pinned versions, and the real
// cluster-autoscaler from its source (see ca.go), into a cache folder
// outside the work tree, and prints that folder. A second run with a warm cache only
// checks that the binaries are there.
//
//	GPUSCALER_TESTBINS="$(go run ./hack/testbins)" go test ./...
//
// The folder is $GPUSCALER_TESTBINS_DIR if set, else
// $XDG_CACHE_HOME/gpuscaler/testbins/<versions> (~/.cache when unset).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbins:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}

func run() (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, c := range components {
		if c.present(dir) {
			continue
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "testbins: building %s %s (first run only; minutes)\n", c.name, c.version)
		if err := c.build(dir); err != nil {
			return "", fmt.Errorf("build %s: %w", c.name, err)
		}
		fmt.Fprintf(os.Stderr, "testbins: built %s in %s\n", c.name, time.Since(start).Round(time.Second))
	}
	if err := copyStages(dir); err != nil {
		return "", fmt.Errorf("kwok stages: %w", err)
	}
	if err := buildCA(dir); err != nil {
		return "", fmt.Errorf("build cluster-autoscaler: %w", err)
	}
	return dir, nil
}

// binDir is the cache folder for the pinned versions.
func binDir() (string, error) {
	if d := os.Getenv("GPUSCALER_TESTBINS_DIR"); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache folder (set GPUSCALER_TESTBINS_DIR): %w", err)
	}
	key := fmt.Sprintf("k8s-%s_etcd-%s_kwok-%s", kubernetesVersion, etcdVersion, kwokVersion)
	return filepath.Join(base, "gpuscaler", "testbins", key), nil
}

// binaries are the names the component's commands get in the cache.
func (c component) binaries() []string {
	out := make([]string, len(c.packages))
	for i, p := range c.packages {
		out[i] = builtName(p)
		if c.name == "etcd" {
			out[i] = "etcd" // the package is go.etcd.io/etcd/server/v3
		}
	}
	return out
}

// builtName is the file go build writes for a main package: the last path
// element that is not a major-version suffix.
func builtName(pkg string) string {
	base := path.Base(pkg)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return base
}

func (c component) present(dir string) bool {
	for _, b := range c.binaries() {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Size() == 0 {
			return false
		}
		if c.stamped {
			if v, err := os.ReadFile(filepath.Join(dir, b+".version")); err != nil || string(v) != c.stamp() {
				return false
			}
		}
	}
	return true
}

// build writes a throwaway module that requires the component, resolves it
// through the module proxy and builds its commands, then moves each binary
// into dir atomically.
func (c component) build(dir string) error {
	work, err := os.MkdirTemp(filepath.Dir(dir), "build-"+c.name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var gomod strings.Builder
	fmt.Fprintf(&gomod, "module gpuscaler.dev/testbins/%s\n\ngo 1.24\n\nrequire %s %s\n", c.name, c.module, c.version)
	if c.stagingReplaces {
		staging, err := stagingModules(work, c.module, c.version)
		if err != nil {
			return err
		}
		gomod.WriteString("\nreplace (\n")
		for _, m := range staging {
			fmt.Fprintf(&gomod, "\t%s => %s %s\n", m, m, stagingVersion)
		}
		gomod.WriteString(")\n")
	}
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, p := range c.packages {
		fmt.Fprintf(&tools, "\t_ %q\n", p)
	}
	tools.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(work, "go.mod"), []byte(gomod.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "tools.go"), []byte(tools.String()), 0o644); err != nil {
		return err
	}
	if err := goCmd(work, "mod", "tidy"); err != nil {
		return err
	}
	out := filepath.Join(work, "out")
	args := append([]string{"build", "-trimpath", "-ldflags=-s -w " + c.ldflags, "-o", out + string(filepath.Separator)}, c.packages...)
	if err := goCmd(work, args...); err != nil {
		return err
	}
	for i, p := range c.packages {
		built := filepath.Join(out, builtName(p))
		bin := filepath.Join(dir, c.binaries()[i])
		if err := os.Rename(built, bin); err != nil {
			return err
		}
		if c.stamped {
			if err := os.WriteFile(bin+".version", []byte(c.stamp()), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// stagingModules reads the component's own go.mod and returns the modules
// it replaces with its ./staging folder.
func stagingModules(work, module, version string) ([]string, error) {
	var info struct{ GoMod string }
	out, err := goOutput(work, "mod", "download", "-json", module+"@"+version)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(out, &info); err != nil || info.GoMod == "" {
		return nil, fmt.Errorf("go mod download %s@%s: no go.mod path in %q", module, version, out)
	}
	f, err := os.Open(info.GoMod)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mods []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "replace"))
		from, to, ok := strings.Cut(line, "=>")
		if ok && strings.HasPrefix(strings.TrimSpace(to), "./staging/") {
			mods = append(mods, strings.Fields(from)[0])
		}
	}
	if len(mods) == 0 {
		return nil, errors.New("found no staging replace directives")
	}
	return mods, sc.Err()
}

// copyStages copies kwok's stage files next to the binaries.
func copyStages(dir string) error {
	modDir, err := goOutput(os.TempDir(), "env", "GOMODCACHE")
	if err != nil {
		return err
	}
	src := filepath.Join(strings.TrimSpace(string(modDir)), "sigs.k8s.io", "kwok@"+kwokVersion, "kustomize", "stage")
	for _, s := range kwokStages {
		dst := filepath.Join(dir, "kwok-stages", filepath.Base(s))
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(src, s)); errors.Is(err, os.ErrNotExist) {
			// The module cache was cleaned since kwok was built: fetch it again.
			if _, err := goOutput(os.TempDir(), "mod", "download", "sigs.k8s.io/kwok@"+kwokVersion); err != nil {
				return err
			}
		}
		if err := copyFile(filepath.Join(src, s), dst); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// goEnv is the environment of the go commands: the throwaway module is its
// own main module, whatever the caller's GOFLAGS or workspace say.
func goEnv() []string {
	return append(os.Environ(), "GOFLAGS=", "GOWORK=off", "GO111MODULE=on")
}

func goCmd(dir string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, goEnv()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, buf.String())
	}
	return nil
}

func goOutput(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, goEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}
