package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpuscaler/gpuscaler/internal/daemon"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

// globalFlags are the flags every subcommand takes.
type globalFlags struct {
	logLevel  string
	logFormat string
	kube      kubeFlags
}

// kubeFlags are the cluster access flags every Kubernetes tool takes.
type kubeFlags struct {
	kubeconfig, context string
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "gpuscaler",
		Short: "Autoscale Kubernetes GPU nodes on GPU clouds",
		Example: `  gpuscaler simulate                                   # a day of GPU traffic on the simulated cloud
  gpuscaler validate --config config.yaml              # check a config as start-up would
  gpuscaler provider --config config.yaml              # serve cluster-autoscaler's external gRPC provider
  gpuscaler controller --config config.yaml            # run the NodeProvisioner controller`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	// The global flags are checked before any command runs, those that
	// log nothing too.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		_, err := g.logger(io.Discard)
		return err
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "auto", "log format: json, text, or auto (text on a terminal, JSON otherwise)")
	root.PersistentFlags().StringVar(&g.kube.kubeconfig, "kubeconfig", "",
		"kubeconfig file, or in-cluster (the pod's service account); overrides the config's kubeconfig. Without either, $KUBECONFIG, ~/.kube/config, then in-cluster, as kubectl reads them (the provider then runs without cluster access)")
	root.PersistentFlags().StringVar(&g.kube.context, "context", "", "kubeconfig context to use instead of the file's current one")
	root.AddCommand(
		newProviderCommand(g),
		newControllerCommand(g),
		newSimulateCommand(g),
		newValidateCommand(),
		newCatalogCommand(),
		newConfigCommand(),
		newVersionCommand(),
	)
	return root
}

// logger builds the process logger from the global flags.
func (g *globalFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, &usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	opts := &slog.HandlerOptions{Level: level}
	format := strings.ToLower(g.logFormat)
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	default:
		return nil, &usageError{fmt.Errorf("--log-format: %q is not json, text or auto", g.logFormat)}
	}
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  gpuscaler version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "gpuscaler", daemon.Version(version))
			return err
		},
	}
}
