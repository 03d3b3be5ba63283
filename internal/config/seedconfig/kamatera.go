package seedconfig

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/gcfg.v1"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Kamatera's cloud name and the node-group cloudOptions its backend reads
// (internal/cloud/kamatera), repeated here so that importing a config
// needs no cloud client.
const (
	kamateraCloud                = "kamatera"
	kamateraOptionDisks          = "disks"
	kamateraOptionNetworks       = "networks"
	kamateraOptionBillingCycle   = "billingCycle"
	kamateraOptionMonthlyPackage = "monthlyPackage"
	kamateraOptionDailyBackup    = "dailyBackup"
	kamateraOptionManaged        = "managed"
	kamateraOptionNamePrefix     = "namePrefix"
	kamateraOptionSSHKey         = "sshKey"
	kamateraOptionScriptBase64   = "scriptBase64"
)

// The Kamatera autoscaler's size defaults.
const (
	kamateraDefaultMinSize = 1
	kamateraDefaultMaxSize = 254
	kamateraMaxName        = 15
)

// kamateraINI is the Kamatera cluster-autoscaler's cloud config, as gcfg
// reads it: a [global] section and [nodegroup "name"] sections.
type kamateraINI struct {
	Global    kamateraGlobal
	Nodegroup map[string]*kamateraGroup
}

// kamateraServer are the server keys a [nodegroup] section sets and
// [global] defaults with a default- prefix.
type kamateraServer struct {
	NamePrefix     string
	Password       string
	SSHKey         string
	Datacenter     string
	Image          string
	CPU            string
	RAM            string
	Disk           []string
	DailyBackup    bool
	Managed        bool
	Network        []string
	BillingCycle   string
	MonthlyPackage string
	ScriptBase64   string
}

type kamateraGlobal struct {
	ClientID         string `gcfg:"kamatera-api-client-id"`
	Secret           string `gcfg:"kamatera-api-secret"`
	URL              string `gcfg:"kamatera-api-url"`
	ClusterName      string `gcfg:"cluster-name"`
	FilterNamePrefix string `gcfg:"filter-name-prefix"`
	ProviderIDPrefix string `gcfg:"provider-id-prefix"`
	MinSize          string `gcfg:"default-min-size"`
	MaxSize          string `gcfg:"default-max-size"`

	NamePrefix     string   `gcfg:"default-name-prefix"`
	Password       string   `gcfg:"default-password"`
	SSHKey         string   `gcfg:"default-ssh-key"`
	Datacenter     string   `gcfg:"default-datacenter"`
	Image          string   `gcfg:"default-image"`
	CPU            string   `gcfg:"default-cpu"`
	RAM            string   `gcfg:"default-ram"`
	Disk           []string `gcfg:"default-disk"`
	DailyBackup    bool     `gcfg:"default-dailybackup"`
	Managed        bool     `gcfg:"default-managed"`
	Network        []string `gcfg:"default-network"`
	BillingCycle   string   `gcfg:"default-billingcycle"`
	MonthlyPackage string   `gcfg:"default-monthlypackage"`
	ScriptBase64   string   `gcfg:"default-script-base64"`
}

type kamateraGroup struct {
	MinSize string `gcfg:"min-size"`
	MaxSize string `gcfg:"max-size"`

	NamePrefix     string   `gcfg:"name-prefix"`
	Password       string   `gcfg:"password"`
	SSHKey         string   `gcfg:"ssh-key"`
	Datacenter     string   `gcfg:"datacenter"`
	Image          string   `gcfg:"image"`
	CPU            string   `gcfg:"cpu"`
	RAM            string   `gcfg:"ram"`
	Disk           []string `gcfg:"disk"`
	DailyBackup    bool     `gcfg:"dailybackup"`
	Managed        bool     `gcfg:"managed"`
	Network        []string `gcfg:"network"`
	BillingCycle   string   `gcfg:"billingcycle"`
	MonthlyPackage string   `gcfg:"monthlypackage"`
	ScriptBase64   string   `gcfg:"script-base64"`
	TemplateLabel  []string `gcfg:"template-label"`
}

