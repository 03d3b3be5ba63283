package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseEmpty(t *testing.T) {
	for name, doc := range map[string]string{
		"no bytes":      "",
		"blank":         "  \n\n",
		"comments only": "# nothing yet\n# still nothing\n",
		"null":          "null\n",
		"tilde":         "~",
		"bare marker":   "---\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(doc)); !errors.Is(err, ErrEmpty) {
				t.Fatalf("err = %v, want ErrEmpty", err)
			}
		})
	}
}

// TestParseDecodeErrors checks that a document that does not fit the types
// is refused with the key's path and line.
func TestParseDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // each must appear in the error, in this order
	}{
		{"unknown top-level key", "clusterName: a\nextra: 1\n", []string{"line 2: extra: unknown field"}},
		{"typo in a group", "clusterName: a\nnodeGroups:\n  - name: x\n    maxsize: 3\n",
			[]string{`line 4: nodeGroups[0].maxsize: unknown field; did you mean "maxSize"?`}},
		{"unknown key in the second group", "nodeGroups:\n  - name: x\n  - name: y\n    cloudd: sim\n",
			[]string{"line 4: nodeGroups[1].cloudd: unknown field"}},
		{"unknown cloud key", "clouds:\n  sim: {sed: 1}\n", []string{"line 2: clouds.sim.sed: unknown field"}},
		{"unknown cloud", "clouds:\n  aws: {}\n", []string{"line 2: clouds.aws: unknown field"}},
		{"unknown taint key", "nodeGroups:\n  - taints:\n      - key: k\n        effekt: NoSchedule\n",
			[]string{"line 4: nodeGroups[0].taints[0].effekt: unknown field"}},
		{"every unknown key, in document order", "zeta: 1\nclusterName: a\nalpha: 2\n",
			[]string{"line 1: zeta: unknown field", "line 3: alpha: unknown field"}},
		{"string for an integer", "nodeGroups:\n  - maxSize: three\n", []string{`line 2: nodeGroups[0].maxSize: want an integer, got "three"`}},
		{"fraction for an integer", "nodeGroups:\n  - minSize: 1.5\n", []string{"line 2: nodeGroups[0].minSize: want an integer, got 1.5"}},
		{"list for a string", "clusterName: [a, b]\n", []string{"line 1: clusterName: want a string, got a list"}},
		{"mapping for a list", "nodeGroups: {name: x}\n", []string{"line 1: nodeGroups: want a list, got a mapping"}},
		{"number for a duration", "sync:\n  period: 30\n", []string{"line 2: sync.period: want a duration such as 30s or 1h30m, got 30"}},
		{"bad duration", "sync:\n  period: 30 seconds\n", []string{`line 2: sync.period: want a duration such as 30s or 1h30m, got "30 seconds"`}},
		{"list for a label value", "nodeGroups:\n  - labels:\n      team: [a]\n", []string{"line 3: nodeGroups[0].labels[team]: want a string, got a list"}},
		{"not a mapping", "- a\n- b\n", []string{"want a mapping, got a list"}},
		{"duplicate key", "clusterName: a\nclusterName: b\n", []string{`line 2: clusterName: duplicate key`}},
		{"duplicate nested key", "nodeGroups:\n  - name: a\n    name: b\n", []string{`line 3: nodeGroups[0].name: duplicate key`}},
		{"syntax error", "clusterName: a\n\tclouds: {}\n", []string{"line 2"}},
		{"two documents", "clusterName: a\n---\nclusterName: b\n", []string{"2 YAML documents"}},
		{"unknown key holding an anchor", "base: &b {maxSize: 1}\n", []string{"line 1: base: unknown field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			var ve *ValidationError
			if errors.As(err, &ve) {
				t.Fatalf("got a validation error, want a decode error: %v", err)
			}
			msg := err.Error()
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error does not say %q (in order):\n%s", w, msg)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestParseDecodeErrorIsStructured(t *testing.T) {
	doc := "clusterName: a\ndefaults: &d\n  maxsize: 3\nnodeGroups:\n  - <<: *d\n    name: x\n"
	_, err := Parse([]byte(doc))
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("err = %v, want a *DecodeError", err)
	}
	if de.Line != 2 || de.Field != "defaults" {
		t.Fatalf("first problem = %+v, want line 2, field defaults", de)
	}
	// The merged key is found where the anchor defines it.
	if !strings.Contains(err.Error(), "line 3: nodeGroups[0].maxsize: unknown field") {
		t.Fatalf("merged key not located:\n%v", err)
	}
}

func TestParseValidationError(t *testing.T) {
	doc := strings.Replace(validDoc, "minSize: 1\n    maxSize: 2", "minSize: 2\n    maxSize: 1", 1)
	_, err := Parse([]byte(doc))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errs) != 1 {
		t.Fatalf("err = %v, want one validation error", err)
	}
	// With the field's line, as a decode error has it.
	want := "invalid config (1 error):\n  line 17: nodeGroups[1].maxSize: Invalid value: 1: must be >= minSize (2)"
	if err.Error() != want {
		t.Fatalf("error =\n%s\nwant\n%s", err, want)
	}
	if got := strings.Split(doc, "\n")[16]; !strings.Contains(got, "maxSize: 1") {
		t.Fatalf("line 17 is %q, not the field's", got)
	}
}

// A problem with a field the document leaves out points at the nearest
// key it has (the group's); a YAML syntax error is a *DecodeError with
// the parser's line.
func TestProblemsPointAtTheirLines(t *testing.T) {
	doc := "clusterName: x\nclouds:\n  sim: {}\nnodeGroups:\n  - name: g\n    cloud: sim\n    locations: [FIN-01]\n    maxSize: 3\n"
	_, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "line 5: nodeGroups[0].instanceType: Required value") {
		t.Fatalf("err = %v, want the missing instanceType at the group's line 5", err)
	}
	_, err = Parse([]byte("clusterName: x\nnodeGroups: [{name: g\n"))
	var de *DecodeError
	if !errors.As(err, &de) || de.Line == 0 || !strings.HasPrefix(de.Detail, "not YAML: ") {
		t.Fatalf("err = %v, want a *DecodeError with a line", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(validDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(validDoc+"extra: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(good)
	if err != nil || cfg.ClusterName != "test" || cfg.Sync.Period == nil {
		t.Fatalf("Load(good) = %+v, %v", cfg, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want fs.ErrNotExist", err)
	}
	_, err = Load(bad)
	var de *DecodeError
	if !errors.As(err, &de) || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Fatalf("bad file: err = %v, want a *DecodeError naming the file", err)
	}
}

// A config path that never ends (/dev/zero) or is far too large fails at
// once with a clear error, not when memory runs out.
func TestLoadBoundsTheFileSize(t *testing.T) {
	if _, err := Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load(/dev/zero): %v", err)
	}
}
