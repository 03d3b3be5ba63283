package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// installReadTimeout bounds the read of the kube-system namespace.
const installReadTimeout = 30 * time.Second

// installID returns this install's ID: the config's ownership.installID,
// else the first 12 hex digits of the kube-system namespace's UID (which
// is the cluster's own, and stays while the cluster does); "" without
// either, when no ID is recorded and none is told apart.
func installID(ctx context.Context, cfg *config.Config, kube kubernetes.Interface) (string, error) {
	if id := cfg.Ownership.InstallID; id != "" {
		return id, nil
	}
	if kube == nil {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, installReadTimeout)
	defer cancel()
	ns, err := kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("this install's ID is the kube-system namespace's UID, which could not be read (ownership.installID sets one instead): %w", err)
	}
	return InstallIDOf(string(ns.UID)), nil
}

// InstallIDOf is the install ID of a cluster whose kube-system namespace
// has the UID uid: its first 12 hex digits.
func InstallIDOf(uid string) string {
	id := strings.ToLower(strings.ReplaceAll(uid, "-", ""))
	return id[:min(12, len(id))]
}

// realClouds reports whether cfg has a cloud other than the simulated
// one, whose account another install may share.
func realClouds(cfg *config.Config) bool {
	c := cfg.Clouds
	return c.Verda != nil || c.Scaleway != nil || c.Kamatera != nil || c.GCP != nil
}
