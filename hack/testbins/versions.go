package main

// Pinned versions of the components the test suite runs. Changing one
// changes the cache key, so the next run rebuilds only what changed.
const (
	kubernetesVersion = "v1.34.4"
	// stagingVersion is the published twin of kubernetesVersion's staging
	// modules (k8s.io/api, k8s.io/apiserver, ...).
	stagingVersion = "v0.34.4"
	etcdVersion    = "v3.6.8"
	kwokVersion    = "v0.8.0"
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
}

var components = []component{
	{name: "etcd", module: "go.etcd.io/etcd/server/v3", version: etcdVersion, packages: []string{"go.etcd.io/etcd/server/v3"}},
	{name: "kwok", module: "sigs.k8s.io/kwok", version: kwokVersion, packages: []string{"sigs.k8s.io/kwok/cmd/kwok"}},
	{
		name: "kubernetes", module: "k8s.io/kubernetes", version: kubernetesVersion, stagingReplaces: true,
		packages: []string{
			"k8s.io/kubernetes/cmd/kube-apiserver",
			"k8s.io/kubernetes/cmd/kube-controller-manager",
			"k8s.io/kubernetes/cmd/kube-scheduler",
		},
	},
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
