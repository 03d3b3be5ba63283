package cloud

import (
	"fmt"
	"strings"
)

// ProviderID returns the canonical provider ID of an instance name on a
// cloud: "<cloud>://<name>". It is known before the instance boots, so the
// startup script can hand it to the kubelet.
func ProviderID(cloudName, instanceName string) string {
	return cloudName + "://" + instanceName
}

// ParseProviderID splits "<cloud>://<rest>" into its scheme and the rest.
func ParseProviderID(pid string) (scheme, rest string, err error) {
	scheme, rest, ok := strings.Cut(pid, "://")
	if !ok || scheme == "" || rest == "" {
		return "", "", fmt.Errorf("provider ID %q: want <cloud>://<id>", pid)
	}
	return scheme, rest, nil
}
