package event_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// refRead is a reference reading of a payload that json.Valid takes,
// built on encoding/json's Token API rather than on the bytes: problem is
// the first thing in document order that decoders may read two ways ("a
// lone surrogate", or "twice:<name>" for a member given twice), or "";
// value is the payload's value written exactly, each string as its UTF-16
// code units (so "\ud800" and "\ufffd" differ), each number as written,
// each object's members sorted, none dropped.
func refRead(p []byte) (problem, value string, err error) {
	problem, value, _, err = refReadNumbers(p)
	return problem, value, err
}

// refReadNumbers is refRead, and whether a number is past a payload's
// bounds (pastBounds).
func refReadNumbers(p []byte) (problem, value string, bigNumber bool, err error) {
	r := &refReader{p: p, dec: json.NewDecoder(bytes.NewReader(p))}
	r.dec.UseNumber()
	t, lit, err := r.token()
	if err != nil {
		return "", "", false, err
	}
	value, err = r.value(t, lit)
	return r.problem, value, r.bigNumber, err
}

type refReader struct {
	p         []byte
	dec       *json.Decoder
	problem   string
	bigNumber bool // a number past 256 digits or an exponent of ±1000
}

// pastBounds reports a number literal of more than 256 digits, or with
// an exponent past ±1000.
func pastBounds(n string) bool {
	mantissa, exp, _ := strings.Cut(strings.ToLower(n), "e")
	digits := 0
	for _, c := range mantissa {
		if c >= '0' && c <= '9' {
			digits++
		}
	}
	exp = strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
	e, _ := strconv.Atoi(exp)
	return digits > 256 || len(exp) > 4 || e > 1000
}

// token is the next token and, for a string, its literal as written.
func (r *refReader) token() (json.Token, []byte, error) {
	start := r.dec.InputOffset()
	t, err := r.dec.Token()
	if err != nil {
		return nil, nil, err
	}
	raw := r.p[start:r.dec.InputOffset()] // separators and spaces, then the token
	if _, ok := t.(string); ok {
		raw = raw[bytes.IndexByte(raw, '"'):]
	}
	return t, raw, nil
}

func (r *refReader) value(t json.Token, lit []byte) (string, error) {
	switch x := t.(type) {
	case string:
		return "s" + r.units(lit), nil
	case json.Number:
		r.bigNumber = r.bigNumber || pastBounds(string(x))
		return "n" + string(x), nil
	case bool, nil:
		return fmt.Sprint(x), nil
	}
	object := t == json.Delim('{')
	var parts []string
	seen := map[string]bool{}
	for r.dec.More() {
		t, lit, err := r.token()
		if err != nil {
			return "", err
		}
		part := ""
		if object {
			name := r.units(lit)
			if seen[name] && r.problem == "" {
				r.problem = "twice:" + t.(string)
			}
			seen[name] = true
			if t, lit, err = r.token(); err != nil {
				return "", err
			}
			part = name + ":"
		}
		v, err := r.value(t, lit)
		if err != nil {
			return "", err
		}
		parts = append(parts, part+v)
	}
	if _, err := r.dec.Token(); err != nil { // the closing delimiter
		return "", err
	}
	if object {
		slices.Sort(parts)
		return "{" + strings.Join(parts, ",") + "}", nil
	}
	return "[" + strings.Join(parts, ",") + "]", nil
}

// units decodes a string literal to its UTF-16 code units, written in
// hex, noting a lone surrogate (a high one not followed by a low one, or
// a low one alone) as r's problem if it is the first.
func (r *refReader) units(lit []byte) string {
	var u []uint16
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			c, size := utf8.DecodeRune(s[i:])
			u = utf16.AppendRune(u, c)
			i += size
			continue
		}
		switch e := s[i+1]; e {
		case 'u':
			v, _ := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
			u = append(u, uint16(v))
			i += 6
			continue
		case 'b':
			u = append(u, '\b')
		case 'f':
			u = append(u, '\f')
		case 'n':
			u = append(u, '\n')
		case 'r':
			u = append(u, '\r')
		case 't':
			u = append(u, '\t')
		default: // " \\ /
			u = append(u, uint16(e))
		}
		i += 2
	}
	for i := 0; i < len(u); i++ {
		switch {
		case utf16.IsSurrogate(rune(u[i])) && u[i] < 0xdc00 && i+1 < len(u) && u[i+1] >= 0xdc00 && u[i+1] < 0xe000:
			i++ // a pair
		case utf16.IsSurrogate(rune(u[i])):
			if r.problem == "" {
				r.problem = "a lone surrogate"
			}
		}
	}
	var b strings.Builder
	for _, c := range u {
		fmt.Fprintf(&b, "%04x", c)
	}
	return b.String()
}
