package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

func newValidateCommand() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a config file and print every problem with its field path",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath)
			var ve *config.ValidationError
			if errors.As(err, &ve) {
				for _, fe := range ve.Errs {
					fmt.Fprintln(cmd.ErrOrStderr(), fe.Error())
				}
				return fmt.Errorf("%s: %d errors", configPath, len(ve.Errs))
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: valid (%d node groups)\n", configPath, len(cfg.NodeGroups))
			return err
		},
	}
	cmd.Flags().StringVarP(&configPath, "config", "c", "", "path of the config file (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
