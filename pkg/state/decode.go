package state

import (
	"encoding/json"
	"math"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeJSON decodes a stored record into r, as json.Unmarshal decodes it
// into a zero Record. A record is decoded on every read (a search's
// hits, the indexer's feed, a callback's compare-and-set), and
// encoding/json's reflection was the largest part of that. JSON that
// AppendJSON writes (its keys, each once, no spaces) is read by a scanner
// made for it; anything else (another key, a space, a null where
// AppendJSON writes none) by encoding/json. FuzzDecodeJSON holds the two
// to the same result.
func DecodeJSON(b []byte, r *Record) error {
	d := decoder{b: b}
	if rec, ok := d.record(); ok {
		*r = rec
		return nil
	}
	*r = Record{}
	return json.Unmarshal(b, r)
}

// decoder reads one record; any method returning false means "not the
// JSON it reads": DecodeJSON then hands the whole input to encoding/json,
// which decodes it or says what is wrong with it.
type decoder struct {
	b []byte
	i int
}

func (d *decoder) next(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *decoder) null() bool {
	if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// object reads {"key":value,...}, handing each key to field, which reads
// the value. A key that comes twice is not read: encoding/json merges a
// second object into the first's pointer, which this does not mimic.
func (d *decoder) object(field func(key []byte, seen *uint64) bool) bool {
	if !d.next('{') {
		return false
	}
	var seen uint64
	if d.next('}') {
		return true
	}
	for {
		key, ok := d.rawString()
		if !ok || !d.next(':') || !field(key, &seen) {
			return false
		}
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// once marks bit n seen; false when it was.
func once(seen *uint64, n uint) bool {
	if *seen&(1<<n) != 0 {
		return false
	}
	*seen |= 1 << n
	return true
}

func (d *decoder) record() (Record, bool) {
	var r Record
	ok := d.object(func(key []byte, seen *uint64) bool {
		var n uint
		var ok bool
		switch string(key) {
		case "id":
			r.ID, ok = d.string()
		case "idempotency_key":
			n = 1
			r.IdempotencyKey, ok = d.string()
		case "account":
			n = 2
			r.Account, ok = d.string()
		case "kind":
			n = 3
			r.Kind, ok = d.string()
		case "entity_id":
			n = 4
			r.EntityID, ok = d.string()
		case "ordering_key":
			n = 5
			r.OrderingKey, ok = d.string()
		case "status":
			n = 6
			var s string
			s, ok = d.name()
			r.Status = State(s)
		case "stage":
			n = 7
			r.Stage, ok = d.name()
		case "attempts":
			n = 8
			r.Attempts, ok = d.int()
		case "replays":
			n = 25
			r.Replays, ok = d.int()
		case "last_error":
			n = 9
			r.LastError, ok = d.errorInfo()
		case "next_run_at":
			n = 10
			r.NextRunAt, ok = d.timePtr()
		case "deadline":
			n = 11
			r.Deadline, ok = d.timePtr()
		case "polls":
			n = 12
			r.Polls, ok = d.int()
		case "reference":
			n = 13
			r.Reference, ok = d.string()
		case "result":
			n = 14
			r.Result, ok = d.raw()
		case "payload":
			n = 15
			r.Payload, ok = d.raw()
		case "payload_sha256":
			n = 16
			r.PayloadSHA256, ok = d.string()
		case "created_at":
			n = 17
			ok = d.time(&r.CreatedAt)
		case "updated_at":
			n = 18
			ok = d.time(&r.UpdatedAt)
		case "run_seq":
			n = 19
			var v uint64
			v, ok = d.uint(math.MaxUint64)
			r.RunSeq = v
		case "after":
			n = 20
			r.After, ok = d.string()
		case "next":
			n = 21
			r.Next, ok = d.string()
		case "traceparent":
			n = 22
			r.Traceparent, ok = d.string()
		case "history":
			n = 23
			r.History, ok = d.history()
		case "history_truncated":
			n = 24
			r.Truncated, ok = d.int()
		default:
			return false
		}
		return ok && once(seen, n)
	})
	return r, ok && d.i == len(d.b)
}

func (d *decoder) errorInfo() (*ErrorInfo, bool) {
	if d.null() {
		return nil, true
	}
	e := &ErrorInfo{}
	ok := d.object(func(key []byte, seen *uint64) bool {
		var n uint
		var ok bool
		switch string(key) {
		case "class":
			e.Class, ok = d.string()
		case "message":
			n = 1
			e.Message, ok = d.string()
		case "http_status":
			n = 2
			e.HTTPStatus, ok = d.int()
		default:
			return false
		}
		return ok && once(seen, n)
	})
	return e, ok
}

func (d *decoder) history() ([]Entry, bool) {
	if d.null() {
		return nil, true
	}
	h := []Entry{}
	ok := d.array(func() bool {
		e, ok := d.entry()
		h = append(h, e)
		return ok
	})
	if !ok {
		return nil, false
	}
	return h, true
}

func (d *decoder) entry() (Entry, bool) {
	var e Entry
	ok := d.object(func(key []byte, seen *uint64) bool {
		var n uint
		var ok bool
		switch string(key) {
		case "at":
			ok = d.time(&e.At)
		case "action":
			n = 1
			var s string
			s, ok = d.name()
			e.Action = ActionName(s)
		case "from":
			n = 2
			var s string
			s, ok = d.name()
			e.From = State(s)
		case "to":
			n = 3
			var s string
			s, ok = d.name()
			e.To = State(s)
		case "attempt":
			n = 4
			e.Attempt, ok = d.int()
		case "stage":
			n = 5
			e.Stage, ok = d.name()
		case "actor":
			n = 6
			e.Actor, ok = d.string()
		case "detail":
			n = 7
			e.Detail, ok = d.string()
		case "http_status":
			n = 8
			e.HTTPStatus, ok = d.int()
		case "count":
			n = 9
			e.Count, ok = d.int()
		default:
			return false
		}
		return ok && once(seen, n)
	})
	return e, ok
}

// array reads [element,...], elem reading each element.
func (d *decoder) array(elem func() bool) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.next(']') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// time reads a time as encoding/json does: the quoted value, handed to
// time.Time.UnmarshalJSON. A null (a no-op there) is left to it.
func (d *decoder) time(t *time.Time) bool {
	start := d.i
	if _, ok := d.rawString(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.b[start:d.i]) == nil
}

func (d *decoder) timePtr() (*time.Time, bool) {
	if d.null() {
		return nil, true
	}
	t := new(time.Time)
	return t, d.time(t)
}

// int reads an integer that fits an int; a fraction, an exponent or a
// null is left to encoding/json.
func (d *decoder) int() (int, bool) {
	neg := d.next('-')
	v, ok := d.uint(math.MaxInt64)
	if !ok {
		return 0, false
	}
	if neg {
		return -int(v), true
	}
	return int(v), true
}

// uint reads the digits of a JSON integer up to most.
func (d *decoder) uint(most uint64) (uint64, bool) {
	start := d.i
	var v uint64
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		c := uint64(d.b[d.i] - '0')
		if v > (most-c)/10 {
			return 0, false
		}
		v = v*10 + c
		d.i++
	}
	n := d.i - start
	if n == 0 || n > 1 && d.b[start] == '0' { // JSON has no leading zeros
		return 0, false
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return 0, false
	}
	return v, true
}

// raw reads any JSON value and returns a copy of it, as
// json.RawMessage's UnmarshalJSON keeps it.
func (d *decoder) raw() (json.RawMessage, bool) {
	start := d.i
	if !d.skip(0) {
		return nil, false
	}
	return append(json.RawMessage(nil), d.b[start:d.i]...), true
}

// skip reads one JSON value of any kind, checking its grammar as
// encoding/json's scanner does; depth bounds the nesting it follows.
func (d *decoder) skip(depth int) bool {
	if depth > 64 || d.i >= len(d.b) {
		return false
	}
	switch c := d.b[d.i]; {
	case c == '"':
		_, ok := d.rawString()
		return ok
	case c == '{': // a raw value may repeat a key: encoding/json keeps it as it is
		return d.object(func([]byte, *uint64) bool { return d.skip(depth + 1) })
	case c == '[':
		return d.array(func() bool { return d.skip(depth + 1) })
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
				d.i += len(lit)
				return true
			}
		}
		return false
	}
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *decoder) number() bool {
	d.next('-')
	digits := func() int {
		n := 0
		for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.next('0') {
		if d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
			return false
		}
	} else if digits() == 0 {
		return false
	}
	if d.next('.') && digits() == 0 {
		return false
	}
	if d.next('e') || d.next('E') {
		if !d.next('+') {
			d.next('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// names are the strings most records repeat (states, actions, stages),
// decoded without an allocation each.
var names = func() map[string]string {
	m := map[string]string{StagePrimary: StagePrimary, StageFallback: StageFallback}
	for _, s := range States {
		m[string(s)] = string(s)
	}
	for a := range Table {
		m[string(a)] = string(a)
	}
	return m
}()

// name reads a string that is most often one of names.
func (d *decoder) name() (string, bool) {
	start := d.i
	s, ok := d.rawString()
	if !ok {
		return "", false
	}
	if n, ok := names[string(s)]; ok {
		return n, true
	}
	d.i = start
	return d.string()
}

// string reads a JSON string's value, as encoding/json unquotes it.
func (d *decoder) string() (string, bool) {
	s, ok := d.rawString()
	if !ok {
		return "", false
	}
	return unquote(s), true
}

// rawString reads a quoted JSON string, checking its grammar (no control
// character, only JSON's escapes), and returns what is between the
// quotes.
func (d *decoder) rawString() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c < 0x20:
			return nil, false
		case c == '\\':
			if d.i+1 >= len(d.b) {
				return nil, false
			}
			switch d.b[d.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.i += 2
			case 'u':
				if getu4(d.b[d.i:]) < 0 {
					return nil, false
				}
				d.i += 6
			default:
				return nil, false
			}
		default:
			d.i++
		}
	}
	return nil, false
}

// unquote is encoding/json's unquoting of a string rawString has checked:
// escapes decoded, a lone surrogate and each byte of invalid UTF-8 as
// U+FFFD.
func unquote(s []byte) string {
	r := 0
	for r < len(s) {
		c := s[r]
		if c == '\\' {
			break
		}
		if c < utf8.RuneSelf {
			r++
			continue
		}
		rr, size := utf8.DecodeRune(s[r:])
		if rr == utf8.RuneError && size == 1 {
			break
		}
		r += size
	}
	if r == len(s) {
		return string(s)
	}
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	b = append(b, s[:r]...)
	for r < len(s) {
		switch c := s[r]; {
		case c == '\\':
			switch e := s[r+1]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := getu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
						r += 6
						b = utf8.AppendRune(b, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // " \ /
				b = append(b, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return string(b)
}

// getu4 decodes \uXXXX at the start of s; -1 when it is not one.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
