// Command gpuscaler autoscales Kubernetes GPU nodes on GPU clouds. See
// README.md for a tour; `gpuscaler --help` lists the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// defaultGCPercent is the garbage collector's target when GOGC is not set.
// gpuscaler's live heap is small and steady (its state, plus one list per
// sync), so collecting at 30 % growth instead of Go's 100 % keeps the
// resident set near the live heap for little CPU (docs/benchmarks.md: at
// 10,000 instances 10 MiB less than 100 % and 3.5 MiB less than 50 %, for
// about 1 % of a core with 5 s syncs). GOGC and GOMEMLIMIT still win.
const defaultGCPercent = 30

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if !strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
		// gpuscaler serves no profiles, so it records none: each sampled
		// allocation's stack would cost CPU and resident memory (up to
		// 1.4 MiB of buckets) for nobody. GODEBUG=memprofilerate=N keeps
		// sampling for a debugging build.
		runtime.MemProfileRate = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCommand(os.Stdout, os.Stderr)
	root.SetContext(ctx)
	code := run(root, os.Stderr, os.Args[1:])
	stop()
	os.Exit(code)
}
