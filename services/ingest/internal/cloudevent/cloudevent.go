// Package cloudevent reads a CloudEvent (CloudEvents 1.0) from a
// submission, strictly: in structured mode (the JSON event format, media
// type application/cloudevents+json) or in binary mode (each attribute in
// a ce-<name> header, the data as the body; HTTP's binding, and the same
// headers on NATS). A missing or ill-formed attribute is an *Error naming
// it. Only JSON data is read: tenaz delivers the data as a JSON payload.
//
//	ev, err := cloudevent.Structured(body)
//	ev, err := cloudevent.Binary(r.Header, r.Header.Get("Content-Type"), body)
package cloudevent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/state"
)

// Media types of the JSON event format.
const (
	// ContentType marks a structured-mode event (one event, JSON format).
	ContentType = "application/cloudevents+json"
	// BatchContentType marks a batch of events, which tenaz does not take.
	BatchContentType = "application/cloudevents-batch+json"
)

// SpecVersion is the only CloudEvents version read.
const SpecVersion = "1.0"

// HeaderPrefix starts the header of each attribute in binary mode.
const HeaderPrefix = "ce-"

// ErrInvalid is wrapped by every *Error.
var ErrInvalid = errors.New("invalid CloudEvent")

// Error is a CloudEvent refused for one attribute ("data" for the data;
// "" when the body is no event at all).
type Error struct {
	Attribute string
	Problem   string
}

func (e *Error) Error() string {
	if e.Attribute == "" {
		return "CloudEvent: " + e.Problem
	}
	return fmt.Sprintf("CloudEvents attribute %q: %s", e.Attribute, e.Problem)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

func bad(attr, format string, args ...any) *Error {
	return &Error{Attribute: attr, Problem: fmt.Sprintf(format, args...)}
}

// Event is a CloudEvent's context attributes and its data.
type Event struct {
	// Required attributes.
	ID, Source, SpecVersion, Type string
	// Optional attributes ("" when absent).
	DataContentType, DataSchema, Subject string
	Time                                 time.Time // zero when absent
	// Extensions are the other attributes, each as its string form.
	Extensions map[string]string
	// Data is the event's data, a JSON document.
	Data json.RawMessage
}

// IsStructured reports whether a Content-Type names the JSON event format.
func IsStructured(contentType string) bool { return mediaType(contentType) == ContentType }

// IsBatch reports whether a Content-Type names the JSON batch format.
func IsBatch(contentType string) bool { return mediaType(contentType) == BatchContentType }

// IsBinary reports whether h (an http.Header or a nats.Header) carries
// any ce- header: it is then read as a binary-mode event, and one without
// ce-specversion is refused rather than taken for something else.
func IsBinary(h map[string][]string) bool {
	for k := range h {
		if hasPrefixFold(k, HeaderPrefix) {
			return true
		}
	}
	return false
}

func mediaType(v string) string {
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return mt
}

// isJSON reports whether a datacontenttype declares JSON data: */json or
// */*+json, parameters aside (the JSON format's own rule).
func isJSON(contentType string) bool {
	mt := mediaType(contentType)
	_, sub, ok := strings.Cut(mt, "/")
	return ok && (sub == "json" || strings.HasSuffix(sub, "+json"))
}

// attrs are the attributes the specification defines; every other one is
// an extension.
var attrs = []string{"specversion", "id", "source", "type", "datacontenttype", "dataschema", "subject", "time"}

// Structured reads an event in the JSON event format.
func Structured(body []byte) (Event, error) {
	members, dup, err := event.Members(body)
	if dup != "" {
		return Event{}, bad(dup, "given twice")
	}
	if err != nil {
		if d := state.Depth(body); d > event.MaxDepth+1 { // past encoding/json's limit: say the one that binds
			return Event{}, bad("data", "the event nests %d levels deep; its data may nest at most %d", d, event.MaxDepth)
		}
		return Event{}, bad("", "the body is not a JSON object (the JSON event format): %v", err)
	}
	str := map[string]string{}
	ext := map[string]string{}
	var data json.RawMessage
	var data64 *string
	for _, name := range slices.Sorted(maps.Keys(members)) { // the first bad one, always the same
		raw := members[name]
		if string(raw) == "null" { // the format's rule: null is unset
			continue
		}
		switch {
		case name == "data":
			data = raw
		case name == "data_base64":
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return Event{}, bad("data_base64", "want a base64 string")
			}
			data64 = &s
		case slices.Contains(attrs, name):
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return Event{}, bad(name, "want a JSON string, got %.40s", raw)
			}
			str[name] = s
		default:
			v, err := extensionValue(name, raw)
			if err != nil {
				return Event{}, err
			}
			ext[name] = v
		}
	}
	if data != nil && data64 != nil {
		return Event{}, bad("data_base64", "give data or data_base64, not both")
	}
	ev, err := build(str, ext)
	if err != nil {
		return Event{}, err
	}
	if data64 != nil {
		b, err := base64.StdEncoding.DecodeString(*data64)
		if err != nil {
			return Event{}, bad("data_base64", "not base64: %v", err)
		}
		data = b
	}
	if ev.DataContentType != "" && !isJSON(ev.DataContentType) {
		return Event{}, bad("datacontenttype", "%q is not JSON: tenaz delivers the data as a JSON payload", ev.DataContentType)
	}
	if ev.Data, err = jsonData(data); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// extensionValue is an extension's string form: the JSON format maps the
// CloudEvents types to strings, integers and booleans only.
func extensionValue(name string, raw json.RawMessage) (string, error) {
	if !validName(name) {
		return "", bad(name, "not an attribute name: names are a-z and 0-9")
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "", bad(name, "%v", err)
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return fmt.Sprint(x), nil
	case json.Number:
		if _, err := x.Int64(); err != nil {
			return "", bad(name, "want an integer, got %s", x)
		}
		return x.String(), nil
	}
	return "", bad(name, "want a string, integer or boolean, got %.40s", raw)
}

