// Package config holds gpuscaler's configuration file: its types, defaults,
// validation (every error names its field path) and loading.
package config

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config is the whole configuration file. Keys are camelCase; unknown keys
// are errors.
type Config struct {
	// ClusterName marks every instance gpuscaler creates, so that List finds
	// them after a restart and two clusters on one account never mix.
	ClusterName string `json:"clusterName"`
	// Ownership tells this install's instances from those of another
	// gpuscaler that uses the same clusterName on the same cloud account.
	Ownership OwnershipConfig `json:"ownership,omitempty"`
	// Provider configures the cluster-autoscaler gRPC server.
	Provider ProviderConfig `json:"provider,omitempty"`
	// Metrics configures the Prometheus and health endpoint.
	Metrics MetricsConfig `json:"metrics,omitempty"`
	// Sync configures the background loop of the node-group core.
	Sync SyncConfig `json:"sync,omitempty"`
	// MaxHourlyCost caps the hourly spend of all groups together; unset, no
	// cap (an explicit 0 is refused: it would read as no cap).
	MaxHourlyCost float64 `json:"maxHourlyCost,omitempty" jsonschema:"minimum=0"`
	// Deprecated lists the old keys the file used, each with its new one
	// (see Decode); never written.
	Deprecated []string `json:"-"`
	// LeakedInstances configures the clean-up of owned instances that never
	// registered or belong to no group.
	LeakedInstances LeakedInstancesConfig `json:"leakedInstances,omitempty"`
	// ScriptServer configures the startup-script server.
	ScriptServer ScriptServerConfig `json:"scriptServer,omitempty"`
	// Kubeconfig reaches the cluster for bootstrap tokens, join Secrets and
	// node registration checks; "in-cluster" uses the pod's service account.
	// Empty: no cluster access.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Clouds configures each cloud account in use.
	Clouds Clouds `json:"clouds"`
	// NodeGroups are the groups gpuscaler scales.
	NodeGroups []NodeGroup `json:"nodeGroups"`
}

// OwnershipConfig says which gpuscaler install the cluster's instances
// belong to. Every instance is recorded at the cloud with the install ID
// of the gpuscaler that ordered it; gpuscaler refuses to start where the
// cloud holds instances of its clusterName that another install ordered,
// and never takes them as its own.
type OwnershipConfig struct {
	// InstallID is this install's ID: 4 to 16 lowercase letters and
	// digits. Default: the first 12 hex digits of the kube-system
	// namespace's UID, which is the cluster's own; set it where gpuscaler
	// has no cluster access. Changing it needs a restart.
	InstallID string `json:"installID,omitempty"`
	// TakeOver lists the install IDs of installs that are gone (a cluster
	// rebuilt under the same clusterName), whose instances this one takes
	// as its own. Keep an ID here while instances it ordered remain.
	TakeOver []string `json:"takeOver,omitempty"`
}

// ProviderConfig configures the external gRPC cloud provider server.
type ProviderConfig struct {
	// ListenAddress is host:port; default "127.0.0.1:8086". An address off
	// loopback needs mTLS (TLS) or Insecure.
	ListenAddress string `json:"listenAddress,omitempty"`
	// Insecure allows a plaintext listener off loopback: any peer that
	// reaches it can scale groups and delete nodes. It is logged loudly at
	// every start.
	Insecure bool `json:"insecure,omitempty"`
	// TLS enables mTLS as the upstream cluster-autoscaler expects it. With
	// all three files empty the server runs plain TCP.
	TLS TLSConfig `json:"tls,omitempty"`
	// GPULabel is the node label key cluster-autoscaler uses to spot GPU
	// nodes; default "gpuscaler.dev/accelerator".
	GPULabel string `json:"gpuLabel,omitempty"`
}

// TLSConfig names PEM files, with the upstream cloud-config's semantics:
// cert and key are the server's pair; caCert verifies client certificates.
type TLSConfig struct {
	CertFile   string `json:"certFile,omitempty"`
	KeyFile    string `json:"keyFile,omitempty"`
	CACertFile string `json:"caCertFile,omitempty"`
	// ClientNames are the identities a client certificate must carry (its
	// subject's common name or one of its DNS names) on top of the CA's
	// signature; the provider only. Empty accepts any certificate the CA
	// signed, which is as wide as who can get one signed (a shared
	// cert-manager ClusterIssuer: anyone who can create a Certificate).
	ClientNames []string `json:"clientNames,omitempty"`
}

