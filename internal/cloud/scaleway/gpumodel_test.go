package scaleway

import (
	"testing"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
)

// The gpu_name values Scaleway's products/servers answers carry, as
// recorded in terraform-provider-scaleway's cassettes
// (data-source-server-type-compare-with-pcu.cassette.yaml,
// server-private-network.cassette.yaml; fr-par-2 sells B300-SXM), each
// read as the model the catalog and node labels use. An unread one leaves
// its types with an unknown model, and a group of them is refused.
func TestRecordedGPUNames(t *testing.T) {
	for name, want := range map[string]string{
		"L4": "L4", "L40S": "L40S", "H100": "H100-80GB", "H100-PCIe": "H100-80GB", "H100-SXM": "H100-80GB",
		"B300-SXM": "B300", "P100": "P100", "RTX 3070": "RTX3070",
	} {
		if got := gpuModel(name); got != want {
			t.Errorf("gpu_name %q: %q, want %q", name, got, want)
		}
	}
}

// Scaleway prices in euros: its types say so, so that spend and caps are
// never added to another cloud's dollars.
func TestPricesAreInEuros(t *testing.T) {
	if c := convertType("L4-1-24G", &instance.ServerType{HourlyPrice: 0.75}).PriceCurrency(); c != "EUR" {
		t.Errorf("currency %q, want EUR", c)
	}
}
