package main

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuscaler/gpuscaler/api/v1alpha1"
	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/simulate"
)

type simulateFlags struct {
	config, trace, format, provisioner, html, sweep, policy string
	output, pool                                            string
	seed                                                    uint64
	standby, days                                           int
	scale, pullRate                                         float64
	gpuStartup, standbyGPUStartup, loop, trainFor           time.Duration
	refillAfter, scaleDownAfter                             time.Duration
	forecast, prePull                                       bool
	gpuStartupByGPUs                                        map[string]string
	// cloud are the simulated cloud's timings and prices the flags put
	// over the pool's clouds.sim.
	cloud simCloudFlags
}

// simCloudFlags put the simulated cloud's boots, starts and stopped
// price over the pool's clouds.sim, each only when given.
type simCloudFlags struct {
	bootDelay, bootDelayP95, startDelay, startDelayP95 time.Duration
	startFailureRate, stoppedPrice                     float64
}

// add registers the flags.
func (c *simCloudFlags) add(fl *pflag.FlagSet) {
	fl.DurationVar(&c.bootDelay, "boot-delay", 0, "sets clouds.sim.bootDelay, the median time from an order to a registered Node (built-in pool: 4m30s)")
	fl.DurationVar(&c.bootDelayP95, "boot-delay-p95", 0, "sets clouds.sim.bootDelayP95, its 95th percentile: each boot a log-normal draw (built-in pool: 7m30s)")
	fl.DurationVar(&c.startDelay, "start-delay", 0, "sets clouds.sim.startDelay, the median time from a standby instance's start to its registered Node (built-in pool: 1m)")
	fl.DurationVar(&c.startDelayP95, "start-delay-p95", 0, "sets clouds.sim.startDelayP95, its 95th percentile (built-in pool: 4m30s)")
	fl.Float64Var(&c.startFailureRate, "start-failure-rate", 0, "sets clouds.sim.startFailureRate, the chance a start is refused for capacity (built-in pool: 0.2)")
	fl.Float64Var(&c.stoppedPrice, "stopped-price", 0, "sets clouds.sim.stoppedPrice, a stopped instance's hourly price, its disk (built-in pool: 0.0466)")
}

// apply puts the flags that were given over s.
func (c *simCloudFlags) apply(fl *pflag.FlagSet, s *config.SimConfig) {
	duration := func(name string, d time.Duration, to **metav1.Duration) {
		if fl.Changed(name) {
			*to = &metav1.Duration{Duration: d}
		}
	}
	duration("boot-delay", c.bootDelay, &s.BootDelay)
	duration("boot-delay-p95", c.bootDelayP95, &s.BootDelayP95)
	duration("start-delay", c.startDelay, &s.StartDelay)
	duration("start-delay-p95", c.startDelayP95, &s.StartDelayP95)
	if fl.Changed("start-failure-rate") {
		s.StartFailureRate = c.startFailureRate
	}
	if fl.Changed("stopped-price") {
		s.StoppedPrice = &c.stoppedPrice
	}
}

