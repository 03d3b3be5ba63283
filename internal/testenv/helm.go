package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Helm runs the helm CLI that hack/testbins builds (the version go.mod's
// helm engine has) against the cluster as its admin, and returns what it
// printed. Helm's cache, config and data folders are the environment's
// own, so nothing outside it is read or written.
func (e *Env) Helm(ctx context.Context, args ...string) (string, error) {
	bin := filepath.Join(e.bins, "helm")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no helm in %s (go run ./hack/testbins builds it): %w", e.bins, err)
	}
	home := filepath.Join(e.Dir, "helm")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+e.Kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}
