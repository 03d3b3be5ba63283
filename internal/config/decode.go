package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

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

// decode reads one YAML document into cfg, strictly: duplicate keys, keys
// that match no field exactly (case included), values of the wrong kind and
// extra documents are all errors, each naming the key and, where it can be
// found, its line.
func decode(data []byte, cfg *Config) error {
	// The YAML decoder under YAMLToJSONStrict reports syntax errors and
	// duplicate keys with their line.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return ErrEmpty
	}
	doc := parseNodes(data)
	if doc.count > 1 {
		return fmt.Errorf("config holds %d YAML documents; want one", doc.count)
	}
	// sigs.k8s.io/json matches keys case-sensitively, unlike encoding/json
	// (and so yaml.UnmarshalStrict), which would take "maxsize" for maxSize.
	strict, decodeErr := kjson.UnmarshalStrict(js, cfg, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if decodeErr == nil && len(strict) == 0 {
		return nil
	}
	// Name every problem with its path and line; if the walk finds none
	// (it should not happen), fall back to the decoder's own words.
	problems := locate(js)
	if len(problems) == 0 {
		if decodeErr != nil {
			return decodeErr
		}
		return errors.Join(strict...)
	}
	found := make([]*DecodeError, len(problems))
	for i, p := range problems {
		found[i] = &DecodeError{Line: doc.line(p.path), Field: p.path.String(), Detail: p.detail}
	}
	// JSON objects lost the document's key order: restore it by line, with
	// problems whose line is unknown last.
	slices.SortStableFunc(found, func(a, b *DecodeError) int {
		return cmp.Compare(sortLine(a.Line), sortLine(b.Line))
	})
	errs := make([]error, len(found))
	for i, e := range found {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// sortLine orders unknown lines (0) after every known one.
func sortLine(line int) int {
	if line == 0 {
		return math.MaxInt
	}
	return line
}
