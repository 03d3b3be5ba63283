package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/testenv"
)

// gpuscalerBin is the gpuscaler binary the tests run, found or built by
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
		if gpuscalerBin, err = testenv.GPUScaler(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}
