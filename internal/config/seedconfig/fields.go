package seedconfig

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// groupField splits a native path such as nodeGroups[2].cloudOptions[contract]
// into the group's index and the rest ("cloudOptions[contract]").
var groupField = regexp.MustCompile(`^nodeGroups\[(\d+)\](?:\.(.+))?$`)

// Field names in a seed format.
type fieldNames struct {
	// exact maps a native field (after the group) to the seed's key;
	// prefix matches keep what follows ("labels[a]" → "labels[a]").
	exact  map[string]string
	prefix map[string]string
}

func (f fieldNames) name(rest string) (string, bool) {
	if n, ok := f.exact[rest]; ok {
		return n, true
	}
	for native, seed := range f.prefix {
		if rest == native || strings.HasPrefix(rest, native+"[") || strings.HasPrefix(rest, native+".") {
			return seed + strings.TrimPrefix(rest, native), true
		}
	}
	return "", false
}

var caVerdaFields = fieldNames{
	exact: map[string]string{
		"minSize": "min_size", "maxSize": "max_size", "instanceType": "instance_type", "image": "image",
		"capacityPolicy": "contract",
		"cloudOptions[" + verdaOptionContract + "]":        "contract",
		"cloudOptions[" + verdaOptionPricing + "]":         "pricing",
		"cloudOptions[" + verdaOptionSSHKeyIDs + "]":       "ssh_key_ids",
		"cloudOptions[" + verdaOptionStartupScriptID + "]": "startup_script_id",
	},
	prefix: map[string]string{"locations": "location", "labels": "labels", "taints": "taints"},
}

var dataCrunchFields = fieldNames{
	exact: map[string]string{
		"image": "image_type", "diskSizeGiB": "disk_size_gb", "overrideNumGPUs": "override_num_gpus",
		"capacityPolicy": "instance_option",
		"cloudOptions[" + verdaOptionPricing + "]":             "pricing_option",
		"cloudOptions[" + verdaOptionSSHKeyIDs + "]":           "ssh_key_ids",
		"cloudOptions[" + verdaOptionStartupScriptBase64 + "]": "startup_script_base64",
	},
	prefix: map[string]string{"labels": "labels", "taints": "taints"},
}

// dataCrunchFlagFields are the group fields a --nodes flag sets.
var dataCrunchFlagFields = map[string]string{
	"minSize": "min", "maxSize": "max", "instanceType": "instance-type", "locations": "region", "locations[0]": "region", "name": "name",
}

// CAVerdaField names a field of a config imported by FromCAVerda as the
// user wrote it: nodeGroups[0].minSize is node_groups[alpha].min_size.
// Paths it cannot map are returned as they are.
func CAVerdaField(cfg *config.Config, path string) string {
	if path == "nodeGroups" {
		return "node_groups"
	}
	i, rest, ok := splitGroup(cfg, path)
	if !ok {
		return path
	}
	group := "node_groups[" + cfg.NodeGroups[i].Name + "]"
	if rest == "" || rest == "name" {
		return group
	}
	if n, ok := caVerdaFields.name(rest); ok {
		return group + "." + n
	}
	return path
}

// DataCrunchField names a field of a config imported by FromDataCrunch as
// the user wrote it: a --nodes flag's part (--nodes[0] min) or a key of
// the cluster config (node_configs[pool].disk_size_gb).
func DataCrunchField(cfg *config.Config, path string) string {
	if path == "nodeGroups" {
		return "--nodes"
	}
	i, rest, ok := splitGroup(cfg, path)
	if !ok {
		return path
	}
	flag := "--nodes[" + strconv.Itoa(i) + "]"
	if rest == "" {
		return flag
	}
	if n, ok := dataCrunchFlagFields[rest]; ok {
		return flag + " " + n
	}
	if n, ok := dataCrunchFields.name(rest); ok {
		return "node_configs[" + cfg.NodeGroups[i].Name + "]." + n
	}
	return path
}

func splitGroup(cfg *config.Config, path string) (int, string, bool) {
	m := groupField.FindStringSubmatch(path)
	if m == nil {
		return 0, "", false
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(cfg.NodeGroups) {
		return 0, "", false
	}
	return i, m[2], true
}

// CAVerdaTerms renames the native field names a message mentions ("must be
// >= minSize") in ca-verda's terms.
var CAVerdaTerms = strings.NewReplacer("minSize", "min_size", "maxSize", "max_size", "instanceType", "instance_type")

// DataCrunchTerms renames them in the terms of DataCrunch's --nodes flag.
var DataCrunchTerms = strings.NewReplacer("minSize", "min", "maxSize", "max", "instanceType", "instance-type")
