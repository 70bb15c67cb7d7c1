package names_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/names"
)

// checkName runs one validation case: ok says whether v must be accepted;
// a refusal must wrap ErrInvalidName.
func checkName(t *testing.T, what, v string, ok bool, err error) {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Errorf("%s %q: want accepted, got %v", what, v, err)
	case !ok && err == nil:
		t.Errorf("%s %q: want refused, got accepted", what, v)
	case !ok && !errors.Is(err, names.ErrInvalidName):
		t.Errorf("%s %q: want an error wrapping ErrInvalidName, got %v", what, v, err)
	}
}

func TestValidateAccount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"simple", "acme", true},
		{"all allowed classes", "Acme_Corp-42", true},
		{"one char", "a", true},
		{"digits only", "0042", true},
		{"max length", strings.Repeat("a", names.MaxAccountLen), true},
		{"over max length", strings.Repeat("a", names.MaxAccountLen+1), false},
		{"empty", "", false},
		{"dot splits a subject", "acme.eu", false},
		{"leading dot", ".acme", false},
		{"trailing dot", "acme.", false},
		{"star wildcard", "*", false},
		{"star inside", "ac*me", false},
		{"gt wildcard", ">", false},
		{"gt inside", "acme>", false},
		{"space", "ac me", false},
		{"tab", "acme\t", false},
		{"newline", "acme\n", false},
		{"leading space", " acme", false},
		{"unicode letter", "café", false},
		{"unicode digit", "acme٣", false},
		{"NUL byte", "acme\x00", false},
		{"slash", "acme/eu", false},
		{"colon", "acme:eu", false},
		{"dollar (system subjects)", "$SYS", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkName(t, "account", tt.in, tt.ok, names.ValidateAccount(tt.in))
		})
	}
}

func TestValidateKind(t *testing.T) {
	t.Parallel()
	eight := strings.TrimSuffix(strings.Repeat("a.", names.MaxKindTokens), ".")
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"one token", "invoice", true},
		{"two tokens", "order.create", true},
		{"allowed classes", "Order_V2.create-now", true},
		{"max tokens", eight, true},
		{"too many tokens", eight + ".a", false},
		{"max length", strings.Repeat("k", names.MaxKindLen), true},
		{"over max length", strings.Repeat("k", names.MaxKindLen+1), false},
		{"max length in tokens", strings.Repeat("k", 60) + "." + strings.Repeat("k", 67), true},
		{"empty", "", false},
		{"only a dot", ".", false},
		{"leading dot", ".order", false},
		{"trailing dot", "order.", false},
		{"empty middle token", "order..create", false},
		{"star token", "order.*", false},
		{"star inside a token", "order.cre*te", false},
		{"gt token", "order.>", false},
		{"gt alone", ">", false},
		{"space", "order create", false},
		{"space around a dot", "order. create", false},
		{"tab", "order\t", false},
		{"unicode", "commande.créer", false},
		{"slash", "order/create", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkName(t, "kind", tt.in, tt.ok, names.ValidateKind(tt.in))
		})
	}
}

func TestValidateKey(t *testing.T) {
	t.Parallel()
	printable := func() string {
		var b strings.Builder
		for c := byte(0x21); c <= 0x7e; c++ {
			b.WriteByte(c)
		}
		return b.String()
	}()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"simple", "order-42", true},
		{"every printable ASCII byte", printable, true},
		{"wildcards and dots are fine in keys", "a.*.>", true},
		{"max length", strings.Repeat("k", names.MaxKeyLen), true},
		{"over max length", strings.Repeat("k", names.MaxKeyLen+1), false},
		{"empty", "", false},
		{"space", "order 42", false},
		{"tab", "order\t42", false},
		{"newline (header injection)", "order\r\nX-Evil: 1", false},
		{"DEL", "order\x7f", false},
		{"NUL", "\x00", false},
		{"unicode", "commande-é", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := names.ValidateKey("entity id", tt.in)
			checkName(t, "key", tt.in, tt.ok, err)
			if err != nil && !strings.Contains(err.Error(), "entity id") {
				t.Errorf("key %q: want the error to name the field %q, got %v", tt.in, "entity id", err)
			}
		})
	}
}

