package ingest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/services/ingest/internal/cloudevent"
)

// FuzzFieldsOfTakesTheSubjectAndHeaders checks how an intake message's
// subject and headers become a submission's fields: it never panics; a
// refusal is a 400: invalid_subject exactly when the subject does not
// parse, else malformed exactly when a field's header has two values,
// else invalid_cloudevent; what it accepts is the subject's
// account and kind (both valid), a tenaz header given is never
// overridden (a CloudEvent attribute must agree with it), the key is
// otherwise Nats-Msg-Id less "<account>:", and a CloudEvent's id is a
// valid key.
//
// The headers come as lines "Name: value", names in any case, a name
// given twice adding a value.
func FuzzFieldsOfTakesTheSubjectAndHeaders(f *testing.F) {
	const subject = "tenaz.intake.acme.order.create"
	ce := "content-type: application/json\nce-specversion: 1.0\nce-type: order.create\nce-source: /erp\nce-id: ce-n\nce-subject: o-n\nce-partitionkey: c-1"
	for _, s := range [][2]string{
		{subject, "Nats-Msg-Id: k1"}, {subject, "Nats-Msg-Id: acme:k1"}, {subject, "Nats-Msg-Id: globex:k1\nIdempotency-Key: acme-1"},
		{subject, "idempotency-key: lk-1\ntenaz-not-before: 2026-03-01T12:00:00Z\nTENAZ-ENTITY-ID: e-9"}, {subject, ""},
		{subject, ce}, {subject, ce + "\nIdempotency-Key: other"}, {subject, ce + "\nTenaz-Ordering-Key: c-1\nce-tenazaccount: acme"},
		{subject, "content-type: application/json\nce-specversion: 1.0\nce-type: order.ship\nce-source: /erp\nce-id: ce-b1"},
		{subject, "content-type: application/json\nce-specversion: 0.3\nce-type: order.create\nce-source: /erp\nce-id: ce-b2"},
		{subject, "Content-Type: application/cloudevents+json"}, {subject, "ce-id: x"},
		{subject, "ce-specversion: 1.0\nce-type: order.create\nce-source: s\nce-id: a%20b\nce-tenazaccount: globex"},
		{subject, "Tenaz-Not-Before: 0\ntenaz-not-before: 1"}, {subject, "Tenaz-Entity-Id: e\nTenaz-Entity-Id: "},
		{"tenaz.intake.acme", ""}, {"tenaz.intake.a.b..c", ""}, {"other.intake.acme.k", ""}, {"tenaz.intake.*.k", ""}, {"tenaz.intake.acme.order.>", ""},
	} {
		f.Add(s[0], s[1])
	}
	s := &Service{subj: names.NewSubjects("")}
	f.Fuzz(func(t *testing.T, subject, headers string) {
		h := nats.Header{}
		for line := range strings.SplitSeq(headers, "\n") {
			name, value, _ := strings.Cut(line, ":")
			h[name] = append(h[name], strings.TrimPrefix(value, " "))
		}
		got, serr := s.fieldsOf(subject, h)
		_, _, subjErr := s.subj.ParseIntake(subject)
		twice := false
		for _, name := range []string{names.HeaderIdempotencyKey, names.HeaderEntityID, names.HeaderOrderingKey, names.HeaderNotBefore} {
			twice = twice || len(valuesOf(h, name)) > 1
		}
		if serr != nil {
			want := codeInvalidCloudEvent
			switch {
			case subjErr != nil:
				want = "invalid_subject"
			case twice:
				want = "malformed"
			}
			if serr.Status != http.StatusBadRequest || serr.Code != want {
				t.Fatalf("fieldsOf(%q, %q): want a 400 %s, got %d %s: %v", subject, h, want, serr.Status, serr.Code, serr)
			}
			return
		}
		if subjErr != nil || twice {
			t.Fatalf("fieldsOf(%q, %q): took it (bad subject: %v, a field's header given two values: %t)", subject, h, subjErr, twice)
		}
		if names.ValidateAccount(got.Account) != nil || names.ValidateKind(got.Kind) != nil || subject != "tenaz.intake."+got.Account+"."+got.Kind {
			t.Fatalf("fieldsOf(%q, %q): account %q, kind %q: want the subject's, valid", subject, h, got.Account, got.Kind)
		}
		for _, c := range []struct{ header, v string }{
			{names.HeaderIdempotencyKey, got.IdempotencyKey}, {names.HeaderEntityID, got.EntityID},
			{names.HeaderOrderingKey, got.OrderingKey}, {names.HeaderNotBefore, got.NotBefore},
		} {
			if hv, ok := header(h, c.header); ok && (hv != "" || c.header == names.HeaderNotBefore) && c.v != hv {
				t.Fatalf("fieldsOf(%q, %q): %s %q given, field %q", subject, h, c.header, hv, c.v)
			}
		}
		binary := cloudevent.IsBinary(h)
		if key, ok := header(h, names.HeaderIdempotencyKey); ok && key == "" && !binary {
			if id, ok := header(h, names.HeaderMsgID); ok && got.IdempotencyKey != strings.TrimPrefix(id, got.Account+":") {
				t.Fatalf("fieldsOf(%q, %q): key %q, want Nats-Msg-Id less %q", subject, h, got.IdempotencyKey, got.Account+":")
			}
		}
		if binary && names.ValidateKey("id", got.IdempotencyKey) != nil {
			t.Fatalf("fieldsOf(%q, %q): took a CloudEvent whose key %q is not valid", subject, h, got.IdempotencyKey)
		}
	})
}

// valuesOf is the distinct values h gives name, in every spelling.
func valuesOf(h nats.Header, name string) map[string]bool {
	vs := map[string]bool{}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			for _, x := range v {
				vs[x] = true
			}
		}
	}
	return vs
}

// header is what headerOf reads of name in h, when that does not depend
// on which of several spellings of the name it meets first; ok is false
// when it does (those are spelt in any case, and a map has no order).
func header(h nats.Header, name string) (v string, ok bool) {
	if vs := h[name]; len(vs) > 0 && vs[0] != "" {
		return vs[0], true
	}
	seen := false
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			if seen && vs[0] != v {
				return "", false
			}
			v, seen = vs[0], true
		}
	}
	return v, true
}
