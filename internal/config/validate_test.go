package config

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// validDoc is a small valid config; the tests change one thing at a time.
const validDoc = `
clusterName: test
clouds:
  sim: {}
  verda: {}
nodeGroups:
  - name: a
    cloud: sim
    instanceType: 1H100.80S.30V
    locations: [FIN-01]
    maxSize: 3
  - name: b
    cloud: sim
    instanceType: 1A100.22V
    locations: [FIN-01, FIN-02]
    minSize: 1
    maxSize: 2
    mig: {profile: all-1g.10gb}
`

// validConfig returns a fresh, defaulted copy of validDoc.
func validConfig(t *testing.T) *Config {
	t.Helper()
	cfg, err := Parse([]byte(validDoc))
	if err != nil {
		t.Fatalf("the base document is invalid: %v", err)
	}
	return cfg
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// bootstrapped gives group 0 a valid k3s bootstrap section and the cluster
// access it needs, then lets the case change it.
func bootstrapped(change func(*Bootstrap)) func(*Config) {
	return func(c *Config) {
		c.Kubeconfig = "in-cluster"
		b := &Bootstrap{
			Method:         BootstrapK3s,
			Server:         "https://10.0.0.1:6443",
			TokenSecretRef: &SecretKeyRef{Namespace: "kube-system", Name: "k3s", Key: "token"},
		}
		SetDefaults(&Config{NodeGroups: []NodeGroup{{Bootstrap: b}}})
		change(b)
		c.NodeGroups[0].Bootstrap = b
	}
}

func group0(change func(*NodeGroup)) func(*Config) {
	return func(c *Config) { change(&c.NodeGroups[0]) }
}

func sim(change func(*SimConfig)) func(*Config) {
	return func(c *Config) { change(c.Clouds.Sim) }
}

// TestValidateInvalidFields breaks one field per case and checks that
// Validate reports exactly the expected paths, with the expected kind.
func TestValidateInvalidFields(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   []string // exact field paths, in order
		typ    field.ErrorType
	}{
		{"cluster name missing", func(c *Config) { c.ClusterName = "" }, []string{"clusterName"}, field.ErrorTypeRequired},
		{"cluster name not a DNS label", func(c *Config) { c.ClusterName = "Bad_Name" }, []string{"clusterName"}, field.ErrorTypeInvalid},
		{"cluster name too long", func(c *Config) { c.ClusterName = strings.Repeat("a", 41) }, []string{"clusterName"}, field.ErrorTypeTooLong},
		{"install ID of capitals", func(c *Config) { c.Ownership.InstallID = "ABCD1234" }, []string{"ownership.installID"}, field.ErrorTypeInvalid},
		{"install ID too long for a Kamatera tag", func(c *Config) { c.Ownership.InstallID = strings.Repeat("a", 17) }, []string{"ownership.installID"}, field.ErrorTypeInvalid},
		{"taking over oneself", func(c *Config) { c.Ownership = OwnershipConfig{InstallID: "abcd1234", TakeOver: []string{"abcd1234"}} },
			[]string{"ownership.takeOver[0]"}, field.ErrorTypeInvalid},
		{"taking over a bad ID", func(c *Config) { c.Ownership.TakeOver = []string{"ok12", "no"} }, []string{"ownership.takeOver[1]"}, field.ErrorTypeInvalid},
		{"taking over twice", func(c *Config) { c.Ownership.TakeOver = []string{"ok12", "ok12"} }, []string{"ownership.takeOver[1]"}, field.ErrorTypeDuplicate},
		{"listen address", func(c *Config) { c.Provider.ListenAddress = "nonsense" }, []string{"provider.listenAddress"}, field.ErrorTypeInvalid},
		{"listen port not a number", func(c *Config) { c.Provider.ListenAddress = "localhost:grpc" }, []string{"provider.listenAddress"}, field.ErrorTypeInvalid},
		{"listen port out of range", func(c *Config) { c.Provider.ListenAddress = ":70000" }, []string{"provider.listenAddress"}, field.ErrorTypeInvalid},
		{"tls names each missing file", func(c *Config) { c.Provider.TLS.CertFile = "tls.crt" },
			[]string{"provider.tls.keyFile", "provider.tls.caCertFile"}, field.ErrorTypeRequired},
		{"tls without ca", func(c *Config) { c.Provider.TLS = TLSConfig{CertFile: "c", KeyFile: "k"} },
			[]string{"provider.tls.caCertFile"}, field.ErrorTypeRequired},
		{"gpu label", func(c *Config) { c.Provider.GPULabel = "bad label!" }, []string{"provider.gpuLabel"}, field.ErrorTypeInvalid},
		{"client names without mTLS", func(c *Config) { c.Provider.TLS.ClientNames = []string{"cluster-autoscaler"} },
			[]string{"provider.tls.clientNames"}, field.ErrorTypeForbidden},
		{"an adopted MIG that is no MIG reference", func(c *Config) {
			c.Clouds.GCP = &GCPConfig{Project: "p", AdoptInstanceGroups: []string{"regions/us-east4/instanceGroupManagers/g"}}
		}, []string{"clouds.gcp.adoptInstanceGroups[0]"}, field.ErrorTypeInvalid},
		{"an adopted bare MIG name without a zone", func(c *Config) {
			c.Clouds.GCP = &GCPConfig{Project: "p", AdoptInstanceGroups: []string{"grp"}}
		}, []string{"clouds.gcp.adoptInstanceGroups[0]"}, field.ErrorTypeInvalid},
		{"plaintext on every interface", func(c *Config) { c.Provider.ListenAddress = ":8086" }, []string{"provider.listenAddress"}, field.ErrorTypeForbidden},
		{"plaintext on 0.0.0.0", func(c *Config) { c.Provider.ListenAddress = "0.0.0.0:8086" }, []string{"provider.listenAddress"}, field.ErrorTypeForbidden},
		{"plaintext on a LAN address", func(c *Config) { c.Provider.ListenAddress = "10.1.2.3:8086" }, []string{"provider.listenAddress"}, field.ErrorTypeForbidden},
		{"a location that is not printable", group0(func(g *NodeGroup) { g.Locations = []string{"FIN-01", "\x9b"} }),
			[]string{"nodeGroups[0].locations[1]"}, field.ErrorTypeInvalid},
		{"an instance type with a space", group0(func(g *NodeGroup) { g.InstanceType = "1H100 .80S" }),
			[]string{"nodeGroups[0].instanceType"}, field.ErrorTypeInvalid},
		{"a cloud option with a control character", group0(func(g *NodeGroup) { g.CloudOptions = map[string]string{"networks": "n\x7fme=wan,ip=auto"} }),
			[]string{"nodeGroups[0].cloudOptions[networks]"}, field.ErrorTypeInvalid},
		{"an image on two lines", group0(func(g *NodeGroup) { g.Image = "ubuntu\nrm" }),
			[]string{"nodeGroups[0].image"}, field.ErrorTypeInvalid},
		{"a group past maxGroupSize", group0(func(g *NodeGroup) { g.MinSize, g.MaxSize = 2000000000, 2000000000 }),
			[]string{"nodeGroups[0].maxSize"}, field.ErrorTypeInvalid},
		{"maxGroupSize past its ceiling", func(c *Config) { c.Sync.MaxGroupSize = MaxGroupSizeCeiling + 1 }, []string{"sync.maxGroupSize"}, field.ErrorTypeInvalid},
		{"maxIncrease negative", func(c *Config) { c.Sync.MaxIncrease = -1 }, []string{"sync.maxIncrease"}, field.ErrorTypeInvalid},
		{"metrics address", func(c *Config) { c.Metrics.Address = "9090" }, []string{"metrics.address"}, field.ErrorTypeInvalid},
		{"sync period zero", func(c *Config) { c.Sync.Period = dur(0) }, []string{"sync.period"}, field.ErrorTypeInvalid},
		{"sync period negative", func(c *Config) { c.Sync.Period = dur(-time.Second) }, []string{"sync.period"}, field.ErrorTypeInvalid},
		{"max concurrent creates", func(c *Config) { c.Sync.MaxConcurrentCreates = -1 }, []string{"sync.maxConcurrentCreates"}, field.ErrorTypeInvalid},
		{"requests per second", func(c *Config) { c.Sync.RequestsPerSecond = -1 }, []string{"sync.requestsPerSecond"}, field.ErrorTypeInvalid},
		{"requests per second NaN", func(c *Config) { c.Sync.RequestsPerSecond = math.NaN() }, []string{"sync.requestsPerSecond"}, field.ErrorTypeInvalid},
		{"offering backoff", func(c *Config) { c.Sync.OfferingBackoff = dur(0) }, []string{"sync.offeringBackoff"}, field.ErrorTypeInvalid},
		{"list lag", func(c *Config) { c.Sync.ListLag = dur(2 * time.Hour) }, []string{"sync.listLag"}, field.ErrorTypeInvalid},
		{"create retries", func(c *Config) { c.Sync.CreateRetries = ptr.To(-1) }, []string{"sync.createRetries"}, field.ErrorTypeInvalid},
		{"cost cap negative", func(c *Config) { c.MaxHourlyCost = -3 }, []string{"maxHourlyCost"}, field.ErrorTypeInvalid},
		{"cost cap infinite", func(c *Config) { c.MaxHourlyCost = math.Inf(1) }, []string{"maxHourlyCost"}, field.ErrorTypeInvalid},
		{"leak grace period", func(c *Config) { c.LeakedInstances.GracePeriod = dur(0) }, []string{"leakedInstances.gracePeriod"}, field.ErrorTypeInvalid},
		{"leak action", func(c *Config) { c.LeakedInstances.Action = "ignore" }, []string{"leakedInstances.action"}, field.ErrorTypeNotSupported},
		{"script server address", func(c *Config) { c.ScriptServer = ScriptServerConfig{ListenAddress: "x", URL: "https://s:8443"} },
			[]string{"scriptServer.listenAddress"}, field.ErrorTypeInvalid},
		{"script server url", func(c *Config) { c.ScriptServer = ScriptServerConfig{ListenAddress: ":8443", URL: "s:8443"} },
			[]string{"scriptServer.url"}, field.ErrorTypeInvalid},
		{"script server tls", func(c *Config) {
			c.ScriptServer = ScriptServerConfig{ListenAddress: ":8443", URL: "https://s:8443", TLS: TLSConfig{CertFile: "c"}}
		}, []string{"scriptServer.tls"}, field.ErrorTypeRequired},
		{"no cloud", func(c *Config) { c.Clouds, c.NodeGroups = Clouds{}, nil }, []string{"clouds", "nodeGroups"}, field.ErrorTypeRequired},
		{"verda endpoint", func(c *Config) { c.Clouds.Verda.Endpoint = "ftp://api" }, []string{"clouds.verda.endpoint"}, field.ErrorTypeInvalid},
		{"verda script url", func(c *Config) { c.Clouds.Verda.StartupScriptFetchURL = "nowhere" },
			[]string{"clouds.verda.startupScriptFetchURL"}, field.ErrorTypeInvalid},
		{"verda script url in clear", func(c *Config) { c.Clouds.Verda.StartupScriptFetchURL = "http://scripts.example.com/script" },
			[]string{"clouds.verda.startupScriptFetchURL"}, field.ErrorTypeInvalid},
		{"verda script url in clear, upper case", func(c *Config) { c.Clouds.Verda.StartupScriptFetchURL = "HTTP://scripts.example.com/script" },
			[]string{"clouds.verda.startupScriptFetchURL"}, field.ErrorTypeInvalid},
		{"sim location repeated", sim(func(s *SimConfig) { s.Locations = append(s.Locations, "FIN-01") }),
			[]string{"clouds.sim.locations[4]"}, field.ErrorTypeDuplicate},
		{"sim location empty", sim(func(s *SimConfig) { s.Locations = append(s.Locations, "") }),
			[]string{"clouds.sim.locations[4]"}, field.ErrorTypeRequired},
		{"sim default capacity", sim(func(s *SimConfig) { s.DefaultCapacity = ptr.To(-1) }),
			[]string{"clouds.sim.defaultCapacity"}, field.ErrorTypeInvalid},
		{"sim capacity count", sim(func(s *SimConfig) { s.Capacity = []SimCapacity{{Count: -1}} }),
			[]string{"clouds.sim.capacity[0].count"}, field.ErrorTypeInvalid},
		{"sim capacity type", sim(func(s *SimConfig) { s.Capacity = []SimCapacity{{CapacityType: "reserved"}} }),
			[]string{"clouds.sim.capacity[0].capacityType"}, field.ErrorTypeNotSupported},
		{"sim capacity location", sim(func(s *SimConfig) { s.Capacity = []SimCapacity{{Location: "MARS-01"}} }),
			[]string{"clouds.sim.capacity[0].location"}, field.ErrorTypeNotSupported},
		{"sim boot delay", sim(func(s *SimConfig) { s.BootDelay = dur(-time.Second) }), []string{"clouds.sim.bootDelay"}, field.ErrorTypeInvalid},
		{"sim delete delay", sim(func(s *SimConfig) { s.DeleteDelay = dur(-time.Second) }), []string{"clouds.sim.deleteDelay"}, field.ErrorTypeInvalid},
		{"sim api latency", sim(func(s *SimConfig) { s.APILatency = dur(-time.Second) }), []string{"clouds.sim.apiLatency"}, field.ErrorTypeInvalid},
		{"sim fault rate of one", sim(func(s *SimConfig) { s.FaultRate = 1 }), []string{"clouds.sim.faultRate"}, field.ErrorTypeInvalid},
		{"sim fault rate negative", sim(func(s *SimConfig) { s.FaultRate = -0.1 }), []string{"clouds.sim.faultRate"}, field.ErrorTypeInvalid},
		{"sim reclaim rate", sim(func(s *SimConfig) { s.SpotReclaimRate = 1 }), []string{"clouds.sim.spotReclaimRate"}, field.ErrorTypeInvalid},
		{"no node groups", func(c *Config) { c.NodeGroups = nil }, []string{"nodeGroups"}, field.ErrorTypeRequired},
		{"group name repeated", func(c *Config) { c.NodeGroups[1].Name = "a" }, []string{"nodeGroups[1].name"}, field.ErrorTypeDuplicate},
		{"group name missing", group0(func(g *NodeGroup) { g.Name = "" }), []string{"nodeGroups[0].name"}, field.ErrorTypeRequired},
		{"group name not a DNS label", group0(func(g *NodeGroup) { g.Name = "B!" }), []string{"nodeGroups[0].name"}, field.ErrorTypeInvalid},
		{"group name too long", group0(func(g *NodeGroup) { g.Name = strings.Repeat("g", 41) }), []string{"nodeGroups[0].name"}, field.ErrorTypeTooLong},
		{"cloud missing", group0(func(g *NodeGroup) { g.Cloud = "" }), []string{"nodeGroups[0].cloud"}, field.ErrorTypeRequired},
		{"cloud unknown", group0(func(g *NodeGroup) { g.Cloud = "aws" }), []string{"nodeGroups[0].cloud"}, field.ErrorTypeNotSupported},
		{"cloud not configured", func(c *Config) { c.Clouds.Verda = nil; c.NodeGroups[0].Cloud = CloudVerda },
			[]string{"nodeGroups[0].cloud"}, field.ErrorTypeInvalid},
		{"instance type", group0(func(g *NodeGroup) { g.InstanceType = "" }), []string{"nodeGroups[0].instanceType"}, field.ErrorTypeRequired},
		{"no locations", group0(func(g *NodeGroup) { g.Locations = nil }), []string{"nodeGroups[0].locations"}, field.ErrorTypeRequired},
		{"location repeated", group0(func(g *NodeGroup) { g.Locations = []string{"FIN-01", "FIN-01"} }),
			[]string{"nodeGroups[0].locations[1]"}, field.ErrorTypeDuplicate},
		{"location empty", group0(func(g *NodeGroup) { g.Locations = []string{"FIN-01", ""} }),
			[]string{"nodeGroups[0].locations[1]"}, field.ErrorTypeRequired},
		{"location not simulated", group0(func(g *NodeGroup) { g.Locations = []string{"FIN-01", "MARS-01"} }),
			[]string{"nodeGroups[0].locations[1]"}, field.ErrorTypeNotSupported},
		{"capacity policy", group0(func(g *NodeGroup) { g.CapacityPolicy = "cheapest" }), []string{"nodeGroups[0].capacityPolicy"}, field.ErrorTypeNotSupported},
		{"managed by", group0(func(g *NodeGroup) { g.ManagedBy = "kube-scheduler" }), []string{"nodeGroups[0].managedBy"}, field.ErrorTypeNotSupported},
		{"karpenter template with a min size", func(c *Config) { c.NodeGroups[1].ManagedBy, c.NodeGroups[1].MinSize = ManagedByKarpenter, 1 },
			[]string{"nodeGroups[1].minSize"}, field.ErrorTypeInvalid},
		{"min size", group0(func(g *NodeGroup) { g.MinSize = -1 }), []string{"nodeGroups[0].minSize"}, field.ErrorTypeInvalid},
		{"max size zero", group0(func(g *NodeGroup) { g.MaxSize = 0 }), []string{"nodeGroups[0].maxSize"}, field.ErrorTypeInvalid},
		{"max below min", func(c *Config) { c.NodeGroups[1].MinSize = 3 }, []string{"nodeGroups[1].maxSize"}, field.ErrorTypeInvalid},
		{"disk size", group0(func(g *NodeGroup) { g.DiskSizeGiB = -5 }), []string{"nodeGroups[0].diskSizeGiB"}, field.ErrorTypeInvalid},
		{"label key", group0(func(g *NodeGroup) { g.Labels = map[string]string{"bad key": "x"} }),
			[]string{"nodeGroups[0].labels[bad key]"}, field.ErrorTypeInvalid},
		{"label value", group0(func(g *NodeGroup) { g.Labels = map[string]string{"team": "a b"} }),
			[]string{"nodeGroups[0].labels[team]"}, field.ErrorTypeInvalid},
		{"label node group", group0(func(g *NodeGroup) { g.Labels = map[string]string{"gpuscaler.dev/node-group": "x"} }),
			[]string{"nodeGroups[0].labels[gpuscaler.dev/node-group]"}, field.ErrorTypeForbidden},
		{"label instance type", group0(func(g *NodeGroup) { g.Labels = map[string]string{corev1.LabelInstanceTypeStable: "x"} }),
			[]string{"nodeGroups[0].labels[node.kubernetes.io/instance-type]"}, field.ErrorTypeForbidden},
		{"label zone", group0(func(g *NodeGroup) { g.Labels = map[string]string{corev1.LabelTopologyZone: "x"} }),
			[]string{"nodeGroups[0].labels[topology.kubernetes.io/zone]"}, field.ErrorTypeForbidden},
		{"label hostname", group0(func(g *NodeGroup) { g.Labels = map[string]string{corev1.LabelHostname: "x"} }),
			[]string{"nodeGroups[0].labels[kubernetes.io/hostname]"}, field.ErrorTypeForbidden},
		{"label mig config beside a mig section", func(c *Config) { c.NodeGroups[1].Labels = map[string]string{"nvidia.com/mig.config": "x"} },
			[]string{"nodeGroups[1].labels[nvidia.com/mig.config]"}, field.ErrorTypeForbidden},
		{"label is the gpu label", func(c *Config) {
			c.Provider.GPULabel = "example.com/gpu"
			c.NodeGroups[0].Labels = map[string]string{"example.com/gpu": "h100"}
		}, []string{"nodeGroups[0].labels[example.com/gpu]"}, field.ErrorTypeForbidden},
		{"label the kubelet refuses", func(c *Config) {
			bootstrapped(func(*Bootstrap) {})(c)
			c.NodeGroups[0].Labels = map[string]string{"node-role.kubernetes.io/gpu": ""}
		}, []string{"nodeGroups[0].labels[node-role.kubernetes.io/gpu]"}, field.ErrorTypeForbidden},
		{"taint key missing", group0(func(g *NodeGroup) { g.Taints = []corev1.Taint{{Effect: corev1.TaintEffectNoSchedule}} }),
			[]string{"nodeGroups[0].taints[0].key"}, field.ErrorTypeRequired},
		{"taint key invalid", group0(func(g *NodeGroup) { g.Taints = []corev1.Taint{{Key: "a b", Effect: corev1.TaintEffectNoSchedule}} }),
			[]string{"nodeGroups[0].taints[0].key"}, field.ErrorTypeInvalid},
		{"taint value", group0(func(g *NodeGroup) {
			g.Taints = []corev1.Taint{{Key: "k", Value: "a b", Effect: corev1.TaintEffectNoSchedule}}
		}), []string{"nodeGroups[0].taints[0].value"}, field.ErrorTypeInvalid},
		{"taint effect", group0(func(g *NodeGroup) { g.Taints = []corev1.Taint{{Key: "k", Effect: "Sometimes"}} }),
			[]string{"nodeGroups[0].taints[0].effect"}, field.ErrorTypeNotSupported},
		{"taint repeated", group0(func(g *NodeGroup) {
			g.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}, {Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}
		}), []string{"nodeGroups[0].taints[1]"}, field.ErrorTypeDuplicate},
		{"taint time added", group0(func(g *NodeGroup) {
			g.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{}}}
		}), []string{"nodeGroups[0].taints[0].timeAdded"}, field.ErrorTypeForbidden},
		{"mig profile", func(c *Config) { c.NodeGroups[1].MIG.Profile = "" }, []string{"nodeGroups[1].mig.profile"}, field.ErrorTypeRequired},
		{"mig strategy", func(c *Config) { c.NodeGroups[1].MIG.Strategy = "none" }, []string{"nodeGroups[1].mig.strategy"}, field.ErrorTypeNotSupported},
		{"override gpus", group0(func(g *NodeGroup) { g.OverrideNumGPUs = ptr.To(0) }), []string{"nodeGroups[0].overrideNumGPUs"}, field.ErrorTypeInvalid},
		{"override gpus with mig", func(c *Config) { c.NodeGroups[1].OverrideNumGPUs = ptr.To(7) },
			[]string{"nodeGroups[1].overrideNumGPUs"}, field.ErrorTypeForbidden},
		{"group cost cap", group0(func(g *NodeGroup) { g.MaxHourlyCost = -1 }), []string{"nodeGroups[0].maxHourlyCost"}, field.ErrorTypeInvalid},
		{"standby above maxSize", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 4} }), []string{"nodeGroups[0].standby.size"}, field.ErrorTypeInvalid},
		{"standby negative", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: -1} }), []string{"nodeGroups[0].standby.size"}, field.ErrorTypeInvalid},
		{"standby max age", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 1, MaxAge: dur(time.Minute)} }),
			[]string{"nodeGroups[0].standby.maxAge"}, field.ErrorTypeInvalid},
		{"standby warm for", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 1, WarmFor: dur(-time.Minute)} }),
			[]string{"nodeGroups[0].standby.warmFor"}, field.ErrorTypeInvalid},
		{"standby refill after", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 1, RefillAfter: dur(48 * time.Hour)} }),
			[]string{"nodeGroups[0].standby.refillAfter"}, field.ErrorTypeInvalid},
		{"standby scale down after", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 1, ScaleDownAfter: dur(-time.Minute)} }),
			[]string{"nodeGroups[0].standby.scaleDownAfter"}, field.ErrorTypeInvalid},
		{"standby on verda", group0(func(g *NodeGroup) {
			g.Cloud, g.Locations, g.Standby = CloudVerda, []string{"FIN-01"}, &Standby{Size: 1}
		}),
			[]string{"nodeGroups[0].standby"}, field.ErrorTypeForbidden},
		{"standby on a sim cloud playing verda's catalog", func(c *Config) {
			c.Clouds.Sim.Catalog = SimCatalogVerda
			c.NodeGroups[0].Standby = &Standby{Size: 1}
		}, []string{"nodeGroups[0].standby"}, field.ErrorTypeForbidden},
		{"sim catalog", sim(func(s *SimConfig) { s.Catalog = "aws" }), []string{"clouds.sim.catalog"}, field.ErrorTypeNotSupported},
		{"group image twice", group0(func(g *NodeGroup) { g.PrePullImages = []string{"triton", "triton"} }),
			[]string{"nodeGroups[0].prePullImages[1]"}, field.ErrorTypeDuplicate},
		{"group images on a karpenter template", group0(func(g *NodeGroup) {
			g.ManagedBy, g.PrePullImages = ManagedByKarpenter, []string{"triton"}
		}), []string{"nodeGroups[0].prePullImages"}, field.ErrorTypeForbidden},
		{"standby image missing", group0(func(g *NodeGroup) {
			g.Standby = &Standby{Size: 1, PrePullImages: []string{"nvcr.io/nvidia/pytorch:24.05-py3", " "}}
		}),
			[]string{"nodeGroups[0].standby.prePullImages[1]"}, field.ErrorTypeRequired},
		{"standby image twice", group0(func(g *NodeGroup) {
			g.Standby = &Standby{Size: 1, PrePullImages: []string{"vllm/vllm-openai:v0.6", "vllm/vllm-openai:v0.6"}}
		}),
			[]string{"nodeGroups[0].standby.prePullImages[1]"}, field.ErrorTypeDuplicate},
		{"standby image spaces", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 1, PrePullImages: []string{"vllm openai"}} }),
			[]string{"nodeGroups[0].standby.prePullImages[0]"}, field.ErrorTypeInvalid},
		{"standby forecast below size", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 2, Forecast: &StandbyForecast{MaxSize: 2}} }),
			[]string{"nodeGroups[0].standby.forecast.maxSize"}, field.ErrorTypeInvalid},
		{"standby forecast past maxSize", group0(func(g *NodeGroup) { g.Standby = &Standby{Size: 1, Forecast: &StandbyForecast{MaxSize: g.MaxSize + 1}} }),
			[]string{"nodeGroups[0].standby.forecast.maxSize"}, field.ErrorTypeInvalid},
		{"standby forecast lead", group0(func(g *NodeGroup) {
			g.Standby = &Standby{Size: 1, Forecast: &StandbyForecast{MaxSize: 2, LeadTime: dur(time.Second)}}
		}), []string{"nodeGroups[0].standby.forecast.leadTime"}, field.ErrorTypeInvalid},
		{"utilization threshold", group0(func(g *NodeGroup) {
			g.AutoscalingOptions = &AutoscalingOptions{ScaleDownUtilizationThreshold: ptr.To(-0.1)}
		}), []string{"nodeGroups[0].autoscalingOptions.scaleDownUtilizationThreshold"}, field.ErrorTypeInvalid},
		{"gpu utilization threshold", group0(func(g *NodeGroup) {
			g.AutoscalingOptions = &AutoscalingOptions{ScaleDownGPUUtilizationThreshold: ptr.To(1.5)}
		}), []string{"nodeGroups[0].autoscalingOptions.scaleDownGpuUtilizationThreshold"}, field.ErrorTypeInvalid},
		{"unneeded time", group0(func(g *NodeGroup) {
			g.AutoscalingOptions = &AutoscalingOptions{ScaleDownUnneededTime: dur(-time.Minute)}
		}),
			[]string{"nodeGroups[0].autoscalingOptions.scaleDownUnneededTime"}, field.ErrorTypeInvalid},
		{"unready time", group0(func(g *NodeGroup) {
			g.AutoscalingOptions = &AutoscalingOptions{ScaleDownUnreadyTime: dur(-time.Minute)}
		}),
			[]string{"nodeGroups[0].autoscalingOptions.scaleDownUnreadyTime"}, field.ErrorTypeInvalid},
		{"provision time", group0(func(g *NodeGroup) { g.AutoscalingOptions = &AutoscalingOptions{MaxNodeProvisionTime: dur(0)} }),
			[]string{"nodeGroups[0].autoscalingOptions.maxNodeProvisionTime"}, field.ErrorTypeInvalid},
		{"cloud option name", group0(func(g *NodeGroup) { g.CloudOptions = map[string]string{"": "x"} }),
			[]string{"nodeGroups[0].cloudOptions[]"}, field.ErrorTypeRequired},
		{"bootstrap method", bootstrapped(func(b *Bootstrap) { b.Method = "ansible" }),
			[]string{"nodeGroups[0].bootstrap.method"}, field.ErrorTypeNotSupported},
		{"bootstrap server", bootstrapped(func(b *Bootstrap) { b.Server = "" }), []string{"nodeGroups[0].bootstrap.server"}, field.ErrorTypeRequired},
		{"k3s version not a release", bootstrapped(func(b *Bootstrap) { b.Version = "latest" }), []string{"nodeGroups[0].bootstrap.version"}, field.ErrorTypeInvalid},
		{"k3s version for kubeadm", bootstrapped(func(b *Bootstrap) {
			b.Method, b.Server, b.CACertHash, b.Version = BootstrapKubeadm, "10.0.0.1:6443", "sha256:"+strings.Repeat("a", 64), "v1.33.4+k3s1"
		}), []string{"nodeGroups[0].bootstrap.version"}, field.ErrorTypeForbidden},
		{"a newline in the server breaks out of the script", bootstrapped(func(b *Bootstrap) { b.Server = "https://10.0.0.1:6443\nUNIT\ntouch /pwned" }),
			[]string{"nodeGroups[0].bootstrap.server"}, field.ErrorTypeInvalid},
		{"k3s server not https", bootstrapped(func(b *Bootstrap) { b.Server = "http://10.0.0.1:6443" }), []string{"nodeGroups[0].bootstrap.server"}, field.ErrorTypeInvalid},
		{"k3s server with a password", bootstrapped(func(b *Bootstrap) { b.Server = "https://u:p@10.0.0.1:6443" }), []string{"nodeGroups[0].bootstrap.server"}, field.ErrorTypeInvalid},
		{"a shell command in kubelet args", bootstrapped(func(b *Bootstrap) { b.KubeletExtraArgs = []string{"max-pods=64", "x; touch /pwned"} }),
			[]string{"nodeGroups[0].bootstrap.kubeletExtraArgs[1]"}, field.ErrorTypeInvalid},
		{"k3s server not https", bootstrapped(func(b *Bootstrap) { b.Server = "10.0.0.1:6443" }),
			[]string{"nodeGroups[0].bootstrap.server"}, field.ErrorTypeInvalid},
		{"no join token", bootstrapped(func(b *Bootstrap) { b.TokenSecretRef = nil }),
			[]string{"nodeGroups[0].bootstrap.tokenSecretRef"}, field.ErrorTypeRequired},
		{"token secret key", bootstrapped(func(b *Bootstrap) { b.TokenSecretRef.Key = "" }),
			[]string{"nodeGroups[0].bootstrap.tokenSecretRef.key"}, field.ErrorTypeRequired},
		{"k3s cannot mint", bootstrapped(func(b *Bootstrap) { b.TokenSecretRef, b.MintToken = nil, true }),
			[]string{"nodeGroups[0].bootstrap.mintToken"}, field.ErrorTypeForbidden},
		{"kubeadm ca pin", bootstrapped(func(b *Bootstrap) {
			b.Method, b.Server, b.TokenSecretRef, b.MintToken, b.CACertHash = BootstrapKubeadm, "10.0.0.1:6443", nil, true, "md5:1"
		}), []string{"nodeGroups[0].bootstrap.caCertHash"}, field.ErrorTypeInvalid},
		{"custom needs a template", bootstrapped(func(b *Bootstrap) { b.Method = BootstrapCustom }),
			[]string{"nodeGroups[0].bootstrap.templateFile"}, field.ErrorTypeRequired},
		{"template only for custom", bootstrapped(func(b *Bootstrap) { b.TemplateFile = "join.tmpl" }),
			[]string{"nodeGroups[0].bootstrap.templateFile"}, field.ErrorTypeForbidden},
		{"delivery", bootstrapped(func(b *Bootstrap) { b.Delivery = "email" }),
			[]string{"nodeGroups[0].bootstrap.delivery"}, field.ErrorTypeNotSupported},
		{"server delivery without a server", bootstrapped(func(b *Bootstrap) { b.Delivery = DeliveryServer }),
			[]string{"scriptServer.url"}, field.ErrorTypeRequired},
		{"token ttl", bootstrapped(func(b *Bootstrap) { b.TokenTTL = dur(0) }), []string{"nodeGroups[0].bootstrap.tokenTTL"}, field.ErrorTypeInvalid},
		{"bootstrap without cluster access", func(c *Config) {
			bootstrapped(func(*Bootstrap) {})(c)
			c.Kubeconfig = ""
		}, []string{"kubeconfig"}, field.ErrorTypeRequired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig(t)
			tt.change(cfg)
			errs := Validate(cfg)
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
				if e.Type != tt.typ {
					t.Errorf("%s: type %q, want %q (%v)", e.Field, e.Type, tt.typ, e)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("paths = %q, want %q\n%v", got, tt.want, errs.ToAggregate())
			}
		})
	}
}

