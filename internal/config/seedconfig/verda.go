package seedconfig

// The Verda cloud's name and the cloudOptions keys its backend reads. They
// are part of the config file's contract; the backend defines them too,
// and a test keeps both in step (config packages import no cloud).
const (
	verdaCloud                     = "verda"
	verdaOptionSSHKeyIDs           = "sshKeyIDs"
	verdaOptionContract            = "contract"
	verdaOptionPricing             = "pricing"
	verdaOptionStartupScriptID     = "startupScriptID"
	verdaOptionStartupScriptBase64 = "startupScriptBase64"
)
