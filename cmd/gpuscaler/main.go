// Command gpuscaler autoscales Kubernetes GPU nodes on GPU clouds. See
// README.md for a tour; `gpuscaler --help` lists the subcommands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// defaultGCPercent is the garbage collector's target when GOGC is not set:
// gpuscaler's heap is small and steady, so collecting at half the usual
// growth costs little CPU and keeps about 16 MiB less resident at 10,000
// instances (docs/benchmarks.md). GOGC and GOMEMLIMIT still win.
const defaultGCPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
