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
	var cloudName, format string
	var gpuOnly bool
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List a cloud's instance types: GPUs, prices, and where each can be had now",
		Long: `catalog lists a cloud's instance types with their GPUs, list prices, and the locations where each
can be ordered now, on demand and as spot: the names a node group's instanceType takes. With --config
it lists the config's cloud (say which with --cloud when it has several), with its credentials and
locations; without, --cloud names the cloud and credentials come from the environment.`,
		Example: `  gpuscaler catalog                                   # the simulated cloud
  gpuscaler catalog --cloud verda --gpu-only          # VERDA_CLIENT_ID and VERDA_CLIENT_SECRET set
  gpuscaler catalog --config config.yaml -o json | jq '.[] | select(.spotNow != null) | .type'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(format); err != nil {
				return err
			}
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
			if !cmd.Flags().Changed("cloud") && src.configPath != "" {
				// The config's own cloud, when it has one.
				switch names := cfg.Clouds.Configured(); len(names) {
				case 1:
					cloudName = names[0]
				default:
					return &usageError{fmt.Errorf("the config has clouds %s: name the one to list with --cloud", strings.Join(names, ", "))}
				}
			}
			providers, err := daemon.Providers(cmd.Context(), cfg, env.Getenv, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			p, ok := providers[cloudName]
			if !ok {
				return &usageError{fmt.Errorf("--cloud %q is not configured", cloudName)}
			}
			entries, err := catalogOf(cmd.Context(), p, gpuOnly)
			if err != nil {
				return err
			}
			if format != outputTable {
				return writeStructured(cmd.OutOrStdout(), format, entries)
			}
			return printCatalog(cmd.OutOrStdout(), entries)
		},
	}
	src.addFlags(cmd)
	cmd.Flags().StringVar(&cloudName, "cloud", "sim", "cloud to list (with --config: the config's, when it has one)")
	cmd.Flags().BoolVar(&gpuOnly, "gpu-only", false, "list GPU instance types only")
	addOutputFlag(cmd, &format)
	return cmd
}

// catalogEntry is one instance type as catalog prints it.
type catalogEntry struct {
	Type         string  `json:"type"`
	GPUs         int     `json:"gpus"`
	GPUModel     string  `json:"gpuModel,omitempty"`
	GPUMemoryGiB int     `json:"gpuMemoryGiB"`
	VCPUs        int     `json:"vcpus"`
	MemoryGiB    int     `json:"memoryGiB"`
	OnDemandHour float64 `json:"onDemandPricePerHour"`
	SpotHour     float64 `json:"spotPricePerHour"`
	// OnDemandNow and SpotNow are the locations where it can be ordered
	// now.
	OnDemandNow []string `json:"onDemandNow"`
	SpotNow     []string `json:"spotNow"`
}

// catalogOf reads a cloud's instance types and where each can be had
// now, GPU types first by model, then by price.
func catalogOf(ctx context.Context, p cloud.Provider, gpuOnly bool) ([]catalogEntry, error) {
	types, err := p.InstanceTypes(ctx)
	if err != nil {
		return nil, fmt.Errorf("instance types: %w", err)
	}
	offs, err := p.Offerings(ctx)
	if err != nil {
		return nil, fmt.Errorf("offerings: %w", err)
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
	entries := []catalogEntry{}
	for _, t := range types {
		if gpuOnly && t.GPUCount == 0 {
			continue
		}
		od, spot := where[t.Name][cloud.OnDemand], where[t.Name][cloud.Spot]
		sort.Strings(od)
		sort.Strings(spot)
		entries = append(entries, catalogEntry{Type: t.Name, GPUs: t.GPUCount, GPUModel: t.GPUModel, GPUMemoryGiB: t.GPUMemoryGiB,
			VCPUs: t.VCPUs, MemoryGiB: t.MemoryGiB, OnDemandHour: t.OnDemandPrice, SpotHour: t.SpotPrice, OnDemandNow: od, SpotNow: spot})
	}
	return entries, nil
}

// printCatalog prints the entries as a table.
func printCatalog(w io.Writer, entries []catalogEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tGPUS\tGPU MEM\tVCPU\tMEMORY\tON-DEMAND/H\tSPOT/H\tON-DEMAND NOW\tSPOT NOW")
	for _, e := range entries {
		gpus := "-"
		if e.GPUs > 0 {
			gpus = fmt.Sprintf("%dx %s", e.GPUs, e.GPUModel)
		}
		fmt.Fprintf(tw, "%s\t%s\t%dGiB\t%d\t%dGiB\t%.4f\t%.4f\t%s\t%s\n", e.Type, gpus, e.GPUMemoryGiB, e.VCPUs, e.MemoryGiB,
			e.OnDemandHour, e.SpotHour, list(e.OnDemandNow), list(e.SpotNow))
	}
	return tw.Flush()
}

func list(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}
