package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

const charts = "../../../deploy/charts/"

// imageLayout writes an OCI layout as make image does: one image index
// with an image per platform.
func imageLayout(t *testing.T, platforms ...string) (dir, digest string) {
	t.Helper()
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		osName, arch, _ := strings.Cut(p, "/")
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}}})
	}
	dir = filepath.Join(t.TempDir(), "image")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dir, d.String()
}

func changelog(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "CHANGELOG.md")
	doc := "# Changelog\n\n## Unreleased\n\n- next\n\n## [9.8.7] - 2026-11-29\n\n### Fixed\n- a thing\n\n## 9.8.6\n\n- older\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A release holds the image layout whose digest the packaged chart pins
// (the real helm renders the Deployment with image@digest), both
// architectures, an SBOM of the binaries' modules, the version's notes
// and checksums of every file. A layout without one of the platforms, or
// a version without a changelog section, is refused.
func TestRelease(t *testing.T) {
	img, digest := imageLayout(t, "linux/amd64", "linux/arm64")
	out := filepath.Join(t.TempDir(), "release")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Version: "9.8.7", Image: img, Platforms: []string{"linux/amd64", "linux/arm64"}, Binaries: []string{self},
		Charts: []string{charts + "gpuscaler", charts + "gpuscaler-crd"}, Changelog: changelog(t), Out: out}
	files, err := Release(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"RELEASE_NOTES.md", "gpuscaler-9.8.7-image.oci.tar", "gpuscaler-9.8.7.spdx.json", "gpuscaler-9.8.7.tgz",
		"gpuscaler-crd-9.8.7.tgz", "image-digest.txt", "SHA256SUMS"}
	for _, w := range want {
		if _, err := os.Stat(filepath.Join(out, w)); err != nil {
			t.Errorf("%s: %v (wrote %v)", w, err, files)
		}
	}
	read := func(name string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got := strings.TrimSpace(read("image-digest.txt")); got != digest {
		t.Errorf("image-digest.txt %s, the layout's index is %s", got, digest)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(read("SHA256SUMS")), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		s := sha256.Sum256([]byte(read(name)))
		if hex.EncodeToString(s[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
	}
	if notes := read("RELEASE_NOTES.md"); !strings.Contains(notes, "a thing") || strings.Contains(notes, "older") || strings.Contains(notes, "next") {
		t.Errorf("notes are not 9.8.7's section:\n%s", notes)
	}

	// The archived layout is the layout: its index names the digest.
	tr := tar.NewReader(bytes.NewReader([]byte(read("gpuscaler-9.8.7-image.oci.tar"))))
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "index.json" {
			data, _ := io.ReadAll(tr)
			found = strings.Contains(string(data), digest)
		}
	}
	if !found {
		t.Error("the archived layout's index.json does not name the image's digest")
	}

	// The real helm reads the packaged charts: the version, and the image
	// pinned by digest in what the main chart renders.
	helm := testenv.Bin(t, "helm")
	show, err := exec.Command(helm, "show", "chart", filepath.Join(out, "gpuscaler-9.8.7.tgz")).CombinedOutput()
	if err != nil || !strings.Contains(string(show), "version: 9.8.7") || !strings.Contains(string(show), "appVersion: 9.8.7") {
		t.Errorf("helm show chart: %v\n%s", err, show)
	}
	rendered, err := exec.Command(helm, "template", "gs", filepath.Join(out, "gpuscaler-9.8.7.tgz"), "--kube-version", "1.34.4").CombinedOutput()
	if err != nil || !strings.Contains(string(rendered), "image: ghcr.io/gpuscaler/gpuscaler@"+digest) {
		t.Errorf("helm template does not pin the image's digest: %v\n%.2000s", err, rendered)
	}
	crds, err := exec.Command(helm, "template", "gs-crd", filepath.Join(out, "gpuscaler-crd-9.8.7.tgz"), "--kube-version", "1.34.4").CombinedOutput()
	if err != nil || strings.Count(string(crds), "kind: CustomResourceDefinition") != 2 {
		t.Errorf("helm template of the CRD chart: %v\n%.500s", err, crds)
	}
	var doc struct {
		Version  string `json:"spdxVersion"`
		Packages []struct {
			Name, VersionInfo string
		} `json:"packages"`
	}
	if err := json.Unmarshal([]byte(read("gpuscaler-9.8.7.spdx.json")), &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range doc.Packages {
		names = append(names, p.Name)
	}
	if doc.Version != "SPDX-2.3" || !strings.Contains(strings.Join(names, " "), "github.com/google/go-containerregistry") {
		t.Errorf("SBOM %s lists %v", doc.Version, names)
	}

	oneArch, _ := imageLayout(t, "linux/amd64")
	opts.Image = oneArch
	if _, err := Release(opts); err == nil || !strings.Contains(err.Error(), "linux/arm64") {
		t.Errorf("a layout without arm64: %v", err)
	}
	opts.Image, opts.Version = img, "9.9.0"
	if _, err := Release(opts); err == nil || !strings.Contains(err.Error(), "## 9.9.0") {
		t.Errorf("a version without notes: %v", err)
	}
	opts.Version = "v9.8.7"
	if _, err := Release(opts); err == nil {
		t.Error("a version with a leading v was taken")
	}
}