// TestValidateAccepts lists edge cases that are valid and must stay so.
func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{"metrics off", func(c *Config) { c.Metrics.Address = "0" }},
		{"free port", func(c *Config) { c.Provider.ListenAddress = "127.0.0.1:0" }},
		{"ipv6 listen address", func(c *Config) { c.Provider.ListenAddress = "[::1]:8086" }},
		{"localhost", func(c *Config) { c.Provider.ListenAddress = "localhost:8086" }},
		{"off loopback with mTLS", func(c *Config) {
			c.Provider.ListenAddress, c.Provider.TLS = ":8086", TLSConfig{CertFile: "c", KeyFile: "k", CACertFile: "ca"}
		}},
		{"off loopback, insecure on purpose", func(c *Config) { c.Provider.ListenAddress, c.Provider.Insecure = ":8086", true }},
		{"groups of 100,000", func(c *Config) { c.Sync.MaxGroupSize, c.NodeGroups[0].MaxSize = 100000, 100000 }},
		{"full mTLS", func(c *Config) { c.Provider.TLS = TLSConfig{CertFile: "c", KeyFile: "k", CACertFile: "ca"} }},
		{"name of 40 characters", func(c *Config) { c.ClusterName = strings.Repeat("c", 40) }},
		{"min equals max", group0(func(g *NodeGroup) { g.MinSize, g.MaxSize = 3, 3 })},
		{"fault rate just below one", sim(func(s *SimConfig) { s.FaultRate, s.SpotReclaimRate = 0.99, 0.99 })},
		{"thresholds at the bounds", group0(func(g *NodeGroup) {
			g.AutoscalingOptions = &AutoscalingOptions{ScaleDownUtilizationThreshold: ptr.To(0.0), ScaleDownGPUUtilizationThreshold: ptr.To(1.0),
				ScaleDownUnneededTime: dur(0)}
		})},
		{"kubernetes.io label without bootstrap", group0(func(g *NodeGroup) { g.Labels = map[string]string{"node-role.kubernetes.io/gpu": ""} })},
		{"node.kubernetes.io label with bootstrap", func(c *Config) {
			bootstrapped(func(*Bootstrap) {})(c)
			c.NodeGroups[0].Labels = map[string]string{"node.kubernetes.io/pool": "gpu", "example.com/team": "ml", "plain": "x"}
		}},
		{"mig label without a mig section", group0(func(g *NodeGroup) {
			g.OverrideNumGPUs = ptr.To(7)
			g.Labels = map[string]string{"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
		})},
		{"taint without value", group0(func(g *NodeGroup) {
			g.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
		})},
		{"same taint key, two effects", group0(func(g *NodeGroup) {
			g.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}, {Key: "k", Effect: corev1.TaintEffectNoExecute}}
		})},
		{"verda group", group0(func(g *NodeGroup) { g.Cloud, g.Locations = CloudVerda, []string{"FIN-01", "ICE-01"} })},
		{"sim capacity for every location", sim(func(s *SimConfig) { s.Capacity = []SimCapacity{{CapacityType: "spot", Count: 0}} })},
		{"custom bootstrap needs no server", bootstrapped(func(b *Bootstrap) { b.Method, b.Server, b.TemplateFile = BootstrapCustom, "", "join.tmpl" })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validConfig(t)
			tt.change(cfg)
			if errs := Validate(cfg); len(errs) > 0 {
				t.Fatalf("rejected: %v", errs.ToAggregate())
			}
		})
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	cfg := validConfig(t)
	cfg.ClusterName = ""
	cfg.NodeGroups[0].MaxSize = 0
	cfg.NodeGroups[0].CapacityPolicy = "x"
	cfg.NodeGroups[1].MinSize = 5
	cfg.Clouds.Sim.FaultRate = 2
	want := []string{"clusterName", "clouds.sim.faultRate", "nodeGroups[0].capacityPolicy", "nodeGroups[0].maxSize", "nodeGroups[1].maxSize"}
	var got []string
	for _, e := range Validate(cfg) {
		got = append(got, e.Field)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paths = %q, want %q", got, want)
	}
}