func (g kamateraGlobal) server() kamateraServer {
	return kamateraServer{g.NamePrefix, g.Password, g.SSHKey, g.Datacenter, g.Image, g.CPU, g.RAM, g.Disk,
		g.DailyBackup, g.Managed, g.Network, g.BillingCycle, g.MonthlyPackage, g.ScriptBase64}
}

// over returns the group's server keys over the defaults, as the
// Kamatera autoscaler merges them (a true flag wins either way).
func (g kamateraGroup) over(d kamateraServer) kamateraServer {
	pick := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	s := kamateraServer{
		NamePrefix: pick(g.NamePrefix, d.NamePrefix), Password: pick(g.Password, d.Password), SSHKey: pick(g.SSHKey, d.SSHKey),
		Datacenter: pick(g.Datacenter, d.Datacenter), Image: pick(g.Image, d.Image), CPU: pick(g.CPU, d.CPU), RAM: pick(g.RAM, d.RAM),
		Disk: d.Disk, DailyBackup: g.DailyBackup || d.DailyBackup, Managed: g.Managed || d.Managed, Network: d.Network,
		BillingCycle: pick(g.BillingCycle, d.BillingCycle), MonthlyPackage: pick(g.MonthlyPackage, d.MonthlyPackage),
		ScriptBase64: pick(g.ScriptBase64, d.ScriptBase64),
	}
	if g.Disk != nil {
		s.Disk = g.Disk
	}
	if g.Network != nil {
		s.Network = g.Network
	}
	return s
}

// KamateraError is a problem in a Kamatera INI file, named by section and
// key as the file writes them.
type KamateraError struct {
	Section, Key, Reason string
}

func (e *KamateraError) Error() string {
	if e.Key == "" {
		return e.Section + ": " + e.Reason
	}
	return e.Section + " " + e.Key + ": " + e.Reason
}

func groupSection(name string) string { return `[nodegroup "` + name + `"]` }

// IsKamateraINI reports whether data is in the Kamatera
// cluster-autoscaler's INI format: its first line that is neither blank
// nor a comment is a [global] or [nodegroup "name"] section header. (A
// YAML config cannot start so: a flow sequence is no config.)
func IsKamateraINI(data []byte) bool {
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == ';' || line[0] == '#' {
			continue
		}
		name, open := strings.CutPrefix(line, "[")
		name, closed := strings.CutSuffix(name, "]")
		if !open || !closed {
			return false
		}
		name = strings.ToLower(strings.TrimSpace(name))
		return name == "global" || strings.HasPrefix(name, "nodegroup ") && strings.HasSuffix(name, `"`)
	}
	return false
}

