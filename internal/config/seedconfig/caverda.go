package seedconfig

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// CAVerda is the Verda gRPC provider's config.yaml.
type CAVerda struct {
	NodeGroups map[string]CAVerdaGroup `json:"node_groups"`
}

// CAVerdaGroup is one node group in ca-verda's format.
type CAVerdaGroup struct {
	InstanceType    string            `json:"instance_type"`
	Image           string            `json:"image"`
	MinSize         int               `json:"min_size"`
	MaxSize         int               `json:"max_size"`
	Location        string            `json:"location"`
	SSHKeyIDs       []string          `json:"ssh_key_ids"`
	StartupScriptID string            `json:"startup_script_id"`
	HourlyPrice     float64           `json:"hourly_price"`
	Contract        string            `json:"contract"`
	Pricing         string            `json:"pricing"`
	Labels          map[string]string `json:"labels"`
	Taints          []corev1.Taint    `json:"taints"`
}

// IsCAVerda reports whether a YAML document is in ca-verda's format (it has
// a top-level node_groups key).
func IsCAVerda(data []byte) bool {
	var probe map[string]any
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return false
	}
	_, ok := probe["node_groups"]
	return ok
}

// FromCAVerda converts a ca-verda config.yaml into a native config.
func FromCAVerda(clusterName string, data []byte) (*config.Config, error) {
	var cv CAVerda
	if err := config.DecodeStrict(data, &cv); err != nil {
		return nil, fmt.Errorf("ca-verda config: %w", err)
	}
	cfg := &config.Config{ClusterName: clusterName, Clouds: config.Clouds{Verda: &config.VerdaConfig{AdoptLegacyInstances: true}}}
	names := make([]string, 0, len(cv.NodeGroups))
	for n := range cv.NodeGroups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		src := cv.NodeGroups[name]
		g := config.NodeGroup{
			Name: name, Cloud: verdaCloud, InstanceType: src.InstanceType, Image: src.Image,
			MinSize: src.MinSize, MaxSize: src.MaxSize, Labels: src.Labels, Taints: src.Taints,
			CapacityPolicy: config.PolicyOnDemandOnly,
		}
		if src.Location != "" {
			g.Locations = []string{src.Location}
		}
		opts := map[string]string{}
		if len(src.SSHKeyIDs) > 0 {
			opts[verdaOptionSSHKeyIDs] = strings.Join(src.SSHKeyIDs, ",")
		}
		if src.StartupScriptID != "" {
			opts[verdaOptionStartupScriptID] = src.StartupScriptID
		}
		switch src.Contract {
		case "SPOT":
			g.CapacityPolicy = config.PolicySpotOnly
		case "":
		default:
			opts[verdaOptionContract] = src.Contract
		}
		if src.Pricing != "" {
			opts[verdaOptionPricing] = src.Pricing
		}
		if len(opts) > 0 {
			g.CloudOptions = opts
		}
		cfg.NodeGroups = append(cfg.NodeGroups, g)
	}
	return cfg, nil
}

// dotEnvLine is one variable of a .env file.
var dotEnvLine = regexp.MustCompile(`^(export\s+)?[A-Za-z_][A-Za-z0-9_]*=`)

// IsDotEnv reports whether a file is a .env file: KEY=VALUE lines (with
// optional export), comments and blank lines, at least one variable.
func IsDotEnv(data []byte) bool {
	vars := 0
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case dotEnvLine.MatchString(line):
			vars++
		default:
			return false
		}
	}
	return vars > 0
}

// DotEnv reads KEY=VALUE lines (with optional quotes and export) from a
// .env file, as ca-verda loaded VERDA_CLIENT_ID and VERDA_CLIENT_SECRET.
// A missing file yields an empty map.
func DotEnv(path string) (map[string]string, error) {
	data, err := config.ReadFile(path)
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want KEY=VALUE", path, n)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
			v = v[1 : len(v)-1]
		}
		out[strings.TrimSpace(k)] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
