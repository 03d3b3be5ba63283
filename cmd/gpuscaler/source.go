package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/config/seedconfig"
)

// source is where a command's configuration comes from: a native config
// file, a ca-verda config.yaml, or DataCrunch-style --nodes flags with the
// cluster config in DATACRUNCH_CLUSTER_CONFIG*.
type source struct {
	configPath  string
	nodes       []string
	clusterName string
	port        int
	listen      string
	insecure    bool
}

func (s *source) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&s.configPath, "config", "c", "", "config file: gpuscaler's own, or a ca-verda config.yaml (node_groups)")
	cmd.Flags().StringArrayVar(&s.nodes, "nodes", nil,
		"DataCrunch-style node group min:max:instance-type:region:name (repeatable); pool settings come from DATACRUNCH_CLUSTER_CONFIG_JSON, DATACRUNCH_CLUSTER_CONFIG or DATACRUNCH_CLUSTER_CONFIG_FILE")
	cmd.Flags().StringVar(&s.clusterName, "cluster-name", "gpuscaler", "cluster name for imported configs (native files name their own)")
	cmd.Flags().IntVar(&s.port, "port", 0, "gRPC port; overrides the port of provider.listenAddress (as ca-verda's --port)")
	cmd.Flags().StringVar(&s.listen, "listen-address", "", "overrides provider.listenAddress (host:port)")
	cmd.Flags().BoolVar(&s.insecure, "insecure", false, "allow a plaintext gRPC listener off loopback (provider.insecure): anyone who reaches it can scale groups and delete nodes")
}

// imported reports whether the configuration comes from a seed format
// (which has no reload).
func (s *source) imported() bool {
	if len(s.nodes) > 0 {
		return true
	}
	data, err := config.ReadFile(s.configPath)
	return err == nil && seedconfig.IsCAVerda(data)
}

// reloadPath is the file to watch for changes: a native config file;
// imported configurations are not reloaded.
func (s *source) reloadPath() string {
	if s.configPath == "" || s.imported() {
		return ""
	}
	return s.configPath
}

// load reads, imports, defaults and validates the configuration.
func (s *source) load(getenv func(string) string) (*config.Config, error) {
	var cfg *config.Config
	switch {
	case s.configPath != "" && len(s.nodes) > 0:
		return nil, errors.New("give --config or --nodes, not both")
	case s.configPath != "":
		data, err := config.ReadFile(s.configPath)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		if !seedconfig.IsCAVerda(data) {
			cfg, err = config.Decode(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.configPath, err)
			}
			break
		}
		if cfg, err = seedconfig.FromCAVerda(s.clusterName, data); err != nil {
			return nil, fmt.Errorf("%s: %w", s.configPath, err)
		}
	case len(s.nodes) > 0:
		data, _, _, err := seedconfig.DataCrunchEnv(getenv)
		if err != nil {
			return nil, err
		}
		if cfg, err = seedconfig.FromDataCrunch(s.clusterName, s.nodes, data); err != nil {
			return nil, err
		}
		cfg.Clouds.Verda.StartupScriptFetchURL = getenv("DATACRUNCH_STARTUP_SCRIPT_FETCH_URL")
	default:
		return nil, errors.New("--config (or DataCrunch-style --nodes) is required")
	}
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
	if err := config.Complete(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// envWithDotEnv returns a getenv that falls back to ./.env, where ca-verda
// users keep VERDA_CLIENT_ID and VERDA_CLIENT_SECRET. The process
// environment wins.
func envWithDotEnv(path string) (func(string) string, error) {
	dot, err := seedconfig.DotEnv(path)
	if err != nil {
		return nil, err
	}
	return func(k string) string {
		if v, ok := os.LookupEnv(k); ok {
			return v
		}
		return dot[k]
	}, nil
}
