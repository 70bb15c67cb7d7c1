package audit_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/state"
)

func rec(entries ...state.Entry) state.Record {
	return state.Record{ID: "ev_1", Account: "acme", Kind: "k", Status: state.Pending, History: entries}
}

func entry(a state.ActionName, count int) state.Entry {
	return state.Entry{At: time.Unix(int64(len(a)), 0), Action: a, Count: count}
}

// Diff writes each entry once whatever revisions the archiver sees: all of
// them, only the last (the others were replaced while it was down), the
// same one again, an older one after a newer, or a repoll run's count
// growing.
func TestDiff(t *testing.T) {
	t.Parallel()
	accept, claim, poll := entry(state.Accept, 0), entry(state.Claim, 0), entry(state.Poll, 0)
	for _, c := range []struct {
		name    string
		rec     state.Record
		last    audit.Mark
		want    []state.ActionName
		wantNew bool
	}{
		{"first revision", rec(accept), audit.Mark{}, []state.ActionName{state.Accept}, true},
		{"next revision", rec(accept, claim), audit.Mark{Step: 1}, []state.ActionName{state.Claim}, true},
		{"revisions missed", rec(accept, claim, poll), audit.Mark{Step: 1}, []state.ActionName{state.Claim, state.Poll}, true},
		{"nothing archived yet, late", rec(accept, claim, poll), audit.Mark{}, []state.ActionName{state.Accept, state.Claim, state.Poll}, true},
		{"redelivered", rec(accept, claim), audit.Mark{Step: 2}, nil, false},
		{"older than the archive", rec(accept), audit.Mark{Step: 2}, nil, false},
		{"a repoll run grows", rec(accept, entry(state.Repoll, 3)), audit.Mark{Step: 2, Count: 2}, []state.ActionName{state.Repoll}, true},
		{"a repoll run grows, then a step", rec(accept, entry(state.Repoll, 3), claim), audit.Mark{Step: 2, Count: 2}, []state.ActionName{state.Repoll, state.Claim}, true},
		{"a repoll run seen already", rec(accept, entry(state.Repoll, 3)), audit.Mark{Step: 2, Count: 3}, nil, false},
		{"truncated history", func() state.Record { r := rec(accept, claim); r.Truncated = 5; return r }(), audit.Mark{Step: 6}, []state.ActionName{state.Claim}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, ok := audit.Diff(c.rec, 7, c.last)
			if ok != c.wantNew {
				t.Fatalf("ok = %v, want %v", ok, c.wantNew)
			}
			var got []state.ActionName
			for _, e := range r.Entries {
				got = append(got, e.Action)
			}
			if len(got) != len(c.want) {
				t.Fatalf("entries %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("entries %v, want %v", got, c.want)
				}
			}
			if ok && (r.Step != c.rec.Step() || r.Revision != 7) {
				t.Fatalf("step %d revision %d, want %d and 7", r.Step, r.Revision, c.rec.Step())
			}
			if ok {
				es, err := audit.Decode(audit.Subject("tenaz", "acme", "", "ev_1"), mustJSON(t, r))
				if err != nil || len(es) != len(got) || es[len(es)-1].Step != c.rec.Step() {
					t.Fatalf("decoded %+v, %v: want %d entries ending at step %d", es, err, len(got), c.rec.Step())
				}
			}
		})
	}
}

// Entity tokens are one safe subject token whatever the id holds.
func TestEntityToken(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"proposal-42", "a.b.*.>", "x y", "ü"} {
		tok := audit.EntityToken(id)
		if len(tok) != 33 || tok[0] != 'e' || tok != audit.EntityToken(id) {
			t.Fatalf("EntityToken(%q) = %q", id, tok)
		}
	}
	if audit.EntityToken("") != audit.NoEntity || audit.EntityToken("a") == audit.EntityToken("b") {
		t.Fatal("tokens of none, a and b")
	}
	if s := audit.Subject("acme.t", "acme", "a.b", "ev_1"); s != "acme.t.audit.acme."+audit.EntityToken("a.b")+".ev_1" {
		t.Fatalf("subject %q", s)
	}
	if !audit.IsOps(audit.OpsSubject("tenaz", "acme", 5)) || audit.IsOps(audit.Subject("tenaz", "acme", "", "ev_1")) {
		t.Fatal("IsOps")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Decode refuses what is not an archive message and never panics.
func FuzzDecode(f *testing.F) {
	f.Add("tenaz.audit.acme._.ev_1", []byte(`{"id":"ev_1","account":"acme","step":2,"entries":[{"at":"2026-01-01T00:00:00Z","action":"accept","to":"pending"}]}`))
	f.Add("tenaz.audit.acme.ops.1", []byte(`{"at":"2026-01-01T00:00:00Z","action":"pause","account":"acme","actor":"operator:a","reason":"r"}`))
	f.Add("tenaz.audit.acme._.ev_1", []byte(`{"id":"ev_1","step":-5,"entries":[{},{}]}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		es, err := audit.Decode(subject, data)
		if err != nil && es != nil {
			t.Fatalf("entries with an error: %v", err)
		}
	})
}
