package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Options are one release's inputs.
type Options struct {
	// Version is x.y.z (semantic versioning, no leading v).
	Version string
	// Image is the OCI image layout `make image` wrote: an index whose one
	// entry is the image index of every platform.
	Image string
	// Platforms the image must hold ("linux/amd64").
	Platforms []string
	// Binaries are what the SBOM describes (one platform's; the others
	// are built from the same modules).
	Binaries []string
	// Charts are the chart folders to package; the one whose values have
	// image.digest gets the image's.
	Charts []string
	// Changelog's section for Version becomes the release notes.
	Changelog string
	// Out is the folder written (replaced).
	Out string
}

var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Release writes the release folder and returns the names of its files.
func Release(opts Options) ([]string, error) {
	if !semver.MatchString(opts.Version) {
		return nil, fmt.Errorf("version %q: want x.y.z (semantic versioning, no leading v)", opts.Version)
	}
	notes, err := releaseNotes(opts.Changelog, opts.Version)
	if err != nil {
		return nil, err
	}
	digest, err := imageDigest(opts.Image, opts.Platforms)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", opts.Image, err)
	}
	if err := os.RemoveAll(opts.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"RELEASE_NOTES.md": notes,
		"image-digest.txt": []byte(digest + "\n"),
	}
	if files[fmt.Sprintf("gpuscaler-%s-image.oci.tar", opts.Version)], err = tarDir(opts.Image, ""); err != nil {
		return nil, err
	}
	if files[fmt.Sprintf("gpuscaler-%s.spdx.json", opts.Version)], err = sbom(opts.Version, opts.Binaries); err != nil {
		return nil, err
	}
	for _, dir := range opts.Charts {
		name, pkg, err := packageChart(dir, opts.Version, digest)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", dir, err)
		}
		files[fmt.Sprintf("%s-%s.tgz", name, opts.Version)] = pkg
	}
	names := make([]string, 0, len(files)+1)
	var sums strings.Builder
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(opts.Out, name), files[name], 0o644); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(files[name])
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
	}
	if err := os.WriteFile(filepath.Join(opts.Out, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return append(names, "SHA256SUMS"), nil
}

// releaseNotes returns the changelog's section for version ("## 1.2.3"
// or "## [1.2.3]", up to the next "## ").
func releaseNotes(changelog, version string) ([]byte, error) {
	data, err := os.ReadFile(changelog)
	if err != nil {
		return nil, err
	}
	var out []string
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, "## ") {
			head := strings.Fields(strings.TrimPrefix(line, "## "))
			in = len(head) > 0 && strings.Trim(head[0], "[]") == version
			if in {
				out = append(out, "# gpuscaler "+version)
			}
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no section \"## %s\": rename \"## Unreleased\" to it first", changelog, version)
	}
	return []byte(strings.TrimSpace(strings.Join(out, "\n")) + "\n"), nil
}

// imageDigest returns the digest of the layout's image index, checking
// that it holds an image for every platform asked for.
func imageDigest(dir string, platforms []string) (string, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return "", err
	}
	outer, err := lp.ImageIndex()
	if err != nil {
		return "", err
	}
	om, err := outer.IndexManifest()
	if err != nil {
		return "", err
	}
	if len(om.Manifests) != 1 || !om.Manifests[0].MediaType.IsIndex() {
		return "", errors.New("want one image index in the layout (make image writes one)")
	}
	d := om.Manifests[0].Digest
	idx, err := outer.ImageIndex(d)
	if err != nil {
		return "", err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	have := map[string]bool{}
	for _, m := range im.Manifests {
		if m.Platform != nil {
			have[m.Platform.OS+"/"+m.Platform.Architecture] = true
		}
	}
	for _, p := range platforms {
		if !have[p] {
			return "", fmt.Errorf("no image for %s (it has %v)", p, slices.Sorted(maps.Keys(have)))
		}
	}
	return d.String(), nil
}

// tarDir archives a folder's files under prefix, in a stable order with
// fixed times, so that the same input gives the same bytes.
func tarDir(dir, prefix string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := eachFile(dir, func(rel string, data []byte) error { return writeFile(tw, path.Join(prefix, rel), data) })
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// eachFile calls fn with every file under dir, by its slash-separated
// path relative to dir, in lexical order.
func eachFile(dir string, fn func(rel string, data []byte) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), data)
	})
}

func writeFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

var (
	chartVersion    = regexp.MustCompile(`(?m)^version: .*$`)
	chartAppVersion = regexp.MustCompile(`(?m)^appVersion: .*$`)
	chartName       = regexp.MustCompile(`(?m)^name: (\S+)$`)
	valuesTag       = regexp.MustCompile(`(?m)^  tag: ""$`)
	valuesDigest    = regexp.MustCompile(`(?m)^  digest: ""$`)
)