// Binary reads a binary-mode event: its attributes from h's ce- headers
// (see Attributes), body as its data.
func Binary(h map[string][]string, contentType string, body []byte) (Event, error) {
	ev, err := Attributes(h, contentType)
	if err != nil {
		return Event{}, err
	}
	if ev.Data, err = jsonData(body); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Attributes reads a binary-mode event's attributes from h's ce- headers
// (names case-insensitive, values percent-decoded as the HTTP binding has
// them), with contentType as its datacontenttype (the Content-Type
// header; a ce-datacontenttype header is read too). The data is the
// caller's to check.
func Attributes(h map[string][]string, contentType string) (Event, error) {
	str := map[string]string{}
	ext := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		vs := h[k]
		if !hasPrefixFold(k, HeaderPrefix) {
			continue
		}
		name := strings.ToLower(k[len(HeaderPrefix):])
		if !validName(name) {
			return Event{}, bad(name, "header %s does not name an attribute: names are a-z and 0-9", k)
		}
		_, dupStr := str[name]
		_, dupExt := ext[name]
		if dupStr || dupExt || len(vs) != 1 {
			return Event{}, bad(name, "given more than once")
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil || !utf8.ValidString(v) {
			return Event{}, bad(name, "header %s is not percent-encoded UTF-8", k)
		}
		if slices.Contains(attrs, name) {
			str[name] = v
		} else {
			ext[name] = v
		}
	}
	if contentType != "" {
		if ct, ok := str["datacontenttype"]; ok && ct != contentType {
			return Event{}, bad("datacontenttype", "ce-datacontenttype %q differs from Content-Type %q", ct, contentType)
		}
		str["datacontenttype"] = contentType
	}
	ev, err := build(str, ext)
	if err != nil {
		return Event{}, err
	}
	// In binary mode the data's type must be stated: a body is JSON only
	// when the sender says so (curl's default form type is not).
	if !isJSON(ev.DataContentType) {
		if ev.DataContentType == "" {
			return Event{}, bad("datacontenttype", "missing: send the JSON data with Content-Type: application/json")
		}
		return Event{}, bad("datacontenttype", "%q is not JSON: tenaz delivers the data as a JSON payload", ev.DataContentType)
	}
	return ev, nil
}

// build checks the attributes common to both modes.
func build(str, ext map[string]string) (Event, error) {
	sv, ok := str["specversion"]
	if !ok {
		return Event{}, bad("specversion", "missing: want %q", SpecVersion)
	}
	if sv != SpecVersion {
		return Event{}, bad("specversion", "want %q, got %q", SpecVersion, sv)
	}
	ev := Event{SpecVersion: sv, ID: str["id"], Source: str["source"], Type: str["type"],
		DataContentType: str["datacontenttype"], DataSchema: str["dataschema"], Subject: str["subject"], Extensions: ext}
	for _, req := range []struct{ name, v string }{{"id", ev.ID}, {"source", ev.Source}, {"type", ev.Type}} {
		if req.v == "" {
			if _, given := str[req.name]; given {
				return Event{}, bad(req.name, "must not be empty")
			}
			return Event{}, bad(req.name, "missing (required)")
		}
	}
	if _, err := url.Parse(ev.Source); err != nil {
		return Event{}, bad("source", "not a URI-reference: %v", err)
	}
	if _, given := str["subject"]; given && ev.Subject == "" {
		return Event{}, bad("subject", "must not be empty when given")
	}
	if ev.DataSchema != "" {
		if u, err := url.Parse(ev.DataSchema); err != nil || !u.IsAbs() {
			return Event{}, bad("dataschema", "want an absolute URI, got %q", ev.DataSchema)
		}
	}
	if ev.DataContentType != "" && mediaType(ev.DataContentType) == "" {
		return Event{}, bad("datacontenttype", "%q is not a media type", ev.DataContentType)
	}
	if t, given := str["time"]; given {
		var err error
		if ev.Time, err = time.Parse(time.RFC3339Nano, t); err != nil {
			return Event{}, bad("time", "want an RFC 3339 timestamp, got %q", t)
		}
	}
	return ev, nil
}

// jsonData checks the data: present, one JSON document, not null. How
// deep it nests, and that decoders read it one way only (no lone
// surrogate escape, no member given twice), is event.New's to check, as
// for any payload: refused as malformed.
func jsonData(b []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 || string(bytes.TrimSpace(b)) == "null" {
		return nil, bad("data", "missing: tenaz delivers the data as the event's payload")
	}
	if !json.Valid(b) {
		if d := state.Depth(b); d > event.MaxDepth { // past encoding/json's limit: say the one that binds
			return nil, bad("data", "nests %d levels deep; the limit is %d", d, event.MaxDepth)
		}
		return nil, bad("data", "not a JSON document")
	}
	return json.RawMessage(b), nil
}

// validName: CloudEvents attribute names are a-z and 0-9 (the
// specification's MUST; its 20 characters are only a SHOULD).
func validName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// ContentTypeOf is h's Content-Type, its name in any case (NATS headers
// are case-sensitive; publishers write content-type as often as not).
// Sent in several spellings, the smallest spelling's counts, the same on
// every delivery.
func ContentTypeOf(h map[string][]string) string {
	found, v := "", ""
	for k, vs := range h {
		if strings.EqualFold(k, "Content-Type") && len(vs) > 0 && (found == "" || k < found) {
			found, v = k, vs[0]
		}
	}
	return v
}
