package seedconfig

import (
	"testing"

	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
)

func TestVerdaKeysMatchTheBackend(t *testing.T) {
	for mine, theirs := range map[string]string{
		verdaCloud:                     verda.Name,
		verdaOptionSSHKeyIDs:           verda.OptionSSHKeyIDs,
		verdaOptionContract:            verda.OptionContract,
		verdaOptionPricing:             verda.OptionPricing,
		verdaOptionStartupScriptID:     verda.OptionStartupScriptID,
		verdaOptionStartupScriptBase64: verda.OptionStartupScriptBase64,
	} {
		if mine != theirs {
			t.Errorf("seedconfig writes %q where the Verda backend reads %q", mine, theirs)
		}
	}
}
