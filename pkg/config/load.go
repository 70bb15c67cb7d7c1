package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// Load reads the YAML file at path and returns it parsed, with ${ENV}
// references and TENAZ_… overrides taken from the process environment,
// defaults filled and validated (see Parse). Errors name the file. Relative
// schema paths in the file are resolved against the file's directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	cfg, err := parse(data, os.LookupEnv, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a tenaz.yaml document and returns it ready to use:
//
//  1. strict YAML decoding: an unknown or duplicate key, or a value of the
//     wrong type, is an error naming the key path;
//  2. ${NAME} in any value is replaced by the variable NAME from getenv
//     (an unset variable is an error; $${ writes a literal ${);
//  3. TENAZ_<PATH> variables from getenv override single values (see
//     docs/configuration.md for the naming rule); NATS_URL, LOG_FORMAT and
//     LOG_LEVEL are honoured when their TENAZ_ twin is unset;
//  4. WithDefaults, then Validate.
//
// Every error wraps ErrInvalidConfig and names the key; all problems found
// in a step are reported together. getenv may be nil (no environment);
// os.LookupEnv is the usual choice. Relative schema paths are resolved
// against the current directory.
func Parse(data []byte, getenv func(string) (string, bool)) (*Config, error) {
	return parse(data, getenv, "")
}

func parse(data []byte, getenv func(string) (string, bool), dir string) (*Config, error) {
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	cfg := &Config{dir: dir, explicitZero: map[string]bool{}}
	if err := decodeInto(cfg, data, getenv); err != nil {
		return nil, err
	}
	if err := applyEnv(cfg, getenv); err != nil {
		return nil, err
	}
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decodeInto runs the YAML steps: parse to a node tree, expand aliases and
// merge keys, substitute ${ENV}, check every key and value against the
// Config type (naming the key path), then decode.
func decodeInto(cfg *Config, data []byte, getenv func(string) (string, bool)) error {
	root, err := parseYAML(data)
	if err != nil {
		return err
	}
	if root == nil {
		return nil // an empty file: every value is a default
	}
	z := &normalizer{budget: maxNodes, expanding: map[*yaml.Node]bool{}}
	root = z.node(root, "")
	if len(z.errs) > 0 {
		return joinSorted(z.errs)
	}
	if root.Kind != yaml.MappingNode {
		if root.ShortTag() == "!!null" {
			return nil
		}
		return &KeyError{Msg: "the document must be a mapping of keys (prefix, nats, http, …), got " + describe(root), Line: root.Line}
	}
	s := &substituter{getenv: getenv, done: map[*yaml.Node]bool{}, failed: map[*yaml.Node]bool{}}
	s.walk(root, "")
	w := &walker{substituted: s.done, failed: s.failed, zeros: cfg.explicitZero}
	w.walk(root, configType, "")
	if errs := append(s.errs, w.errs...); len(errs) > 0 {
		return joinSorted(errs)
	}
	// The walker has checked every key and value, so this cannot fail on
	// input; any error here is still reported, never ignored.
	if err := root.Decode(cfg); err != nil {
		return &KeyError{Msg: err.Error(), Err: err}
	}
	return nil
}

// parseYAML parses exactly one YAML document into a node tree; nil means
// the input holds no document at all.
func parseYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		// The YAML library reports its errors through panics it recovers
		// itself; this only guards against a bug in it on hostile input.
		if r := recover(); r != nil {
			root, err = nil, &KeyError{Msg: fmt.Sprintf("yaml: internal error: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &KeyError{Msg: err.Error(), Err: err}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &KeyError{Msg: "more than one YAML document (---); tenaz.yaml holds exactly one", Line: extra.Line}
	case !errors.Is(err, io.EOF):
		return nil, &KeyError{Msg: err.Error(), Err: err}
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}
