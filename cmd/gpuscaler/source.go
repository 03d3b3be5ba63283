package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/config/seedconfig"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
)

// source is where a command's configuration comes from: a native config
// file, a ca-verda config.yaml, DataCrunch-style --nodes flags with the
// cluster config in DATACRUNCH_CLUSTER_CONFIG*, or the Kamatera
// cluster-autoscaler's INI cloud config (--cloud-config).
type source struct {
	configPath  string
	cloudConfig string
	nodes       []string
	clusterName string
	port        int
	listen      string
	insecure    bool
	envFile     string
	// metricsAddr is --metrics-address, of the commands that serve.
	metricsAddr string
	// online makes load ask the clouds too (validate --online); fileOnly
	// checks the configuration without its environment (config convert).
	online, fileOnly bool

	// Set by read: the import format, for error messages.
	caVerda        bool
	dataCrunchFrom string
	// dataCrunchFile is a DataCrunch cluster config given as --config
	// beside --nodes (set by sniff).
	dataCrunchFile string
	// Set by load: what the clouds will do differently from the config.
	warnings []string
}

func (s *source) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&s.configPath, "config", "c", "", "config file: gpuscaler's own, or a ca-verda config.yaml (node_groups)")
	cmd.Flags().StringVar(&s.cloudConfig, "cloud-config", "", "the Kamatera cluster-autoscaler's INI cloud config ([global], [nodegroup \"name\"]), used as it is")
	cmd.Flags().StringArrayVar(&s.nodes, "nodes", nil,
		"DataCrunch-style node group min:max:instance-type:region:name (repeatable); pool settings come from DATACRUNCH_CLUSTER_CONFIG_JSON, DATACRUNCH_CLUSTER_CONFIG or DATACRUNCH_CLUSTER_CONFIG_FILE")
	cmd.Flags().StringVar(&s.clusterName, "cluster-name", "gpuscaler", "cluster name for imported configs (native files name their own)")
	cmd.Flags().StringVar(&s.envFile, "env-file", "",
		"a file of KEY=value lines read for credentials, below the process environment; a ca-verda config.yaml reads ./.env without it, as ca-verda did")
}

// addListenerFlags adds the gRPC listener's flags, for the commands that
// serve it or check or write its settings (provider, validate, config
// convert); the others do not show them.
func (s *source) addListenerFlags(cmd *cobra.Command) {
	cmd.Flags().IntVar(&s.port, "port", 0, "gRPC port; overrides the port of provider.listenAddress (as ca-verda's --port)")
	cmd.Flags().StringVar(&s.listen, "listen-address", "", "overrides provider.listenAddress (host:port)")
	cmd.Flags().BoolVar(&s.insecure, "insecure", false, "allow a plaintext gRPC listener off loopback (provider.insecure): anyone who reaches it can scale groups and delete nodes")
}

// imported reports whether the configuration comes from a seed format
// (which has no reload).
func (s *source) imported() bool {
	if len(s.nodes) > 0 || s.cloudConfig != "" {
		return true
	}
	data, err := config.ReadFile(s.configPath)
	return err == nil && (seedconfig.IsCAVerda(data) || seedconfig.IsKamateraINI(data))
}

// sniff recognises every seed format given as --config (or config
// convert FILE) by its content, not only by its flag: the Kamatera
// cluster-autoscaler's INI is read as --cloud-config, and a DataCrunch
// cluster config beside --nodes as DATACRUNCH_CLUSTER_CONFIG_FILE. A file
// that cannot stand alone (a DataCrunch cluster config without --nodes, a
// .env file) gets an error naming the flags that read it.
func (s *source) sniff() error {
	if s.configPath == "" || s.cloudConfig != "" {
		return nil
	}
	data, err := config.ReadFile(s.configPath)
	if err != nil {
		return nil // read reports it
	}
	switch {
	case seedconfig.IsKamateraINI(data):
		s.cloudConfig, s.configPath = s.configPath, ""
	case seedconfig.IsDataCrunch(data) && len(s.nodes) > 0:
		s.dataCrunchFile, s.configPath = s.configPath, ""
	case seedconfig.IsDataCrunch(data):
		return fmt.Errorf("%s is a DataCrunch cluster config (node_configs): it holds the pools' settings, not the node groups; "+
			"give them beside it with --nodes min:max:instance-type:region:name (repeatable)", s.configPath)
	case seedconfig.IsDotEnv(data):
		return fmt.Errorf("%s is a file of KEY=value variables (.env), not a config: give it with --env-file, "+
			"beside --config, --nodes or --cloud-config", s.configPath)
	}
	return nil
}

