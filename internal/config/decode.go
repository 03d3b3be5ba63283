package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ErrEmpty is returned for a config document with nothing in it (no bytes,
// only comments, or a bare null).
var ErrEmpty = errors.New("config is empty")

// DecodeError is one problem that keeps a document from decoding into a
// Config: an unknown key, or a value of the wrong kind. Test for it with
// errors.As; a document with several problems yields several, joined.
type DecodeError struct {
	// Line is the 1-based line of the offending key in the YAML document;
	// 0 when it could not be found.
	Line int
	// Field is the path of the key, as in validation errors
	// ("nodeGroups[0].maxsize"); empty for the document itself.
	Field string
	// Detail says what is wrong.
	Detail string
}

// Error renders the problem as "line 4: nodeGroups[0].maxsize: unknown field".
func (e *DecodeError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Detail)
	return b.String()
}

// decode reads one YAML document into cfg, strictly (see DecodeStrict),
// and refuses an explicit 0 where 0 would silently mean the default.
func decode(data []byte, cfg *Config) error {
	doc, err := decodeStrict(data, cfg)
	if err != nil {
		return err
	}
	return explicitZeros(doc, cfg)
}

// DecodeStrict reads one YAML (or JSON) document into v, strictly:
// duplicate keys, keys that match no field exactly (case included), values
// of the wrong kind, NaN and infinities, and extra documents are all
// errors, each naming the key's path and, where it can be found, its line.
// The seed-format importers decode their files with it too.
func DecodeStrict(data []byte, v any) error {
	_, err := decodeStrict(data, v)
	return err
}

// decodeStrict is DecodeStrict, also returning the document's node tree.
func decodeStrict(data []byte, v any) (yamlDoc, error) {
	doc := parseNodes(data)
	// The YAML decoder under YAMLToJSONStrict reports syntax errors with
	// their line; duplicate keys, and NaN and infinities (which JSON cannot
	// hold), are found first so that they get a path too.
	if bad := scanNodes(doc, reflect.TypeOf(v).Elem()); bad != nil {
		return doc, bad
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return doc, syntaxError(err)
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return doc, ErrEmpty
	}
	if doc.count > 1 {
		return doc, &DecodeError{Detail: fmt.Sprintf("the file holds %d YAML documents; want one", doc.count)}
	}
	// sigs.k8s.io/json matches keys case-sensitively, unlike encoding/json
	// (and so yaml.UnmarshalStrict), which would take "maxsize" for maxSize.
	strict, decodeErr := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if decodeErr == nil && len(strict) == 0 {
		return doc, nil
	}
	// Name every problem with its path and line; if the walk finds none
	// (it should not happen), fall back to the decoder's own words.
	problems := locate(reflect.TypeOf(v).Elem(), js)
	if len(problems) == 0 {
		if decodeErr != nil {
			return doc, decodeErr
		}
		return doc, errors.Join(strict...)
	}
	found := make([]*DecodeError, len(problems))
	for i, p := range problems {
		found[i] = &DecodeError{Line: doc.line(p.path), Field: p.path.String(), Detail: p.detail}
	}
	return doc, joinByLine(found)
}

