package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/daemon"
)

func newCatalogCommand() *cobra.Command {
	var src source
	var cloudName string
	var gpuOnly bool
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List a cloud's instance types: GPUs, prices, and where each can be had now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env := src.environ(nil)
			var err error
			cfg := &config.Config{ClusterName: "catalog", Clouds: config.Clouds{Sim: &config.SimConfig{}}}
			switch {
			case src.configPath != "" || len(src.nodes) > 0 || src.cloudConfig != "":
				if cfg, err = src.load(cmd.Context(), env); err != nil {
					return err
				}
			case cloudName == "verda":
				// Credentials from the environment are all a catalog needs.
				cfg.Clouds = config.Clouds{Verda: &config.VerdaConfig{}}
				config.SetDefaults(cfg)
			case cloudName == "scaleway":
				// Keys from the environment or the Scaleway config file;
				// every GPU zone.
				cfg.Clouds = config.Clouds{Scaleway: &config.ScalewayConfig{}}
				config.SetDefaults(cfg)
			case cloudName == "kamatera":
				// Every datacenter the account can order in.
				cfg.Clouds = config.Clouds{Kamatera: &config.KamateraConfig{}}
				config.SetDefaults(cfg)
			default:
				config.SetDefaults(cfg)
			}
			providers, err := daemon.Providers(cmd.Context(), cfg, env.Getenv, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			p, ok := providers[cloudName]
			if !ok {
				return fmt.Errorf("--cloud %q is not configured", cloudName)
			}
			return printCatalog(cmd.Context(), cmd.OutOrStdout(), p, gpuOnly)
		},
	}
	src.addFlags(cmd)
	cmd.Flags().StringVar(&cloudName, "cloud", "sim", "cloud to list")
	cmd.Flags().BoolVar(&gpuOnly, "gpu-only", false, "list GPU instance types only")
	return cmd
}

func printCatalog(ctx context.Context, w io.Writer, p cloud.Provider, gpuOnly bool) error {
	types, err := p.InstanceTypes(ctx)
	if err != nil {
		return fmt.Errorf("instance types: %w", err)
	}
	offs, err := p.Offerings(ctx)
	if err != nil {
		return fmt.Errorf("offerings: %w", err)
	}
	where := map[string]map[cloud.CapacityType][]string{}
	for _, o := range offs {
		if !o.Available {
			continue
		}
		if where[o.InstanceType] == nil {
			where[o.InstanceType] = map[cloud.CapacityType][]string{}
		}
		where[o.InstanceType][o.CapacityType] = append(where[o.InstanceType][o.CapacityType], o.Location)
	}
	sort.Slice(types, func(i, j int) bool {
		if types[i].GPUModel != types[j].GPUModel {
			return types[i].GPUModel > types[j].GPUModel
		}
		if types[i].OnDemandPrice != types[j].OnDemandPrice {
			return types[i].OnDemandPrice < types[j].OnDemandPrice
		}
		return types[i].Name < types[j].Name
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tGPUS\tGPU MEM\tVCPU\tMEMORY\tON-DEMAND/H\tSPOT/H\tON-DEMAND NOW\tSPOT NOW")
	for _, t := range types {
		if gpuOnly && t.GPUCount == 0 {
			continue
		}
		gpus := "-"
		if t.GPUCount > 0 {
			gpus = fmt.Sprintf("%dx %s", t.GPUCount, t.GPUModel)
		}
		fmt.Fprintf(tw, "%s\t%s\t%dGiB\t%d\t%dGiB\t%.4f\t%.4f\t%s\t%s\n", t.Name, gpus, t.GPUMemoryGiB, t.VCPUs, t.MemoryGiB,
			t.OnDemandPrice, t.SpotPrice, list(where[t.Name][cloud.OnDemand]), list(where[t.Name][cloud.Spot]))
	}
	return tw.Flush()
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}
