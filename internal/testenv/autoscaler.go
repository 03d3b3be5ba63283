package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// ClusterAutoscaler is a running cluster-autoscaler.
type ClusterAutoscaler struct {
	p *process
	// Log is the path of its log file.
	Log string
}

// StartClusterAutoscaler runs the real cluster-autoscaler (built by
// hack/testbins from its upstream source, externalgrpc provider only)
// against the cluster as kubeconfig, with args after the ones it needs
// here (--kubeconfig, a free metrics port), and waits until its /health-check
// answers. Its log joins the failure dump; it stops with the cluster, or
// earlier with Stop.
func (e *Env) StartClusterAutoscaler(ctx context.Context, name, kubeconfig string, args ...string) (*ClusterAutoscaler, error) {
	return e.StartClusterAutoscalerWithEnv(ctx, name, kubeconfig, nil, args...)
}

// StartClusterAutoscalerWithEnv is StartClusterAutoscaler with environ
// added to the process's environment (HTTPS_PROXY, say, to reach a
// provider by the Service name the chart's cloud-config gives).
func (e *Env) StartClusterAutoscalerWithEnv(ctx context.Context, name, kubeconfig string, environ []string, args ...string) (*ClusterAutoscaler, error) {
	if _, err := os.Stat(filepath.Join(e.bins, "cluster-autoscaler")); err != nil {
		return nil, fmt.Errorf("cluster-autoscaler was not built (go run ./hack/testbins): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	all := append([]string{"--kubeconfig=" + kubeconfig, "--address=127.0.0.1:" + strconv.Itoa(port)}, args...)
	p, err := e.runWithEnv(name, "cluster-autoscaler", environ, all...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = waitFor(ctx, p, "cluster-autoscaler /health-check", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/health-check", port), "")
	})
	return &ClusterAutoscaler{p: p, Log: p.log}, err
}

// Stop ends cluster-autoscaler (SIGTERM, then SIGKILL after 10 s).
func (c *ClusterAutoscaler) Stop() { c.p.stop(10 * time.Second) }
