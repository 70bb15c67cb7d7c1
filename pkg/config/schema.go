package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.yaml.in/yaml/v3"
)

// maxSchemaBytes bounds a schema file.
const maxSchemaBytes = 4 << 20

// schemaCache holds compiled schemas by kind, schema text and base dir.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]schemaEntry
}

type schemaEntry struct {
	s   *jsonschema.Schema
	err error
}

// cacheInit guards the lazy creation of Config.schemas, so that SchemaFor
// is safe for concurrent use on a Config built without Parse.
var cacheInit sync.Mutex

func (c *Config) schemaCache() *schemaCache {
	cacheInit.Lock()
	defer cacheInit.Unlock()
	if c.schemas == nil {
		c.schemas = &schemaCache{m: map[string]schemaEntry{}}
	}
	return c.schemas
}

// SchemaFor returns the compiled JSON Schema of a kind, or nil when the
// kind has none (or is not configured). A schema is compiled once and
// cached; Validate compiles every schema, so after Parse or Load this only
// fails if the schema was changed in code. Safe for concurrent use.
func (c *Config) SchemaFor(kind string) (*jsonschema.Schema, error) {
	k, ok := c.Kinds[kind]
	if !ok || strings.TrimSpace(k.Schema) == "" {
		return nil, nil
	}
	cache := c.schemaCache()
	key := kind + "\x00" + c.dir + "\x00" + k.Schema
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if e, ok := cache.m[key]; ok {
		return e.s, e.err
	}
	s, err := compileSchema(kind, k.Schema, c.dir)
	cache.m[key] = schemaEntry{s, err}
	return s, err
}

// compileSchema compiles an inline JSON object or the file at a path
// (relative to dir). $ref may reach other local files, never the network.
func compileSchema(kind, src, dir string) (*jsonschema.Schema, error) {
	text := strings.TrimSpace(src)
	var doc any
	var loc string
	if strings.HasPrefix(text, "{") {
		d, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return nil, fmt.Errorf("inline schema is not valid JSON: %v", err)
		}
		doc = d
		loc = "urn:tenaz:kinds:" + url.PathEscape(kind) + ":schema.json"
	} else {
		p := text
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("schema file %s: %v", text, err)
		}
		d, err := loadSchemaFile(abs)
		if err != nil {
			return nil, err
		}
		doc = d
		loc = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.UseLoader(fileLoader{})
	if err := comp.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("schema: %v", err)
	}
	s, err := comp.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON Schema: %v", err)
	}
	return s, nil
}

// fileLoader loads $ref'd schema files (file:// URLs only).
type fileLoader struct{}

// Load implements jsonschema.URLLoader.
func (fileLoader) Load(u string) (any, error) {
	p, err := jsonschema.FileLoader{}.ToFile(u)
	if err != nil {
		return nil, err
	}
	return loadSchemaFile(p)
}

// loadSchemaFile reads a JSON (or, by extension, YAML) schema file. It
// only opens regular files of bounded size: a schema path cannot make
// tenaz block on a pipe or read a device.
func loadSchemaFile(path string) (any, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("schema file: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("schema file %s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("schema file: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSchemaBytes+1))
	if err != nil {
		return nil, fmt.Errorf("schema file %s: %v", path, err)
	}
	if len(data) > maxSchemaBytes {
		return nil, fmt.Errorf("schema file %s is larger than %d bytes", path, maxSchemaBytes)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("schema file %s: %v", path, err)
		}
		js, err := json.Marshal(jsonable(v))
		if err != nil {
			return nil, fmt.Errorf("schema file %s: %v", path, err)
		}
		data = js
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("schema file %s is not valid JSON: %v", path, err)
	}
	return doc, nil
}

// MatchSchema checks payload, valid JSON, against sch. Numbers are read
// exactly (json.Number): read as float64, a const, enum or maximum beyond
// 2^53 would be judged against a rounded value. A failure is reported by
// SchemaViolation.
func MatchSchema(sch *jsonschema.Schema, payload []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return err
	}
	return sch.Validate(doc)
}

