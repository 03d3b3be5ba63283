package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/utils/env"
)

// Karpenter core parses every flag of the process, its own and its
// provider's, from the Injectables it is given before NewOperator.
func init() {
	coreoptions.Injectables = append(coreoptions.Injectables, &options{})
}

// options are gpuscaler's flags (and environment variables) beside
// Karpenter core's.
type options struct {
	// configPath is gpuscaler's config file: clouds, credentials' variable
	// names, template node groups, sync and cost settings.
	configPath string
	// reloadPeriod is how often the config file is checked for changes.
	reloadPeriod time.Duration
	// leakPeriod and leakGrace drive the leaked-machine collector.
	leakPeriod, leakGrace time.Duration
	// logLevel is gpuscaler's own log level (Karpenter core has LOG_LEVEL).
	logLevel string
}

type optionsKey struct{}

// AddFlags adds gpuscaler's flags.
func (o *options) AddFlags(fs *coreoptions.FlagSet) {
	fs.StringVar(&o.configPath, "config", env.WithDefaultString("GPUSCALER_CONFIG", ""), "gpuscaler's config file (clouds, template node groups); required")
	fs.DurationVar(&o.reloadPeriod, "config-reload-period", env.WithDefaultDuration("GPUSCALER_CONFIG_RELOAD_PERIOD", 10*time.Second), "how often the config file is checked for changes")
	fs.DurationVar(&o.leakPeriod, "leaked-machine-period", env.WithDefaultDuration("GPUSCALER_LEAKED_MACHINE_PERIOD", 2*time.Minute), "how often machines no NodeClaim owns are looked for")
	fs.DurationVar(&o.leakGrace, "leaked-machine-grace", env.WithDefaultDuration("GPUSCALER_LEAKED_MACHINE_GRACE", time.Minute), "how old a machine no NodeClaim owns must be to be deleted")
	fs.StringVar(&o.logLevel, "gpuscaler-log-level", env.WithDefaultString("GPUSCALER_LOG_LEVEL", "info"), "gpuscaler's log level: debug, info, warn, error")
}

// Parse parses the flags and checks gpuscaler's.
func (o *options) Parse(fs *coreoptions.FlagSet, args ...string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return fmt.Errorf("parsing flags, %w", err)
	}
	var errs []error
	if o.configPath == "" {
		errs = append(errs, errors.New("--config (GPUSCALER_CONFIG): gpuscaler's config file is required"))
	}
	for name, d := range map[string]time.Duration{"--config-reload-period": o.reloadPeriod, "--leaked-machine-period": o.leakPeriod, "--leaked-machine-grace": o.leakGrace} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, not %s", name, d))
		}
	}
	return errors.Join(errs...)
}

// ToContext puts the options in ctx.
func (o *options) ToContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

// fromContext returns the options NewOperator parsed.
func fromContext(ctx context.Context) *options {
	o, _ := ctx.Value(optionsKey{}).(*options)
	return o
}
