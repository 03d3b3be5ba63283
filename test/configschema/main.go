// Command configschema writes the chart's schema of `config` (the values
// key that holds gpuscaler's config file) from the config types, so that
// `helm install` refuses a misspelt key or a negative maxSize with its
// path, and the schema cannot drift from what gpuscaler reads: `make lint`
// runs it with -check.
//
//	go -C test run ./configschema [-check] [-schema PATH]
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscaler/gpuscaler/internal/config"
)

func main() {
	check := flag.Bool("check", false, "fail if the file's config schema is not the generated one, instead of writing it")
	path := flag.String("schema", "../deploy/charts/gpuscaler/values.schema.json", "the chart's values.schema.json")
	flag.Parse()
	if err := run(*path, *check); err != nil {
		fmt.Fprintln(os.Stderr, "configschema:", err)
		os.Exit(1)
	}
}

func run(path string, check bool) error {
	file, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	gen, err := Schema()
	if err != nil {
		return err
	}
	out, err := splice(file, gen)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if check {
		if !bytes.Equal(out, file) {
			return fmt.Errorf("%s: the config schema is not the config types': run `go -C test run ./configschema`", path)
		}
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}

// The keys the chart sets itself; a value for one is refused with a
// message that says so (a const no value equals: the validator's error
// quotes it).
var chartSet = map[string]string{
	"kubeconfig": "the chart sets config.kubeconfig (in-cluster): remove it from your values",
	"provider":   "the chart sets config.provider (provider mode's listener and mTLS): remove it from your values",
}

// Schema returns the JSON schema of config.Config, every object closed
// to keys the types do not have, everything inline (no $defs: it sits
// under the values schema's properties).
func Schema() ([]byte, error) {
	r := &jsonschema.Reflector{
		DoNotReference:             true,
		RequiredFromJSONSchemaTags: true, // defaults fill the rest; gpuscaler's start-up checks what is missing
		Mapper:                     mapType,
	}
	s := r.Reflect(&config.Config{})
	s.Version, s.ID = "", ""
	s.Description = "gpuscaler's config file (docs/configuration.md), generated from its types by test/configschema; gpuscaler checks the rest at start"
	for key, why := range chartSet {
		if _, ok := s.Properties.Get(key); !ok {
			return nil, fmt.Errorf("config has no key %q any more: update chartSet", key)
		}
		s.Properties.Set(key, &jsonschema.Schema{Description: why, Const: why})
	}
	return json.MarshalIndent(s, "    ", "  ")
}

// mapType gives the types that encode as something other than their
// fields their JSON form.
func mapType(t reflect.Type) *jsonschema.Schema {
	switch t {
	case reflect.TypeFor[metav1.Duration]():
		return &jsonschema.Schema{Type: "string", Pattern: `^(-?([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$|^0$`,
			Description: "a Go duration: 90s, 5m, 1h30m"}
	case reflect.TypeFor[metav1.Time]():
		return &jsonschema.Schema{Type: "string", Format: "date-time"}
	}
	return nil
}

// splice puts gen in place of the value of properties.config in the
// schema file's text, leaving the rest of the file as it is written.
func splice(file, gen []byte) ([]byte, error) {
	const key = "\n    \"config\": "
	i := bytes.Index(file, []byte(key))
	if i < 0 {
		return nil, errors.New(`no "config" at the properties' indent`)
	}
	start := i + len(key)
	end, err := valueEnd(file, start)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(file[:start])
	b.Write(gen)
	b.Write(file[end:])
	return b.Bytes(), nil
}

// valueEnd returns the index just past the JSON object that starts at
// from, skipping strings.
func valueEnd(text []byte, from int) (int, error) {
	if from >= len(text) || text[from] != '{' {
		return 0, errors.New(`"config" is not an object`)
	}
	depth, inString := 0, false
	for i := from; i < len(text); i++ {
		c := text[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, errors.New(strings.TrimSpace(`"config" does not end`))
}
