package main

import (
	"os"
	"strings"
	"testing"
)

// The helm CLI the chart is installed with is the helm whose engine renders
// it in the unit tests: a chart that renders under one and not the other
// would pass one suite and fail the other.
func TestHelmMatchesGoMod(t *testing.T) {
	mod, err := os.ReadFile("../../test/go.mod") // the test module: Helm renders the chart only in tests
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(mod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "helm.sh/helm/v3" {
			if f[1] != helmVersion {
				t.Fatalf("helmVersion %s, test/go.mod requires helm.sh/helm/v3 %s: keep them in step", helmVersion, f[1])
			}
			return
		}
	}
	t.Fatal("test/go.mod does not require helm.sh/helm/v3")
}