// A Karpenter template group keeps a standby pool where the cloud can
// hand a stopped instance over under a NodeClaim's name, and is refused
// one on GCP, whose MIG members keep their names.
func TestStandbyUnderKarpenter(t *testing.T) {
	const doc = `
clusterName: test
clouds:
  sim: {}
  gcp: {project: p}
nodeGroups:
  - {name: tpl, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-01], maxSize: 2, managedBy: karpenter, standby: {size: 1}}
  - {name: mig, cloud: gcp, instanceType: g2-standard-8, locations: [us-central1-a], maxSize: 2, managedBy: karpenter, standby: {size: 1}}
`
	_, err := Parse([]byte(doc))
	if err == nil {
		t.Fatal("a standby pool on a GCP Karpenter template is accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, "nodeGroups[1].standby") || !strings.Contains(msg, "MIG member's name is fixed") {
		t.Fatalf("error %q, want nodeGroups[1].standby refused for the MIG's fixed names", msg)
	}
	if strings.Contains(msg, "nodeGroups[0]") {
		t.Fatalf("the simulated cloud's Karpenter template is refused its pool: %q", msg)
	}
}

// A group's standby.scaleDownAfter is cluster-autoscaler's
// scaleDownUnneededTime for the group, unless autoscalingOptions sets one;
// the group's other overrides stay, and the config is not changed.
func TestScaleDownAfterIsCAsUnneededTime(t *testing.T) {
	cfg, err := Parse([]byte(`clusterName: c
clouds: {sim: {}}
nodeGroups:
  - {name: pooled, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 4, standby: {size: 1, scaleDownAfter: 2m},
     autoscalingOptions: {scaleDownUtilizationThreshold: 0.3}}
  - {name: set, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 4, standby: {size: 1, scaleDownAfter: 2m},
     autoscalingOptions: {scaleDownUnneededTime: 20m}}
  - {name: plain, cloud: sim, instanceType: 1V100.6V, locations: [FIN-01], maxSize: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	opts := OptionsOf(cfg)
	if o, ok := opts("pooled"); !ok || o.ScaleDownUnneededTime == nil || o.ScaleDownUnneededTime.Duration != 2*time.Minute ||
		o.ScaleDownUtilizationThreshold == nil || *o.ScaleDownUtilizationThreshold != 0.3 {
		t.Errorf("pooled: %+v, want scaleDownUnneededTime 2m and its threshold", o)
	}
	if cfg.NodeGroups[0].AutoscalingOptions.ScaleDownUnneededTime != nil {
		t.Error("OptionsOf changed the config's own autoscalingOptions")
	}
	if o, _ := opts("set"); o.ScaleDownUnneededTime.Duration != 20*time.Minute {
		t.Errorf("set: scaleDownUnneededTime %s, want the explicit 20m", o.ScaleDownUnneededTime.Duration)
	}
	if _, ok := opts("plain"); ok {
		t.Error("plain: overrides for a group without any")
	}
}
