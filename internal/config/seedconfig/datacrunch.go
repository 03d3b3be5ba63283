// Package seedconfig imports the configuration of the autoscalers gpuscaler
// replaces, so their users switch without rewriting it:
//
//   - the DataCrunch cluster-autoscaler provider: --nodes=min:max:type:region:name
//     flags plus DATACRUNCH_CLUSTER_CONFIG_JSON, DATACRUNCH_CLUSTER_CONFIG
//     (base64) or DATACRUNCH_CLUSTER_CONFIG_FILE with its node_configs;
//   - the Verda external gRPC provider (ca-verda): its config.yaml with
//     node_groups.
//
// Each importer returns a native config.Config, validated like any other.
package seedconfig

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// DataCrunch is the DataCrunch provider's cluster config JSON.
type DataCrunch struct {
	NodeConfigs map[string]DataCrunchNodeConfig `json:"node_configs"`
}

// DataCrunchNodeConfig is one pool's settings in DataCrunch's format.
type DataCrunchNodeConfig struct {
	ImageType           string            `json:"image_type"`
	SSHKeyIDs           []string          `json:"ssh_key_ids"`
	InstanceOption      string            `json:"instance_option"`
	PricingOption       string            `json:"pricing_option"`
	DiskSizeGB          int               `json:"disk_size_gb"`
	OverrideNumGPUs     int               `json:"override_num_gpus"`
	StartupScriptBase64 string            `json:"startup_script_base64"`
	Taints              []corev1.Taint    `json:"taints"`
	Labels              map[string]string `json:"labels"`
}

// IsDataCrunch reports whether a file is the DataCrunch provider's
// cluster config: a JSON object with a top-level node_configs key. It is
// read as YAML, so a file JSON refuses (a trailing comma) is recognised
// too, and FromDataCrunch then names the line.
func IsDataCrunch(data []byte) bool {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return false
	}
	var probe map[string]any
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return false
	}
	_, ok := probe["node_configs"]
	return ok
}

// DataCrunchEnv reads the cluster config from the environment, as the
// DataCrunch provider did: DATACRUNCH_CLUSTER_CONFIG_JSON, else
// DATACRUNCH_CLUSTER_CONFIG (base64), else DATACRUNCH_CLUSTER_CONFIG_FILE.
// ok is false when none is set.
func DataCrunchEnv(getenv func(string) string) (data []byte, source string, ok bool, err error) {
	if v := getenv("DATACRUNCH_CLUSTER_CONFIG_JSON"); v != "" {
		return []byte(v), "DATACRUNCH_CLUSTER_CONFIG_JSON", true, nil
	}
	if v := getenv("DATACRUNCH_CLUSTER_CONFIG"); v != "" {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return nil, "DATACRUNCH_CLUSTER_CONFIG", true, fmt.Errorf("DATACRUNCH_CLUSTER_CONFIG: not base64: %w", err)
		}
		return b, "DATACRUNCH_CLUSTER_CONFIG", true, nil
	}
	if v := getenv("DATACRUNCH_CLUSTER_CONFIG_FILE"); v != "" {
		b, err := config.ReadFile(v)
		if err != nil {
			return nil, "DATACRUNCH_CLUSTER_CONFIG_FILE", true, fmt.Errorf("DATACRUNCH_CLUSTER_CONFIG_FILE: %w", err)
		}
		return b, "DATACRUNCH_CLUSTER_CONFIG_FILE", true, nil
	}
	return nil, "", false, nil
}

