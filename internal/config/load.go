package config

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidationError lists every problem found in a config, each as
// "<field path>: <reason>". Test for it with errors.As.
type ValidationError struct {
	Errs field.ErrorList
}

// Error renders a header line, then one problem per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		lines[i] = fe.Error()
	}
	noun := "errors"
	if len(e.Errs) == 1 {
		noun = "error"
	}
	return fmt.Sprintf("invalid config (%d %s):\n  %s", len(e.Errs), noun, strings.Join(lines, "\n  "))
}

// Load reads, decodes, defaults and validates a config file. Errors name
// the file; see Parse for their kinds.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes one YAML document strictly, applies defaults and validates
// the result. An empty document is ErrEmpty; keys that are unknown or
// repeated and values of the wrong kind are *DecodeError (joined when there
// are several) or the YAML parser's own error, naming the key and its line;
// a config that decodes but is not valid is a *ValidationError listing every
// problem.
func Parse(data []byte) (*Config, error) {
	cfg, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := Complete(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Decode decodes one YAML document strictly, as Parse does, without
// defaults or validation: for callers that override fields (command-line
// flags) before Complete checks the whole.
// The old keys of the clouds section are read into their new ones and
// noted in Config.Deprecated (see migrateAliases).
func Decode(data []byte) (*Config, error) {
	var cfg Config
	if err := decode(data, &cfg); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if errs := migrateAliases(&cfg); len(errs) > 0 {
		return nil, &ValidationError{Errs: errs}
	}
	return &cfg, nil
}

// Complete applies defaults to a config built in code (by an importer, say)
// and validates it; the error is a *ValidationError.
func Complete(cfg *Config) error {
	SetDefaults(cfg)
	if errs := Validate(cfg); len(errs) > 0 {
		return &ValidationError{Errs: errs}
	}
	return nil
}