func newSimulateCommand(g *globalFlags) *cobra.Command {
	f := &simulateFlags{}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Play a workload trace through the real core and NodeProvisioner on a virtual clock, against a cluster-autoscaler-like baseline",
		Long: `simulate runs gpuscaler's node-group core, its NodeProvisioner planner and the simulated cloud on a
virtual clock (a day of trace in seconds) and reports how long pods waited for GPUs and what the pool
cost, next to a baseline that scales as cluster-autoscaler does with its defaults. See docs/simulate.md.`,
		Example: `  gpuscaler simulate
  gpuscaler simulate --trace training-jobs --html report.html
  gpuscaler simulate --pool scaleway --forecast --days 3
  gpuscaler simulate --config examples/sim-quickstart.yaml --trace my-cluster.csv
  gpuscaler simulate --sweep minUnutilizedGPUNodes=0..3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return runSimulate(cmd, f, log)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "gpuscaler config whose node groups on the simulated cloud form the pool (default: a built-in pool of spot H100s, 8xH100 nodes and MIG A100s)")
	fl.StringVar(&f.pool, "pool", simulate.PoolSim, "the built-in pool, on one cloud's catalog and prices: "+strings.Join(simulate.Pools(), ", ")+
		" (sim: the simulated cloud's own; standby only where the cloud offers it)")
	fl.StringVar(&f.trace, "trace", "diurnal-inference", "a built-in trace ("+strings.Join(simulate.Builtins, ", ")+") or a CSV or JSONL file")
	fl.StringVar(&f.format, "format", "", "the trace file's format, csv or jsonl (default: from its extension)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the built-in traces, the simulated cloud and instance names: the same seed gives the same numbers")
	fl.Float64Var(&f.scale, "scale", 1, "multiplies a built-in trace's arrival rate")
	fl.StringVar(&f.policy, "policy", "all", "nodeprovisioner, cluster-autoscaler, oracle (the NodeProvisioner told every arrival in advance, with --standby's pools: a reference), or all side by side, with the floor no policy beats (both: the same as all)")
	fl.StringVar(&f.provisioner, "provisioner", "", "a NodeProvisioner manifest whose spec the NodeProvisioner policy uses (default: its defaults over every group)")
	fl.DurationVar(&f.gpuStartup, "gpu-startup", simulate.FactGPUStartup, "time from a registered Node to its GPUs being allocatable (driver, device plugin)")
	fl.StringToStringVar(&f.gpuStartupByGPUs, "gpu-startup-by-gpus", nil, "the GPU start-up, cold or after a standby start, of nodes of a GPU count, e.g. 8=6m (no source publishes one; counts left out take --gpu-startup and --standby-gpu-startup)")
	fl.DurationVar(&f.standbyGPUStartup, "standby-gpu-startup", simulate.FactStandbyGPUStartup, "the same for an instance started from standby")
	fl.Float64Var(&f.pullRate, "pull-rate", simulate.FactPullRate, "how fast a node pulls a pod's image, in MB/s: a trace's pods name theirs (image, image_gb), a built-in trace's run a 10 GB one, and --standby's pools pull them while they warm")
	fl.BoolVar(&f.prePull, "pre-pull", false, "every group without prePullImages pulls the trace's images as its nodes join, while their GPUs start (nodeGroups[].prePullImages)")
	f.cloud.add(fl)
	fl.IntVar(&f.standby, "standby", defaultStandby, "standby pool size for each group without one; with --policy all, the NodeProvisioner also runs with it beside its run without (0: none)")
	fl.DurationVar(&f.refillAfter, "standby-refill-after", 0, "how long --standby's pools wait, short, before they order fresh instances; meanwhile the nodes scaled down go back to them (standby.refillAfter)")
	fl.DurationVar(&f.scaleDownAfter, "standby-scale-down-after", 0, "how long a node stays unneeded before it goes back to --standby's pool when the pool has room (standby.scaleDownAfter; 0: the NodeProvisioner's scaleDownDelay)")
	fl.IntVar(&f.days, "days", 1, fmt.Sprintf("days of a built-in trace, each drawn anew (the forecast learns on the first ones); at most %d: a day is about a second and 25 MB a policy", simulate.MaxDays))
	fl.BoolVar(&f.forecast, "forecast", false, "the NodeProvisioner also orders ahead of a forecast of the pool's demand, learned on the trace itself; with --policy all, as a column of its own")
	fl.DurationVar(&f.trainFor, "train-for", 24*time.Hour, "how long the forecast learns before it orders ahead")
	fl.DurationVar(&f.loop, "loop", 10*time.Second, "autoscaler loop period (the core lists the cloud every sync.period of the config)")
	addOutputFlag(cmd, &f.output)
	fl.StringVar(&f.html, "html", "", "also write a self-contained HTML report (charts over time and the table) to this file")
	fl.StringVar(&f.sweep, "sweep", "", "run a grid over one NodeProvisioner setting, e.g. minUnutilizedGPUNodes=0..3, and print the frontier of p95 wait against cost")
	return cmd
}

// simulateGCPercent is the garbage collector's target for simulate, when
// GOGC is not set: a batch job whose heap is small and whose time is the
// user's wait, unlike the long-running commands (defaultGCPercent).
const simulateGCPercent = 200

// defaultStandby is --standby's default: the standby pool per group the
// default run shows beside the NodeProvisioner without one.
const defaultStandby = 2

func runSimulate(cmd *cobra.Command, f *simulateFlags, log *slog.Logger) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(simulateGCPercent)
	}
	if err := checkOutput(f.output); err != nil {
		return err
	}
	if !(f.pullRate > 0) {
		return &usageError{fmt.Errorf("--pull-rate %v: want more than 0 MB/s (a trace without images pulls nothing)", f.pullRate)}
	}
	if f.output != outputTable && f.sweep != "" {
		return &usageError{fmt.Errorf("--sweep prints its frontier as a table only; leave out --output %s", f.output)}
	}
	// out is the results; info what a person reads beside them, which
	// JSON and YAML leave to stderr.
	out, info := cmd.OutOrStdout(), cmd.OutOrStdout()
	if f.output != outputTable {
		info = cmd.ErrOrStderr()
	}
	cfg, err := loadPool(cmd.Flags(), f)
	if err != nil {
		return err
	}
	if why := standbyRefused(cfg); why != "" && f.standby > 0 {
		if cmd.Flags().Changed("standby") {
			return &usageError{fmt.Errorf("--standby %d: %s", f.standby, why)}
		}
		f.standby = 0 // the default asks for none where the cloud cannot
	}
	trace, err := loadTrace(f)
	if err != nil {
		return err
	}
	opts := simulate.Options{Config: cfg, Seed: f.seed, GPUStartup: f.gpuStartup, StandbyGPUStartup: f.standbyGPUStartup, PullRate: f.pullRate, PrePull: f.prePull, Loop: f.loop, StandbyRefillAfter: f.refillAfter, StandbyScaleDownAfter: f.scaleDownAfter}
	if opts.GPUStartupByGPUs, err = parseByGPUs(f.gpuStartupByGPUs); err != nil {
		return err
	}
	if cmd.Flags().Changed("log-level") {
		// The core's own logs (wall-clock times, not the run's) only when
		// asked for: a day of them buries the report.
		opts.Logger = log.With("component", "core")
	}
	if f.provisioner != "" {
		np, err := readProvisioner(f.provisioner)
		if err != nil {
			return err
		}
		opts.Provisioner = np.Spec
	}
	opts.Progress = progress(cmd.ErrOrStderr(), trace.Name)
	ctx := cmd.Context()
	fmt.Fprintf(info, "trace %s: %d pods over %s; pool: %s\n\n", trace.Name, len(trace.Pods), trace.End().Round(time.Minute), poolName(f))
	if f.forecast && trace.End() <= f.trainFor {
		// Too short to learn on and then play: run without, and say so.
		fmt.Fprintf(info, "no forecast: the trace spans %s, no more than --train-for %s, so nothing would be left to play after training (a built-in trace takes --days)\n\n",
			trace.End().Round(time.Minute), f.trainFor)
		f.forecast = false
	}
	if f.forecast {
		// Every column is measured on the days the forecast did not learn
		// on, alike.
		opts.TrainFor, opts.MeasureFrom = f.trainFor, f.trainFor
	}
	if f.sweep != "" {
		opts.Forecast = f.forecast
		sw, err := simulate.ParseSweep(f.sweep)
		if err != nil {
			return err
		}
		results, err := sw.Run(ctx, trace, opts)
		if err != nil {
			return err
		}
		if err := sw.WriteFrontier(out, results); err != nil {
			return err
		}
		return writeHTML(f.html, results)
	}
	if f.standby < 0 {
		return fmt.Errorf("--standby %d: want 0 or more", f.standby)
	}
	columns, err := simulateColumns(f)
	if err != nil {
		return err
	}
	var results []*simulate.Result
	for _, c := range columns {
		p := c.policy
		opts.Policy, opts.Standby, opts.Forecast = p, c.standby, c.forecast
		r, err := simulate.Run(ctx, trace, opts)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		results = append(results, r)
	}
	if f.output != outputTable {
		if err := writeStructured(out, f.output, simulate.Summarize(results...)); err != nil {
			return err
		}
	} else if err := simulate.WriteTable(out, results...); err != nil {
		return err
	}
	return writeHTML(f.html, results)
}

// column is one run of simulate's table: a policy, its standby pools, and
// whether it orders ahead of a forecast.
type column struct {
	policy   simulate.Policy
	standby  int
	forecast bool
}

// simulateColumns are the runs --policy, --standby and --forecast ask
// for, in the table's order.
func simulateColumns(f *simulateFlags) ([]column, error) {
	var columns []column
	switch f.policy {
	case "all", "both":
		// The oracle knows what every other column does, standby pools
		// included.
		columns = []column{{simulate.NodeProvisioner, 0, false}}
		if f.standby > 0 {
			columns = append(columns, column{simulate.NodeProvisioner, f.standby, false})
		}
		if f.forecast {
			columns = append(columns, column{simulate.NodeProvisioner, 0, true})
			if f.standby > 0 {
				// The forecast starts standby instances ahead of the pods
				// it expects soon (provisioner.OrdersAhead).
				columns = append(columns, column{simulate.NodeProvisioner, f.standby, true})
			}
		}
		columns = append(columns, column{simulate.Baseline, 0, false}, column{simulate.Oracle, f.standby, false})
	case string(simulate.NodeProvisioner), string(simulate.Baseline), string(simulate.Oracle):
		if f.forecast && f.policy != string(simulate.NodeProvisioner) {
			return nil, fmt.Errorf("--forecast: only the nodeprovisioner policy orders ahead of a forecast, not %s", f.policy)
		}
		columns = []column{{simulate.Policy(f.policy), f.standby, f.forecast}}
	default:
		return nil, fmt.Errorf("--policy %q: want nodeprovisioner, cluster-autoscaler, oracle or all", f.policy)
	}
	return columns, nil
}

// loadPool reads --config, or the built-in pool --pool names, with the
// simulated cloud's flags put over its clouds.sim.
func loadPool(fl *pflag.FlagSet, f *simulateFlags) (*config.Config, error) {
	var doc []byte
	if f.config != "" {
		if fl.Changed("pool") {
			return nil, &usageError{fmt.Errorf("--pool %s and --config %s: a built-in pool or your own, not both", f.pool, f.config)}
		}
		var err error
		if doc, err = os.ReadFile(f.config); err != nil {
			return nil, err
		}
	} else {
		pool, err := simulate.Pool(f.pool)
		if err != nil {
			return nil, &usageError{fmt.Errorf("--pool: %w", err)}
		}
		doc = []byte(pool)
	}
	cfg, err := config.Parse(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nameOr(f.config, "built-in pool"), err)
	}
	if cfg.Clouds.Sim != nil {
		f.cloud.apply(fl, cfg.Clouds.Sim)
		if err := config.Complete(cfg); err != nil {
			return nil, fmt.Errorf("%s with the flags: %w", nameOr(f.config, "built-in pool"), err)
		}
	}
	return cfg, nil
}

// parseByGPUs reads --gpu-startup-by-gpus: a GPU count and a duration a
// pair.
func parseByGPUs(in map[string]string) (map[int]time.Duration, error) {
	out := map[int]time.Duration{}
	for k, v := range in {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			return nil, &usageError{fmt.Errorf("--gpu-startup-by-gpus %s=%s: %q is not a GPU count", k, v, k)}
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, &usageError{fmt.Errorf("--gpu-startup-by-gpus %s=%s: %q is not a duration such as 6m", k, v, v)}
		}
		out[n] = d
	}
	return out, nil
}

// poolName names the pool a run plays, for the report's first line.
func poolName(f *simulateFlags) string {
	if f.config != "" {
		return f.config
	}
	return "built-in, " + f.pool + " catalog"
}

// standbyRefused says why a pool's groups on the simulated cloud can keep
// no standby pool (the cloud whose catalog it plays cannot); empty when
// they can.
func standbyRefused(cfg *config.Config) string {
	for i := range cfg.NodeGroups {
		if g := &cfg.NodeGroups[i]; g.Cloud == config.CloudSim {
			if why := config.StandbyRefused(g, cfg.Clouds); why != "" {
				return why
			}
		}
	}
	return ""
}

// loadTrace reads --trace: a built-in name, else a file.
func loadTrace(f *simulateFlags) (simulate.Trace, error) {
	if slices.Contains(simulate.Builtins, f.trace) {
		tr, err := simulate.BuiltinDays(f.trace, f.scale, f.seed, f.days)
		if err != nil {
			return tr, fmt.Errorf("--trace %s: %w", f.trace, err)
		}
		return tr, nil
	}
	if f.days != 1 {
		return simulate.Trace{}, fmt.Errorf("--days %d: only a built-in trace is drawn for a number of days; a file is as long as it is", f.days)
	}
	file, err := os.Open(f.trace)
	if err != nil {
		return simulate.Trace{}, fmt.Errorf("--trace %q: not a built-in trace (%s), and %w", f.trace, strings.Join(simulate.Builtins, ", "), err)
	}
	defer func() { _ = file.Close() }()
	format := f.format
	if format == "" {
		switch strings.ToLower(filepath.Ext(f.trace)) {
		case ".jsonl", ".ndjson":
			format = "jsonl"
		default:
			format = "csv"
		}
	}
	t, err := simulate.Read(file, filepath.Base(f.trace), format)
	if err != nil {
		return t, fmt.Errorf("%s: %w", f.trace, err)
	}
	return t, nil
}

// readProvisioner reads a NodeProvisioner manifest, refusing unknown keys.
func readProvisioner(path string) (*v1alpha1.NodeProvisioner, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var np v1alpha1.NodeProvisioner
	if err := yaml.UnmarshalStrict(doc, &np); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if np.Kind != "" && np.Kind != "NodeProvisioner" {
		return nil, fmt.Errorf("%s: kind %q: want NodeProvisioner", path, np.Kind)
	}
	return &np, nil
}

// progress reports a long run's simulated time on w about every two
// seconds of wall time, naming the policy it runs:
// "simulate: nodeprovisioner +standby 2: 17h of 24h (diurnal-inference)".
func progress(w io.Writer, trace string) func(name string, done, total time.Duration) {
	last := time.Now()
	return func(name string, done, total time.Duration) {
		if time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now()
		fmt.Fprintf(w, "simulate: %s: %dh of %dh (%s)\n", name, int(done.Hours()), int(math.Ceil(total.Hours())), trace)
	}
}

func writeHTML(path string, results []*simulate.Result) error {
	if path == "" {
		return nil
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := simulate.WriteHTML(file, results...); err != nil {
		_ = file.Close()
		return err
	}
	return file.Close()
}

func nameOr(name, fallback string) string {
	if name == "" {
		return fallback
	}
	return name
}
