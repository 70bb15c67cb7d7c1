package names_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/tenaz/tenaz/pkg/names"
)

// subjectSafe fails t if an accepted token s could widen or split a NATS
// subject: wildcards, whitespace, control or non-ASCII bytes. dots says
// whether dots are allowed (kinds) or not (accounts); where allowed, they
// must separate non-empty tokens.
func subjectSafe(t *testing.T, what, s string, maxLen int, dots bool) {
	t.Helper()
	if s == "" {
		t.Fatalf("accepted an empty %s", what)
	}
	if len(s) > maxLen {
		t.Fatalf("accepted a %d-byte %s %q, want at most %d", len(s), what, s, maxLen)
	}
	if strings.ContainsAny(s, "*>") {
		t.Fatalf("accepted %s %q with a wildcard", what, s)
	}
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		t.Fatalf("accepted %s %q with whitespace", what, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] >= 0x7f {
			t.Fatalf("accepted %s %q with byte %#x", what, s, s[i])
		}
	}
	if !dots && strings.Contains(s, ".") {
		t.Fatalf("accepted %s %q with a dot", what, s)
	}
	if dots {
		toks := strings.Split(s, ".")
		if len(toks) > names.MaxKindTokens {
			t.Fatalf("accepted %s %q with %d tokens, want at most %d", what, s, len(toks), names.MaxKindTokens)
		}
		for _, tok := range toks {
			if tok == "" {
				t.Fatalf("accepted %s %q with an empty token", what, s)
			}
		}
	}
}

func FuzzValidateAccount(f *testing.F) {
	for _, s := range []string{"acme", "", "a.b", "*", ">", "a b", "café", strings.Repeat("a", 65), "A-b_9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, a string) {
		if names.ValidateAccount(a) != nil {
			return
		}
		subjectSafe(t, "account", a, names.MaxAccountLen, false)
		if got, ok := names.AccountOfConsumer(names.ConsumerName(a)); !ok || got != a {
			t.Fatalf("AccountOfConsumer(ConsumerName(%q)): want (%q, true), got (%q, %v)", a, a, got, ok)
		}
	})
}

func FuzzValidateKind(f *testing.F) {
	for _, s := range []string{"order.create", "", ".", "a..b", "a.*", "a.>", "a b", "a.b.c.d.e.f.g.h.i", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if names.ValidateKind(k) != nil {
			return
		}
		subjectSafe(t, "kind", k, names.MaxKindLen, true)
	})
}

// FuzzParseIntake checks both directions: a subject that parses is
// rebuilt exactly by Intake, and a pair that Intake accepts parses back to
// itself.
func FuzzParseIntake(f *testing.F) {
	f.Add("tenaz.intake.acme.order.create", "acme", "order.create")
	f.Add("tenaz.intake.acme", "acme", "")
	f.Add("tenaz.intake.*.>", "*", ">")
	f.Add("tenaz.intake..x", "a.b", "x")
	f.Add("other.intake.acme.x", "acme", "x y")
	f.Fuzz(func(t *testing.T, subject, account, kind string) {
		s := names.NewSubjects("tenaz")
		if a, k, err := s.ParseIntake(subject); err == nil {
			subjectSafe(t, "account", a, names.MaxAccountLen, false)
			subjectSafe(t, "kind", k, names.MaxKindLen, true)
			back, err := s.Intake(a, k)
			if err != nil || back != subject {
				t.Fatalf("Intake(ParseIntake(%q)): want the subject back, got %q (%v)", subject, back, err)
			}
		}
		subj, err := s.Intake(account, kind)
		if err != nil {
			if names.ValidateAccount(account) == nil && names.ValidateKind(kind) == nil {
				t.Fatalf("Intake(%q, %q): valid names refused: %v", account, kind, err)
			}
			return
		}
		a, k, err := s.ParseIntake(subj)
		if err != nil || a != account || k != kind {
			t.Fatalf("ParseIntake(Intake(%q, %q)) = (%q, %q, %v), want the pair back", account, kind, a, k, err)
		}
	})
}

// FuzzParseEvent checks that a subject that parses names a safe account
// and kind whose own event subject parses back to them, in whichever
// partition, and that every event subject Event makes parses back.
func FuzzParseEvent(f *testing.F) {
	f.Add("tenaz.events.acme.order.create", "acme", "order.create")
	f.Add("tenaz.p3.events.acme.order.create", "acme", "x")
	f.Add("tenaz.p3.acme.events.x", "p3", "events")
	f.Add("tenaz.events", "events", "events")
	f.Add("other.events.acme.x", "acme", "x y")
	f.Fuzz(func(t *testing.T, subject, account, kind string) {
		for _, s := range []names.Subjects{names.NewSubjects("tenaz"), names.NewSubjects("tenaz").WithPartitions(4)} {
			if a, k, err := s.ParseEvent(subject); err == nil {
				subjectSafe(t, "account", a, names.MaxAccountLen, false)
				subjectSafe(t, "kind", k, names.MaxKindLen, true)
				back, err := s.Event(a, k)
				if err != nil {
					t.Fatalf("Event(ParseEvent(%q)): %v", subject, err)
				}
				if a2, k2, err := s.ParseEvent(back); err != nil || a2 != a || k2 != k {
					t.Fatalf("ParseEvent(Event(%q, %q)) = %q, %q, %v", a, k, a2, k2, err)
				}
			}
			if subj, err := s.Event(account, kind); err == nil {
				if a, k, err := s.ParseEvent(subj); err != nil || a != account || k != kind {
					t.Fatalf("ParseEvent(Event(%q, %q) = %q) = %q, %q, %v", account, kind, subj, a, k, err)
				}
			}
		}
	})
}
