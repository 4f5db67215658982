package config

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decodeYAML decodes a configuration file into c, refusing unknown keys.
// yaml.v3 reports a wrong value by line and Go type ("line 3: cannot
// unmarshal !!str `lots` into int"), which an operator cannot act on
// without reading the source; each such line is rewritten to name the key
// (ingest.prefetch), the value, and what the key accepts.
func decodeYAML(name string, b []byte, c *Config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config: %s is not valid YAML: %w", name, err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	err := dec.Decode(c)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	idx := indexLines(&doc)
	var lines []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines = te.Errors
	} else {
		lines = []string{err.Error()}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = explainYAMLLine(idx, l)
	}
	return fmt.Errorf("config: %s: %s", name, strings.Join(out, "; "))
}

// yamlKey is a key of the file and the scalar written for it, if any.
type yamlKey struct {
	path  string
	value string
	key   bool // the line holds the key itself, not only its value
	// nested: the key's value is a list or mapping, not a scalar.
	nested bool
}

// indexLines maps each line of the document to the keys written on it.
func indexLines(doc *yaml.Node) map[int][]yamlKey {
	idx := map[int][]yamlKey{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				idx[k.Line] = append(idx[k.Line], yamlKey{path: p, key: true})
				if v.Kind == yaml.ScalarNode {
					idx[v.Line] = append(idx[v.Line], yamlKey{path: p, value: v.Value})
				} else {
					idx[v.Line] = append(idx[v.Line], yamlKey{path: p, nested: true})
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Kind == yaml.ScalarNode {
					idx[c.Line] = append(idx[c.Line], yamlKey{path: p, value: c.Value})
				}
				walk(c, p)
			}
		}
	}
	walk(doc, "")
	return idx
}

var (
	lineRe     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	unmarshRe  = regexp.MustCompile("^cannot unmarshal !!(\\w+) (?:`(.*)` )?into (.+)$")
	notFoundRe = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
)

// explainYAMLLine rewrites one of yaml.v3's error lines.
func explainYAMLLine(idx map[int][]yamlKey, l string) string {
	m := lineRe.FindStringSubmatch(l)
	if m == nil {
		return l
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[2]
	if u := notFoundRe.FindStringSubmatch(rest); u != nil {
		k := pick(idx[line], "", u[1])
		parent := ""
		if i := strings.LastIndexByte(k.path, '.'); i >= 0 {
			parent = k.path[:i]
		}
		where := "at the top level"
		if parent != "" {
			where = "under " + parent
		}
		return fmt.Sprintf("line %d: unknown key %q %s (known keys there: %s)", line, u[1], where, strings.Join(keysAt(parent), ", "))
	}
	if u := unmarshRe.FindStringSubmatch(rest); u != nil {
		k := pick(idx[line], u[2], "")
		what := k.path
		if what == "" {
			what = "the file"
		}
		if u[2] != "" {
			return fmt.Sprintf("line %d: %s: %q is not %s", line, what, u[2], describeType(u[3], k.path))
		}
		return fmt.Sprintf("line %d: %s: a YAML %s is not %s", line, what, yamlKind(u[1]), describeType(u[3], k.path))
	}
	k := pick(idx[line], "", "")
	if k.path == "" {
		return l
	}
	return fmt.Sprintf("line %d: %s: %s", line, k.path, rest)
}

// pick chooses among the keys of one line: the one whose value or key name
// the error quotes, else one holding a list or mapping (the error quotes no
// value when it is about one), else the most deeply nested one.
func pick(keys []yamlKey, value, key string) yamlKey {
	for _, k := range keys {
		if value != "" && !k.key && !k.nested && k.value == value {
			return k
		}
		if key != "" && k.key && (k.path == key || strings.HasSuffix(k.path, "."+key)) {
			return k
		}
	}
	if value == "" && key == "" {
		var best yamlKey
		for _, k := range keys {
			if k.nested && len(k.path) > len(best.path) {
				best = k
			}
		}
		if best.path != "" {
			return best
		}
	}
	var best yamlKey
	for _, k := range keys {
		if len(k.path) > len(best.path) {
			best = k
		}
	}
	return best
}

func yamlKind(tag string) string {
	switch tag {
	case "seq":
		return "list"
	case "map":
		return "mapping"
	}
	return tag
}

// describeType says in words what a Go type accepts in YAML.
func describeType(goType, path string) string {
	switch goType {
	case "int", "int64", "int32":
		return "a whole number"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	case "time.Duration", "config.Duration":
		return "a duration (e.g. 250ms, 30s, 5m)"
	case "[]string":
		return "a list of strings (e.g. [a, b])"
	}
	if strings.HasPrefix(goType, "[]") {
		return "a list"
	}
	if strings.HasPrefix(goType, "map[") {
		return "a mapping"
	}
	if keys := keysAt(strings.TrimSuffix(trimIndex(path), ".")); len(keys) > 0 {
		return "a mapping with the keys " + strings.Join(keys, ", ")
	}
	return "a " + goType
}

var indexRe = regexp.MustCompile(`\[\d+\]`)

func trimIndex(path string) string { return indexRe.ReplaceAllString(path, "[]") }

// keysAt lists the YAML keys accepted at path ("" is the top level;
// "topology.source_queues[]" an element of that list).
func keysAt(path string) []string {
	t := reflect.TypeFor[Config]()
	path = trimIndex(path)
	if path != "" {
		for _, seg := range strings.Split(path, ".") {
			name, elem := strings.CutSuffix(seg, "[]")
			t = fieldType(t, name)
			if t == nil {
				return nil
			}
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if elem && (t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
				t = t.Elem()
			}
		}
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	keys := structKeys(t)
	slices.Sort(keys)
	return keys
}

var durationType = reflect.TypeFor[time.Duration]()

func structKeys(t reflect.Type) []string {
	if t == durationType || t == reflect.TypeFor[Duration]() {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-" || !f.IsExported():
		case strings.Contains(opts, "inline"):
			keys = append(keys, structKeys(f.Type)...)
		case name != "":
			keys = append(keys, name)
		default:
			keys = append(keys, strings.ToLower(f.Name))
		}
	}
	return keys
}

// fieldType returns the type of the field of struct t (or of a struct it
// inlines) whose YAML key is name.
func fieldType(t reflect.Type, name string) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		return t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		key, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") {
			if ft := fieldType(f.Type, name); ft != nil {
				return ft
			}
			continue
		}
		if key == "" {
			key = strings.ToLower(f.Name)
		}
		if key == name {
			return f.Type
		}
	}
	return nil
}
