package config

import (
	"bytes"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// yamlDoc is the node tree of a config file, kept only to find the line of
// a key for error messages.
type yamlDoc struct {
	// root is the first document's content; nil if the file did not parse.
	root *yaml.Node
	// count is how many documents with content the file holds.
	count int
}

// parseNodes reads the node tree of every document in data. A parse error
// leaves what was read so far: the strict decoder has already reported
// syntax errors, and lines are a courtesy.
func parseNodes(data []byte) yamlDoc {
	var d yamlDoc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			return d
		}
		if n.Kind != yaml.DocumentNode || len(n.Content) == 0 || isNull(n.Content[0]) {
			continue
		}
		if d.root == nil {
			d.root = n.Content[0]
		}
		d.count++
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// line returns the 1-based line of the key (or list item) at path, or 0
// if the path does not lead anywhere in the tree.
func (d yamlDoc) line(path docPath) int {
	n := d.root
	if n == nil {
		return 0
	}
	line := n.Line
	for _, s := range path {
		n = resolve(n)
		switch s.kind {
		case stepIndex:
			if n.Kind != yaml.SequenceNode || s.index >= len(n.Content) {
				return 0
			}
			n = n.Content[s.index]
			line = n.Line
		default:
			key, value := lookup(n, s.name)
			if key == nil {
				return 0
			}
			n, line = value, key.Line
		}
	}
	return line
}

// lookup finds a key of a mapping node, looking through merge keys (<<).
func lookup(n *yaml.Node, name string) (key, value *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == name && k.Tag != "!!merge" {
			return k, n.Content[i+1]
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Tag != "!!merge" {
			continue
		}
		merged := resolve(n.Content[i+1])
		sources := []*yaml.Node{merged}
		if merged.Kind == yaml.SequenceNode {
			sources = merged.Content
		}
		for _, src := range sources {
			if k, v := lookup(resolve(src), name); k != nil {
				return k, v
			}
		}
	}
	return nil, nil
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// fieldLines are the document's lines of the fields errs name: each
// field's key, or its nearest ancestor's that the document has (a value
// left out and defaulted, or refused as missing); 0 for none.
func fieldLines(data []byte, errs field.ErrorList) []int {
	doc := parseNodes(data)
	out := make([]int, len(errs))
	for i, fe := range errs {
		for p := parseFieldPath(fe.Field); len(p) > 0; p = p[:len(p)-1] {
			if line := doc.line(p); line > 0 {
				out[i] = line
				break
			}
		}
	}
	return out
}

// parseFieldPath reads a field path as field.Path renders it
// ("nodeGroups[0].labels[team].value"): names, [index] and [key].
func parseFieldPath(s string) docPath {
	var p docPath
	for s != "" {
		switch {
		case s[0] == '.':
			s = s[1:]
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return p
			}
			inside := s[1:end]
			if i, err := strconv.Atoi(inside); err == nil {
				p = p.index(i)
			} else {
				p = p.key(inside)
			}
			s = s[end+1:]
		default:
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			p = p.child(s[:end])
			s = s[end:]
		}
	}
	return p
}
