package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
