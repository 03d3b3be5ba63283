package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The real cluster-autoscaler, with only the externalgrpc cloud provider.
// The module proxy refuses its modules (k8s.io/autoscaler/cluster-autoscaler
// and sigs.k8s.io/cluster-autoscaler), so it is built from source: its
// binary main module (kubernetes/autoscaler, cluster-autoscaler/) and its
// core (kubernetes-sigs/cluster-autoscaler) at the commits below, the
// second put in place of the first's requirement on it. Everything else
// comes from the module proxy as the first's go.mod pins it.
const (
	caRepo       = "https://github.com/kubernetes/autoscaler"
	caCommit     = "55c37cd5eb"
	caCoreRepo   = "https://github.com/kubernetes-sigs/cluster-autoscaler"
	caCoreCommit = "6e285e0f4b4f"
	caBinary     = "cluster-autoscaler"
	caCoreModule = "sigs.k8s.io/cluster-autoscaler"
)

// caStamp names the source the binary was built from, kept beside it, so
// that a new pin rebuilds it.
var caStamp = "autoscaler@" + caCommit + " core@" + caCoreCommit + "\n"

// buildCA builds cluster-autoscaler into dir unless the binary of the
// pinned source is there. The source is, in order: $GPUSCALER_CA_SRC (a
// folder or .tar.gz laid out like the shared copy), the shared copy next
// to the checkout, or a clone of the two public repositories.
func buildCA(dir string) error {
	stamp := filepath.Join(dir, caBinary+".source")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == caStamp {
		if st, err := os.Stat(filepath.Join(dir, caBinary)); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			return nil
		}
	}
	start := time.Now()
	work, err := os.MkdirTemp(filepath.Dir(dir), "build-cluster-autoscaler-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	src, err := caSource(work)
	if err != nil {
		return fmt.Errorf("cluster-autoscaler source: %w", err)
	}
	fmt.Fprintf(os.Stderr, "testbins: building cluster-autoscaler (%s) from %s (first run only; minutes)\n", strings.TrimSpace(caStamp), src)
	main := filepath.Join(work, "cluster-autoscaler")
	if err := goCmd(main, "mod", "edit", "-replace", caCoreModule+"=../core"); err != nil {
		return err
	}
	out := filepath.Join(work, "bin", caBinary)
	if err := goCmd(main, "build", "-tags", "externalgrpc", "-trimpath", "-ldflags=-s -w", "-o", out, "."); err != nil {
		return err
	}
	if err := os.Rename(out, filepath.Join(dir, caBinary)); err != nil {
		return err
	}
	if err := os.WriteFile(stamp, []byte(caStamp), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "testbins: built cluster-autoscaler in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// caSource puts the two trees in work (cluster-autoscaler/ and core/) and
// says where they came from.
func caSource(work string) (string, error) {
	if src := os.Getenv("GPUSCALER_CA_SRC"); src != "" {
		return src, unpackOrCopy(src, work)
	}
	if shared, ok := sharedCopy(); ok {
		return shared, untar(shared, work)
	}
	if err := cloneCA(work); err != nil {
		return "", fmt.Errorf("no GPUSCALER_CA_SRC, no shared copy (shared/reference/cluster-autoscaler/ca-src.tar.gz) beside the checkout or its origin, and the clone failed: %w", err)
	}
	return caRepo + " and " + caCoreRepo, nil
}

// sharedCopy finds the shared source copy beside the checkout: next to the
// module root or any folder above it (a checkout nested deeper, as CI's
// may be), or beside the repository a clone was made from (its origin,
// when that is a local path).
func sharedCopy() (string, bool) {
	var roots []string
	if root, err := moduleRoot(); err == nil {
		roots = append(roots, root)
		if out, err := exec.Command("git", "-C", root, "remote", "get-url", "origin").Output(); err == nil {
			if origin := strings.TrimPrefix(strings.TrimSpace(string(out)), "file://"); filepath.IsAbs(origin) {
				roots = append(roots, origin)
			}
		}
	}
	rel := filepath.Join("shared", "reference", "cluster-autoscaler", "ca-src.tar.gz")
	for _, root := range roots {
		for dir := filepath.Dir(root); ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, rel); fileExists(p) {
				return p, true
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	return "", false
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// unpackOrCopy takes $GPUSCALER_CA_SRC: a .tar.gz is unpacked, a folder
// copied (the build edits go.mod).
func unpackOrCopy(src, work string) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("GPUSCALER_CA_SRC: %w", err)
	}
	if !st.IsDir() {
		return untar(src, work)
	}
	for _, sub := range []string{"cluster-autoscaler", "core"} {
		if err := copyTree(filepath.Join(src, sub), filepath.Join(work, sub)); err != nil {
			return fmt.Errorf("GPUSCALER_CA_SRC must hold cluster-autoscaler/ and core/: %w", err)
		}
	}
	return nil
}

// cloneCA clones both repositories (trees only, blobs on demand) and
// checks out the pinned commits.
func cloneCA(work string) error {
	if _, err := exec.LookPath("git"); err != nil {
		return errors.New("no GPUSCALER_CA_SRC, no shared copy (shared/reference/cluster-autoscaler/ca-src.tar.gz beside the checkout), and no git to clone " + caRepo)
	}
	repo := filepath.Join(work, "autoscaler")
	for _, c := range []struct{ url, dir, commit string }{
		{caRepo, repo, caCommit},
		{caCoreRepo, filepath.Join(work, "core"), caCoreCommit},
	} {
		if err := runCmd(work, "git", "clone", "--quiet", "--filter=blob:none", "--no-checkout", c.url, c.dir); err != nil {
			return err
		}
		if err := runCmd(c.dir, "git", "checkout", "--quiet", c.commit); err != nil {
			return err
		}
	}
	return os.Rename(filepath.Join(repo, "cluster-autoscaler"), filepath.Join(work, "cluster-autoscaler"))
}

func runCmd(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// moduleRoot is the folder of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// untar unpacks a .tar.gz into dir; no entry may leave it.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", archive, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", archive, err)
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%s: entry %q leaves the folder", archive, h.Name)
		}
		dst := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFrom(tr, dst, h.FileInfo().Mode().Perm()); err != nil {
				return err
			}
		}
	}
}

// copyTree copies a folder's regular files.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

func writeFrom(r io.Reader, dst string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm|0o200)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
