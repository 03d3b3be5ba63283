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
		Short: "Check a config file and print every problem with its field path",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			getenv, err := envWithDotEnv(".env")
			if err != nil {
				return err
			}
			cfg, err := src.load(getenv)
			var ve *config.ValidationError
			if errors.As(err, &ve) {
				for _, fe := range ve.Errs {
					fmt.Fprintln(cmd.ErrOrStderr(), fe.Error())
				}
				return fmt.Errorf("%d errors", len(ve.Errs))
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "valid (%d node groups)\n", len(cfg.NodeGroups))
			return err
		},
	}
	src.addFlags(cmd)
	return cmd
}
