package kamatera

import (
	"fmt"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Environment variables the API credentials are read from.
const (
	ClientIDEnv = "KAMATERA_API_CLIENT_ID"
	SecretEnv   = "KAMATERA_API_SECRET"
	// URLEnv overrides the API's address when clouds.kamatera.endpoint
	// is unset.
	URLEnv = "KAMATERA_API_URL"
)

// Credentials reads the API client ID and secret from the named files when
// given, else from KAMATERA_API_CLIENT_ID and KAMATERA_API_SECRET through
// getenv. The error never contains them.
func Credentials(getenv func(string) string, idFile, secretFile string) (id, secret string, err error) {
	if id, err = cloud.ReadCredential(getenv, idFile, []string{ClientIDEnv}, "clouds.kamatera"); err != nil {
		return "", "", fmt.Errorf("kamatera API client ID: %w", err)
	}
	if secret, err = cloud.ReadCredential(getenv, secretFile, []string{SecretEnv}, "clouds.kamatera"); err != nil {
		return "", "", fmt.Errorf("kamatera API secret: %w", err)
	}
	return id, secret, nil
}