// FromKamateraINI converts the Kamatera cluster-autoscaler's INI cloud
// config into a native config: each [nodegroup] a group on the kamatera
// cloud, the server keys its instance type ("<cpu>-<ram>"), datacenter,
// image and cloudOptions. The API credentials and root passwords stay in
// memory (KamateraConfig.Imported), never in the native form.
func FromKamateraINI(data []byte) (*config.Config, error) {
	var ini kamateraINI
	if err := gcfg.ReadInto(&ini, bytes.NewReader(data)); err != nil {
		// gcfg lists unknown keys as "warning(s):" lines; all are errors here.
		msg := strings.TrimSpace(err.Error())
		for _, p := range []string{"warnings:", "warning:"} {
			msg = strings.TrimSpace(strings.TrimPrefix(msg, p))
		}
		return nil, fmt.Errorf("kamatera cloud config: %s", strings.ReplaceAll(msg, "\n", "; "))
	}
	gl := ini.Global
	var errs []error
	bad := func(section, key, reason string) { errs = append(errs, &KamateraError{section, key, reason}) }
	for key, v := range map[string]string{"kamatera-api-client-id": gl.ClientID, "kamatera-api-secret": gl.Secret, "cluster-name": gl.ClusterName} {
		if v == "" {
			bad("[global]", key, "required")
		}
	}
	if len(gl.ClusterName) > kamateraMaxName {
		bad("[global]", "cluster-name", fmt.Sprintf("%q is longer than %d characters (it goes into the k8sca- server tag)", gl.ClusterName, kamateraMaxName))
	}
	defMin := intKey(bad, "[global]", "default-min-size", gl.MinSize, kamateraDefaultMinSize)
	defMax := intKey(bad, "[global]", "default-max-size", gl.MaxSize, kamateraDefaultMaxSize)
	if len(ini.Nodegroup) == 0 {
		bad("[nodegroup]", "", `no node groups: add a [nodegroup "name"] section`)
	}
	cfg := &config.Config{ClusterName: gl.ClusterName, Clouds: config.Clouds{Kamatera: &config.KamateraConfig{
		Endpoint: gl.URL, FilterNamePrefix: gl.FilterNamePrefix, ProviderIDPrefix: gl.ProviderIDPrefix,
		Imported: &config.KamateraSecrets{ClientID: gl.ClientID, Secret: gl.Secret, Passwords: map[string]string{}},
	}}}
	names := make([]string, 0, len(ini.Nodegroup))
	for n := range ini.Nodegroup {
		names = append(names, n)
	}
	sort.Strings(names)
	defaults := gl.server()
	for _, name := range names {
		g, err := kamateraNodeGroup(name, ini.Nodegroup[name], defaults, defMin, defMax)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if pw := ini.Nodegroup[name].over(defaults).Password; pw != "" {
			cfg.Clouds.Kamatera.Imported.Passwords[name] = pw
		}
		cfg.NodeGroups = append(cfg.NodeGroups, g)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kamatera cloud config: %w", err)
	}
	return cfg, nil
}

// kamateraNodeGroup converts one [nodegroup] section.
func kamateraNodeGroup(name string, src *kamateraGroup, defaults kamateraServer, defMin, defMax int) (config.NodeGroup, error) {
	section := groupSection(name)
	var errs []error
	bad := func(key, reason string) { errs = append(errs, &KamateraError{section, key, reason}) }
	if len(name) > kamateraMaxName {
		bad("", fmt.Sprintf("the name is longer than %d characters (it goes into the k8scang- server tag)", kamateraMaxName))
	}
	sv := src.over(defaults)
	for key, v := range map[string]string{"datacenter": sv.Datacenter, "image": sv.Image, "cpu": sv.CPU, "ram": sv.RAM} {
		if v == "" {
			bad(key, "required (here, or default-"+key+" in [global])")
		}
	}
	for key, v := range map[string][]string{"disk": sv.Disk, "network": sv.Network} {
		if len(v) == 0 {
			bad(key, "required (here, or default-"+key+" in [global])")
		}
		for _, spec := range v {
			if strings.ContainsAny(spec, " \t") || spec == "" {
				bad(key, fmt.Sprintf("%q: a spec may not be empty or contain spaces", spec))
			}
		}
	}
	ram, err := strconv.Atoi(sv.RAM)
	if sv.RAM != "" && (err != nil || ram <= 0) {
		bad("ram", fmt.Sprintf("%q is not a size in MB", sv.RAM))
	}
	if sv.BillingCycle != "" && sv.BillingCycle != "hourly" && sv.BillingCycle != "monthly" {
		bad("billingcycle", fmt.Sprintf("%q: want hourly or monthly", sv.BillingCycle))
	}
	if sv.ScriptBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(sv.ScriptBase64); err != nil {
			bad("script-base64", "not base64: "+err.Error())
		}
	}
	minSize := intKey(func(_, key, reason string) { bad(key, reason) }, section, "min-size", src.MinSize, defMin)
	maxSize := intKey(func(_, key, reason string) { bad(key, reason) }, section, "max-size", src.MaxSize, defMax)
	labels := map[string]string{}
	for _, l := range src.TemplateLabel {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			bad("template-label", fmt.Sprintf("%q: want key=value", l))
			continue
		}
		labels[k] = v
	}
	if err := errors.Join(errs...); err != nil {
		return config.NodeGroup{}, err
	}
	g := config.NodeGroup{
		Name: name, Cloud: kamateraCloud, InstanceType: sv.CPU + "-" + strconv.Itoa(ram), Locations: []string{sv.Datacenter},
		Image: sv.Image, MinSize: minSize, MaxSize: maxSize, CapacityPolicy: config.PolicyOnDemandOnly,
		DiskSizeGiB: diskSize(sv.Disk), CloudOptions: map[string]string{
			kamateraOptionDisks: strings.Join(sv.Disk, " "), kamateraOptionNetworks: strings.Join(sv.Network, " "),
		},
	}
	if len(labels) > 0 {
		g.Labels = labels
	}
	opts := g.CloudOptions
	set := func(k, v string) {
		if v != "" {
			opts[k] = v
		}
	}
	set(kamateraOptionBillingCycle, sv.BillingCycle)
	set(kamateraOptionMonthlyPackage, sv.MonthlyPackage)
	set(kamateraOptionNamePrefix, sv.NamePrefix)
	set(kamateraOptionSSHKey, sv.SSHKey)
	set(kamateraOptionScriptBase64, sv.ScriptBase64)
	if sv.DailyBackup {
		opts[kamateraOptionDailyBackup] = "true"
	}
	if sv.Managed {
		opts[kamateraOptionManaged] = "true"
	}
	return g, nil
}