// reloadPath is the file to watch for changes: a native config file;
// imported configurations are not reloaded.
func (s *source) reloadPath() string {
	if s.configPath == "" || s.imported() {
		return ""
	}
	return s.configPath
}

// load reads, imports, defaults and validates the configuration, then
// runs start-up's own checks on it offline (see daemon.Preflight; online
// too when s.online). Every error names where the configuration came from
// and each field as the user wrote it: a native path, a ca-verda key or a
// DataCrunch flag. A malformed .env fails only a configuration that reads
// the environment.
func (s *source) load(ctx context.Context, env *environ) (*config.Config, error) {
	cfg, err := s.read(env.Getenv)
	readsEnv := cfg != nil && (cfg.Clouds.Verda != nil || cfg.Clouds.Scaleway != nil || cfg.Clouds.Kamatera != nil && cfg.Clouds.Kamatera.Imported == nil)
	if err == nil && env.err != nil && !s.fileOnly && (readsEnv || len(s.nodes) > 0) {
		return nil, env.err
	}
	if err == nil {
		s.warnings, err = daemon.Preflight(ctx, cfg, env.runtimeOptions("", nil, kubeFlags{}), daemon.PreflightOptions{Online: s.online, FileOnly: s.fileOnly})
	}
	if err != nil {
		return nil, s.explain(cfg, err)
	}
	s.warnings = append(slices.Clone(cfg.Deprecated), s.warnings...)
	return cfg, nil
}

// nativePath finds native field paths in an error's text.
var nativePath = regexp.MustCompile(`nodeGroups\[\d+\](?:\.[A-Za-z]+|\[[^\]]*\])*`)

// explain names the source in err and renames native field paths in the
// terms of an imported format.
func (s *source) explain(cfg *config.Config, err error) error {
	origin := s.configPath
	var place func(*config.Config, string) string
	var terms *strings.Replacer
	switch {
	case len(s.nodes) > 0:
		origin = "DataCrunch config (--nodes"
		if s.dataCrunchFrom != "" {
			origin += ", " + s.dataCrunchFrom
		}
		origin += ")"
		place, terms = seedconfig.DataCrunchField, seedconfig.DataCrunchTerms
	case s.caVerda:
		place, terms = seedconfig.CAVerdaField, seedconfig.CAVerdaTerms
	case s.cloudConfig != "":
		origin = s.cloudConfig
		place, terms = seedconfig.KamateraField, seedconfig.KamateraTerms
	}
	if place != nil && cfg != nil {
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			for _, fe := range ve.Errs {
				fe.Field, fe.Detail = place(cfg, fe.Field), terms.Replace(fe.Detail)
			}
		} else {
			err = errors.New(nativePath.ReplaceAllStringFunc(err.Error(), func(p string) string { return place(cfg, p) }))
		}
	}
	if origin == "" {
		return err
	}
	return fmt.Errorf("%s: %w", origin, err)
}

// read reads, imports, defaults and validates the configuration. On a
// validation error it returns the config too, so that explain can name
// its fields.
func (s *source) read(getenv func(string) string) (*config.Config, error) {
	if err := s.sniff(); err != nil {
		return nil, err
	}
	var cfg *config.Config
	var native []byte // a native config file's text: its problems get their lines
	switch {
	case btoi(s.configPath != "")+btoi(len(s.nodes) > 0)+btoi(s.cloudConfig != "") > 1:
		return nil, errors.New("give one of --config, --nodes and --cloud-config")
	case s.cloudConfig != "":
		data, err := config.ReadFile(s.cloudConfig)
		if err != nil {
			return nil, fmt.Errorf("read cloud config: %w", err)
		}
		if cfg, err = seedconfig.FromKamateraINI(data); err != nil {
			return nil, err
		}
	case s.configPath != "":
		data, err := config.ReadFile(s.configPath)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		if s.caVerda = seedconfig.IsCAVerda(data); !s.caVerda {
			if cfg, err = config.Decode(data); err != nil {
				return nil, err
			}
			native = data
			break
		}
		if cfg, err = seedconfig.FromCAVerda(s.clusterName, data); err != nil {
			return nil, err
		}
	case len(s.nodes) > 0:
		data, from, _, err := seedconfig.DataCrunchEnv(getenv)
		s.dataCrunchFrom = from
		if from == "DATACRUNCH_CLUSTER_CONFIG_FILE" {
			s.dataCrunchFrom += "=" + getenv(from)
		}
		if s.dataCrunchFile != "" { // the file named on the command line wins
			s.dataCrunchFrom = "--config " + s.dataCrunchFile
			data, err = config.ReadFile(s.dataCrunchFile)
		}
		if err != nil {
			return nil, err
		}
		if cfg, err = seedconfig.FromDataCrunch(s.clusterName, s.nodes, data); err != nil {
			return nil, err
		}
		cfg.Clouds.Verda.StartupScriptFetchURL = getenv("DATACRUNCH_STARTUP_SCRIPT_FETCH_URL")
	default:
		return nil, errors.New("--config (or DataCrunch-style --nodes, or a Kamatera --cloud-config) is required")
	}
	s.overrideProvider(cfg)
	if err := config.Complete(cfg); err != nil {
		return cfg, config.Locate(err, native)
	}
	// The file's metrics address is checked even when the flag replaces it.
	s.overrideMetrics(cfg)
	return cfg, nil
}

