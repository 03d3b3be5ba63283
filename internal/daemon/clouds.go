package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuscaler/gpuscaler/internal/bootstrap"
	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/gcp"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera"
	"github.com/gpuscaler/gpuscaler/internal/cloud/scaleway"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	"github.com/gpuscaler/gpuscaler/internal/cloud/verda"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/nodeindex"
)

// clouds are the configured cloud accounts and what runs beside them.
type clouds struct {
	providers map[string]cloud.Provider
	// background runs until its context is done (for example the simulated
	// cloud's node registrar).
	background []func(ctx context.Context) error
	// nodes indexes the cluster's Nodes; nil when gpuscaler has no
	// cluster access.
	nodes *nodeindex.Index
	// kube reaches the cluster named by the config's kubeconfig; nil without.
	kube kubernetes.Interface
	// tokens mints and reaps bootstrap tokens, across reloads; nil without
	// cluster access.
	tokens *bootstrap.Tokens
	// kubeUnchecked: the config names cluster access that a preflight
	// cannot reach from where it runs (in-cluster outside a pod).
	kubeUnchecked bool
}

// setGroups gives the clouds built from node groups (GCP) the groups of
// cfg; it is called while no core runs.
func (c *clouds) setGroups(cfg *config.Config) {
	if g, ok := c.providers[gcp.Name].(*gcp.Cloud); ok {
		g.SetGroups(gcpGroups(cfg))
	}
}

// listableAhead reports which clouds' lists a reload from cur to next may
// take before the hand-over (nodegroup.Manager.Warm): all but GCP when
// next gives it other groups, whose MIGs it lists only once setGroups
// has followed.
func listableAhead(cur, next *config.Config) func(cloudName string) bool {
	sameGCP := reflect.DeepEqual(gcpGroups(cur), gcpGroups(next))
	return func(cloudName string) bool { return cloudName != gcp.Name || sameGCP }
}

// Describer returns the cloud's reader of existing instance groups; false
// when the cloud is not configured or has none.
func (r *Runtime) Describer(cloudName string) (cloud.GroupDescriber, bool) {
	d, ok := r.clouds.providers[cloudName].(cloud.GroupDescriber)
	return d, ok
}

// buildClouds builds one Provider per configured cloud, and the node
// index when the config gives cluster access.
func buildClouds(ctx context.Context, cfg *config.Config, opts Options) (*clouds, error) {
	log := opts.Logger
	out := &clouds{providers: map[string]cloud.Provider{}}
	kubeconfig := opts.KubeconfigOf(cfg)
	var rc *rest.Config
	switch {
	case kubeconfig != "" && opts.preflight.unreachable(kubeconfig):
		out.kubeUnchecked = true
	case kubeconfig != "":
		var err error
		if rc, err = RestConfig(kubeconfig, opts.KubeContext); err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	case opts.Kube != nil:
		rc = opts.Kube
	}
	if rc != nil {
		kube, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		out.kube = kube
		out.tokens = bootstrap.NewTokens(kube)
		out.nodes = nodeindex.New(kube, log.With("component", "node-index"), opts.Namespace)
		out.background = append(out.background, out.nodes.Run)
	}
	if s := cfg.Clouds.Sim; s != nil {
		if err := out.addSim(cfg, s, opts); err != nil {
			return nil, fmt.Errorf("clouds.sim: %w", err)
		}
	}
	if v := cfg.Clouds.Verda; v != nil {
		prov, err := buildVerda(cfg, v, opts, out.nodes)
		if err != nil {
			return nil, fmt.Errorf("clouds.verda: %w", err)
		}
		out.providers[verda.Name] = prov
	}
	if gc := cfg.Clouds.GCP; gc != nil {
		prov, err := buildGCP(ctx, cfg, gc, opts)
		if err != nil {
			return nil, fmt.Errorf("clouds.gcp: %w", err)
		}
		out.providers[gcp.Name] = prov
	}
	if sc := cfg.Clouds.Scaleway; sc != nil {
		prov, err := buildScaleway(cfg, sc, opts)
		if err != nil {
			return nil, fmt.Errorf("clouds.scaleway: %w", err)
		}
		out.providers[scaleway.Name] = prov
	}
	if k := cfg.Clouds.Kamatera; k != nil {
		prov, err := buildKamatera(cfg, k, opts)
		if err != nil {
			return nil, fmt.Errorf("clouds.kamatera: %w", err)
		}
		out.providers[kamatera.Name] = prov
	}
	return out, nil
}

