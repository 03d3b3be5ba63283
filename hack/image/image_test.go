package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// The built layout holds one image per platform, configured to run the
// entrypoint as uid 65532 with the CA roots, labelled with the version;
// the binary inside runs and says what the binary put in says.
func TestImage(t *testing.T) {
	if testing.Short() && os.Getenv("GPUSCALER_BIN") == "" {
		t.Skip("-short: would build the gpuscaler binary (make test builds it first and sets GPUSCALER_BIN)")
	}
	dir := t.TempDir()
	bin, err := testenv.GPUScaler(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, want)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nroots\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "layout")
	if err := Build(Options{Out: out, Version: "v9.8.7-test", Revision: "abc123", CACerts: ca, Binaries: map[string][]string{"linux/amd64": {bin}}}); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil || len(om.Manifests) != 1 || om.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != RefName+":v9.8.7-test" {
		t.Fatalf("layout index: %+v, %v", om, err)
	}
	idx, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != "amd64" {
		t.Fatalf("image index: %+v, %v", im, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/usr/local/bin/gpuscaler" || cfg.OS != "linux" || cfg.Architecture != "amd64" ||
		c.Labels["org.opencontainers.image.version"] != "v9.8.7-test" || c.Labels["org.opencontainers.image.revision"] != "abc123" {
		t.Fatalf("config: %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		switch h.Name {
		case "usr/local/bin/gpuscaler":
			extracted := filepath.Join(dir, "from-image")
			f, err := os.OpenFile(extracted, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
			got, err := exec.Command(extracted, "version").CombinedOutput()
			if err != nil || string(got) != string(want) {
				t.Fatalf("the binary in the image says %q, %v; the one put in says %q", got, err, want)
			}
		case "etc/passwd":
			data, _ := io.ReadAll(tr)
			if !strings.Contains(string(data), "nonroot:x:65532:65532:") {
				t.Fatalf("passwd: %s", data)
			}
		}
	}
	for _, name := range []string{"usr/local/bin/gpuscaler", "etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group", "tmp/"} {
		if files[name] == nil {
			t.Errorf("the image lacks %s", name)
		}
	}
	if h := files["usr/local/bin/gpuscaler"]; h != nil && h.Mode&0o111 == 0 {
		t.Errorf("the binary is not executable: %o", h.Mode)
	}
	// One input, one digest: a second build is the same image.
	out2 := filepath.Join(dir, "layout2")
	if err := Build(Options{Out: out2, Version: "v9.8.7-test", Revision: "abc123", CACerts: ca, Binaries: map[string][]string{"linux/amd64": {bin}}}); err != nil {
		t.Fatal(err)
	}
	p2, _ := layout.FromPath(out2)
	outer2, _ := p2.ImageIndex()
	om2, _ := outer2.IndexManifest()
	if om2.Manifests[0].Digest != om.Manifests[0].Digest {
		t.Fatalf("rebuilt digests differ: %s, %s", om.Manifests[0].Digest, om2.Manifests[0].Digest)
	}
}
