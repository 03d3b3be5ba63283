package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts.
const (
	// UID is the user the image runs as (distroless's nonroot).
	UID = 65532
	// BinDir is where the binaries go.
	BinDir = "/usr/local/bin"
	// CAPath is where the CA roots go, the path Go's crypto/x509 reads.
	CAPath = "/etc/ssl/certs/ca-certificates.crt"
	// RefName names the image in the layout's index.
	RefName = "ghcr.io/gpuscaler/gpuscaler"
)

// epoch is every file's and the image's time, so that one input makes one
// digest.
var epoch = time.Unix(0, 0).UTC()

// Options say what to build.
type Options struct {
	Out, Version, Revision, CACerts string
	// Binaries per platform ("linux/arm64"); the first is the entrypoint.
	Binaries map[string][]string
}

// Build writes the OCI layout.
func Build(opts Options) error {
	ca, err := os.ReadFile(opts.CACerts)
	if err != nil {
		return fmt.Errorf("CA roots: %w", err)
	}
	platforms := make([]string, 0, len(opts.Binaries))
	for p := range opts.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		osName, arch, _ := strings.Cut(p, "/")
		img, err := platformImage(opts, osName, arch, opts.Binaries[p], ca)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}}})
	}
	if err := os.RemoveAll(opts.Out); err != nil {
		return err
	}
	lp, err := layout.Write(opts.Out, empty.Index)
	if err != nil {
		return err
	}
	return lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": RefName + ":" + opts.Version}))
}

// platformImage is one platform's image: one layer with the binaries, the
// CA roots, and the passwd and group files of the nonroot user.
func platformImage(opts Options, osName, arch string, bins []string, ca []byte) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc", "etc/ssl", "etc/ssl/certs", "tmp", "usr", "usr/local", "usr/local/bin", "home", "home/nonroot"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		uid := 0
		if d == "home/nonroot" {
			uid = UID
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	files := map[string][]byte{
		strings.TrimPrefix(CAPath, "/"): ca,
		"etc/passwd":                    []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, UID)),
		"etc/group":                     []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", UID)),
	}
	names := []string{strings.TrimPrefix(CAPath, "/"), "etc/group", "etc/passwd"}
	for _, n := range names {
		if err := writeFile(tw, n, 0o644, files[n]); err != nil {
			return nil, err
		}
	}
	var entry string
	for i, b := range bins {
		data, err := os.ReadFile(b)
		if err != nil {
			return nil, err
		}
		name := path.Join(BinDir, path.Base(b))
		if i == 0 {
			entry = name
		}
		if err := writeFile(tw, strings.TrimPrefix(name, "/"), 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching) // compressed once, not once per digest and write
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{CreatedBy: "hack/image", Created: v1.Time{Time: epoch}}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = osName, arch, v1.Time{Time: epoch}
	cfg.Config.Entrypoint = []string{entry}
	cfg.Config.User = fmt.Sprintf("%d:%d", UID, UID)
	cfg.Config.WorkingDir = "/home/nonroot"
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CAPath, "HOME=/home/nonroot"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "gpuscaler",
		"org.opencontainers.image.description": "Autoscale Kubernetes GPU nodes on GPU clouds",
		"org.opencontainers.image.source":      "https://github.com/gpuscaler/gpuscaler",
		"org.opencontainers.image.version":     opts.Version,
		"org.opencontainers.image.revision":    opts.Revision,
	}
	return mutate.ConfigFile(img, cfg)
}

func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
