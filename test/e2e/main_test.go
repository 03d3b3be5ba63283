package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// gpuscalerBin is the gpuscaler binary the tests run, built once by
// TestMain before any test starts its clock.
var gpuscalerBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if !testing.Short() {
		dir, err := os.MkdirTemp("", "gpuscaler-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		gpuscalerBin = filepath.Join(dir, "gpuscaler")
		build := exec.Command("go", "build", "-o", gpuscalerBin, "github.com/gpuscaler/gpuscaler/cmd/gpuscaler")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build gpuscaler: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}
