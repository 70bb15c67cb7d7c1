package state

import "bytes"

// MaxDepth is how deep a JSON value that tenaz keeps may nest: a payload
// (every way in refuses a deeper one, see event.CheckPayload) and a
// result (Apply keeps none deeper). [] and {"a":1} are one level deep,
// [[]] two, a string or a number none.
//
// Why 512: a payload travels wrapped in other JSON (the submission body,
// the record and the EVENTS envelope add one level, the DEAD entry and
// the deadletter service's answers two), and encoding/json refuses
// anything past 10,000 levels in all. Without a limit of its own, a
// payload of 9,999 levels was accepted and went dead into a DEAD entry
// nothing could decode (one of 10,000, sent to an intake subject, into a
// record nothing could read): an event no operator could see or act on.
// 512 leaves more than 9,000 levels of room below every decoder of every
// stage, for any wrapping to come. No integration payload comes
// near it (orders, invoices, FHIR bundles, GeoJSON nest tens of levels),
// and few targets could take more: JSON parsers stop at 64 (.NET), 100
// (Ruby), 128 (serde_json), 512 (PHP) or 1,000 (Jackson, Python's
// stack). It also bounds what grows with depth: the screen's and the
// CLI's indentation (its square), and every recursive reader of a
// payload (the canonical form, schema matching).
const MaxDepth = 512

// Depth is how deep the JSON text b nests (see MaxDepth): the most
// arrays and objects open at once. It is one pass over the bytes,
// without decoding, and on valid JSON counts as encoding/json does
// against its own limit (FuzzDepth holds it to that); on text that is
// not JSON its answer means nothing: json.Valid says so.
func Depth(b []byte) int {
	depth, most := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '[', '{':
			depth++
			most = max(most, depth)
		case ']', '}':
			depth--
		case '"':
			i = stringEnd(b, i)
		}
	}
	return most
}

// stringEnd is the index of the quote that closes the string opened at
// b[open], or len(b) if none does. Brackets inside a string are text.
func stringEnd(b []byte, open int) int {
	for i := open + 1; ; i++ {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		i += j
		// Escaped if an odd number of backslashes precede it.
		k := i - 1
		for k > open && b[k] == '\\' {
			k--
		}
		if (i-1-k)%2 == 0 {
			return i
		}
	}
}