// FromDataCrunch converts --nodes specs and a cluster config JSON (may be
// empty) into a native config. Errors name the flag or JSON path.
func FromDataCrunch(clusterName string, nodes []string, clusterJSON []byte) (*config.Config, error) {
	var dc DataCrunch
	if len(strings.TrimSpace(string(clusterJSON))) > 0 {
		if err := checkJSON(clusterJSON); err != nil {
			return nil, fmt.Errorf("DataCrunch cluster config: %w", err)
		}
		if err := config.DecodeStrict(clusterJSON, &dc); err != nil {
			return nil, fmt.Errorf("DataCrunch cluster config: %w", err)
		}
	}
	if len(nodes) == 0 {
		return nil, errors.New("--nodes: at least one min:max:instance-type:region:name is needed")
	}
	cfg := &config.Config{ClusterName: clusterName, Clouds: config.Clouds{Verda: &config.VerdaConfig{AdoptLegacyInstances: true}}}
	var errs []error
	seen := map[string]bool{}
	for i, spec := range nodes {
		parts := strings.Split(spec, ":")
		if len(parts) != 5 {
			errs = append(errs, fmt.Errorf("--nodes[%d] %q: want min:max:instance-type:region:name", i, spec))
			continue
		}
		minSize, err1 := strconv.Atoi(parts[0])
		maxSize, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			errs = append(errs, fmt.Errorf("--nodes[%d] %q: min and max must be integers", i, spec))
			continue
		}
		name := parts[4]
		seen[name] = true
		g := config.NodeGroup{
			Name: name, Cloud: verdaCloud, InstanceType: parts[2], Locations: []string{parts[3]},
			MinSize: minSize, MaxSize: maxSize,
		}
		if nc, ok := dc.NodeConfigs[name]; ok {
			if err := applyDataCrunch(&g, nc); err != nil {
				errs = append(errs, fmt.Errorf("node_configs[%s].%w", name, err))
			}
		}
		cfg.NodeGroups = append(cfg.NodeGroups, g)
	}
	var orphans []string
	for name := range dc.NodeConfigs {
		if !seen[name] {
			orphans = append(orphans, name)
		}
	}
	sort.Strings(orphans)
	for _, name := range orphans {
		errs = append(errs, fmt.Errorf("node_configs[%s]: no --nodes flag names this pool", name))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

func applyDataCrunch(g *config.NodeGroup, nc DataCrunchNodeConfig) error {
	if nc.DiskSizeGB < 0 {
		return fmt.Errorf("disk_size_gb: %d is negative", nc.DiskSizeGB)
	}
	if nc.OverrideNumGPUs < 0 {
		return fmt.Errorf("override_num_gpus: %d is negative", nc.OverrideNumGPUs)
	}
	g.Image = nc.ImageType
	g.DiskSizeGiB = nc.DiskSizeGB
	g.Labels = nc.Labels
	g.Taints = nc.Taints
	opts := map[string]string{}
	if len(nc.SSHKeyIDs) > 0 {
		opts[verdaOptionSSHKeyIDs] = strings.Join(nc.SSHKeyIDs, ",")
	}
	switch nc.InstanceOption {
	case "", "on_demand_only":
		g.CapacityPolicy = config.PolicyOnDemandOnly
	case "prefer_spot":
		g.CapacityPolicy = config.PolicyPreferSpot
	case "prefer_on_demand":
		g.CapacityPolicy = config.PolicyPreferOnDemand
	case "spot_only":
		g.CapacityPolicy = config.PolicySpotOnly
	default:
		return fmt.Errorf("instance_option: %q is not prefer_spot, prefer_on_demand, spot_only or on_demand_only", nc.InstanceOption)
	}
	switch nc.PricingOption {
	case "":
	case "dynamic":
		opts[verdaOptionPricing] = "DYNAMIC_PRICE"
	case "fixed":
		opts[verdaOptionPricing] = "FIXED_PRICE"
	default:
		return fmt.Errorf("pricing_option: %q is not dynamic or fixed", nc.PricingOption)
	}
	if nc.OverrideNumGPUs > 0 {
		n := nc.OverrideNumGPUs
		g.OverrideNumGPUs = &n
	}
	if nc.StartupScriptBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(nc.StartupScriptBase64); err != nil {
			return fmt.Errorf("startup_script_base64: %w", err)
		}
		opts[verdaOptionStartupScriptBase64] = nc.StartupScriptBase64
	}
	if len(opts) > 0 {
		g.CloudOptions = opts
	}
	return nil
}

// checkJSON refuses what JSON refuses (trailing commas, trailing garbage)
// though YAML, which DecodeStrict reads, would take it; the error names
// the line.
func checkJSON(data []byte) error {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Errorf("line %d: %w", line, err)
	}
	return err
}