// intKey parses a size key, or returns def when it is unset.
func intKey(bad func(section, key, reason string), section, key, v string, def int) int {
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		bad(section, key, fmt.Sprintf("%q is not a whole number", v))
		return def
	}
	if n < 0 {
		bad(section, key, fmt.Sprintf("%d: must be >= 0", n))
	}
	return n
}

// diskSize is the size of the first disk spec ("size=100,..."), for the
// node template's ephemeral storage; 0 when it names none.
func diskSize(disks []string) int {
	if len(disks) == 0 {
		return 0
	}
	for _, part := range strings.Split(disks[0], ",") {
		if v, ok := strings.CutPrefix(part, "size="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// KamateraField names a field of a config imported by FromKamateraINI as
// the INI file writes it: nodeGroups[0].maxSize is [nodegroup "ng1"]
// max-size. Paths it cannot map are returned as they are.
func KamateraField(cfg *config.Config, path string) string {
	switch path {
	case "clusterName":
		return "[global] cluster-name"
	case "nodeGroups":
		return "[nodegroup]"
	case "clouds.kamatera.endpoint":
		return "[global] kamatera-api-url"
	case "clouds.kamatera.providerIDPrefix":
		return "[global] provider-id-prefix"
	case "clouds.kamatera.filterNamePrefix":
		return "[global] filter-name-prefix"
	}
	i, rest, ok := splitGroup(cfg, path)
	if !ok {
		return path
	}
	section := groupSection(cfg.NodeGroups[i].Name)
	if rest == "" || rest == "name" {
		return section
	}
	if n, ok := kamateraFields.name(rest); ok {
		return section + " " + n
	}
	return path
}

var kamateraFields = fieldNames{
	exact: map[string]string{
		"minSize": "min-size", "maxSize": "max-size", "instanceType": "cpu, ram", "image": "image",
		"locations": "datacenter", "locations[0]": "datacenter",
		"cloudOptions[" + kamateraOptionDisks + "]":          "disk",
		"cloudOptions[" + kamateraOptionNetworks + "]":       "network",
		"cloudOptions[" + kamateraOptionBillingCycle + "]":   "billingcycle",
		"cloudOptions[" + kamateraOptionMonthlyPackage + "]": "monthlypackage",
		"cloudOptions[" + kamateraOptionNamePrefix + "]":     "name-prefix",
		"cloudOptions[" + kamateraOptionSSHKey + "]":         "ssh-key",
		"cloudOptions[" + kamateraOptionScriptBase64 + "]":   "script-base64",
	},
	prefix: map[string]string{"labels": "template-label"},
}

// KamateraTerms renames the native field names a message mentions in the
// INI file's terms.
var KamateraTerms = strings.NewReplacer("clouds.kamatera.filterNamePrefix", "filter-name-prefix",
	"namePrefix", "name-prefix", "minSize", "min-size", "maxSize", "max-size", "instanceType", "cpu and ram")
