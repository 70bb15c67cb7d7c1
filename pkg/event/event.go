package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
)

// Envelope is one event as it travels between services. The payload is kept
// exactly as submitted.
type Envelope struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Account        string          `json:"account"`
	Kind           string          `json:"kind"`
	EntityID       string          `json:"entity_id,omitempty"`
	OrderingKey    string          `json:"ordering_key,omitempty"`
	NotBefore      *time.Time      `json:"not_before,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	Payload        json.RawMessage `json:"payload"`
	// Traceparent is the event's W3C trace context (pkg/tracing): the
	// accept span's, or the submitter's while tracing is off.
	Traceparent string `json:"traceparent,omitempty"`
}

// Errors a submission can fail with; HTTP maps them to status codes.
var (
	// ErrMalformed: the body or a header cannot be parsed (HTTP 400).
	ErrMalformed = errors.New("malformed submission")
	// ErrInvalid: a field is syntactically fine but not allowed (HTTP 400).
	ErrInvalid = errors.New("invalid submission")
)

// MaxNotBefore is how far ahead an event may be delayed.
const MaxNotBefore = 366 * 24 * time.Hour

// Submission is the body of POST /v1/events.
type Submission struct {
	Account     string          `json:"account"`
	Kind        string          `json:"kind"`
	EntityID    string          `json:"entity_id,omitempty"`
	OrderingKey string          `json:"ordering_key,omitempty"`
	NotBefore   string          `json:"not_before,omitempty"`
	Payload     json.RawMessage `json:"payload"`
}

// ParseSubmission decodes and checks an HTTP submission body. Unknown
// fields are refused so that a typo ("ordering-key") is not silently lost.
func ParseSubmission(body []byte) (Submission, error) {
	var s Submission
	err := parseStrict(body, &s, &s)
	return s, err
}

// ParseSubmitRequest decodes and checks a request of the submit endpoint
// as ParseSubmission does an HTTP body.
func ParseSubmitRequest(body []byte) (SubmitRequest, error) {
	var r SubmitRequest
	err := parseStrict(body, &r, &r.Submission)
	return r, err
}

// Members reads a JSON object's members. An object that gives a member
// twice is refused, naming it (dup): decoders keep the last, while a proxy
// or a reviewer reading the body may take the first, so
// {"account":"a","account":"b"} means two things. An error means data is
// not one JSON object.
func Members(data []byte) (members map[string]json.RawMessage, dup string, err error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, "", errors.New("not a JSON object")
	}
	members = map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, "", err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, "", err
		}
		if _, ok := members[key]; ok && dup == "" {
			dup = key
		}
		members[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, "", err
	}
	if !atEOF(dec) {
		return nil, "", errors.New("trailing data after the JSON object")
	}
	if dup != "" {
		return nil, dup, nil
	}
	return members, "", nil
}

// parseStrict decodes body into v, refusing unknown fields, a member given
// twice or spelled otherwise than its field (see checkSpelling) and
// trailing data, and checks s, the submission v holds.
func parseStrict(body []byte, v any, s *Submission) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if d := state.Depth(body); d > MaxDepth+1 {
			// Past encoding/json's 10,000 levels its error says only
			// "exceeded max depth"; the limit is much lower.
			return fmt.Errorf("%w: the submission nests %d levels deep; a payload may nest at most %d", ErrMalformed, d, MaxDepth)
		}
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !atEOF(dec) {
		return fmt.Errorf("%w: trailing data after the JSON object", ErrMalformed)
	}
	members, dup, _ := Members(body)
	if dup != "" {
		return fmt.Errorf("%w: %q is given twice", ErrMalformed, dup)
	}
	if given, want := misspelledIn(members, reflect.TypeOf(v).Elem()); given != "" {
		return fmt.Errorf("%w: the member %q is spelled %q: spell it exactly", ErrMalformed, want, given)
	}
	if len(s.Payload) == 0 || string(s.Payload) == "null" {
		return errNoPayload
	}
	return nil
}

// CheckPayload is what every way in asks of a payload, a submission's or
// an operator's edit: present (not null) and one JSON document in UTF-8
// that nests at most MaxDepth levels and that decoders cannot read two
// ways: no escape of a lone UTF-16 surrogate ("\ud800") and no member
// given twice in an object (see scanPayload).
func CheckPayload(p []byte) error {
	if len(bytes.TrimSpace(p)) == 0 || isNull(p) {
		return errNoPayload
	}
	return checkJSONText(p)
}

var errNoPayload = fmt.Errorf("%w: payload is required", ErrInvalid)

// isNull reports whether p is the JSON null, whitespace aside.
func isNull(p []byte) bool { return string(bytes.TrimSpace(p)) == "null" }

// MaxDepth is how deep a payload may nest (state.MaxDepth, which says
// why): a deeper one is refused as malformed on every way in.
const MaxDepth = state.MaxDepth

// CheckDepth refuses a JSON value (what names it: "payload", "result")
// that nests deeper than MaxDepth, with an error wrapping ErrMalformed
// that names the limit. It is one pass over the bytes, no decode.
func CheckDepth(what string, p []byte) error {
	if d := state.Depth(p); d > MaxDepth {
		return fmt.Errorf("%w: %s nests %d levels deep; the limit is %d", ErrMalformed, what, d, MaxDepth)
	}
	return nil
}

// checkJSONText requires one JSON document in UTF-8 that nests at most
// MaxDepth levels, with no lone surrogate escape and no member given
// twice. JSON text is UTF-8 (RFC 8259); decoding would turn each invalid
// byte, as each lone surrogate escape, into U+FFFD, so two different
// payloads would derive one key (and a member given twice is read two
// ways). One pass over the bytes (scanPayload, cheaper than json.Valid's)
// finds the depth and those; the depth is reported first: a payload
// nested past encoding/json's own limit is told the limit too, not "not
// valid JSON".
func checkJSONText(p []byte) error {
	depth, ambiguous, number := scanPayload(p)
	if depth > MaxDepth {
		return fmt.Errorf("%w: payload nests %d levels deep; the limit is %d", ErrMalformed, depth, MaxDepth)
	}
	if !json.Valid(p) {
		return fmt.Errorf("%w: payload is not valid JSON", ErrMalformed)
	}
	if !utf8.Valid(p) {
		return fmt.Errorf("%w: payload is not valid UTF-8, as JSON text must be: send text as UTF-8, bytes as base64", ErrMalformed)
	}
	if ambiguous != nil {
		return fmt.Errorf("%w: payload %v", ErrMalformed, ambiguous)
	}
	if number != nil {
		return fmt.Errorf("%w: payload %v", ErrMalformed, number)
	}
	return nil
}

// CheckUnambiguous refuses JSON text b (what names it: "body") that
// decoders may read two ways, as a payload is (a member given twice, a
// lone surrogate escape), with an error wrapping ErrMalformed. b is
// valid JSON: this is not a grammar check.
func CheckUnambiguous(what string, b []byte) error {
	if err := ReadsTwoWays(what, b); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

// ReadsTwoWays is CheckUnambiguous's finding alone, for JSON text that
// is not a submission (a provider's answer or webhook): "<what> gives
// the member … twice …", or nil.
func ReadsTwoWays(what string, b []byte) error {
	if _, ambiguous, _ := scanPayload(b); ambiguous != nil {
		return fmt.Errorf("%s %w", what, ambiguous)
	}
	return nil
}

// Fields are the submission's parts that are not the payload.
type Fields struct {
	Account, Kind, EntityID, OrderingKey, NotBefore, IdempotencyKey string
	// Traceparent is the submitter's, in canonical form (tracing.From).
	Traceparent string
}

// New builds a validated Envelope from a submission's fields and payload.
// entityField and orderField name payload fields that supply the entity id
// and ordering key when the caller gave none (the kind's config).
func New(f Fields, payload []byte, entityField, orderField string, now time.Time) (Envelope, error) {
	if err := names.ValidateAccount(f.Account); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := names.ValidateKind(f.Kind); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := checkJSONText(payload); err != nil {
		return Envelope{}, err
	}
	if isNull(payload) {
		return Envelope{}, errNoPayload // refused as every way in refuses it
	}
	env := Envelope{
		Account:     f.Account,
		Kind:        f.Kind,
		EntityID:    f.EntityID,
		OrderingKey: f.OrderingKey,
		CreatedAt:   now.UTC(),
		Payload:     json.RawMessage(payload),
		Traceparent: f.Traceparent,
	}
	// What a value was read from, for its error: the caller sent no
	// entity_id when it comes from the payload's field.
	entityFrom, orderFrom := "entity_id", "ordering_key"
	if (env.EntityID == "" && entityField != "") || (env.OrderingKey == "" && orderField != "") {
		if obj, _ := DecodeObject(payload); obj != nil {
			if env.EntityID == "" && entityField != "" {
				env.EntityID = Scalar(obj[entityField])
				entityFrom = fmt.Sprintf("entity_id (the payload's %q, the kind's entity field)", entityField)
			}
			if env.OrderingKey == "" && orderField != "" {
				env.OrderingKey = Scalar(obj[orderField])
				orderFrom = fmt.Sprintf("ordering_key (the payload's %q, the kind's ordering field)", orderField)
			}
		}
	}
	for _, kv := range [][2]string{{entityFrom, env.EntityID}, {orderFrom, env.OrderingKey}} {
		if kv[1] != "" {
			if err := names.ValidateKey(kv[0], kv[1]); err != nil {
				return Envelope{}, fmt.Errorf("%w: %v", ErrInvalid, err)
			}
		}
	}
	if f.NotBefore != "" {
		t, err := time.Parse(time.RFC3339, f.NotBefore)
		if err != nil {
			return Envelope{}, fmt.Errorf("%w: not_before %q is not RFC 3339", ErrMalformed, f.NotBefore)
		}
		if t.After(now.Add(MaxNotBefore)) {
			return Envelope{}, fmt.Errorf("%w: not_before is more than a year ahead", ErrInvalid)
		}
		if t.After(now) {
			t = t.UTC()
			env.NotBefore = &t
		}
	}
	key := f.IdempotencyKey
	if key == "" {
		canon, err := Canonical(payload)
		if err != nil {
			return Envelope{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		key = DerivedKey(f.Kind, env.EntityID, canon)
	} else if err := CheckKey("idempotency key", key); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	env.IdempotencyKey = key
	env.ID = ID(f.Account, key)
	return env, nil
}

// atEOF reports whether nothing but whitespace follows the value dec has
// just decoded. (Decoder.More is no test for this: it reports false before
// a stray '}' or ']', so `{...}}` would pass.)
func atEOF(dec *json.Decoder) bool {
	_, err := dec.Token()
	return err == io.EOF
}

// DecodeObject decodes a JSON object (a payload, a provider's answer or
// webhook) with its numbers kept as written, for Scalar. Nothing but
// whitespace may follow it, and null is no object.
func DecodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("null is not a JSON object")
	}
	if !atEOF(dec) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return obj, nil
}

// Scalar is a value of a DecodeObject object as text: a string as is, a
// number as written (12345678901234567890 stays exact, 1e3 stays 1e3),
// true or false; "" for null, an object or a list. So a provider's job id
// reads alike in its answer and its webhook, and done_when compares
// values as the provider wrote them.
func Scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

// Canonical re-encodes a JSON document with object keys sorted and no
// insignificant whitespace, numbers kept as written, so that two encodings
// of the same payload hash alike. Only on text CheckPayload accepts are
// two payloads' canonical forms equal just when they are the same value:
// decoding turns a lone surrogate escape into U+FFFD and keeps the last
// of a member given twice, which every way in therefore refuses.
func Canonical(payload []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if !atEOF(dec) {
		return nil, errors.New("trailing data after the JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// DerivedKey is the idempotency key of a submission that brought none:
// kind, entity id and the SHA-256 of the canonical payload.
func DerivedKey(kind, entity string, canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "d:" + kind + ":" + entity + ":" + hex.EncodeToString(sum[:])
}

// CheckKey checks an idempotency key a caller gives: its own
// (names.ValidateKey: 1 to 255 bytes), or one tenaz derived (DerivedKey)
// and answered, which is longer when the kind and the entity id are: the
// caller may send it again, or search by it, as it was answered.
func CheckKey(field, key string) error {
	if len(key) > names.MaxKeyLen && isDerived(key) {
		return nil
	}
	return names.ValidateKey(field, key)
}

// isDerived reports whether key has DerivedKey's form with a valid kind
// and entity id: d:<kind>:<entity>:<SHA-256 in lower-case hex>.
func isDerived(key string) bool {
	rest, ok := strings.CutPrefix(key, "d:")
	kind, rest, ok2 := strings.Cut(rest, ":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || !ok2 || i < 0 {
		return false
	}
	entity, sum := rest[:i], rest[i+1:]
	if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size || strings.ToLower(sum) != sum {
		return false
	}
	return names.ValidateKind(kind) == nil && names.ValidateKey("entity", entity) == nil
}

// PayloadSHA256 is the hex SHA-256 of a payload's bytes, as an event's
// record keeps it for the idempotency check.
func PayloadSHA256(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// ID derives the event id from account and idempotency key: "ev_" and 26
// base32 characters (130 bits) of SHA-256. Keys are per account, so two
// accounts may use the same key.
func ID(account, key string) string {
	var in [256]byte // on the stack for the usual account and key (ingest derives an id per submission)
	b := append(append(append(in[:0], account...), 0), key...)
	sum := sha256.Sum256(b)
	var out [52]byte // idEncoding.EncodedLen(sha256.Size)
	idEncoding.Encode(out[:], sum[:])
	return "ev_" + string(out[:26])
}

// Marshal encodes the envelope. It escapes no HTML: json.Marshal would
// write each <, > and & of the payload as six bytes, and a payload that
// fits the size budget (pkg/size) could then not fit a message.
func (e Envelope) Marshal() []byte {
	if b, ok := e.appendJSON(make([]byte, 0, 320+len(e.Payload))); ok {
		return b
	}
	return e.marshalJSON()
}

// appendJSON appends what marshalJSON writes, without reflection (the
// envelope is encoded for every message of an event;
// TestMarshalMatchesEncodingJSON checks it), or reports false for what
// encoding/json fails on (a time it cannot write, a payload that is not
// JSON).
func (e Envelope) appendJSON(b []byte) ([]byte, bool) {
	var err error
	b = append(b, `{"id":`...)
	b = state.AppendString(b, e.ID, false)
	b = append(b, `,"idempotency_key":`...)
	b = state.AppendString(b, e.IdempotencyKey, false)
	b = append(b, `,"account":`...)
	b = state.AppendString(b, e.Account, false)
	b = append(b, `,"kind":`...)
	b = state.AppendString(b, e.Kind, false)
	if e.EntityID != "" {
		b = append(b, `,"entity_id":`...)
		b = state.AppendString(b, e.EntityID, false)
	}
	if e.OrderingKey != "" {
		b = append(b, `,"ordering_key":`...)
		b = state.AppendString(b, e.OrderingKey, false)
	}
	if e.NotBefore != nil {
		b = append(b, `,"not_before":"`...)
		if b, err = e.NotBefore.AppendText(b); err != nil {
			return nil, false
		}
		b = append(b, '"')
	}
	b = append(b, `,"created_at":"`...)
	if b, err = e.CreatedAt.AppendText(b); err != nil {
		return nil, false
	}
	b = append(b, `","payload":`...)
	if e.Payload == nil {
		b = append(b, "null"...)
	} else {
		buf := bytes.NewBuffer(b)
		if json.Compact(buf, e.Payload) != nil { // as encoding/json writes a json.RawMessage
			return nil, false
		}
		b = buf.Bytes()
	}
	if e.Traceparent != "" {
		b = append(b, `,"traceparent":`...)
		b = state.AppendString(b, e.Traceparent, false)
	}
	return append(b, '}'), true
}

