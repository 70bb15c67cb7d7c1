package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/tenaz/tenaz/pkg/state"
)

// A payload is kept and delivered as its bytes, while tenaz reads it
// decoded: its derived idempotency key and the 409 of a key reused with
// another payload compare the canonical form (Canonical), and the JSON
// Schema check sees encoding/json's value. So a payload that decoders
// may read two ways is refused (scanPayload finds it): what tenaz
// checked and hashed would not be what the target reads, and two
// different payloads would be one event.
//
//   - An escape of a lone UTF-16 surrogate (\ud800 not followed by a low
//     surrogate escape \udc00–\udfff, or a low one alone) names no
//     character: encoding/json reads it as U+FFFD, so "A\ud800",
//     "A\udbff" and "A\ufffd" would be one payload, while the target's
//     parser may keep it, refuse it or read something else.
//   - A member given twice in one object: encoding/json keeps the last
//     value (the hash, the schema check), many parsers the first (the
//     target), so {"amount":100,"amount":5} would be 5 to tenaz and
//     maybe 100 to the target.

// shortString is how many bytes of a string stringEnd reads one by one
// before it searches.
const shortString = 32

// linearNames is how many member names of one object scanPayload
// compares one by one; past it, it looks them up in a map.
const linearNames = 16

// scanFrame is an array or object scanPayload is inside.
type scanFrame struct {
	set    map[string]struct{} // an object's names once past linearNames
	start  int                 // where an object's names start in names
	at     int                 // an array's current element; an object's current name (its index in names), -1 before the first
	object bool
}

// A number is read exactly where a kind's JSON Schema checks it (a
// big.Rat per number): 1e999999 costs a 2-million-bit power of ten, tens
// of milliseconds, and a payload holds tens of thousands of them. So a
// payload's numbers are bounded: at most maxNumberDigits digits and an
// exponent of at most ±maxExponent, far past any quantity's (float64
// ends at 1e308, decimal128 at 34 digits). A number past them is refused
// and may be sent as a string.
const (
	maxNumberDigits = 256
	maxExponent     = 1000
)

// scanPayload reads JSON text p once and returns how deep it nests (as
// state.Depth counts it) and the first thing in it that decoders may read
// two ways (see above), as an error its caller prefixes with what p is
// ("payload gives the member …"), or nil; and likewise the first number
// past the bounds above (a payload's, not any JSON text's). On
// text that is not JSON its answers mean nothing: json.Valid says so.
// Past MaxDepth it stops looking for anything but the depth. Its stacks
// start on the goroutine's stack: the usual payload costs no allocation.
func scanPayload(p []byte) (depth int, ambiguous, number error) {
	var frameBuf [16]scanFrame
	var nameBuf [32][]byte
	frames := frameBuf[:0] // the arrays and objects open
	names := nameBuf[:0]   // the member names of the open objects, decoded
	wantKey := false       // the next string is a member name
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			end, err := numberEnd(p, i)
			if err != nil && number == nil {
				number = fmt.Errorf("has %v at %s: send it as a string", err, pointer(frames, names))
			}
			i = end - 1
		case '{', '[':
			if len(frames) == MaxDepth {
				return state.Depth(p), nil, nil // too deep: refused for that
			}
			object := p[i] == '{'
			frames = append(frames, scanFrame{start: len(names), at: -1, object: object})
			if !object {
				frames[len(frames)-1].at = 0
			}
			depth = max(depth, len(frames))
			wantKey = object
		case '}', ']':
			if n := len(frames); n > 0 {
				names = names[:frames[n-1].start]
				frames = frames[:n-1]
			}
			wantKey = false
		case ',':
			if n := len(frames); n > 0 {
				if f := &frames[n-1]; f.object {
					wantKey = true
				} else {
					f.at++
				}
			}
		case '"':
			end, escaped, lone := stringEnd(p, i)
			key := wantKey && len(frames) > 0
			if lone >= 0 {
				return max(depth, state.Depth(p)), loneSurrogate(frames, names, string(p[lone:lone+6]), lone, key), number
			}
			if end == len(p) {
				return depth, nil, number // unterminated: not JSON
			}
			if key {
				var err error
				if names, err = addName(frames, names, p[i:end+1], escaped); err != nil {
					return max(depth, state.Depth(p)), err, number
				}
				wantKey = false
			}
			i = end
		}
	}
	return depth, nil, number
}

// numberEnd reads the number whose literal starts at p[start] and returns
// where it ends, with an error if it is past maxNumberDigits or
// maxExponent. On text that is not JSON its answers mean nothing.
func numberEnd(p []byte, start int) (int, error) {
	i, digits := start, 0
	if i < len(p) && p[i] == '-' {
		i++
	}
	for ; i < len(p) && (p[i] >= '0' && p[i] <= '9' || p[i] == '.'); i++ {
		if p[i] != '.' {
			digits++
		}
	}
	exp := 0
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		for ; i < len(p) && p[i] >= '0' && p[i] <= '9'; i++ {
			exp = min(exp*10+int(p[i]-'0'), 10*maxExponent) // no overflow, still past the bound
		}
	}
	switch {
	case digits > maxNumberDigits:
		return i, fmt.Errorf("a number of %d digits (at most %d are taken)", digits, maxNumberDigits)
	case exp > maxExponent:
		return i, fmt.Errorf("a number with an exponent past ±%d", maxExponent)
	}
	return i, nil
}

