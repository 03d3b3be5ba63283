package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// step is one element of a path into the document: a struct field, a list
// index or a map key.
type step struct {
	name  string
	index int
	kind  stepKind
}

type stepKind int

const (
	stepField stepKind = iota
	stepIndex
	stepKey
)

// docPath is a path into the document, rendered like validation paths.
type docPath []step

func (p docPath) child(name string) docPath { return p.with(step{name: name, kind: stepField}) }
func (p docPath) index(i int) docPath       { return p.with(step{index: i, kind: stepIndex}) }
func (p docPath) key(k string) docPath      { return p.with(step{name: k, kind: stepKey}) }

func (p docPath) with(s step) docPath {
	out := make(docPath, len(p), len(p)+1)
	copy(out, p)
	return append(out, s)
}

// String renders the path as field.Path does: nodeGroups[0].labels[a].
func (p docPath) String() string {
	var b strings.Builder
	for _, s := range p {
		switch s.kind {
		case stepField:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.name)
		case stepIndex:
			fmt.Fprintf(&b, "[%d]", s.index)
		case stepKey:
			fmt.Fprintf(&b, "[%s]", s.name)
		}
	}
	return b.String()
}

// problem is one thing that keeps the document from decoding.
type problem struct {
	path   docPath
	detail string
}

// locate walks a JSON document alongside a type and returns every
// unknown key and every value that does not decode, with its path. It
// descends only where the type goes, so its depth is bounded by the type's.
func locate(t reflect.Type, js []byte) []problem {
	var out []problem
	walk(t, js, nil, &out)
	return out
}

func walk(t reflect.Type, raw []byte, path docPath, out *[]problem) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return // null decodes to the zero value of anything
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		leaf(t, raw, path, out)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		members, ok := objectMembers(raw)
		if !ok {
			leaf(t, raw, path, out)
			return
		}
		fields := jsonFields(t)
		for _, m := range members {
			f, known := fields[m.key]
			if !known {
				*out = append(*out, problem{path: path.child(m.key), detail: unknownField(m.key, fields)})
				continue
			}
			walk(f.Type, m.value, path.child(m.key), out)
		}
	case reflect.Map:
		members, ok := objectMembers(raw)
		if !ok || t.Key().Kind() != reflect.String {
			leaf(t, raw, path, out)
			return
		}
		for _, m := range members {
			walk(t.Elem(), m.value, path.key(m.key), out)
		}
	case reflect.Slice:
		elems, ok := arrayElems(raw)
		if !ok || t.Elem().Kind() == reflect.Uint8 {
			leaf(t, raw, path, out)
			return
		}
		for i, e := range elems {
			walk(t.Elem(), e, path.index(i), out)
		}
	default:
		leaf(t, raw, path, out)
	}
}

// leaf decodes a value that the walk does not descend into and records why
// it fails, if it does.
func leaf(t reflect.Type, raw []byte, path docPath, out *[]problem) {
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, reflect.New(t).Interface()); err != nil {
		*out = append(*out, problem{path: path, detail: describe(t, raw, err)})
	}
}

// describe words a decode failure for an operator: what the field wants and
// what the document has.
func describe(t reflect.Type, raw []byte, err error) string {
	got := shortValue(raw)
	switch {
	case t == reflect.TypeFor[metav1.Duration]():
		return fmt.Sprintf("want a duration such as 30s or 1h30m, got %s", got)
	case reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()):
		return fmt.Sprintf("invalid value %s: %s", got, strings.TrimPrefix(err.Error(), "json: "))
	}
	return fmt.Sprintf("want %s, got %s", kindName(t), got)
}

// kindName names what a Go type takes, in YAML terms.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	}
	return t.String()
}

// shortValue shows a JSON value in a message: scalars as they are (cut to a
// readable length), lists and mappings by kind.
func shortValue(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '[':
		return "a list"
	case '{':
		return "a mapping"
	}
	const maxLen = 40
	if len(raw) > maxLen {
		return string(raw[:maxLen]) + "..."
	}
	return string(raw)
}

// unknownField words an unknown key, suggesting the field it differs from
// only in case.
func unknownField(key string, fields map[string]reflect.StructField) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf("unknown field; did you mean %q?", name)
		}
	}
	return "unknown field"
}

// jsonFields maps the JSON names of a struct's fields to the fields, with
// untagged embedded structs flattened as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, sub := range jsonFields(f.Type) {
				if _, shadowed := fields[n]; !shadowed {
					fields[n] = sub
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f
	}
	return fields
}

type member struct {
	key   string
	value json.RawMessage
}

// objectMembers splits a JSON object into its members, in document order.
func objectMembers(raw []byte) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		key, isString := tok.(string)
		if err != nil || !isString {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{key: key, value: v})
	}
	return out, true
}

// arrayElems splits a JSON array into its elements.
func arrayElems(raw []byte) ([]json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, false
	}
	var out []json.RawMessage
	for dec.More() {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}
