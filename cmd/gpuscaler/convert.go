package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/config/seedconfig"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with config files",
		Example: "  gpuscaler config convert config.yaml > gpuscaler.yaml   # a ca-verda config.yaml, in gpuscaler's form"}
	src := source{fileOnly: true}
	convert := &cobra.Command{
		Use:   "convert [FILE]",
		Short: "Print the native config equivalent to a DataCrunch (--nodes + DATACRUNCH_CLUSTER_CONFIG*), ca-verda (config.yaml) or Kamatera (--cloud-config INI) setup, gpuscaler's NodeProvisioners for Baseten NodeProvisioner manifests, or a NodePool and GPUNodeClass for Karpenter v1alpha5 Provisioners (scw-karpenter)",
		Example: `  gpuscaler config convert config.yaml > gpuscaler.yaml          # a ca-verda config.yaml
  gpuscaler config convert --nodes 0:3:1H100.80S.30V:FIN-01:h100 > gpuscaler.yaml   # DataCrunch flags
  gpuscaler config convert --cloud-config kamatera.ini > gpuscaler.yaml
  gpuscaler config convert provisioners.yaml                     # Baseten or scw-karpenter manifests`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if src.configPath != "" && src.configPath != args[0] {
					return fmt.Errorf("give the file once: %q or --config %q", args[0], src.configPath)
				}
				src.configPath = args[0]
			}
			if src.configPath != "" {
				if data, err := config.ReadFile(src.configPath); err == nil {
					if m, ok := seedManifests(data); ok {
						out, err := m.convert(cmd, data)
						if err != nil {
							return err
						}
						_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s%s", m.header, out)
						return err
					}
				}
			}
			env := src.environ(nil)
			cfg, err := src.load(cmd.Context(), env)
			if err != nil {
				return err
			}
			if src.imported() && !cmd.Flags().Changed("cluster-name") && cfg.ClusterName == src.clusterName {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: clusterName is %q, --cluster-name's default: gpuscaler takes as its own every instance of the "+
					"cloud account marked with it, so two installs sharing it delete each other's nodes; give this cluster its own name (--cluster-name)\n", cfg.ClusterName)
			}
			if v := cfg.Clouds.Verda; v != nil {
				if r := cloud.RedactUserinfo(v.StartupScriptFetchURL); r != v.StartupScriptFetchURL {
					v.StartupScriptFetchURL = r
					fmt.Fprintln(cmd.ErrOrStderr(), "note: the password in clouds.verda.startupScriptFetchURL is not printed; put it back where the converted file is kept")
				}
			}
			credentials := "VERDA_CLIENT_ID/VERDA_CLIENT_SECRET (or DATACRUNCH_*)"
			if k := cfg.Clouds.Kamatera; k != nil {
				credentials = "KAMATERA_API_CLIENT_ID/KAMATERA_API_SECRET (or clouds.kamatera.clientIDFile/secretFile)"
				if k.Imported != nil && len(k.Imported.Passwords) > 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "note: the root passwords of the cloud config are not printed; put one in a file named by clouds.kamatera.passwordFile, or log in with cloudOptions.sshKey")
				}
				withholdScripts(cmd.ErrOrStderr(), cfg)
			}
			out, err := yaml.Marshal(cfg)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "# Converted by gpuscaler config convert; credentials stay in %s.\n%s", credentials, out)
			return err
		},
	}
	src.addFlags(convert)
	src.addListenerFlags(convert)
	cmd.AddCommand(convert)
	return cmd
}

// scriptDir is where a converted config expects the Kamatera startup
// scripts it does not print: a Secret mounted into the pod.
const scriptDir = "/etc/gpuscaler/scripts"

// withholdScripts takes the static startup scripts (script-base64) out of
// an imported Kamatera config: one usually carries a join token, and the
// converted config usually lands in a ConfigMap. Each group names a file
// instead, and a note says how to put the script there.
func withholdScripts(w io.Writer, cfg *config.Config) {
	for i := range cfg.NodeGroups {
		g := &cfg.NodeGroups[i]
		if g.Cloud != kamatera.Name || g.CloudOptions[kamatera.OptionScriptBase64] == "" {
			continue
		}
		delete(g.CloudOptions, kamatera.OptionScriptBase64)
		path := scriptDir + "/" + g.Name + ".sh"
		g.CloudOptions[kamatera.OptionScriptFile] = path
		fmt.Fprintf(w, "note: the startup script of nodeGroups[%d] (%s, script-base64) may hold a join token and is not printed; "+
			"keep it in a Secret mounted at %s (cloudOptions.scriptFile): "+
			"kubectl create secret generic kamatera-scripts --from-file=%s.sh=<the script, decoded>\n", i, g.Name, path, g.Name)
	}
}

// manifests is a seed format of Kubernetes manifests rather than a config
// file, which config convert turns into gpuscaler's and validate checks by
// converting.
type manifests struct {
	kind   string
	header string // what config convert prints above the result
	fn     func([]byte) (out []byte, notes []string, err error)
}

// seedManifests recognises a file of seed manifests by its content:
// Baseten NodeProvisioners or Karpenter v1alpha5 Provisioners.
func seedManifests(data []byte) (manifests, bool) {
	switch {
	case seedconfig.IsNodeProvisionerManifest(data):
		return manifests{kind: "Baseten NodeProvisioner manifests", fn: seedconfig.ConvertNodeProvisioners,
			header: "# Converted by gpuscaler config convert from Baseten NodeProvisioner manifests.\n" +
				"# gpuscaler's config needs clouds.gcp (project; zone for bare instance group names); see docs/provisioner.md.\n"}, true
	case seedconfig.IsProvisionerManifest(data):
		return manifests{kind: "Karpenter v1alpha5 Provisioners", fn: seedconfig.ConvertProvisioners,
			header: "# Converted by gpuscaler config convert from Karpenter v1alpha5 Provisioners,\n" +
				"# for gpuscaler-karpenter on Scaleway; see docs/karpenter.md.\n"}, true
	}
	return manifests{}, false
}

// convert converts the manifests, printing the conversion's notes.
func (m manifests) convert(cmd *cobra.Command, data []byte) ([]byte, error) {
	out, notes, err := m.fn(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.kind, err)
	}
	for _, n := range notes {
		fmt.Fprintln(cmd.ErrOrStderr(), "note: "+n)
	}
	return out, nil
}
