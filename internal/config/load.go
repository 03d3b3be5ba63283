package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ValidationError lists every problem found in a config file, each naming
// its field path. Test for it with errors.As.
type ValidationError struct {
	Errs field.ErrorList
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		lines[i] = fe.Error()
	}
	return fmt.Sprintf("invalid config (%d errors):\n  %s", len(e.Errs), strings.Join(lines, "\n  "))
}

// Load reads, defaults and validates a config file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a config document strictly (unknown and duplicate keys are
// errors), applies defaults and validates it.
func Parse(data []byte) (*Config, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errors.New("config is empty")
	}
	// Keys match case-sensitively: "maxsize" is an unknown key, not maxSize.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	var cfg Config
	strict, err := kjson.UnmarshalStrict(js, &cfg, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decode config: %w", errors.Join(strict...))
	}
	if err := Complete(&cfg); err != nil {
		return nil, err
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
