package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Output formats of the commands that print results (-o): a table for
// people, JSON or YAML for scripts, as kubectl's -o.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// addOutputFlag adds -o/--output to a command.
func addOutputFlag(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVarP(format, "output", "o", outputTable, "output format: table, json or yaml")
}

// checkOutput refuses an unknown format as a usage error (exit 2).
func checkOutput(format string) error {
	switch format {
	case outputTable, outputJSON, outputYAML:
		return nil
	}
	return &usageError{fmt.Errorf("--output %q: want table, json or yaml", format)}
}

// writeStructured prints v as indented JSON or as YAML.
func writeStructured(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == outputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}
