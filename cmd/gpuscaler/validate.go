package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

func newValidateCommand() *cobra.Command {
	var src source
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a config as start-up would, and print every problem with its field path",
		Long: `validate runs every check start-up runs without starting anything: the file's schema and
values, credentials and the files it names (TLS, kubeconfig, templates), each group's cloudOptions,
and each group against its cloud's catalog. The simulated cloud answers locally; with --online the
other clouds are asked too (their credentials must work).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if src.configPath != "" {
				if data, err := config.ReadFile(src.configPath); err == nil {
					if m, ok := seedManifests(data); ok {
						if _, err := m.convert(cmd, data); err != nil {
							return err
						}
						_, err := fmt.Fprintf(cmd.OutOrStdout(), "valid (%s; gpuscaler config convert prints what they become)\n", m.kind)
						return err
					}
				}
			}
			cfg, err := src.load(cmd.Context(), src.environ(nil))
			if err != nil {
				return err
			}
			for _, w := range src.warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+src.explain(cfg, errors.New(w)).Error())
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "valid (%d node groups)\n", len(cfg.NodeGroups))
			return err
		},
	}
	src.addFlags(cmd)
	src.addListenerFlags(cmd)
	cmd.Flags().BoolVar(&src.online, "online", false, "also ask the clouds: credentials, instance types and MIG profiles of every group")
	return cmd
}
