package verda

import (
	"fmt"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// Environment variables the credentials are read from, newest names first;
// the DATACRUNCH_* names keep the DataCrunch autoscaler's deployments working.
var (
	clientIDEnv     = []string{"VERDA_CLIENT_ID", "DATACRUNCH_CLIENT_ID"}
	clientSecretEnv = []string{"VERDA_CLIENT_SECRET", "DATACRUNCH_CLIENT_SECRET"}
)

// Credentials reads the API client ID and secret from the named files when
// given, else from the environment through getenv. Values are trimmed; the
// error never contains them.
func Credentials(getenv func(string) string, idFile, secretFile string) (id, secret string, err error) {
	id, err = cloud.ReadCredential(getenv, idFile, clientIDEnv, "clouds.verda")
	if err != nil {
		return "", "", fmt.Errorf("verda client ID: %w", err)
	}
	secret, err = cloud.ReadCredential(getenv, secretFile, clientSecretEnv, "clouds.verda")
	if err != nil {
		return "", "", fmt.Errorf("verda client secret: %w", err)
	}
	return id, secret, nil
}
