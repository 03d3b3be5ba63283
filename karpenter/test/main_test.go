// Package test runs the Karpenter operator binary against a real test
// cluster (etcd, kube-apiserver, controller-manager, scheduler and kwok)
// with Karpenter's CRDs and the GPUNodeClass CRD installed.
package test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// operatorBin is the operator binary: $GPUSCALER_KARPENTER_BIN, which
// `make test` builds before any test binary runs, or else (the package
// tested on its own) one TestMain builds, before any test's clock.
var operatorBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if bin := os.Getenv("GPUSCALER_KARPENTER_BIN"); bin != "" && !testing.Short() {
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintf(os.Stderr, "GPUSCALER_KARPENTER_BIN: %v\n", err)
			return 1
		}
		operatorBin = bin
	} else if !testing.Short() {
		dir, err := os.MkdirTemp("", "gpuscaler-karpenter-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		operatorBin = filepath.Join(dir, "gpuscaler-karpenter")
		cmd := exec.Command("go", "build", "-o", operatorBin, "../cmd/gpuscaler-karpenter")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build gpuscaler-karpenter: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}