// addName records the member name lit (a string literal, quotes
// included) of the innermost of frames, an object, or refuses it as given
// twice in that object. names are the open objects' names (see
// scanFrame.start); it returns them with lit's added.
func addName(frames []scanFrame, names [][]byte, lit []byte, escaped bool) ([][]byte, error) {
	f := &frames[len(frames)-1]
	name := lit[1 : len(lit)-1]
	if escaped { // compared as decoded: "a" and "\u0061" are one name
		var d string
		if json.Unmarshal(lit, &d) != nil {
			return names, nil // not JSON: json.Valid says so
		}
		name = []byte(d)
	}
	switch {
	case f.set != nil:
		if _, dup := f.set[string(name)]; dup {
			return names, duplicate(frames, names, name)
		}
		f.set[string(name)] = struct{}{}
	case len(names)-f.start < linearNames:
		for _, n := range names[f.start:] {
			if bytes.Equal(n, name) {
				return names, duplicate(frames, names, name)
			}
		}
	default:
		// A big object: a map from here on keeps each name's check cheap.
		f.set = make(map[string]struct{}, 2*linearNames)
		for _, n := range names[f.start:] {
			f.set[string(n)] = struct{}{}
		}
		if _, dup := f.set[string(name)]; dup {
			return names, duplicate(frames, names, name)
		}
		f.set[string(name)] = struct{}{}
	}
	f.at = len(names)
	return append(names, name), nil
}

func duplicate(frames []scanFrame, names [][]byte, name []byte) error {
	return fmt.Errorf("gives the member %q twice in the object at %s: "+
		"decoders differ on which one counts (tenaz reads the last, others may read the first); send each member once",
		name, pointer(frames[:len(frames)-1], names))
}

// loneSurrogate is the refusal of the escape esc at byte at, in a string
// of the innermost of frames: a member name (key) or a value.
func loneSurrogate(frames []scanFrame, names [][]byte, esc string, at int, key bool) error {
	what := "the string at " + pointer(frames, names)
	if key {
		what = "a member name in the object at " + pointer(frames[:len(frames)-1], names)
	}
	return fmt.Errorf("has %s at byte %d, in %s: a lone UTF-16 surrogate escape names no character "+
		"(decoders read U+FFFD for it or refuse it, so two different values would be one); "+
		"send the character as UTF-8 or as a surrogate pair (\\ud83d\\ude00)",
		esc, at, what)
}

// pointer is the JSON Pointer (RFC 6901) of the value frames lead to,
// quoted, or "the top level".
func pointer(frames []scanFrame, names [][]byte) string {
	var b strings.Builder
	for _, f := range frames {
		if f.object && f.at < 0 {
			continue // no member yet (not on a path to a value)
		}
		b.WriteByte('/')
		if !f.object {
			b.WriteString(strconv.Itoa(f.at))
			continue
		}
		for _, c := range string(names[f.at]) {
			switch c {
			case '~':
				b.WriteString("~0")
			case '/':
				b.WriteString("~1")
			default:
				b.WriteRune(c)
			}
		}
	}
	if b.Len() == 0 {
		return "the top level"
	}
	return strconv.Quote(b.String())
}

// stringEnd reads the string literal opened at p[open]: the index of its
// closing quote (len(p) if none), whether it has an escape, and where an
// escape of a lone surrogate starts in it (-1 for none). It looks for
// the quote and each backslash with bytes.IndexByte, so a string without
// escapes costs two fast searches.
func stringEnd(p []byte, open int) (end int, escaped bool, lone int) {
	// Most strings of a payload are short and plain: a byte loop over
	// their first bytes costs less than the calls of the searches.
	for j := open + 1; j < len(p) && j <= open+shortString; j++ {
		if c := p[j]; c == '"' {
			return j, false, -1
		} else if c == '\\' {
			break
		}
	}
	quote := -1
	for j := open + 1; ; {
		if quote < j {
			q := bytes.IndexByte(p[j:], '"')
			if q < 0 {
				return len(p), escaped, -1
			}
			quote = j + q
		}
		b := bytes.IndexByte(p[j:quote], '\\')
		if b < 0 {
			return quote, escaped, -1
		}
		b += j
		escaped = true
		if b+1 < len(p) && p[b+1] == 'u' {
			switch r := hex4(p, b+2); {
			case r >= 0xd800 && r < 0xdc00: // high: a low escape must follow
				if p2 := b + 6; p2+1 < len(p) && p[p2] == '\\' && p[p2+1] == 'u' {
					if r2 := hex4(p, p2+2); r2 >= 0xdc00 && r2 < 0xe000 {
						j = p2 + 6
						continue
					}
				}
				return quote, escaped, b
			case r >= 0xdc00 && r < 0xe000:
				return quote, escaped, b
			}
			j = b + 2 // the four digits are no quote nor backslash
			continue
		}
		j = b + 2 // the escaped character, a quote or a backslash included
	}
}

// hex4 is the value of the four hex digits at p[i:], or -1.
func hex4(p []byte, i int) int {
	if i+4 > len(p) {
		return -1
	}
	v := 0
	for _, c := range p[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		v = v<<4 | int(c)
	}
	return v
}
