package main

import (
	"fmt"
	"strings"
)

// Pinned versions of the components the test suite runs. Changing one
// changes the cache key, so the next run rebuilds only what changed.
const (
	kubernetesVersion = "v1.34.4"
	// stagingVersion is the published twin of kubernetesVersion's staging
	// modules (k8s.io/api, k8s.io/apiserver, ...).
	stagingVersion = "v0.34.4"
	etcdVersion    = "v3.6.8"
	kwokVersion    = "v0.8.0"
	// helmVersion is the helm CLI the chart is installed with; the same
	// as test/go.mod's helm.sh/helm/v3, whose engine renders it in the
	// tests (TestHelmMatchesGoMod). Not in the cache key: a stamp beside
	// the binary rebuilds it alone when it changes.
	helmVersion = "v3.22.0"
)

// component is one module the builder turns into binaries.
type component struct {
	name    string
	module  string
	version string
	// packages are the main packages to build; the binary is named after
	// the last path element.
	packages []string
	// stagingReplaces asks for a replace directive per staging module.
	stagingReplaces bool
	// ldflags are added to the build's -ldflags.
	ldflags string
	// stamped: what the binaries are built from (version and ldflags) is
	// not all in the cache key, so a file beside each binary names it,
	// and a change rebuilds them.
	stamped bool
}

// stamp is what a stamped component's binaries are built from.
func (c component) stamp() string {
	if c.ldflags == "" {
		return c.version + "\n"
	}
	return c.version + " " + c.ldflags + "\n"
}

// kubeVersionFlags set the version the Kubernetes binaries report, as
// Kubernetes' own build does (hack/lib/version.sh): built from the module
// proxy they would report v0.0.0-master, which a chart's kubeVersion
// (helm install) and clients that check the server version refuse.
var kubeVersionFlags = func() string {
	major, rest, _ := strings.Cut(strings.TrimPrefix(kubernetesVersion, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	var b strings.Builder
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, " -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
			pkg, kubernetesVersion, pkg, major, pkg, minor, pkg)
	}
	return strings.TrimSpace(b.String())
}()

var components = []component{
	{name: "etcd", module: "go.etcd.io/etcd/server/v3", version: etcdVersion, packages: []string{"go.etcd.io/etcd/server/v3"}},
	{name: "kwok", module: "sigs.k8s.io/kwok", version: kwokVersion, packages: []string{"sigs.k8s.io/kwok/cmd/kwok"}},
	{
		name: "kubernetes", module: "k8s.io/kubernetes", version: kubernetesVersion, stagingReplaces: true,
		ldflags: kubeVersionFlags, stamped: true,
		packages: []string{
			"k8s.io/kubernetes/cmd/kube-apiserver",
			"k8s.io/kubernetes/cmd/kube-controller-manager",
			"k8s.io/kubernetes/cmd/kube-scheduler",
		},
	},
	{name: "helm", module: "helm.sh/helm/v3", version: helmVersion, packages: []string{"helm.sh/helm/v3/cmd/helm"}, stamped: true},
}

// kwokStages are kwok's stage files the test cluster needs, relative to the
// kwok module's kustomize/stage folder.
var kwokStages = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat/node-heartbeat.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-complete.yaml",
	"pod/fast/pod-delete.yaml",
}
