package daemon

import (
	"log/slog"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
)

// secretFiles are the files of a configuration that hold credentials or
// keys, by the field that names them.
func secretFiles(cfg *config.Config) map[string]string {
	files := map[string]string{}
	add := func(field, path string) {
		if path != "" {
			files[field] = path
		}
	}
	c := cfg.Clouds
	if v := c.Verda; v != nil {
		add("clouds.verda.clientIDFile", v.ClientIDFile)
		add("clouds.verda.secretFile", v.SecretFile)
	}
	if k := c.Kamatera; k != nil {
		add("clouds.kamatera.clientIDFile", k.ClientIDFile)
		add("clouds.kamatera.secretFile", k.SecretFile)
		add("clouds.kamatera.passwordFile", k.PasswordFile)
	}
	if s := c.Scaleway; s != nil {
		add("clouds.scaleway.accessKeyFile", s.AccessKeyFile)
		add("clouds.scaleway.secretFile", s.SecretFile)
	}
	if g := c.GCP; g != nil {
		add("clouds.gcp.secretFile", g.SecretFile)
	}
	add("scriptServer.tokenKeyFile", cfg.ScriptServer.TokenKeyFile)
	add("scriptServer.tls.keyFile", cfg.ScriptServer.TLS.KeyFile)
	add("provider.tls.keyFile", cfg.Provider.TLS.KeyFile)
	return files
}

// warnLooseSecretFiles logs each secret file that others than gpuscaler
// can read.
func warnLooseSecretFiles(cfg *config.Config, log *slog.Logger) {
	for field, path := range secretFiles(cfg) {
		if why := cloud.LoosePermissions(path); why != "" {
			log.Warn("a file that holds a secret is "+why+"; make it 0400 or 0440 (a Secret volume's defaultMode)", "field", field, "path", path)
		}
	}
}