// joinByLine joins decode errors in the document's order (JSON objects
// lost the key order), with those whose line is unknown last.
func joinByLine(found []*DecodeError) error {
	slices.SortStableFunc(found, func(a, b *DecodeError) int {
		return cmp.Compare(sortLine(a.Line), sortLine(b.Line))
	})
	errs := make([]error, len(found))
	for i, e := range found {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// scanNodes finds keys given twice in one mapping, and NaN and infinite
// numbers (.nan, .inf), which no field takes; nil when there are none.
// The type t of the value being decoded names map keys as [key] and
// struct fields as .field, as the other errors do.
func scanNodes(doc yamlDoc, t reflect.Type) error {
	var found []*DecodeError
	var visit func(n *yaml3.Node, t reflect.Type, path docPath, depth int)
	visit = func(n *yaml3.Node, t reflect.Type, path docPath, depth int) {
		if n == nil || depth > maxNodeDepth {
			return
		}
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		// member is the path and type of a mapping's member.
		member := func(key string) (docPath, reflect.Type) {
			switch {
			case t != nil && t.Kind() == reflect.Map:
				return path.key(key), t.Elem()
			case t != nil && t.Kind() == reflect.Struct:
				if f, ok := jsonFields(t)[key]; ok {
					return path.child(key), f.Type
				}
			}
			return path.child(key), nil
		}
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		switch n.Kind {
		case yaml3.MappingNode:
			seen := map[string]bool{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p, vt := member(k.Value)
				if k.Kind == yaml3.ScalarNode && k.Tag != "!!merge" {
					if seen[k.Value] {
						found = append(found, &DecodeError{Line: k.Line, Field: p.String(), Detail: "duplicate key; give it once"})
					}
					seen[k.Value] = true
				}
				visit(n.Content[i+1], vt, p, depth+1)
			}
		case yaml3.SequenceNode:
			for i, c := range n.Content {
				visit(c, elem, path.index(i), depth+1)
			}
		case yaml3.ScalarNode:
			if n.Tag != "!!float" {
				return
			}
			switch strings.ToLower(strings.TrimLeft(n.Value, "+-")) {
			case ".nan", ".inf":
				found = append(found, &DecodeError{Line: n.Line, Field: path.String(), Detail: fmt.Sprintf("want a finite number, got %s", n.Value)})
			}
		}
	}
	visit(doc.root, t, nil, 0)
	if len(found) == 0 {
		return nil
	}
	return joinByLine(found)
}

// maxNodeDepth bounds the walk of a document's nodes; no config is nearly
// this deep, and the strict decoder refuses what is.
const maxNodeDepth = 64

// explicitZeros refuses a 0 written for a setting whose omission means a
// default: the operator asked for 0 and would silently get the default.
func explicitZeros(doc yamlDoc, cfg *Config) error {
	type setting struct {
		path docPath
		zero bool
		why  string
	}
	sync := docPath{}.child("sync")
	settings := []setting{
		{sync.child("maxConcurrentCreates"), cfg.Sync.MaxConcurrentCreates == 0, fmt.Sprintf("must be >= 1; leave it out for the default (%d)", DefaultMaxConcurrentCreates)},
		{sync.child("requestsPerSecond"), cfg.Sync.RequestsPerSecond == 0, fmt.Sprintf("must be > 0; leave it out for the default (%g)", DefaultRequestsPerSecond)},
		{sync.child("maxGroupSize"), cfg.Sync.MaxGroupSize == 0, fmt.Sprintf("must be >= 1; leave it out for the default (%d)", DefaultMaxGroupSize)},
		{sync.child("maxIncrease"), cfg.Sync.MaxIncrease == 0, fmt.Sprintf("must be >= 1; leave it out for the default (%d)", DefaultMaxIncrease)},
	}
	// A cost cap of 0 would be read as no cap (the same as leaving it
	// out), where a NodeProvisioner's "0" spends nothing: refused.
	const zeroCap = "0 would be taken for no cap; leave it out for none, or set the cap"
	settings = append(settings, setting{docPath{}.child("maxHourlyCost"), cfg.MaxHourlyCost == 0, zeroCap})
	for i, g := range cfg.NodeGroups {
		settings = append(settings, setting{docPath{}.child("nodeGroups").index(i).child("maxHourlyCost"), g.MaxHourlyCost == 0, zeroCap})
	}
	if s := cfg.Clouds.Sim; s != nil {
		sim := docPath{}.child("clouds").child("sim")
		settings = append(settings,
			setting{sim.child("seed"), s.Seed == 0, fmt.Sprintf("0 would be taken for the default (%d); pick another seed", DefaultSimSeed)},
			setting{sim.child("locations"), len(s.Locations) == 0, "an empty list would be taken for the default locations; leave it out, or name at least one"})
	}
	var found []*DecodeError
	for _, s := range settings {
		if !s.zero {
			continue
		}
		if line := doc.line(s.path); line > 0 {
			found = append(found, &DecodeError{Line: line, Field: s.path.String(), Detail: s.why})
		}
	}
	if len(found) == 0 {
		return nil
	}
	return joinByLine(found)
}

// sortLine orders unknown lines (0) after every known one.
func sortLine(line int) int {
	if line == 0 {
		return math.MaxInt
	}
	return line
}

// syntaxLine finds the line a YAML parser's error names.
var syntaxLine = regexp.MustCompile(`line (\d+): (.*)`)

// syntaxError is a YAML syntax error as a *DecodeError: the line the
// parser names (where the construct it could not finish began: the broken
// line is there or just after) and its words.
func syntaxError(err error) error {
	m := syntaxLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &DecodeError{Detail: "not YAML: " + err.Error()}
	}
	line, _ := strconv.Atoi(m[1])
	return &DecodeError{Line: line, Detail: "not YAML: " + m[2]}
}
