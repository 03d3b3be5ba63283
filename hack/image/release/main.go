// Command release writes one version's release into one folder, from an
// image layout `make image` built: the image as an OCI layout archive
// with its digest, an SPDX SBOM of the binaries, the charts packaged
// with that digest pinned, the version's notes from CHANGELOG.md, and
// SHA256SUMS over all of it. `make release VERSION=x.y.z` runs it;
// .github/workflows/release.yml publishes the folder on a tag.
//
//	go -C hack/image run ./release --version 1.2.3 --image dist/image \
//	  --binaries dist/linux-amd64/gpuscaler,dist/linux-amd64/gpuscaler-karpenter \
//	  --charts deploy/charts/gpuscaler,deploy/charts/gpuscaler-crd \
//	  --changelog CHANGELOG.md --out dist/release-1.2.3
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	var opts Options
	var bins, charts, platforms string
	flag.StringVar(&opts.Version, "version", "", "the version released, x.y.z (semantic versioning, no v)")
	flag.StringVar(&opts.Image, "image", "dist/image", "the OCI image layout make image wrote")
	flag.StringVar(&bins, "binaries", "", "comma-separated binaries the SBOM describes (one platform's)")
	flag.StringVar(&charts, "charts", "", "comma-separated chart folders to package")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "the platforms the image must hold")
	flag.StringVar(&opts.Changelog, "changelog", "CHANGELOG.md", "the changelog whose section for the version becomes the notes")
	flag.StringVar(&opts.Out, "out", "", "the folder to write (replaced); default dist/release-<version>")
	flag.Parse()
	opts.Binaries, opts.Charts, opts.Platforms = split(bins), split(charts), split(platforms)
	if opts.Out == "" {
		opts.Out = "dist/release-" + opts.Version
	}
	files, err := Release(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	fmt.Printf("release %s in %s:\n  %s\n", opts.Version, opts.Out, strings.Join(files, "\n  "))
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