// packageChart packages a chart folder as `helm package` does (a gzipped
// tar of <name>/...) with version and appVersion set, and, in the chart
// whose values pin an image by digest, the image's tag and digest set.
func packageChart(dir, version, digest string) (string, []byte, error) {
	chart, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return "", nil, err
	}
	m := chartName.FindSubmatch(chart)
	if m == nil || len(chartVersion.FindAll(chart, -1)) != 1 || len(chartAppVersion.FindAll(chart, -1)) != 1 {
		return "", nil, errors.New("the chart needs one name, one version and one appVersion line in Chart.yaml")
	}
	name := string(m[1])
	chart = chartVersion.ReplaceAll(chart, []byte("version: "+version))
	chart = chartAppVersion.ReplaceAll(chart, []byte(fmt.Sprintf("appVersion: %q", version)))
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err = eachFile(dir, func(rel string, data []byte) error {
		switch rel {
		case "Chart.yaml":
			data = chart
		case "values.yaml":
			if valuesDigest.Match(data) {
				if len(valuesTag.FindAll(data, -1)) != 1 || len(valuesDigest.FindAll(data, -1)) != 1 {
					return errors.New(`values.yaml needs one image line 'tag: ""' and one 'digest: ""'`)
				}
				data = valuesTag.ReplaceAll(data, []byte(fmt.Sprintf("  tag: %q", version)))
				data = valuesDigest.ReplaceAll(data, []byte(fmt.Sprintf("  digest: %q", digest)))
			}
		}
		return writeFile(tw, path.Join(name, rel), data)
	})
	if err != nil {
		return "", nil, err
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
	}
	if err := gz.Close(); err != nil {
		return "", nil, err
	}
	return name, buf.Bytes(), nil
}

// sbom describes the binaries as an SPDX 2.3 document: one package per
// binary, one per Go module linked in (from the build information every
// Go binary carries), each with its package URL.
func sbom(version string, binaries []string) ([]byte, error) {
	if len(binaries) == 0 {
		return nil, errors.New("no binaries for the SBOM")
	}
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		ID         string `json:"SPDXID"`
		Name       string `json:"name"`
		Version    string `json:"versionInfo,omitempty"`
		Download   string `json:"downloadLocation"`
		FilesSeen  bool   `json:"filesAnalyzed"`
		License    string `json:"licenseConcluded"`
		Refs       []ref  `json:"externalRefs,omitempty"`
		Checksums  []any  `json:"checksums,omitempty"`
		Supplier   string `json:"supplier,omitempty"`
		PrimaryFor string `json:"primaryPackagePurpose,omitempty"`
	}
	type rel struct {
		From string `json:"spdxElementId"`
		Type string `json:"relationshipType"`
		To   string `json:"relatedSpdxElement"`
	}
	var pkgs []pkg
	var rels []rel
	seen := map[string]string{}
	id := func(s string) string {
		return "SPDXRef-" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
				return r
			}
			return '-'
		}, s)
	}
	for _, bin := range binaries {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		binID := id("binary-" + filepath.Base(bin))
		pkgs = append(pkgs, pkg{ID: binID, Name: filepath.Base(bin), Version: version, Download: "NOASSERTION", License: "Apache-2.0",
			Checksums: []any{map[string]string{"algorithm": "SHA256", "checksumValue": hex.EncodeToString(sum[:])}}, PrimaryFor: "APPLICATION",
			Refs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + info.Main.Path + "@v" + version}}})
		rels = append(rels, rel{"SPDXRef-DOCUMENT", "DESCRIBES", binID})
		type module struct{ Path, Version string }
		mods := []module{{"stdlib", strings.TrimPrefix(info.GoVersion, "go")}}
		for _, d := range info.Deps {
			if d.Replace != nil && d.Replace.Version != "" {
				d = d.Replace
			}
			mods = append(mods, module{d.Path, d.Version})
		}
		for _, d := range mods {
			key := d.Path + "@" + d.Version
			mid, ok := seen[key]
			if !ok {
				mid = id("module-" + key)
				seen[key] = mid
				pkgs = append(pkgs, pkg{ID: mid, Name: d.Path, Version: d.Version, Download: "NOASSERTION", License: "NOASSERTION",
					Refs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + d.Path + "@" + d.Version}}})
			}
			rels = append(rels, rel{binID, "DEPENDS_ON", mid})
		}
	}
	doc := map[string]any{
		"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
		"name":              "gpuscaler-" + version,
		"documentNamespace": "https://github.com/gpuscaler/gpuscaler/releases/" + version + "/sbom",
		"creationInfo":      map[string]any{"created": created().Format(time.RFC3339), "creators": []string{"Tool: gpuscaler-hack-image-release"}},
		"packages":          pkgs, "relationships": rels,
	}
	return json.MarshalIndent(doc, "", "  ")
}

// created is when the SBOM was made: $SOURCE_DATE_EPOCH for a
// reproducible build, else now.
func created() time.Time {
	if v, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		return time.Unix(v, 0).UTC()
	}
	return time.Now().UTC().Truncate(time.Second)
}