// override puts the command line's settings over a configuration's: at
// start, and on every reload (a reload compares the provider and metrics
// sections with the ones in force, flags included).
func (s *source) override(cfg *config.Config) {
	s.overrideProvider(cfg)
	s.overrideMetrics(cfg)
}

func (s *source) overrideProvider(cfg *config.Config) {
	if s.port != 0 {
		// The port only: the host stays as configured (loopback by default).
		host := "127.0.0.1"
		if h, _, err := net.SplitHostPort(cfg.Provider.ListenAddress); err == nil && cfg.Provider.ListenAddress != "" {
			host = h
		}
		cfg.Provider.ListenAddress = net.JoinHostPort(host, strconv.Itoa(s.port))
	}
	if s.listen != "" {
		cfg.Provider.ListenAddress = s.listen
	}
	if s.insecure {
		cfg.Provider.Insecure = true
	}
}

func (s *source) overrideMetrics(cfg *config.Config) {
	if s.metricsAddr != "" {
		cfg.Metrics.Address = s.metricsAddr
	}
}

// environ is what commands read credentials and DataCrunch settings from:
// the process environment, over a ./.env file where ca-verda users keep
// VERDA_CLIENT_ID and VERDA_CLIENT_SECRET. The process environment wins.
type environ struct {
	path string // the .env file, absolute
	file map[string]string
	// err is a malformed .env; it fails only a config that reads the
	// environment (Verda, DataCrunch flags), and names the file.
	err error
}

// environ is the environment the configuration reads: the process's,
// over --env-file's file, or for a ca-verda config.yaml the ./.env beside
// the process as ca-verda read it. No other command reads a file of the
// working directory unasked; a file read is logged, by path and names.
func (s *source) environ(log *slog.Logger) *environ {
	path := s.envFile
	if path == "" && s.configPath != "" {
		if data, err := config.ReadFile(s.configPath); err == nil && seedconfig.IsCAVerda(data) {
			path = ".env"
		}
	}
	if path == "" {
		return &environ{}
	}
	env := loadEnviron(path)
	if len(env.file) > 0 && log != nil {
		names := slices.Sorted(maps.Keys(env.file))
		log.Info("read variables for credentials from a file; the process environment wins", "file", env.path, "names", names)
	}
	if _, err := os.Stat(env.path); err != nil && s.envFile != "" && env.err == nil {
		env.err = fmt.Errorf("--env-file: %w", err)
	}
	return env
}

// loadEnviron reads the .env file at path, if there is one.
func loadEnviron(path string) *environ {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	file, err := seedconfig.DotEnv(path)
	return &environ{path: path, file: file, err: err}
}

// Getenv returns a variable's value from the environment, else the file.
func (e *environ) Getenv(k string) string {
	if v, ok := os.LookupEnv(k); ok {
		return v
	}
	return e.file[k]
}

// Origin says where Getenv's value of k comes from, for errors: "the
// environment", the .env file's path, or "" when k is not set.
func (e *environ) Origin(k string) string {
	if _, ok := os.LookupEnv(k); ok {
		return "the environment"
	}
	if _, ok := e.file[k]; ok {
		return e.path
	}
	return ""
}

// runtimeOptions are the runtime options of a command reading env.
func (e *environ) runtimeOptions(owner string, log *slog.Logger, kube kubeFlags) daemon.Options {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return daemon.Options{Owner: owner, Getenv: e.Getenv, EnvOrigin: e.Origin, Logger: log, Kubeconfig: kube.kubeconfig, KubeContext: kube.context,
		Version: version}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