func TestValidateEventID(t *testing.T) {
	t.Parallel()
	const valid = "ev_0123456789abcdefghijklmnop"
	if len(valid) != 29 {
		t.Fatalf("test fixture: want a 29-byte id, got %d", len(valid))
	}
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"valid", valid, true},
		{"all base32 letters", "ev_" + strings.Repeat("v", 26), true},
		{"shape only: any lower-case letter passes", "ev_" + strings.Repeat("z", 26), true},
		{"too short", valid[:28], false},
		{"too long", valid + "0", false},
		{"empty", "", false},
		{"wrong prefix", "ex_" + valid[3:], false},
		{"upper-case prefix", "EV_" + valid[3:], false},
		{"upper-case body", "ev_" + strings.ToUpper(valid[3:]), false},
		{"dot in body", "ev_0123456789abcdefghijklmn.", false},
		{"star in body", "ev_0123456789abcdefghijklmn*", false},
		{"gt in body", "ev_0123456789abcdefghijklmn>", false},
		{"space in body", "ev_0123456789abcdefghijklmn ", false},
		{"underscore in body", "ev_0123456789abcdefghijklmn_", false},
		{"unicode of the right byte length", "ev_0123456789abcdefghijklé", false},
		{"path traversal", "ev_../../../../../../etc/pas", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkName(t, "event id", tt.in, tt.ok, names.ValidateEventID(tt.in))
		})
	}
}

func TestNewSubjectsDefaultPrefix(t *testing.T) {
	t.Parallel()
	if got := names.NewSubjects("").Prefix; got != names.DefaultPrefix {
		t.Errorf("NewSubjects(\"\"): want prefix %q, got %q", names.DefaultPrefix, got)
	}
	if got := names.NewSubjects("acme.tenaz").Prefix; got != "acme.tenaz" {
		t.Errorf("NewSubjects(\"acme.tenaz\"): want the prefix kept, got %q", got)
	}
}

func TestSubjectBuilders(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"tenaz", "prod.tenaz"} {
		s := names.NewSubjects(prefix)
		checked := []struct {
			name string
			fn   func(a, k string) (string, error)
			mid  string
		}{
			{"Intake", s.Intake, "intake"},
			{"Event", s.Event, "events"},
			{"Dead", s.Dead, "dead"},
		}
		for _, c := range checked {
			got, err := c.fn("acme", "order.create")
			if want := prefix + "." + c.mid + ".acme.order.create"; err != nil || got != want {
				t.Errorf("%s(%q) with prefix %q: want %q, got %q (%v)", c.name, "acme/order.create", prefix, want, got, err)
			}
			for _, bad := range [][2]string{{"ac.me", "order"}, {"*", "order"}, {"acme", "order.>"}, {"", "order"}, {"acme", ""}, {"acme", "a b"}} {
				got, err := c.fn(bad[0], bad[1])
				if err == nil || !errors.Is(err, names.ErrInvalidName) || got != "" {
					t.Errorf("%s(%q, %q): want \"\" and ErrInvalidName, got %q, %v", c.name, bad[0], bad[1], got, err)
				}
			}
		}
		fixed := map[string][2]string{
			"IntakeAll":       {s.IntakeAll(), prefix + ".intake.>"},
			"EventsIn":        {s.EventsIn(0), prefix + ".events.>"},
			"EventsOf":        {s.EventsOf("acme"), prefix + ".events.acme.>"},
			"Schedule":        {s.Schedule("acme", "ev_x"), prefix + ".sched.ev_x"},
			"SchedulesIn":     {s.SchedulesIn(0), prefix + ".sched.>"},
			"DeadAll":         {s.DeadAll(), prefix + ".dead.>"},
			"AdvisoryDead":    {s.AdvisoryDead("acme", "order.create"), prefix + ".advisory.dead.acme.order.create"},
			"AdvisoryReview":  {s.AdvisoryReview("acme", "order.create"), prefix + ".advisory.review.acme.order.create"},
			"AdvisoryBreaker": {s.AdvisoryBreaker("acme", "erp"), prefix + ".advisory.breaker.acme.erp"},
			"AdvisoryDigest":  {s.AdvisoryDigest(), prefix + ".advisory.digest"},
		}
		for name, gw := range fixed {
			if gw[0] != gw[1] {
				t.Errorf("%s with prefix %q: want %q, got %q", name, prefix, gw[1], gw[0])
			}
		}
	}
}

