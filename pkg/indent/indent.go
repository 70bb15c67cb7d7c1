package indent

import (
	"bytes"
	"encoding/json"
)

// Max is the most that indenting may add to a value: a screen or a
// terminal shows anything a tenant submitted, and past this a value
// nested deep would make each reader build and download megabytes.
const Max = 256 << 10

// JSON is b indented as json.Indent does with two spaces and no prefix,
// or b itself when b is not JSON or its indented form would take more
// than Max bytes beyond len(b).
func JSON(b []byte) []byte {
	limit := len(b) + Max
	if Len(b, limit) > limit {
		return b
	}
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		return b
	}
	return out.Bytes()
}

// Len is how long b is once indented as JSON does it, or more, never
// less: a newline and the indentation after each opening bracket and
// comma and before each closing bracket, a space after each colon. It
// stops counting once past limit.
func Len(b []byte, limit int) int {
	n, depth := len(b), 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			n += 1 + 2*depth
		case c == '}' || c == ']':
			depth--
			n += 1 + 2*max(depth, 0)
		case c == ',':
			n += 1 + 2*depth
		case c == ':':
			n++
		}
		if n > limit {
			return n
		}
	}
	return n
}
