package config

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// FuzzParse feeds Parse arbitrary documents. It must never panic, and
// whatever it accepts must validate and survive a round trip: written back
// as YAML, it parses again to the same config.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	for _, seed := range []string{
		validDoc,
		minimalDoc,
		"",
		"null",
		"clusterName: [1, 2]",
		"nodeGroups: [{}]",
		"clusterName: a\nnodeGroups:\n  - maxsize: 3\n",
		"a: &x [*x]",
		"clusterName: a\n---\nclusterName: b\n",
		"defaults: &d {maxSize: 2}\nnodeGroups: [{<<: *d}]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned a config with an error: %v", err)
			}
			return
		}
		if errs := Validate(cfg); len(errs) > 0 {
			t.Fatalf("Parse accepted a config that does not validate: %v", errs.ToAggregate())
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal an accepted config: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("an accepted config, written back, is refused: %v\n%s", err, out)
		}
		if !equality.Semantic.DeepEqual(cfg, again) {
			t.Fatalf("round trip changed the config:\n%s", out)
		}
	})
}