// subjectMatches reports whether a NATS filter (with * and >) matches subject.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

func TestSubjectsFallUnderTheirFilters(t *testing.T) {
	t.Parallel()
	s := names.NewSubjects("tenaz")
	in, _ := s.Intake("acme", "order.create")
	ev, _ := s.Event("acme", "order.create")
	dead, _ := s.Dead("acme", "order.create")
	other, _ := s.Event("globex", "order.create")
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{s.IntakeAll(), in, true},
		{s.EventsIn(0), ev, true},
		{s.EventsOf("acme"), ev, true},
		{s.EventsOf("acme"), other, false},
		{s.EventsOf("acm"), ev, false},
		{s.DeadAll(), dead, true},
		{s.SchedulesIn(0), s.Schedule("acme", "ev_0123456789abcdefghijklmnop"), true},
		{s.IntakeAll(), ev, false},
		{s.EventsIn(0), in, false},
	} {
		if got := subjectMatches(c.filter, c.subject); got != c.want {
			t.Errorf("filter %q on %q: want match=%v, got %v", c.filter, c.subject, c.want, got)
		}
	}
}

func TestParseIntake(t *testing.T) {
	t.Parallel()
	s := names.NewSubjects("tenaz")
	tests := []struct {
		name, subject string
		account, kind string
		ok            bool
	}{
		{"one-token kind", "tenaz.intake.acme.invoice", "acme", "invoice", true},
		{"multi-token kind", "tenaz.intake.acme.order.create.v2", "acme", "order.create.v2", true},
		{"other prefix", "other.intake.acme.invoice", "", "", false},
		{"prefix without the dot", "tenazintake.acme.invoice", "", "", false},
		{"longer first token", "tenaz2.intake.acme.invoice", "", "", false},
		{"events, not intake", "tenaz.events.acme.invoice", "", "", false},
		{"no kind", "tenaz.intake.acme", "acme", "", false},
		{"empty kind", "tenaz.intake.acme.", "acme", "", false},
		{"empty account", "tenaz.intake..invoice", "", "", false},
		{"wildcard account", "tenaz.intake.*.invoice", "", "", false},
		{"wildcard kind", "tenaz.intake.acme.>", "acme", "", false},
		{"empty kind token", "tenaz.intake.acme.order..create", "acme", "", false},
		{"too many kind tokens", "tenaz.intake.acme.a.b.c.d.e.f.g.h.i", "acme", "", false},
		{"empty", "", "", "", false},
		{"reserved account", "tenaz.intake._invalid.invoice", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, k, err := s.ParseIntake(tt.subject)
			if tt.ok {
				if err != nil || a != tt.account || k != tt.kind {
					t.Errorf("ParseIntake(%q): want (%q, %q, nil), got (%q, %q, %v)", tt.subject, tt.account, tt.kind, a, k, err)
				}
				return
			}
			// A valid account comes back with a kind's error: the
			// refusal counts against it.
			if err == nil || !errors.Is(err, names.ErrInvalidName) || a != tt.account || k != "" {
				t.Errorf("ParseIntake(%q): want (%q, \"\", ErrInvalidName), got (%q, %q, %v)", tt.subject, tt.account, a, k, err)
			}
		})
	}
}

func TestParseIntakeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"tenaz", "prod.eu.tenaz"} {
		s := names.NewSubjects(prefix)
		for _, ak := range [][2]string{{"acme", "invoice"}, {"a", "order.create"}, {"A-b_9", "x.y.z.w.v.u.t.s"}} {
			subj, err := s.Intake(ak[0], ak[1])
			if err != nil {
				t.Fatalf("Intake(%q, %q): want a subject, got %v", ak[0], ak[1], err)
			}
			a, k, err := s.ParseIntake(subj)
			if err != nil || a != ak[0] || k != ak[1] {
				t.Errorf("ParseIntake(Intake(%q, %q)) with prefix %q: want the same pair back, got (%q, %q, %v)", ak[0], ak[1], prefix, a, k, err)
			}
		}
	}
}

func TestConsumerName(t *testing.T) {
	t.Parallel()
	if got := names.ConsumerName("acme"); got != "acct_acme" {
		t.Errorf("ConsumerName(acme): want acct_acme, got %q", got)
	}
	if a, ok := names.AccountOfConsumer(names.ConsumerName("acme-eu_1")); !ok || a != "acme-eu_1" {
		t.Errorf("AccountOfConsumer(ConsumerName(acme-eu_1)): want (acme-eu_1, true), got (%q, %v)", a, ok)
	}
	for _, name := range []string{"ingest", "acct_", "acct_a.b", "acct_*", "xacct_acme", ""} {
		if a, ok := names.AccountOfConsumer(name); ok || a != "" {
			t.Errorf("AccountOfConsumer(%q): want (\"\", false), got (%q, %v)", name, a, ok)
		}
	}
}

// Over several partitions, an account's dispatch, schedule and timer
// subjects are under its partition's root, which only its partition's
// filters match; partition 0 keeps the prefix's root.
func TestSubjectsOfAPartition(t *testing.T) {
	t.Parallel()
	s := names.NewSubjects("tenaz").WithPartitions(4)
	seen := map[int]bool{}
	for i := range 64 {
		account := fmt.Sprintf("acct-%d", i)
		p := s.PartitionOf(account)
		if p < 0 || p >= 4 {
			t.Fatalf("%s: partition %d of 4", account, p)
		}
		seen[p] = true
		ev, err := s.Event(account, "order.create")
		if err != nil {
			t.Fatal(err)
		}
		timer, _ := s.Timer(account, "order.create")
		for q := range 4 {
			if got := subjectMatches(s.EventsIn(q), ev); got != (q == p) {
				t.Errorf("%s (partition %d): EventsIn(%d) matches %q: %v", account, p, q, ev, got)
			}
			if got := subjectMatches(s.SchedulesIn(q), s.Schedule(account, "ev_x")); got != (q == p) {
				t.Errorf("%s (partition %d): SchedulesIn(%d) matches its schedule: %v", account, p, q, got)
			}
			if got := subjectMatches(s.TimersIn(q), timer); got != (q == p) {
				t.Errorf("%s (partition %d): TimersIn(%d) matches %q: %v", account, p, q, timer, got)
			}
		}
		if !subjectMatches(s.EventsOf(account), ev) {
			t.Errorf("%s: its consumer's filter %q misses %q", account, s.EventsOf(account), ev)
		}
		want := map[bool]string{true: "tenaz.events.", false: fmt.Sprintf("tenaz.p%d.events.", p)}[p == 0]
		if !strings.HasPrefix(ev, want) {
			t.Errorf("%s (partition %d): want %q under %q", account, p, ev, want)
		}
	}
	if len(seen) != 4 {
		t.Errorf("want 64 accounts spread over the 4 partitions, saw %d", len(seen))
	}
}