// Enabled reports whether any TLS file is set.
func (t TLSConfig) Enabled() bool {
	return t.CertFile != "" || t.KeyFile != "" || t.CACertFile != ""
}

// MetricsConfig configures the metrics and health HTTP endpoints.
type MetricsConfig struct {
	// Address is host:port; default "127.0.0.1:9090"; "0" disables the endpoint.
	Address string `json:"address,omitempty"`
	// HealthAddress, when set, is a listener (host:port) of its own for
	// /healthz and /readyz, which the metrics address serves too: kubelet
	// probes reach it while a network policy keeps every pod away, so no
	// flood of the metrics port starves them. The chart sets ":8081".
	HealthAddress string `json:"healthAddress,omitempty"`
}

// SyncConfig configures the node-group core's background work.
type SyncConfig struct {
	// Period between two lists of each cloud; default 30s.
	Period *metav1.Duration `json:"period,omitempty"`
	// MaxConcurrentCreates bounds create calls in flight per cloud; default 10.
	MaxConcurrentCreates int `json:"maxConcurrentCreates,omitempty" jsonschema:"minimum=0"`
	// RequestsPerSecond is the client-side rate limit per cloud; default 10.
	RequestsPerSecond float64 `json:"requestsPerSecond,omitempty" jsonschema:"minimum=0"`
	// OfferingBackoff is how long a stocked-out offering is skipped; default 5m.
	OfferingBackoff *metav1.Duration `json:"offeringBackoff,omitempty"`
	// CreateRetries is how many times a create that failed transiently is
	// tried again (with backoff) before the instance is reported failed;
	// default 5.
	CreateRetries *int `json:"createRetries,omitempty" jsonschema:"minimum=0"`
	// MaxGroupSize is the largest maxSize a group may have; default 5000,
	// at most 1,000,000.
	MaxGroupSize int `json:"maxGroupSize,omitempty" jsonschema:"minimum=0"`
	// MaxIncrease is the largest scale-up one call may ask for; default 1000.
	MaxIncrease int `json:"maxIncrease,omitempty" jsonschema:"minimum=0"`
	// ListLag is how long a cloud's list may leave out an instance whose
	// order it accepted: a lost create answer is resolved, and a missing
	// instance taken for gone, only by a list that started that long
	// after; a (re)started gpuscaler holds its first orders that long, so
	// that the previous process's orders are counted. Default 1m.
	ListLag *metav1.Duration `json:"listLag,omitempty"`
}

