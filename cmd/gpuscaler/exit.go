package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

// Exit codes, documented in docs/configuration.md: scripts tell a command
// line they got wrong, and a configuration that is invalid, from a
// failure at run time.
const (
	exitOK            = 0
	exitFailure       = 1 // a failure at run time (a cloud, the cluster, a file that cannot be read)
	exitUsage         = 2 // the command line: an unknown command or flag, a bad flag value
	exitInvalidConfig = 3 // the configuration: a key or value start-up refuses
)

// usageError is a command line that cannot be run as given.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// run runs the command line args and returns the process's exit code,
// the error printed on stderr.
func run(root interface {
	SetArgs([]string)
	Execute() error
}, stderr io.Writer, args []string) int {
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	msg := err.Error()
	if code == exitUsage && !strings.Contains(msg, "--help") {
		msg += "; run 'gpuscaler --help'"
	}
	fmt.Fprintln(stderr, "error:", msg)
	return code
}

// exitCode classes an error a command returned.
func exitCode(err error) int {
	var usage *usageError
	var invalid *config.ValidationError
	var decode *config.DecodeError
	switch {
	case errors.As(err, &usage):
		return exitUsage
	// cobra returns its own untyped errors for these.
	case strings.HasPrefix(err.Error(), "unknown command"), strings.Contains(err.Error(), " arg(s), received "):
		return exitUsage
	case errors.As(err, &invalid), errors.As(err, &decode), errors.Is(err, config.ErrEmpty):
		return exitInvalidConfig
	}
	return exitFailure
}
