package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// DecodeObject decodes a JSON object answer or webhook body, keeping its
// numbers as written (json.Number) for Reference and DoneValue.
func DecodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid character after top-level value")
	}
	return obj, nil
}

// Reference is the provider's job id in field of obj: a string, or a
// number as written (12345678901234567890 stays exact, 1e3 stays 1e3), so
// a delivery's answer and a webhook that both carry {"id": 12345} name
// the same job. "" when absent or of another type.
func Reference(obj map[string]any, field string) string {
	switch v := obj[field].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

// DoneValue is the done_when field's value in obj, as done_when.in
// lists it: a Reference, or true or false. "" when absent or null.
func DoneValue(obj map[string]any, field string) string {
	if v, ok := obj[field].(bool); ok {
		return strconv.FormatBool(v)
	}
	return Reference(obj, field)
}