// LeakedInstancesConfig configures what happens to owned instances that
// never register as Nodes or belong to no group.
type LeakedInstancesConfig struct {
	// GracePeriod before an instance counts as leaked; default 30m.
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`
	// Action is "delete" (default) or "report".
	Action string `json:"action,omitempty"`
}

// Leaked-instance actions.
const (
	LeakActionDelete = "delete"
	LeakActionReport = "report"
)

// Clouds holds one optional section per supported cloud.
type Clouds struct {
	Sim      *SimConfig      `json:"sim,omitempty"`
	Verda    *VerdaConfig    `json:"verda,omitempty"`
	Kamatera *KamateraConfig `json:"kamatera,omitempty"`
	Scaleway *ScalewayConfig `json:"scaleway,omitempty"`
	GCP      *GCPConfig      `json:"gcp,omitempty"`
}

// GCPConfig configures a GCP project's managed instance groups. Each node
// group on GCP orders into the managed instance group named by its
// cloudOptions.instanceGroup (default: the group's name) in each of its
// locations (zones). Credentials are Application Default Credentials
// (workload identity, GOOGLE_APPLICATION_CREDENTIALS, gcloud) unless
// credentialsFile names a service-account key.
type GCPConfig struct {
	// Project is the project ID; default $GOOGLE_CLOUD_PROJECT.
	Project string `json:"project,omitempty"`
	// SecretFile is a service-account key file.
	SecretFile string `json:"secretFile,omitempty"`
	// CredentialsFile is SecretFile's old key (deprecated).
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// Endpoint overrides the Compute API's address (a private endpoint);
	// https only, but for loopback.
	Endpoint string `json:"endpoint,omitempty"`
	// Zone is the zone of the bare managed instance group names a
	// NodeProvisioner's existingInstanceGroupNames lists.
	Zone string `json:"zone,omitempty"`
	// AdoptInstanceGroups are existing managed instance groups the
	// operator hands over to NodeProvisioners (existingInstanceGroupNames),
	// in the same forms. A NodeProvisioner may adopt a MIG only when it is
	// listed here or its description carries
	// "gpuscaler.dev/cluster=<clusterName>": whoever can write a
	// NodeProvisioner can never make gpuscaler resize or delete the
	// members of any other MIG of the project.
	AdoptInstanceGroups []string `json:"adoptInstanceGroups,omitempty"`
}

// ScalewayConfig configures a Scaleway project. The API keys are never in
// this file: they come from the files named here, else from SCW_ACCESS_KEY
// and SCW_SECRET_KEY, else from a profile of the Scaleway config file
// (~/.config/scw/config.yaml, or SCW_CONFIG_PATH).
type ScalewayConfig struct {
	// Project is the project ID where servers are made; default
	// SCW_DEFAULT_PROJECT_ID, else the profile's.
	Project string `json:"project,omitempty"`
	// Endpoint is the API's address; default SCW_API_URL, else
	// https://api.scaleway.com.
	Endpoint string `json:"endpoint,omitempty"`
	// AccessKeyFile and SecretFile hold the API keys.
	AccessKeyFile string `json:"accessKeyFile,omitempty"`
	SecretFile    string `json:"secretFile,omitempty"`
	// ProjectID, APIURL and SecretKeyFile are the old keys of Project,
	// Endpoint and SecretFile (deprecated).
	ProjectID     string `json:"projectID,omitempty"`
	APIURL        string `json:"apiURL,omitempty"`
	SecretKeyFile string `json:"secretKeyFile,omitempty"`
	// Profile names a profile of the Scaleway config file; default its
	// active profile, when the keys are not found elsewhere.
	Profile string `json:"profile,omitempty"`
	// Image is the marketplace label or image UUID of groups that name
	// none; default ubuntu_noble_gpu_os_12 (Scaleway's GPU OS).
	Image string `json:"image,omitempty"`
}

// KamateraConfig configures a Kamatera account. The API credentials are
// never in this file: they come from the files named here, or else from
// KAMATERA_API_CLIENT_ID and KAMATERA_API_SECRET. Groups on Kamatera have
// names of at most 15 characters, and so has the cluster: both go into
// server tags (k8sca-<cluster>, k8scang-<group>), as the Kamatera
// cluster-autoscaler wrote them.
type KamateraConfig struct {
	// Endpoint is the API's address; default https://cloudcli.cloudwm.com.
	Endpoint string `json:"endpoint,omitempty"`
	// BaseURL is Endpoint's old key (deprecated).
	BaseURL string `json:"baseURL,omitempty"`
	// ClientIDFile and SecretFile hold the API credentials.
	ClientIDFile string `json:"clientIDFile,omitempty"`
	SecretFile   string `json:"secretFile,omitempty"`
	// Image is the OS image of groups that name none.
	Image string `json:"image,omitempty"`
	// PasswordFile holds the servers' root password; without it each
	// server gets a generated one that nobody keeps (log in with an SSH
	// key: cloudOptions.sshKey).
	PasswordFile string `json:"passwordFile,omitempty"`
	// FilterNamePrefix limits gpuscaler to servers whose names start
	// with it (the seed's filter-name-prefix).
	FilterNamePrefix string `json:"filterNamePrefix,omitempty"`
	// ProviderIDPrefix is what the nodes' provider IDs put before the
	// server name; default kamatera:// (the seed's provider-id-prefix).
	ProviderIDPrefix string `json:"providerIDPrefix,omitempty"`
	// Imported holds the secrets of an imported INI cloud config; it is
	// never written out.
	Imported *KamateraSecrets `json:"-"`
}

// KamateraSecrets are the secrets a Kamatera INI cloud config carries.
type KamateraSecrets struct {
	ClientID, Secret string
	// Passwords are root passwords by group.
	Passwords map[string]string
}

// VerdaConfig configures a Verda (formerly DataCrunch) account. The API
// credentials are never in this file: they come from the files named here,
// or else from the environment (VERDA_CLIENT_ID and VERDA_CLIENT_SECRET, or
// DATACRUNCH_CLIENT_ID and DATACRUNCH_CLIENT_SECRET).
type VerdaConfig struct {
	// Endpoint is the API's address; default https://api.verda.com/v1
	// (accounts made before the rename may use
	// https://api.datacrunch.io/v1).
	Endpoint string `json:"endpoint,omitempty"`
	// ClientIDFile and SecretFile hold the API credentials, for example
	// from a mounted Secret.
	ClientIDFile string `json:"clientIDFile,omitempty"`
	SecretFile   string `json:"secretFile,omitempty"`
	// BaseURL and ClientSecretFile are the old keys of Endpoint and
	// SecretFile (deprecated).
	BaseURL          string `json:"baseURL,omitempty"`
	ClientSecretFile string `json:"clientSecretFile,omitempty"`
	// Image is the OS image of groups that name none; default
	// ubuntu-24.04-cuda-12.8-open-docker.
	Image string `json:"image,omitempty"`
	// SSHKeyIDs are put on instances of groups that name none.
	SSHKeyIDs []string `json:"sshKeyIDs,omitempty"`
	// AdoptLegacyInstances takes over instances the DataCrunch and Verda
	// autoscalers created: those whose description is a group's name, or
	// whose hostname is "<group>-<8 hex>". Set it when migrating in place;
	// only for accounts no other cluster scales.
	AdoptLegacyInstances bool `json:"adoptLegacyInstances,omitempty"`
	// StartupScriptFetchURL is the DataCrunch autoscaler's script server
	// (DATACRUNCH_STARTUP_SCRIPT_FETCH_URL): for groups without a bootstrap
	// section, gpuscaler POSTs to it before each order and boots the
	// instance with the stored script whose ID it answers, then deletes
	// that script once the instance runs.
	StartupScriptFetchURL string `json:"startupScriptFetchURL,omitempty"`
}

// SimConfig configures the simulated cloud.
type SimConfig struct {
	// Seed makes stock-outs, faults and reclaims repeatable; default 1.
	Seed int64 `json:"seed,omitempty"`
	// Catalog is the instance types and prices the simulated cloud sells:
	// sim (its own, modelled on Verda's), or a real cloud's recorded
	// catalog (verda, gcp, scaleway). A group on it may keep a standby
	// pool only where that cloud can; default sim.
	Catalog string `json:"catalog,omitempty" jsonschema:"enum=sim,enum=verda,enum=gcp,enum=scaleway"`
	// Locations the simulated cloud offers; default the catalog's: for sim
	// FIN-01, FIN-02, FIN-03, ICE-01.
	Locations []string `json:"locations,omitempty"`
	// DefaultCapacity is how many instances each offering holds; default 10.
	DefaultCapacity *int `json:"defaultCapacity,omitempty" jsonschema:"minimum=0"`
	// Capacity overrides DefaultCapacity per offering.
	Capacity []SimCapacity `json:"capacity,omitempty"`
	// BootDelay is the time from create to running; default 20s.
	BootDelay *metav1.Duration `json:"bootDelay,omitempty"`
	// BootDelayP95, when longer than BootDelay, makes each boot a draw:
	// log-normal, BootDelay its median and this its 95th percentile.
	BootDelayP95 *metav1.Duration `json:"bootDelayP95,omitempty"`
	// DeleteDelay is the time from delete to gone; default 5s.
	DeleteDelay *metav1.Duration `json:"deleteDelay,omitempty"`
	// APILatency is added to every API call; default 0.
	APILatency *metav1.Duration `json:"apiLatency,omitempty"`
	// FaultRate is the fraction (0..1) of API calls that fail transiently.
	FaultRate float64 `json:"faultRate,omitempty" jsonschema:"minimum=0,exclusiveMaximum=1"`
	// SpotReclaimRate is the chance (0..1) per hour that a running spot
	// instance is reclaimed.
	SpotReclaimRate float64 `json:"spotReclaimRate,omitempty" jsonschema:"minimum=0,exclusiveMaximum=1"`
	// Kubeconfig, when set, makes the simulated cloud register a Node for
	// each running instance, standing in for the kubelet. "in-cluster" uses
	// the pod's service account.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Kwok annotates registered Nodes so kwok keeps them Ready; default true.
	Kwok *bool `json:"kwok,omitempty"`
	// GPUReadyDelay is the time from a GPU Node's registration (Ready) to
	// its GPUs allocatable, as the NVIDIA driver and device plugin take;
	// default 0.
	GPUReadyDelay *metav1.Duration `json:"gpuReadyDelay,omitempty"`
	// MIGReadyDelay is the further time until a MIG node's devices appear
	// (mig-manager repartitioning); default 0.
	MIGReadyDelay *metav1.Duration `json:"migReadyDelay,omitempty"`
	// ReadyFlaps is how often a GPU Node turns NotReady and Ready again
	// during GPUReadyDelay (a driver container restarting); default 0.
	ReadyFlaps int `json:"readyFlaps,omitempty" jsonschema:"minimum=0"`
	// GPUFailures is how many GPU Nodes, the first to register, never get
	// their GPUs (a driver that does not install); default 0.
	GPUFailures int `json:"gpuFailures,omitempty" jsonschema:"minimum=0"`
	// StartDelay is the time from starting a stopped (standby) instance to
	// running; default 15s.
	StartDelay *metav1.Duration `json:"startDelay,omitempty"`
	// StartDelayP95, when longer than StartDelay, makes each start a draw:
	// log-normal, StartDelay its median and this its 95th percentile.
	StartDelayP95 *metav1.Duration `json:"startDelayP95,omitempty"`
	// StartFailureRate is the chance (0..1) that starting a stopped
	// instance is refused for want of capacity; default 0.
	StartFailureRate float64 `json:"startFailureRate,omitempty" jsonschema:"minimum=0,maximum=1"`
	// StoppedPrice is what a stopped instance costs per hour (its disk);
	// default 0.05.
	StoppedPrice *float64 `json:"stoppedPrice,omitempty" jsonschema:"minimum=0"`
}

// SimCapacity sets the capacity of matching offerings of the simulated
// cloud. Empty fields match everything.
type SimCapacity struct {
	InstanceType string `json:"instanceType,omitempty"`
	Location     string `json:"location,omitempty"`
	CapacityType string `json:"capacityType,omitempty"`
	Count        int    `json:"count" jsonschema:"minimum=0"`
}

// Capacity policies: which capacity types a group orders, in which order.
const (
	PolicySpotOnly       = "spot-only"
	PolicyOnDemandOnly   = "on-demand-only"
	PolicyPreferSpot     = "prefer-spot"
	PolicyPreferOnDemand = "prefer-on-demand"
)

// MIG strategies, as the NVIDIA device plugin names them.
const (
	MIGStrategySingle = "single"
	MIGStrategyMixed  = "mixed"
)

// NodeGroup is one group of identical GPU nodes.
type NodeGroup struct {
	// Name is unique in the file; DNS-label rules, at most 40 characters.
	Name string `json:"name"`
	// Cloud names a section of clouds.
	Cloud string `json:"cloud"`
	// InstanceType is the cloud's type name.
	InstanceType string `json:"instanceType"`
	// Locations are tried in order.
	Locations []string `json:"locations"`
	// CapacityPolicy is one of spot-only, on-demand-only, prefer-spot,
	// prefer-on-demand; default on-demand-only.
	CapacityPolicy string `json:"capacityPolicy,omitempty"`
	MinSize        int    `json:"minSize" jsonschema:"minimum=0"`
	MaxSize        int    `json:"maxSize" jsonschema:"minimum=0"`
	// Image is the cloud's image; empty means the cloud's default.
	Image string `json:"image,omitempty"`
	// DiskSizeGiB is the OS disk size; 0 means the cloud's default.
	DiskSizeGiB int `json:"diskSizeGiB,omitempty" jsonschema:"minimum=0"`
	// Labels are added to the nodes and the template.
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are registered with the nodes and put on the template.
	Taints []corev1.Taint `json:"taints,omitempty"`
	// MIG partitions every GPU of the group's nodes.
	MIG *MIG `json:"mig,omitempty"`
	// MaxHourlyCost caps the group's hourly spend; unset, no cap (an
	// explicit 0 is refused).
	MaxHourlyCost float64 `json:"maxHourlyCost,omitempty" jsonschema:"minimum=0"`
	// AutoscalingOptions overrides cluster-autoscaler's per-group options.
	AutoscalingOptions *AutoscalingOptions `json:"autoscalingOptions,omitempty"`
	// CloudOptions are cloud-specific settings passed to the cloud as they are.
	CloudOptions map[string]string `json:"cloudOptions,omitempty"`
	// ManagedBy says who scales the group: cluster-autoscaler (through
	// gpuscaler provider; the default) or node-provisioner (gpuscaler
	// controller, for groups named in NodeProvisioners) or karpenter (a
	// template of GPUNodeClasses, see ManagedByKarpenter). A group has one
	// owner; the other process leaves its instances alone.
	ManagedBy string `json:"managedBy,omitempty"`
	// Bootstrap renders the startup script the group's nodes join with;
	// without it instances boot with no gpuscaler-rendered script (the
	// cloud's own, for example Verda's startupScriptID, may still join them).
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
	// GPUStartupTimeout is how long a GPU node of the group may be
	// registered without its GPUs allocatable (the driver and device
	// plugin starting) before it is taken for broken: reported, and its
	// instance deleted so that it is replaced (leakedInstances.action
	// report only reports it); default 15m.
	GPUStartupTimeout *metav1.Duration `json:"gpuStartupTimeout,omitempty"`
	// OverrideNumGPUs replaces the instance type's GPU count in the template
	// (nvidia.com/gpu), for setups the MIG table does not describe; prefer
	// mig. Kept for users of the DataCrunch autoscaler's override_num_gpus.
	OverrideNumGPUs *int `json:"overrideNumGPUs,omitempty" jsonschema:"minimum=1"`
	// PrePullImages are pulled onto every node of the group as it joins,
	// while its GPUs start, by a pod of gpuscaler's bound to it, so that
	// the first pod on the node finds its image there; a standby pool
	// pulls them too. Needs gpuscaler to watch Nodes (a kubeconfig).
	PrePullImages []string `json:"prePullImages,omitempty"`
	// Standby keeps instances that booted, joined and warmed once, then
	// stopped, ready to start when the group scales up (docs/standby.md).
	Standby *Standby `json:"standby,omitempty"`
}

// Standby is a group's pool of stopped, warmed instances.
type Standby struct {
	// Size is how many stopped instances to keep ready; size + the
	// group's target never exceeds maxSize.
	Size int `json:"size" jsonschema:"minimum=0"`
	// MaxAge replaces a standby instance older than this (image and driver
	// drift); default 7 days.
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
	// WarmFor is how long an instance of the pool runs after it is up
	// before it is stopped (its Node joins, its GPUs come up, its images
	// are pulled); default 2 minutes.
	WarmFor *metav1.Duration `json:"warmFor,omitempty"`
	// PrePullImages are pulled onto each instance while it warms, by a pod
	// bound to its Node, before it is stopped: a pod started from the
	// pool finds them there. Where gpuscaler watches Nodes only.
	PrePullImages []string `json:"prePullImages,omitempty"`
	// RefillAfter is how long a pool below its size waits before it
	// orders fresh instances: meanwhile the nodes of the group that a
	// front end scales down go back to it (stopped, not deleted), which
	// saves each fresh instance's warm-up at full price. Default 0: order
	// at once. Set it near how long a burst's nodes live, for demand that
	// comes in bursts.
	RefillAfter *metav1.Duration `json:"refillAfter,omitempty"`
	// ScaleDownAfter is how long a node of the group stays unneeded before
	// it is scaled down while the pool has room for it: it goes back to
	// the pool and comes back in a start, not a boot, so it need not wait
	// out the front end's own delay. The NodeProvisioner applies it to the
	// nodes the pool would take back; cluster-autoscaler gets it as the
	// group's scaleDownUnneededTime unless autoscalingOptions sets one.
	// Default: the front end's own delay.
	ScaleDownAfter *metav1.Duration `json:"scaleDownAfter,omitempty"`
	// Forecast lets the pool grow past Size, up to its MaxSize, ahead of
	// the growth the group's own history expects (docs/standby.md).
	Forecast *StandbyForecast `json:"forecast,omitempty"`
}

// StandbyForecast sizes a standby pool by the group's learned demand.
type StandbyForecast struct {
	// MaxSize is the most the pool holds when the forecast expects the
	// group to grow; Size stays its floor.
	MaxSize int `json:"maxSize" jsonschema:"minimum=0"`
	// TrainFor is how long the group's size must have been observed before
	// the pool follows it; default a week.
	TrainFor *metav1.Duration `json:"trainFor,omitempty"`
	// LeadTime is how far ahead the pool is sized: how long a new standby
	// instance takes to order, boot, warm and stop; default 10 minutes.
	LeadTime *metav1.Duration `json:"leadTime,omitempty"`
}

// Default standby settings.
const (
	DefaultStandbyMaxAge  = 7 * 24 * time.Hour
	DefaultStandbyWarmFor = 2 * time.Minute
	// DefaultForecastTrainFor and DefaultForecastLeadTime are a standby
	// forecast's, as a NodeProvisioner's forecast defaults them.
	DefaultForecastTrainFor = 7 * 24 * time.Hour
	DefaultForecastLeadTime = 10 * time.Minute
)

// ForecastTrainFor is the forecast's trainFor, or its default.
func (f *StandbyForecast) ForecastTrainFor() time.Duration {
	if f == nil || f.TrainFor == nil {
		return DefaultForecastTrainFor
	}
	return f.TrainFor.Duration
}

// ForecastLeadTime is the forecast's leadTime, or its default.
func (f *StandbyForecast) ForecastLeadTime() time.Duration {
	if f == nil || f.LeadTime == nil {
		return DefaultForecastLeadTime
	}
	return f.LeadTime.Duration
}

// StandbyMaxAge is the pool's maxAge, or its default.
func (s *Standby) StandbyMaxAge() time.Duration {
	if s == nil || s.MaxAge == nil {
		return DefaultStandbyMaxAge
	}
	return s.MaxAge.Duration
}

// StandbyWarmFor is the pool's warmFor, or its default.
func (s *Standby) StandbyWarmFor() time.Duration {
	if s == nil || s.WarmFor == nil {
		return DefaultStandbyWarmFor
	}
	return s.WarmFor.Duration
}

// StandbyRefillAfter is the pool's refillAfter, or 0.
func (s *Standby) StandbyRefillAfter() time.Duration {
	if s == nil || s.RefillAfter == nil {
		return 0
	}
	return s.RefillAfter.Duration
}

// StandbyScaleDownAfter is the pool's scaleDownAfter, or 0 when unset.
func (s *Standby) StandbyScaleDownAfter() time.Duration {
	if s == nil || s.ScaleDownAfter == nil {
		return 0
	}
	return s.ScaleDownAfter.Duration
}

// StandbyImages are the images the group's standby pool pulls before an
// instance stops; none without a pool.
func (g *NodeGroup) StandbyImages() []string {
	if g.Standby == nil {
		return nil
	}
	if len(g.PrePullImages) == 0 {
		return g.Standby.PrePullImages
	}
	out := slices.Clone(g.PrePullImages)
	for _, img := range g.Standby.PrePullImages {
		if !slices.Contains(out, img) {
			out = append(out, img)
		}
	}
	return out
}

// StandbySize is the group's standby pool size; 0 without one.
func (g *NodeGroup) StandbySize() int {
	if g.Standby == nil {
		return 0
	}
	return g.Standby.Size
}

// StandbyMaxSize is the most the group's standby pool may hold: its size,
// or more when a forecast sizes it; 0 without a pool.
func (g *NodeGroup) StandbyMaxSize() int {
	if g.Standby == nil {
		return 0
	}
	if f := g.Standby.Forecast; f != nil {
		return max(g.Standby.Size, f.MaxSize)
	}
	return g.Standby.Size
}

// Owners of a node group.
const (
	ManagedByClusterAutoscaler = "cluster-autoscaler"
	ManagedByNodeProvisioner   = "node-provisioner"
	// ManagedByKarpenter groups are templates of GPUNodeClasses (their
	// bootstrap, image, disk, cloud options, labels and taints): Karpenter
	// launches one machine per NodeClaim and never sizes the group.
	ManagedByKarpenter = "karpenter"
)

// Bootstrap methods.
const (
	BootstrapK3s     = "k3s"
	BootstrapKubeadm = "kubeadm"
	BootstrapCustom  = "custom"
)

// Delivery modes of a rendered startup script.
const (
	// DeliveryInline puts the script in the cloud's user data or script
	// store; gpuscaler deletes the cloud's copy once the instance runs.
	DeliveryInline = "inline"
	// DeliveryServer gives the cloud only a stub with a one-time token; the
	// node fetches its script from the script server.
	DeliveryServer = "server"
)

// Bootstrap configures how a group's nodes join the cluster.
type Bootstrap struct {
	// Method is k3s, kubeadm or custom.
	Method string `json:"method"`
	// Server is what nodes join: the k3s server URL (https://host:6443) or
	// the kubeadm API endpoint (host:6443).
	Server string `json:"server,omitempty"`
	// TokenSecretRef names the Secret key holding the join token (a k3s
	// token, or a long-lived kubeadm token).
	TokenSecretRef *SecretKeyRef `json:"tokenSecretRef,omitempty"`
	// MintToken creates a kubeadm bootstrap token per node in kube-system,
	// valid for TokenTTL and deleted once the node registers.
	MintToken bool `json:"mintToken,omitempty"`
	// TokenTTL is the lifetime of minted tokens and script-server links;
	// default 1h.
	TokenTTL *metav1.Duration `json:"tokenTTL,omitempty"`
	// CACertHash pins the cluster CA for kubeadm ("sha256:<hex>").
	CACertHash string `json:"caCertHash,omitempty"`
	// TemplateFile is the user's own text/template (method custom).
	TemplateFile string `json:"templateFile,omitempty"`
	// KubeletExtraArgs are added to the kubelet's flags.
	KubeletExtraArgs []string `json:"kubeletExtraArgs,omitempty"`
	// Delivery is inline (default) or server.
	Delivery string `json:"delivery,omitempty"`
	// Version is the k3s release nodes install when their image has no
	// k3s ("v1.33.4+k3s1"); default the server's own version, as its API
	// reports it. Method k3s only.
	Version string `json:"version,omitempty"`
	// MIGManager leaves MIG partitioning to NVIDIA's mig-manager (the node
	// gets the nvidia.com/mig.config label); by default the script enables
	// MIG and creates the instances itself with nvidia-smi.
	MIGManager bool `json:"migManager,omitempty"`
}

// SecretKeyRef names one key of a Secret.
type SecretKeyRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

// ScriptServerConfig configures the startup-script server, which hands
// each node its rendered script once, over HTTP(S).
type ScriptServerConfig struct {
	// ListenAddress is host:port; empty runs no server.
	ListenAddress string `json:"listenAddress,omitempty"`
	// URL is the server's base URL as nodes reach it, e.g. https://scripts.example.com:8443.
	URL string `json:"url,omitempty"`
	// TLS serves HTTPS with the certificate and key; caCertFile, when set,
	// is the CA that signed that certificate, which every node's stub pins
	// (curl --cacert): a node then verifies the server without a public CA.
	TLS TLSConfig `json:"tls,omitempty"`
	// BindToInstanceIP hands a script only to the address the cloud reports
	// for its instance, so that a leaked script URL is of no use elsewhere.
	// Default true, except for a loopback url (a demo on one machine).
	BindToInstanceIP *bool `json:"bindToInstanceIP,omitempty"`
	// TokenKeyFile holds the key (at least 32 bytes, e.g. a Secret's key
	// mounted as a file) that derives each node's script token. With it,
	// the script of a node still booting when gpuscaler restarts is put
	// back under the token the node carries; without it, a random key per
	// process, and such a node never gets its script.
	TokenKeyFile string `json:"tokenKeyFile,omitempty"`
	// Insecure allows a plain http url off loopback: scripts, join tokens
	// included, would cross the network in clear. Warned at every start.
	Insecure bool `json:"insecure,omitempty"`
}

// MIG is a group's MIG partitioning.
type MIG struct {
	// Profile is a mig-parted config name, e.g. "all-1g.10gb" or "all-balanced".
	Profile string `json:"profile"`
	// Strategy is "single" or "mixed"; default "mixed".
	Strategy string `json:"strategy,omitempty"`
}

// AutoscalingOptions are cluster-autoscaler's per-group options. Only the
// fields set override; the rest keep cluster-autoscaler's defaults, which
// the provider copies from the request.
type AutoscalingOptions struct {
	ScaleDownUtilizationThreshold    *float64         `json:"scaleDownUtilizationThreshold,omitempty" jsonschema:"minimum=0,maximum=1"`
	ScaleDownGPUUtilizationThreshold *float64         `json:"scaleDownGpuUtilizationThreshold,omitempty" jsonschema:"minimum=0,maximum=1"`
	ZeroOrMaxNodeScaling             *bool            `json:"zeroOrMaxNodeScaling,omitempty"`
	IgnoreDaemonSetsUtilization      *bool            `json:"ignoreDaemonSetsUtilization,omitempty"`
	ScaleDownUnneededTime            *metav1.Duration `json:"scaleDownUnneededTime,omitempty"`
	ScaleDownUnreadyTime             *metav1.Duration `json:"scaleDownUnreadyTime,omitempty"`
	MaxNodeProvisionTime             *metav1.Duration `json:"maxNodeProvisionTime,omitempty"`
}

// OptionsOf returns a lookup of each node group's cluster-autoscaler
// option overrides; ok is false for groups without any.
func OptionsOf(c *Config) func(group string) (*AutoscalingOptions, bool) {
	byGroup := map[string]*AutoscalingOptions{}
	for _, g := range c.NodeGroups {
		o := g.AutoscalingOptions
		if g.Standby != nil && g.Standby.ScaleDownAfter != nil && (o == nil || o.ScaleDownUnneededTime == nil) {
			// A node of a group with a standby pool comes back in a start:
			// it need not wait out cluster-autoscaler's own unneeded time.
			withPool := AutoscalingOptions{}
			if o != nil {
				withPool = *o
			}
			withPool.ScaleDownUnneededTime = g.Standby.ScaleDownAfter
			o = &withPool
		}
		if o != nil {
			byGroup[g.Name] = o
		}
	}
	return func(group string) (*AutoscalingOptions, bool) {
		o, ok := byGroup[group]
		return o, ok
	}
}
