package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// DecodeStrict decodes data, one JSON object, into v (a pointer to a
// struct) as a request body is read: a member no field names (a typo is
// not silently lost), one given twice (see CheckUnambiguous) or spelled
// otherwise than its field (see checkSpelling), and anything after the
// object are refused, the error saying so under what ("request body").
func DecodeStrict(what string, data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if !atEOF(dec) {
		return fmt.Errorf("%s: something follows the JSON object; send one", what)
	}
	if err := CheckUnambiguous(what, data); err != nil {
		return err
	}
	return checkSpelling(what, data, v)
}

// checkSpelling refuses a request body (what it is: "request body") that
// names a member otherwise than the field of v (a pointer to the struct
// it was decoded into) it fills, say "Account" for "account", at any
// depth. encoding/json matches names regardless of case, so
// {"account":"acme","Account":"globex"} decodes as globex, while a proxy,
// a log reader or a reviewer reading "account" sees acme. Members no
// field names are left to DisallowUnknownFields; data must have decoded
// into v.
func checkSpelling(what string, data []byte, v any) error {
	if given, want := misspelled(data, reflect.TypeOf(v)); given != "" {
		return fmt.Errorf("%s names the member %q as %q: spell it exactly", what, want, given)
	}
	return nil
}

// misspelled returns the first member name of data that matches a
// field of t only regardless of case, and the field's name.
func misspelled(data []byte, t reflect.Type) (given, want string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		var members map[string]json.RawMessage
		if json.Unmarshal(data, &members) != nil {
			return "", "" // null, or not what a struct decodes from
		}
		return misspelledIn(members, t)
	case reflect.Slice, reflect.Array, reflect.Map:
		if !hasStruct(t.Elem()) {
			return "", ""
		}
		var elems []json.RawMessage
		if t.Kind() == reflect.Map {
			var m map[string]json.RawMessage
			if json.Unmarshal(data, &m) != nil {
				return "", ""
			}
			for _, e := range m {
				elems = append(elems, e)
			}
		} else if json.Unmarshal(data, &elems) != nil {
			return "", ""
		}
		for _, e := range elems {
			if g, w := misspelled(e, t.Elem()); g != "" {
				return g, w
			}
		}
	}
	return "", ""
}

// misspelledIn is misspelled of an object's members, for struct t.
func misspelledIn(members map[string]json.RawMessage, t reflect.Type) (given, want string) {
	fields := fieldsOf(t)
	for name, raw := range members {
		if ft, ok := fields[name]; ok {
			if hasStruct(ft) {
				if g, w := misspelled(raw, ft); g != "" {
					return g, w
				}
			}
			continue
		}
		for f := range fields {
			if strings.EqualFold(f, name) {
				return name, f
			}
		}
	}
	return "", ""
}

// hasStruct reports whether t is or holds a struct that names members.
func hasStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Slice, reflect.Array, reflect.Map:
		return hasStruct(t.Elem())
	}
	return false
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf is the JSON names of struct t's fields, with their types, as
// encoding/json reads them (an embedded struct's fields as t's own).
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, t := range fieldsOf(ft) {
					if _, own := out[n]; !own {
						out[n] = t
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	fieldCache.Store(t, out)
	return out
}
