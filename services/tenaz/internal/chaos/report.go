package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// report prints figures and invariants; an invariant with a non-zero
// count is a violation.
type report struct {
	w          io.Writer
	violations []string
}

func (r *report) section(name string) { fmt.Fprintf(r.w, "\n== %s\n", name) }

func (r *report) figure(name string, v any) {
	switch x := v.(type) {
	case float64:
		fmt.Fprintf(r.w, "       %-66s %12.1f\n", name, x)
	default:
		fmt.Fprintf(r.w, "       %-66s %12v\n", name, x)
	}
}

// invariant prints a count that must be zero, and up to ten details of a
// violation.
func (r *report) invariant(name string, n int, details ...string) {
	mark := "ok"
	if n != 0 {
		mark = "FAIL"
		r.violations = append(r.violations, fmt.Sprintf("%s: %d", name, n))
	}
	fmt.Fprintf(r.w, "  %-4s %-66s %12d\n", mark, name, n)
	if n != 0 {
		for i, d := range details {
			if i == 10 {
				fmt.Fprintf(r.w, "         … and %d more\n", len(details)-10)
				break
			}
			fmt.Fprintf(r.w, "         %s\n", d)
		}
	}
}

// counts prints a map of counts sorted by key on one line.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