// addSim adds the simulated cloud, and with its kubeconfig the registrar
// that plays its instances' Nodes (and the node index over them).
func (out *clouds) addSim(cfg *config.Config, s *config.SimConfig, opts Options) error {
	log := opts.Logger
	types, err := SimCatalog(*s)
	if err != nil {
		return err
	}
	acct, err := sim.New(SimConfig(*s), cfg.ClusterName, sim.Options{Catalog: types})
	if err != nil {
		return err
	}
	out.providers[sim.Name] = acct
	if s.Kubeconfig != "" && !opts.preflight.unreachable(s.Kubeconfig) {
		kube, err := kubeClient(s.Kubeconfig, opts.KubeContext)
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		reg := sim.NewRegistrar(acct, kube, sim.RegistrarOptions{Kwok: *s.Kwok, GPUStartup: SimGPUStartup(*s), Logger: log.With("component", "sim-registrar")})
		out.background = append(out.background, reg.Run)
		if out.nodes == nil {
			out.nodes = nodeindex.New(kube, log.With("component", "node-index"), opts.Namespace)
			out.background = append(out.background, out.nodes.Run)
		}
	}
	return nil
}

// buildVerda builds the Verda cloud; nodes (nil without cluster access)
// tells which legacy instances joined this cluster.
func buildVerda(cfg *config.Config, v *config.VerdaConfig, opts Options, nodes *nodeindex.Index) (cloud.Provider, error) {
	getenv, log := opts.Getenv, opts.Logger
	id, secret := "unread", "unread" // a FileOnly preflight never calls the API
	if opts.preflight.readsFiles() {
		var err error
		if id, secret, err = verda.Credentials(getenv, v.ClientIDFile, v.SecretFile); err != nil {
			return nil, err
		}
	}
	baseURL, baseFrom := v.Endpoint, "clouds.verda.endpoint"
	if baseURL == "" {
		baseURL = getenv("VERDA_BASE_URL") // as the Verda autoscaler reads it
		baseFrom = "VERDA_BASE_URL"
		if o := opts.EnvOrigin("VERDA_BASE_URL"); o != "" {
			baseFrom += " (from " + o + ")"
		}
	}
	api, err := verda.NewClient(verda.ClientOptions{
		BaseURL: baseURL, ClientID: id, ClientSecret: secret,
		RequestsPerSecond: cfg.Sync.RequestsPerSecond, Logger: log.With("cloud", verda.Name),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", baseFrom, err)
	}
	if baseURL != "" && baseFrom != "clouds.verda.endpoint" {
		log.Info("Verda API address from the environment", "variable", baseFrom, "url", baseURL)
	}
	var legacy []string
	if v.AdoptLegacyInstances {
		for _, g := range cfg.NodeGroups {
			if g.Cloud == verda.Name {
				legacy = append(legacy, g.Name)
			}
		}
	}
	vopts := verda.Options{
		ClusterName: cfg.ClusterName, Image: v.Image, SSHKeyIDs: v.SSHKeyIDs, LegacyGroups: legacy,
		ScriptFetchURL: v.StartupScriptFetchURL,
		Logger:         log.With("cloud", verda.Name),
	}
	if len(legacy) > 0 {
		if nodes == nil {
			log.Warn("clouds.verda.adoptLegacyInstances needs cluster access (kubeconfig): an instance is adopted only when its Node is in this cluster; none will be")
		} else {
			vopts.LegacyInCluster = nodes.Registered
		}
	}
	return verda.New(api, vopts), nil
}

// buildKamatera builds the Kamatera backend: credentials from an imported
// INI file, else from files or the environment; datacenters from the
// groups.
func buildKamatera(cfg *config.Config, k *config.KamateraConfig, opts Options) (*kamatera.Cloud, error) {
	log := opts.Logger.With("cloud", kamatera.Name)
	id, secret := "unread", "unread" // a FileOnly preflight never calls the API
	passwords := map[string]string{}
	switch {
	case k.Imported != nil:
		id, secret = k.Imported.ClientID, k.Imported.Secret
		maps.Copy(passwords, k.Imported.Passwords)
	case opts.preflight.readsFiles():
		var err error
		if id, secret, err = kamatera.Credentials(opts.Getenv, k.ClientIDFile, k.SecretFile); err != nil {
			return nil, err
		}
	}
	var datacenters []string
	scripts := map[string]string{}
	for i, g := range cfg.NodeGroups {
		if g.Cloud != kamatera.Name {
			continue
		}
		if path := g.CloudOptions[kamatera.OptionScriptFile]; path != "" && opts.preflight.readsFiles() {
			b, err := config.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("nodeGroups[%d].cloudOptions.%s: %w", i, kamatera.OptionScriptFile, err)
			}
			scripts[g.Name] = string(b)
		}
		for _, dc := range g.Locations {
			if !slices.Contains(datacenters, dc) {
				datacenters = append(datacenters, dc)
			}
		}
		if k.PasswordFile != "" && passwords[g.Name] == "" && opts.preflight.readsFiles() {
			pw, err := cloud.ReadSecretFile(k.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("passwordFile: %w", err)
			}
			passwords[g.Name] = strings.TrimSpace(string(pw))
		}
	}
	baseURL, baseFrom := k.Endpoint, "endpoint"
	if baseURL == "" {
		baseURL, baseFrom = opts.Getenv(kamatera.URLEnv), kamatera.URLEnv
	}
	api, err := kamatera.NewClient(kamatera.ClientOptions{
		BaseURL: baseURL, ClientID: id, Secret: secret, RequestsPerSecond: cfg.Sync.RequestsPerSecond, Logger: log,
		Redact: slices.Collect(maps.Values(passwords)),
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", baseFrom, err)
	}
	return kamatera.New(api, kamatera.Options{
		ClusterName: cfg.ClusterName, Image: k.Image, Datacenters: datacenters, FilterNamePrefix: k.FilterNamePrefix, Scripts: scripts,
		ProviderIDPrefix: k.ProviderIDPrefix, Passwords: passwords, Logger: log,
	}), nil
}

// KubeconfigOf is the kubeconfig value in force for cfg: the
// --kubeconfig flag's (Options.Kubeconfig) over the config's.
func (o Options) KubeconfigOf(cfg *config.Config) string {
	if o.Kubeconfig != "" {
		return o.Kubeconfig
	}
	return cfg.Kubeconfig
}

// InCluster is the kubeconfig value that means the pod's own service
// account, and nothing else.
const InCluster = "in-cluster"

// RestConfig is the cluster access a kubeconfig value gives, by client-go's
// loading rules as every Kubernetes tool applies them: InCluster is the
// pod's service account; a path (~/ for the home folder) is that file; ""
// is $KUBECONFIG (a list of files merged), else ~/.kube/config, else the
// pod's service account in a pod. kubeContext, when set, picks a context
// of the file other than its current one.
func RestConfig(path, kubeContext string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if path == InCluster {
		rc, err = rest.InClusterConfig()
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if strings.HasPrefix(path, "~/") {
			home, _ := os.UserHomeDir()
			path = filepath.Join(home, path[2:])
		}
		rules.ExplicitPath = path
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	}
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "gpuscaler"
	return rc, nil
}

// kubeClient builds a clientset for a kubeconfig value (see RestConfig).
func kubeClient(path, kubeContext string) (kubernetes.Interface, error) {
	rc, err := RestConfig(path, kubeContext)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// Providers builds the configured clouds alone, for commands that only
// read a catalog; it starts nothing.
func Providers(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger) (map[string]cloud.Provider, error) {
	c := *cfg
	c.Kubeconfig = ""
	if c.Clouds.Sim != nil {
		s := *c.Clouds.Sim
		s.Kubeconfig = ""
		c.Clouds.Sim = &s
	}
	cs, err := buildClouds(ctx, &c, Options{Getenv: getenv, EnvOrigin: func(string) string { return "" }, Logger: log})
	if err != nil {
		return nil, err
	}
	return cs.providers, nil
}

// buildScaleway builds the Scaleway backend: keys from files, the
// environment or a profile of the Scaleway config file; zones from the
// groups (every GPU zone when none names one, for catalog).
func buildScaleway(cfg *config.Config, sc *config.ScalewayConfig, opts Options) (*scaleway.Cloud, error) {
	log := opts.Logger.With("cloud", scaleway.Name)
	// A FileOnly preflight never calls the API; the SDK checks the keys'
	// forms all the same.
	creds := scaleway.ClientOptions{AccessKey: "SCWXXXXXXXXXXXXXXXXX", SecretKey: "00000000-0000-4000-8000-000000000000",
		ProjectID: "00000000-0000-4000-8000-000000000000", APIURL: sc.Endpoint}
	if opts.preflight.readsFiles() {
		var err error
		creds, err = scaleway.Credentials(opts.Getenv, scaleway.Source{AccessKeyFile: sc.AccessKeyFile, SecretKeyFile: sc.SecretFile,
			Profile: sc.Profile, ProjectID: sc.Project, APIURL: sc.Endpoint})
		if err != nil {
			return nil, err
		}
	}
	creds.RequestsPerSecond = cfg.Sync.RequestsPerSecond
	client, err := scaleway.NewClient(creds)
	if err != nil {
		return nil, err
	}
	var zones []string
	for _, g := range cfg.NodeGroups {
		if g.Cloud != scaleway.Name {
			continue
		}
		for _, z := range g.Locations {
			if !slices.Contains(zones, z) {
				zones = append(zones, z)
			}
		}
	}
	if len(zones) == 0 {
		zones = scaleway.GPUZones
	}
	return scaleway.New(client, scaleway.Options{ClusterName: cfg.ClusterName, ProjectID: creds.ProjectID, Zones: zones, Image: sc.Image,
		Secrets: []string{creds.SecretKey}, Logger: log}), nil
}

// buildGCP builds the GCP backend: each GCP group's managed instance group
// (cloudOptions.instanceGroup, default its name) in each of its zones.
func buildGCP(ctx context.Context, cfg *config.Config, gc *config.GCPConfig, opts Options) (*gcp.Cloud, error) {
	project := gc.Project
	if project == "" {
		project = opts.Getenv("GOOGLE_CLOUD_PROJECT")
	}
	if project == "" {
		return nil, errors.New("set clouds.gcp.project (or GOOGLE_CLOUD_PROJECT)")
	}
	if gc.SecretFile != "" && opts.preflight.readsFiles() {
		// The Google library reads it unbounded: check it first.
		if _, err := cloud.ReadSecretFile(gc.SecretFile); err != nil {
			return nil, fmt.Errorf("secretFile: %w", err)
		}
	}
	co := gcp.ClientOptions{Endpoint: gc.Endpoint, CredentialsFile: gc.SecretFile}
	if u, err := url.Parse(gc.Endpoint); err == nil && u.Scheme == "http" && cloud.IsLoopbackHost(u.Hostname()) && gc.SecretFile == "" {
		// Plain http to this machine (an emulator, or a test's fake): no
		// credentials are sent, as gcloud's emulators expect.
		co.NoAuth = true
	}
	if !opts.preflight.readsFiles() {
		co = gcp.ClientOptions{Endpoint: gc.Endpoint, NoAuth: true} // a FileOnly preflight calls nothing and reads no credentials
	}
	clients, err := gcp.NewClients(ctx, co)
	if err != nil {
		return nil, err
	}
	return gcp.New(clients, gcp.Options{Project: project, ClusterName: cfg.ClusterName, Groups: gcpGroups(cfg), Logger: opts.Logger.With("cloud", gcp.Name)}), nil
}

// gcpGroups are the config's GCP groups' MIGs.
func gcpGroups(cfg *config.Config) map[string]gcp.Group {
	groups := map[string]gcp.Group{}
	for _, g := range cfg.NodeGroups {
		if g.Cloud == gcp.Name {
			groups[g.Name] = gcp.NewGroup(g.Name, g.InstanceType, g.Locations, g.CloudOptions)
		}
	}
	return groups
}
