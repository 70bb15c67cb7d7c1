package state

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the JSON of r to b. It writes what encoding/json
// would (same field names and omitempty rules; TestAppendJSONMatchesEncodingJSON
// checks it) without reflection: a record is encoded on every transition,
// and with encoding/json that was ~9% of the CPU of an event in make bench.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"idempotency_key":`...)
	b = appendString(b, r.IdempotencyKey)
	b = append(b, `,"account":`...)
	b = appendString(b, r.Account)
	b = append(b, `,"kind":`...)
	b = appendString(b, r.Kind)
	if r.EntityID != "" {
		b = append(b, `,"entity_id":`...)
		b = appendString(b, r.EntityID)
	}
	if r.OrderingKey != "" {
		b = append(b, `,"ordering_key":`...)
		b = appendString(b, r.OrderingKey)
	}
	b = append(b, `,"status":`...)
	b = appendString(b, string(r.Status))
	b = append(b, `,"stage":`...)
	b = appendString(b, r.Stage)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	if e := r.LastError; e != nil {
		b = append(b, `,"last_error":{"class":`...)
		b = appendString(b, e.Class)
		b = append(b, `,"message":`...)
		b = appendString(b, e.Message)
		if e.HTTPStatus != 0 {
			b = append(b, `,"http_status":`...)
			b = strconv.AppendInt(b, int64(e.HTTPStatus), 10)
		}
		b = append(b, '}')
	}
	if r.NextRunAt != nil {
		b = append(b, `,"next_run_at":`...)
		b = appendTime(b, *r.NextRunAt)
	}
	if r.Deadline != nil {
		b = append(b, `,"deadline":`...)
		b = appendTime(b, *r.Deadline)
	}
	if r.Replays != 0 {
		b = append(b, `,"replays":`...)
		b = strconv.AppendInt(b, int64(r.Replays), 10)
	}
	if r.Polls != 0 {
		b = append(b, `,"polls":`...)
		b = strconv.AppendInt(b, int64(r.Polls), 10)
	}
	if r.Reference != "" {
		b = append(b, `,"reference":`...)
		b = appendString(b, r.Reference)
	}
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	if len(r.Payload) > 0 {
		b = append(b, `,"payload":`...)
		b = append(b, r.Payload...)
	}
	if r.PayloadSHA256 != "" {
		b = append(b, `,"payload_sha256":`...)
		b = appendString(b, r.PayloadSHA256)
	}
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt)
	b = append(b, `,"updated_at":`...)
	b = appendTime(b, r.UpdatedAt)
	if r.RunSeq != 0 {
		b = append(b, `,"run_seq":`...)
		b = strconv.AppendUint(b, r.RunSeq, 10)
	}
	if r.After != "" {
		b = append(b, `,"after":`...)
		b = appendString(b, r.After)
	}
	if r.Next != "" {
		b = append(b, `,"next":`...)
		b = appendString(b, r.Next)
	}
	if r.Traceparent != "" {
		b = append(b, `,"traceparent":`...)
		b = appendString(b, r.Traceparent)
	}
	b = append(b, `,"history":`...)
	if r.History == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.History {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.History[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	if r.Truncated != 0 {
		b = append(b, `,"history_truncated":`...)
		b = strconv.AppendInt(b, int64(r.Truncated), 10)
	}
	return append(b, '}')
}

func (e *Entry) appendJSON(b []byte) []byte {
	b = append(b, `{"at":`...)
	b = appendTime(b, e.At)
	b = append(b, `,"action":`...)
	b = appendString(b, string(e.Action))
	if e.From != "" {
		b = append(b, `,"from":`...)
		b = appendString(b, string(e.From))
	}
	b = append(b, `,"to":`...)
	b = appendString(b, string(e.To))
	for _, f := range [...]struct {
		name string
		v    int
	}{{`,"attempt":`, e.Attempt}} {
		if f.v != 0 {
			b = append(b, f.name...)
			b = strconv.AppendInt(b, int64(f.v), 10)
		}
	}
	for _, f := range [...]struct{ name, v string }{{`,"stage":`, e.Stage}, {`,"actor":`, e.Actor}, {`,"detail":`, e.Detail}} {
		if f.v != "" {
			b = append(b, f.name...)
			b = appendString(b, f.v)
		}
	}
	if e.HTTPStatus != 0 {
		b = append(b, `,"http_status":`...)
		b = strconv.AppendInt(b, int64(e.HTTPStatus), 10)
	}
	if e.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(e.Count), 10)
	}
	return append(b, '}')
}

// maxJSONLen bounds the length of e's appendJSON without encoding it:
// every key, quote and number at its longest, the time at its longest
// (a 12-digit year and its sign, 9 decimals, an offset of any int
// seconds: 58 bytes), and each byte of a string escaped to at most 6
// (\u00XX, or \ufffd for an invalid byte; a 3-byte U+2028 becomes 6).
// evict calls it for every entry on every transition: encoding them all
// there was most of its cost.
func (e *Entry) maxJSONLen() int {
	const fixed = len(`{"at":,"action":,"from":,"to":,"attempt":,"stage":,"actor":,"detail":,"http_status":,"count":}`) +
		6*2 + // the quotes of six strings
		3*20 + // three ints
		64 // the time, quoted
	return fixed + 6*(len(e.Action)+len(e.From)+len(e.To)+len(e.Stage)+len(e.Actor)+len(e.Detail))
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hex = "0123456789abcdef"

// appendString quotes s as encoding/json does (with HTML escaping, and
// invalid UTF-8 replaced by U+FFFD).
func appendString(b []byte, s string) []byte { return AppendString(b, s, true) }

// AppendString quotes s as encoding/json does, escaping <, > and & only
// with escapeHTML (json.Encoder.SetEscapeHTML), invalid UTF-8 replaced by
// U+FFFD.
func AppendString(b []byte, s string, escapeHTML bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!escapeHTML || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
