package config

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidationError lists every problem found in a config, each as
// "<field path>: <reason>". Test for it with errors.As.
type ValidationError struct {
	Errs field.ErrorList
	// Lines are the document's lines of Errs' fields, one each, when the
	// config was parsed from YAML (Parse): the field's key, or its nearest
	// ancestor's for one the document leaves out; 0 when not known.
	Lines []int
}

// Error renders a header line, then one problem per line, each with its
// line in the document when known.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errs))
	for i := range e.Errs {
		lines[i] = e.Problem(i)
	}
	noun := "errors"
	if len(e.Errs) == 1 {
		noun = "error"
	}
	return fmt.Sprintf("invalid config (%d %s):\n  %s", len(e.Errs), noun, strings.Join(lines, "\n  "))
}

// Problem is the i-th problem as Error prints it: "line 9:
// nodeGroups[0].maxSize: Invalid value: ...".
func (e *ValidationError) Problem(i int) string {
	if i < len(e.Lines) && e.Lines[i] > 0 {
		return fmt.Sprintf("line %d: %s", e.Lines[i], e.Errs[i].Error())
	}
	return e.Errs[i].Error()
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
		return nil, Locate(err, data)
	}
	return cfg, nil
}

// Locate gives a *ValidationError found in err the lines of its fields in
// data, the YAML document it was decoded from (Decode, then Complete);
// it returns err.
func Locate(err error, data []byte) error {
	var invalid *ValidationError
	if errors.As(err, &invalid) && len(data) > 0 {
		invalid.Lines = fieldLines(data, invalid.Errs)
	}
	return err
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
