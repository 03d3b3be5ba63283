// Command image builds gpuscaler's container image without a Docker
// daemon: a static, non-root (uid 65532) image of the binaries given, with
// the build machine's trusted CA roots, for each platform, written as an
// OCI image layout (one index, one manifest per platform).
//
//	go run ./hack/image --out dist/image --version v1.2.3 \
//	  --binary linux/amd64=dist/linux-amd64/gpuscaler,dist/linux-amd64/gpuscaler-karpenter \
//	  --binary linux/arm64=dist/linux-arm64/gpuscaler,dist/linux-arm64/gpuscaler-karpenter
//
// `make image` runs it after building the binaries. It is the image's one
// build definition: no Dockerfile, no base image, no build context.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// binaries maps a platform ("linux/amd64") to the binaries put in
// /usr/local/bin; the first is the entrypoint.
type binaries map[string][]string

func (b binaries) String() string { return fmt.Sprint(map[string][]string(b)) }

func (b binaries) Set(v string) error {
	platform, files, ok := strings.Cut(v, "=")
	if !ok || !strings.Contains(platform, "/") || files == "" {
		return fmt.Errorf("want os/arch=file[,file...], not %q", v)
	}
	b[platform] = strings.Split(files, ",")
	return nil
}

func main() {
	opts := Options{Binaries: binaries{}}
	flag.StringVar(&opts.Out, "out", "dist/image", "the OCI image layout folder to write (replaced)")
	flag.StringVar(&opts.Version, "version", "dev", "the version the image is labelled with")
	flag.StringVar(&opts.Revision, "revision", "", "the source revision the image is labelled with")
	flag.StringVar(&opts.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "the PEM bundle of trusted CA roots to include")
	flag.Var(binaries(opts.Binaries), "binary", "os/arch=file[,file...]: the binaries of one platform (repeat per platform)")
	flag.Parse()
	if len(opts.Binaries) == 0 {
		fmt.Fprintln(os.Stderr, "image: give at least one --binary")
		os.Exit(2)
	}
	if err := Build(opts); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		var pe *os.PathError
		if errors.As(err, &pe) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