// maxViolations bounds the failures SchemaViolation lists.
const maxViolations = 10

// SchemaViolation says why a payload failed its kind's schema without
// quoting the payload: each failing place (a JSON pointer) and the rule it
// breaks, with the schema's own values but never the value found there
// (jsonschema's own messages quote it: a card number, a token). The text
// is what the submitter, the DEAD entry and the logs get.
func SchemaViolation(err error) string {
	ve, ok := errors.AsType[*jsonschema.ValidationError](err)
	if !ok {
		return "the payload does not validate"
	}
	var out []string
	n := 0
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		if n++; n <= maxViolations {
			out = append(out, "at "+strconv.Quote(jsonPointer(e.InstanceLocation))+": "+violation(e.ErrorKind))
		}
	}
	walk(ve)
	if n > maxViolations {
		out = append(out, fmt.Sprintf("and %d more", n-maxViolations))
	}
	return strings.Join(out, "; ")
}

// jsonPointer writes a location as an RFC 6901 pointer ("" is the whole
// payload).
func jsonPointer(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
	}
	return b.String()
}

// violation is the rule an error kind reports, written from the schema's
// side only.
func violation(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("is %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.Enum:
		return "must be one of " + schemaValue(k.Want)
	case *kind.Const:
		return "must be " + schemaValue(k.Want)
	case *kind.Format:
		return fmt.Sprintf("is not a valid %s", k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("does not match the pattern %q", k.Want)
	case *kind.Required:
		return fmt.Sprintf("misses the required %s", quoteAll(k.Missing))
	case *kind.Dependency:
		return fmt.Sprintf("misses %s, required with %q", quoteAll(k.Missing), k.Prop)
	case *kind.DependentRequired:
		return fmt.Sprintf("misses %s, required with %q", quoteAll(k.Missing), k.Prop)
	case *kind.AdditionalProperties:
		return fmt.Sprintf("has properties the schema does not allow: %s", quoteAll(k.Properties))
	case *kind.PropertyNames:
		return "has a property name the schema does not allow"
	case *kind.MinLength:
		return fmt.Sprintf("is shorter than %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("is longer than %d characters", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("has fewer than %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("has more than %d items", k.Want)
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %d items more than the schema allows", k.Count)
	case *kind.MinProperties:
		return fmt.Sprintf("has fewer than %d properties", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("has more than %d properties", k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "has no item that matches contains"
	case *kind.MinContains:
		return fmt.Sprintf("has fewer than %d items that match contains", k.Want)
	case *kind.MaxContains:
		return fmt.Sprintf("has more than %d items that match contains", k.Want)
	case *kind.Minimum:
		return "must be at least " + k.Want.RatString()
	case *kind.Maximum:
		return "must be at most " + k.Want.RatString()
	case *kind.ExclusiveMinimum:
		return "must be more than " + k.Want.RatString()
	case *kind.ExclusiveMaximum:
		return "must be less than " + k.Want.RatString()
	case *kind.MultipleOf:
		return "must be a multiple of " + k.Want.RatString()
	case *kind.ContentEncoding:
		return fmt.Sprintf("is not %s encoded", k.Want)
	case *kind.ContentMediaType:
		return fmt.Sprintf("is not of media type %s", k.Want)
	case *kind.FalseSchema:
		return "is not allowed"
	case *kind.Not:
		return "matches a schema it must not match (not)"
	case *kind.OneOf:
		return "does not match exactly one of oneOf"
	case *kind.InvalidJsonValue:
		return "is not a JSON value"
	}
	return "fails " + strings.Join(k.KeywordPath(), "/")
}

// schemaValue is a value the schema wrote (an enum, a const), as JSON and
// cut short.
func schemaValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "the schema's value"
	}
	return truncate(string(b), 120)
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
