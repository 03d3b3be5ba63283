package cloud

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ReadCredential reads one API credential from file when it is named, else
// from the first of envs that getenv finds set. The value is trimmed; the
// error names where it looked (section is the config section that can
// name a file, e.g. "clouds.verda") and never holds the value.
func ReadCredential(getenv func(string) string, file string, envs []string, section string) (string, error) {
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
	return "", fmt.Errorf("set %s (or name a file in %s)", strings.Join(envs, " or "), section)
}
