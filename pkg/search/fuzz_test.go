package search

import (
	"errors"
	"testing"

	"github.com/tenaz/tenaz/pkg/ops"
)

// A cursor comes from the outside: any string is refused with ErrBadQuery
// or read as a sequence (or an event id) that encodes back to a cursor of
// the same filter.
func FuzzCursor(f *testing.F) {
	q := ops.FindRequest{Account: "acme", State: "dead"}
	f.Add(encodeCursor(q, cursor{seq: 1}))
	f.Add(encodeCursor(q, cursor{seq: 1 << 40, hour: 493000}))
	f.Add(encodeCursor(q, cursor{after: "ev_j316bgkf314ocqth5in0fp1gj0"}))
	f.Add("c2")
	f.Add("c1")
	f.Add("c1AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, cur string) {
		q := q
		q.Cursor = cur
		c, err := decodeCursor(q)
		if err != nil {
			if !errors.Is(err, ErrBadQuery) {
				t.Fatalf("%q: error %v is not an ErrBadQuery", cur, err)
			}
			return
		}
		if c.seq == 0 && c.after == "" {
			t.Fatalf("%q: accepted with neither a sequence nor an event id", cur)
		}
		q.Cursor = encodeCursor(q, c)
		if again, err := decodeCursor(q); err != nil || again != c {
			t.Fatalf("%q: %+v re-encoded reads as %+v, %v", cur, c, again, err)
		}
		q.Account = "globex"
		if _, err := decodeCursor(q); err == nil {
			t.Fatalf("%q: accepted for another filter", cur)
		}
	})
}

func TestSubjectMatch(t *testing.T) {
	for _, c := range []struct {
		filter, subj string
		want         bool
	}{
		{"$KV.b.*.s.*.k.*.*", "$KV.b.acme.s.done.k.2026120115.ev_1", true},
		{"$KV.b.*.s.*.k.*.*", "$KV.b.acme.s.done.j.2026120115.ev_1", false},
		{"$KV.b.*.s.dead.*.*.*", "$KV.b.acme.s.done.k.2026120115.ev_1", false},
		{"$KV.b.*.s.*.*.*.*", "$KV.b.acme.e.abc.ev_1", false},
		{"$KV.b.*.s.*.*.*.*", "$KV.b.acme.s.done.k.2026120115.ev_1.x", false},
		{"$KV.b.*.s.*.*.*.*", "$KV.b.acme.s.done.k.2026120115", false},
	} {
		if got := subjectMatch(c.filter, c.subj); got != c.want {
			t.Errorf("subjectMatch(%q, %q) = %v, want %v", c.filter, c.subj, got, c.want)
		}
	}
}