// marshalJSON is Marshal by encoding/json.
func (e Envelope) marshalJSON() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(e) // cannot fail: plain fields and valid RawMessage
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Unmarshal decodes an envelope and checks its names.
func Unmarshal(b []byte) (Envelope, error) {
	e, ok := parseMarshaled(b)
	if !ok {
		e = Envelope{}
		if err := json.Unmarshal(b, &e); err != nil {
			return e, fmt.Errorf("%w: envelope: %v", ErrMalformed, err)
		}
	}
	if err := names.ValidateEventID(e.ID); err != nil {
		return e, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := names.ValidateAccount(e.Account); err != nil {
		return e, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := names.ValidateKind(e.Kind); err != nil {
		return e, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return e, nil
}

// parseMarshaled decodes b without reflection if it is laid out exactly as
// Marshal writes it, with strings of printable ASCII and no escapes (a
// dispatcher decodes every message it takes): what json.Unmarshal would
// decode (TestUnmarshalMatchesEncodingJSON checks it). Anything else
// reports false, for json.Unmarshal.
func parseMarshaled(b []byte) (Envelope, bool) {
	var e Envelope
	p := parser{b: b}
	ok := p.lit(`{"id":`) && p.str(&e.ID) && p.lit(`,"idempotency_key":`) && p.str(&e.IdempotencyKey) &&
		p.lit(`,"account":`) && p.str(&e.Account) && p.lit(`,"kind":`) && p.str(&e.Kind) &&
		(!p.opt(`,"entity_id":`) || p.str(&e.EntityID)) && (!p.opt(`,"ordering_key":`) || p.str(&e.OrderingKey))
	if !ok {
		return e, false
	}
	if p.opt(`,"not_before":`) {
		var t time.Time
		if !p.time(&t) {
			return e, false
		}
		e.NotBefore = &t
	}
	if !p.lit(`,"created_at":`) || !p.time(&e.CreatedAt) || !p.lit(`,"payload":`) {
		return e, false
	}
	// The payload runs to the closing brace, or to a last traceparent.
	rest := b[p.i:]
	end := len(rest) - 1
	if end < 0 || rest[end] != '}' {
		return e, false
	}
	if i := bytes.LastIndex(rest, []byte(`,"traceparent":"`)); i >= 0 {
		tp := parser{b: rest, i: i + len(`,"traceparent":`)}
		if tp.str(&e.Traceparent) && tp.i == end && json.Valid(rest[:i]) {
			end = i
		} else {
			e.Traceparent = ""
		}
	}
	payload := rest[:end]
	// Marshal writes no whitespace around the payload; encoding/json,
	// which takes any other input, keeps none of it in a RawMessage.
	if len(payload) == 0 || isSpace(payload[0]) || isSpace(payload[len(payload)-1]) ||
		string(payload) == "null" || !json.Valid(payload) {
		return e, false
	}
	e.Payload = json.RawMessage(bytes.Clone(payload))
	return e, true
}

// parser reads the fixed layout of parseMarshaled.
type parser struct {
	b []byte
	i int
}

// lit consumes s, or reports false.
func (p *parser) lit(s string) bool {
	if !bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		return false
	}
	p.i += len(s)
	return true
}

// opt consumes s if it comes next.
func (p *parser) opt(s string) bool { return p.lit(s) }

// str reads a quoted string of printable ASCII without escapes.
func (p *parser) str(v *string) bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			*v = string(p.b[p.i+1 : j])
			p.i = j + 1
			return true
		case c < 0x20 || c > 0x7e || c == '\\':
			return false
		}
	}
	return false
}

// time reads a quoted time as encoding/json does.
func (p *parser) time(t *time.Time) bool {
	start := p.i
	var s string
	if !p.str(&s) {
		return false
	}
	return t.UnmarshalJSON(p.b[start:p.i]) == nil
}

// isSpace reports whether c is JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
