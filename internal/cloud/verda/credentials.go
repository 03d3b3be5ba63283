package verda

import (
	"errors"
	"fmt"
	"os"
	"strings"
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
	id, err = credential(getenv, idFile, clientIDEnv)
	if err != nil {
		return "", "", fmt.Errorf("verda client ID: %w", err)
	}
	secret, err = credential(getenv, secretFile, clientSecretEnv)
	if err != nil {
		return "", "", fmt.Errorf("verda client secret: %w", err)
	}
	return id, secret, nil
}

func credential(getenv func(string) string, file string, envs []string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", file, errors.Unwrap(err))
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%s is empty", file)
	}
	for _, e := range envs {
		if v := strings.TrimSpace(getenv(e)); v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("set %s (or name a file in clouds.verda)", strings.Join(envs, " or "))
}
