package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// validation is what validate -o json|yaml prints.
type validation struct {
	Valid bool `json:"valid"`
	// SeedKind names a seed system's manifests, which are converted.
	SeedKind   string   `json:"seedKind,omitempty"`
	NodeGroups int      `json:"nodeGroups,omitempty"`
	Warnings   []string `json:"warnings,omitempty"`
	// Errors are the problems, one per field for an invalid config.
	Errors []string `json:"errors,omitempty"`
}

// problems lists an error's problems: one per field of an invalid
// config, else the error.
func problems(err error) []string {
	var invalid *config.ValidationError
	if errors.As(err, &invalid) {
		out := make([]string, len(invalid.Errs))
		for i := range invalid.Errs {
			out[i] = invalid.Problem(i)
		}
		return out
	}
	return []string{err.Error()}
}

func newValidateCommand() *cobra.Command {
	var src source
	var format string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a config as start-up would, and print every problem with its field path",
		Long: `validate runs every check start-up runs without starting anything: the file's schema and
values, credentials and the files it names (TLS, kubeconfig, templates), each group's cloudOptions,
and each group against its cloud's catalog. The simulated cloud answers locally; with --online the
other clouds are asked too (their credentials must work). The exit status is 0 for a valid config,
3 for an invalid one; -o json or yaml prints the outcome for scripts either way.`,
		Example: `  gpuscaler validate --config config.yaml
  gpuscaler validate --config config.yaml --online            # also asks the clouds
  gpuscaler validate --config config.yaml -o json | jq -r '.errors[]?'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(format); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			report := func(v validation, err error) error {
				if format == outputTable {
					return err
				}
				if err != nil {
					v.Errors = problems(err)
				}
				if werr := writeStructured(out, format, v); werr != nil {
					return werr
				}
				return err
			}
			if src.configPath != "" {
				if data, err := config.ReadFile(src.configPath); err == nil {
					if m, ok := seedManifests(data); ok {
						if _, err := m.convert(cmd, data); err != nil {
							return report(validation{SeedKind: m.kind}, err)
						}
						if format != outputTable {
							return report(validation{Valid: true, SeedKind: m.kind}, nil)
						}
						_, err = fmt.Fprintf(out, "valid (%s; gpuscaler config convert prints what they become)\n", m.kind)
						return err
					}
				}
			}
			cfg, err := src.load(cmd.Context(), src.environ(nil))
			if err != nil {
				return report(validation{}, err)
			}
			var warnings []string
			for _, w := range src.warnings {
				warnings = append(warnings, src.explain(cfg, errors.New(w)).Error())
			}
			if format != outputTable {
				return report(validation{Valid: true, NodeGroups: len(cfg.NodeGroups), Warnings: warnings}, nil)
			}
			for _, w := range warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			_, err = fmt.Fprintf(out, "valid (%d node groups)\n", len(cfg.NodeGroups))
			return err
		},
	}
	addOutputFlag(cmd, &format)
	src.addFlags(cmd)
	src.addListenerFlags(cmd)
	cmd.Flags().BoolVar(&src.online, "online", false, "also ask the clouds: credentials, instance types and MIG profiles of every group")
	return cmd
}
