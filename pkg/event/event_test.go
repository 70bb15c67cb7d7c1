package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestParseSubmission(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want error // nil: accepted
	}{
		{"full", `{"account":"acme","kind":"order.create","entity_id":"o-1","ordering_key":"c-1","not_before":"2026-03-02T00:00:00Z","payload":{"a":1}}`, nil},
		{"minimal", `{"account":"acme","kind":"k","payload":{}}`, nil},
		{"scalar payload", `{"account":"acme","kind":"k","payload":42}`, nil},
		{"whitespace around", " \n\t{\"account\":\"acme\",\"kind\":\"k\",\"payload\":[1]}\r\n ", nil},
		{"unknown field (typo)", `{"account":"acme","kind":"k","ordering-key":"x","payload":{}}`, event.ErrMalformed},
		{"unknown field (idempotency key belongs in the header)", `{"account":"acme","kind":"k","idempotency_key":"x","payload":{}}`, event.ErrMalformed},
		{"trailing object", `{"account":"acme","kind":"k","payload":{}} {}`, event.ErrMalformed},
		{"trailing garbage", `{"account":"acme","kind":"k","payload":{}} x`, event.ErrMalformed},
		{"trailing closing brace", `{"account":"acme","kind":"k","payload":{}}}`, event.ErrMalformed},
		{"trailing closing bracket", `{"account":"acme","kind":"k","payload":{}}]`, event.ErrMalformed},
		{"trailing comma", `{"account":"acme","kind":"k","payload":{}},`, event.ErrMalformed},
		{"missing payload", `{"account":"acme","kind":"k"}`, event.ErrInvalid},
		{"null payload", `{"account":"acme","kind":"k","payload":null}`, event.ErrInvalid},
		{"null payload with spaces", `{"account":"acme","kind":"k","payload" :  null }`, event.ErrInvalid},
		{"empty body", ``, event.ErrMalformed},
		{"only whitespace", "  \n", event.ErrMalformed},
		{"array body", `[{"account":"acme"}]`, event.ErrMalformed},
		{"wrong field type", `{"account":5,"kind":"k","payload":{}}`, event.ErrMalformed},
		{"truncated", `{"account":"acme","kind":"k","payload":{`, event.ErrMalformed},
		{"invalid json", `{account:acme}`, event.ErrMalformed},
		// encoding/json matches names regardless of case: the second
		// spelling would win, while a reader of "account" sees acme.
		{"a member in two spellings", `{"account":"acme","Account":"globex","kind":"k","payload":{}}`, event.ErrMalformed},
		{"a member spelled otherwise alone", `{"ACCOUNT":"acme","kind":"k","payload":{}}`, event.ErrMalformed},
		{"a member spelled with the Kelvin sign", `{"account":"acme","Kind":"k","payload":{}}`, event.ErrMalformed},
		{"payload members differing in case", `{"account":"acme","kind":"k","payload":{"id":1,"ID":2}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := event.ParseSubmission([]byte(tt.body))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("want accepted, got %v", err)
				}
				if s.Account != "acme" || len(s.Payload) == 0 {
					t.Errorf("want account acme and a payload, got %+v", s)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("want an error wrapping %v, got %v", tt.want, err)
			}
		})
	}
}

func TestParseSubmissionFields(t *testing.T) {
	t.Parallel()
	s, err := event.ParseSubmission([]byte(`{"account":"acme","kind":"order.create","entity_id":"o-1","ordering_key":"c-1","not_before":"2026-03-02T00:00:00Z","payload":{"b": 2, "a": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := event.Submission{Account: "acme", Kind: "order.create", EntityID: "o-1", OrderingKey: "c-1",
		NotBefore: "2026-03-02T00:00:00Z", Payload: json.RawMessage(`{"b": 2, "a": 1}`)}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("want %+v (payload as written), got %+v", want, s)
	}
}

func fields(mod func(*event.Fields)) event.Fields {
	f := event.Fields{Account: "acme", Kind: "order.create"}
	if mod != nil {
		mod(&f)
	}
	return f
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		f       event.Fields
		payload string
		want    error
	}{
		{"ok", fields(nil), `{"a":1}`, nil},
		{"bad account", fields(func(f *event.Fields) { f.Account = "ac.me" }), `{}`, event.ErrInvalid},
		{"empty account", fields(func(f *event.Fields) { f.Account = "" }), `{}`, event.ErrInvalid},
		{"bad kind", fields(func(f *event.Fields) { f.Kind = "order.>" }), `{}`, event.ErrInvalid},
		{"payload not JSON", fields(nil), `{"a":`, event.ErrMalformed},
		{"payload with trailing data", fields(nil), `{"a":1}}`, event.ErrMalformed},
		{"empty payload", fields(nil), ``, event.ErrMalformed},
		{"null payload", fields(nil), ` null `, event.ErrInvalid},
		// Latin-1 é and ü: decoded, both would be U+FFFD and derive one key.
		{"payload not UTF-8", fields(nil), "{\"name\":\"Jos\xe9\"}", event.ErrMalformed},
		{"payload not UTF-8 either", fields(nil), "{\"name\":\"Jos\xfc\"}", event.ErrMalformed},
		{"payload in UTF-8", fields(nil), `{"name":"José"}`, nil},
		{"entity with space", fields(func(f *event.Fields) { f.EntityID = "o 1" }), `{}`, event.ErrInvalid},
		{"entity too long", fields(func(f *event.Fields) { f.EntityID = strings.Repeat("e", names.MaxKeyLen+1) }), `{}`, event.ErrInvalid},
		{"ordering key with newline", fields(func(f *event.Fields) { f.OrderingKey = "c\n1" }), `{}`, event.ErrInvalid},
		{"client key with space", fields(func(f *event.Fields) { f.IdempotencyKey = "k 1" }), `{}`, event.ErrInvalid},
		{"client key too long", fields(func(f *event.Fields) { f.IdempotencyKey = strings.Repeat("k", names.MaxKeyLen+1) }), `{}`, event.ErrInvalid},
		{"not_before malformed", fields(func(f *event.Fields) { f.NotBefore = "tomorrow" }), `{}`, event.ErrMalformed},
		{"not_before date only", fields(func(f *event.Fields) { f.NotBefore = "2026-03-02" }), `{}`, event.ErrMalformed},
		{"not_before unix seconds", fields(func(f *event.Fields) { f.NotBefore = "1772409600" }), `{}`, event.ErrMalformed},
		{"not_before more than a year ahead", fields(func(f *event.Fields) {
			f.NotBefore = now.Add(event.MaxNotBefore + time.Second).Format(time.RFC3339)
		}), `{}`, event.ErrInvalid},
		{"not_before 10 years ahead", fields(func(f *event.Fields) { f.NotBefore = "2036-03-01T12:00:00Z" }), `{}`, event.ErrInvalid},
		{"not_before at the limit", fields(func(f *event.Fields) { f.NotBefore = now.Add(event.MaxNotBefore).Format(time.RFC3339) }), `{}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := event.New(tt.f, []byte(tt.payload), "", "", now)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("want accepted, got %v", err)
				}
				if err := names.ValidateEventID(env.ID); err != nil {
					t.Errorf("want a valid id, got %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("want an error wrapping %v, got %v (envelope %+v)", tt.want, err, env)
			}
		})
	}
}

func TestNewNotBefore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, nb string
		want     *time.Time // nil: no delay
	}{
		{"absent", "", nil},
		{"in the past", "2026-02-01T00:00:00Z", nil},
		{"exactly now", now.Format(time.RFC3339), nil},
		{"one second ahead", now.Add(time.Second).Format(time.RFC3339), ptr(now.Add(time.Second))},
		{"a day ahead, in another zone, kept as UTC", "2026-03-02T14:00:00+02:00", ptr(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))},
		{"fractional seconds", "2026-03-01T12:00:00.5Z", ptr(now.Add(500 * time.Millisecond))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := event.New(fields(func(f *event.Fields) { f.NotBefore = tt.nb }), []byte(`{}`), "", "", now)
			if err != nil {
				t.Fatalf("want accepted, got %v", err)
			}
			switch {
			case tt.want == nil && env.NotBefore != nil:
				t.Errorf("want no delay, got not_before %v", env.NotBefore)
			case tt.want != nil && env.NotBefore == nil:
				t.Errorf("want not_before %v, got none", tt.want)
			case tt.want != nil && (!env.NotBefore.Equal(*tt.want) || env.NotBefore.Location() != time.UTC):
				t.Errorf("want not_before %v in UTC, got %v", tt.want, env.NotBefore)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestNewEntityAndOrderingFromPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		f                   event.Fields
		payload             string
		entityField, orderF string
		entity, ordering    string
		wantErr             error
	}{
		{"string fields", fields(nil), `{"order_id":"o-1","customer":"c-9"}`, "order_id", "customer", "o-1", "c-9", nil},
		{"no fields configured", fields(nil), `{"order_id":"o-1","customer":"c-9"}`, "", "", "", "", nil},
		{"caller's values win", fields(func(f *event.Fields) { f.EntityID, f.OrderingKey = "mine", "ours" }),
			`{"order_id":"o-1","customer":"c-9"}`, "order_id", "customer", "mine", "ours", nil},
		{"caller's entity wins, ordering from payload", fields(func(f *event.Fields) { f.EntityID = "mine" }),
			`{"order_id":"o-1","customer":"c-9"}`, "order_id", "customer", "mine", "c-9", nil},
		{"integer", fields(nil), `{"n":42}`, "n", "n", "42", "42", nil},
		{"integer beyond float64 precision kept exact", fields(nil), `{"n":12345678901234567890}`, "n", "", "12345678901234567890", "", nil},
		{"neighbouring big integers stay distinct", fields(nil), `{"n":12345678901234567891}`, "n", "", "12345678901234567891", "", nil},
		{"decimal as written", fields(nil), `{"n":1.25}`, "n", "", "1.25", "", nil},
		{"tiny decimal as written", fields(nil), `{"n":1e-7}`, "n", "", "1e-7", "", nil},
		{"bool", fields(nil), `{"b":true,"c":false}`, "b", "c", "true", "false", nil},
		{"missing field", fields(nil), `{"x":1}`, "order_id", "customer", "", "", nil},
		{"null field", fields(nil), `{"order_id":null}`, "order_id", "", "", "", nil},
		{"object field", fields(nil), `{"order_id":{"v":1}}`, "order_id", "", "", "", nil},
		{"array field", fields(nil), `{"order_id":[1]}`, "order_id", "", "", "", nil},
		{"nested fields are not looked into", fields(nil), `{"order":{"id":"o-1"}}`, "order.id", "", "", "", nil},
		{"payload is an array", fields(nil), `[{"order_id":"o-1"}]`, "order_id", "", "", "", nil},
		{"payload is a string", fields(nil), `"o-1"`, "order_id", "", "", "", nil},
		{"field value with a space is refused", fields(nil), `{"order_id":"o 1"}`, "order_id", "", "", "", event.ErrInvalid},
		{"field value too long is refused", fields(nil), `{"c":"` + strings.Repeat("x", 256) + `"}`, "", "c", "", "", event.ErrInvalid},
		{"empty string field gives no entity", fields(nil), `{"order_id":""}`, "order_id", "", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := event.New(tt.f, []byte(tt.payload), tt.entityField, tt.orderF, now)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("want an error wrapping %v, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("want accepted, got %v", err)
			}
			if env.EntityID != tt.entity || env.OrderingKey != tt.ordering {
				t.Errorf("want entity %q and ordering key %q, got %q and %q", tt.entity, tt.ordering, env.EntityID, env.OrderingKey)
			}
		})
	}
}

func TestNewEnvelope(t *testing.T) {
	t.Parallel()
	local := now.In(time.FixedZone("BRT", -3*3600))
	payload := []byte(`{ "order_id": "o-1",  "total": 10 }`)
	env, err := event.New(fields(nil), payload, "order_id", "", local)
	if err != nil {
		t.Fatal(err)
	}
	if env.Account != "acme" || env.Kind != "order.create" || env.EntityID != "o-1" {
		t.Errorf("want acme/order.create/o-1, got %s/%s/%s", env.Account, env.Kind, env.EntityID)
	}
	if !env.CreatedAt.Equal(now) || env.CreatedAt.Location() != time.UTC {
		t.Errorf("want created_at %v in UTC, got %v", now, env.CreatedAt)
	}
	if !bytes.Equal(env.Payload, payload) {
		t.Errorf("want the payload kept exactly as submitted, got %s", env.Payload)
	}
	if env.ID != event.ID("acme", env.IdempotencyKey) {
		t.Errorf("want id = ID(account, key) = %s, got %s", event.ID("acme", env.IdempotencyKey), env.ID)
	}
}

func TestIdempotencyKeyClientWins(t *testing.T) {
	t.Parallel()
	a, err := event.New(fields(func(f *event.Fields) { f.IdempotencyKey = "client-key-1" }), []byte(`{"a":1}`), "", "", now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := event.New(fields(func(f *event.Fields) { f.IdempotencyKey = "client-key-1" }), []byte(`{"a":2}`), "", "", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if a.IdempotencyKey != "client-key-1" {
		t.Errorf("want the client's key kept, got %q", a.IdempotencyKey)
	}
	if a.ID != b.ID {
		t.Errorf("want one id for one client key whatever the payload, got %s and %s", a.ID, b.ID)
	}
	c, err := event.New(fields(func(f *event.Fields) { f.IdempotencyKey = "client-key-2" }), []byte(`{"a":1}`), "", "", now)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == a.ID {
		t.Errorf("want different client keys to give different ids, both got %s", a.ID)
	}
}

func derived(t *testing.T, kind, entity, payload string) event.Envelope {
	t.Helper()
	env, err := event.New(event.Fields{Account: "acme", Kind: kind, EntityID: entity}, []byte(payload), "", "", now)
	if err != nil {
		t.Fatalf("New(%s, %s, %s): %v", kind, entity, payload, err)
	}
	return env
}

func TestDerivedKey(t *testing.T) {
	t.Parallel()
	base := derived(t, "order.create", "o-1", `{"a":1,"b":[true,null,"x"]}`)
	if !strings.HasPrefix(base.IdempotencyKey, "d:order.create:o-1:") {
		t.Errorf("want a derived key naming kind and entity, got %q", base.IdempotencyKey)
	}
	same := []string{
		`{"b":[true,null,"x"],"a":1}`,
		"{\n  \"a\" : 1 ,\n  \"b\" : [ true , null , \"x\" ]\n}\n",
		`{"a":1,"b":[true,null,"\u0078"]}`,
	}
	for _, p := range same {
		if got := derived(t, "order.create", "o-1", p); got.IdempotencyKey != base.IdempotencyKey || got.ID != base.ID {
			t.Errorf("payload %s: want the key and id of %s, got %q / %s", p, `{"a":1,...}`, got.IdempotencyKey, got.ID)
		}
	}
	different := []struct{ what, kind, entity, payload string }{
		{"another value", "order.create", "o-1", `{"a":2,"b":[true,null,"x"]}`},
		{"array order matters", "order.create", "o-1", `{"a":1,"b":[null,true,"x"]}`},
		{"number as written matters", "order.create", "o-1", `{"a":1.0,"b":[true,null,"x"]}`},
		{"string is not number", "order.create", "o-1", `{"a":"1","b":[true,null,"x"]}`},
		{"extra field", "order.create", "o-1", `{"a":1,"b":[true,null,"x"],"c":0}`},
		{"another kind", "order.update", "o-1", `{"a":1,"b":[true,null,"x"]}`},
		{"another entity", "order.create", "o-2", `{"a":1,"b":[true,null,"x"]}`},
		{"no entity", "order.create", "", `{"a":1,"b":[true,null,"x"]}`},
	}
	seen := map[string]string{base.IdempotencyKey: "base"}
	for _, d := range different {
		got := derived(t, d.kind, d.entity, d.payload)
		if prev, dup := seen[got.IdempotencyKey]; dup {
			t.Errorf("%s: want a new key, got the key of %s: %q", d.what, prev, got.IdempotencyKey)
		}
		seen[got.IdempotencyKey] = d.what
	}
}

func TestDerivedKeyEntityFromPayload(t *testing.T) {
	t.Parallel()
	// The entity taken from the payload is part of the key like a given one.
	a, err := event.New(fields(nil), []byte(`{"order_id":"o-1"}`), "order_id", "", now)
	if err != nil {
		t.Fatal(err)
	}
	if want := "d:order.create:o-1:"; !strings.HasPrefix(a.IdempotencyKey, want) {
		t.Errorf("want a key starting %q, got %q", want, a.IdempotencyKey)
	}
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{` { "z" : { "y" : 1 , "x" : [ 3 , 2 ] } } `, `{"z":{"x":[3,2],"y":1}}`},
		{`1.50`, `1.50`},
		{`1e3`, `1e3`},
		{`"<&>"`, `"<&>"`},
		{`"\u00e9"`, `"é"`},
		{`null`, `null`},
		{`{"a":1,"a":2}`, `{"a":2}`},
	}
	for _, tt := range tests {
		got, err := event.Canonical([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonical(%s): want %s, got %s (%v)", tt.in, tt.want, got, err)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1} 2`, `{"a":1}}`, `[1]]`, `nul`} {
		if got, err := event.Canonical([]byte(bad)); err == nil {
			t.Errorf("Canonical(%q): want an error, got %s", bad, got)
		}
	}
}

func TestID(t *testing.T) {
	t.Parallel()
	id := event.ID("acme", "key-1")
	if len(id) != 29 {
		t.Errorf("want a 29-character id, got %d: %q", len(id), id)
	}
	if err := names.ValidateEventID(id); err != nil {
		t.Errorf("want ValidateEventID to accept %q, got %v", id, err)
	}
	if again := event.ID("acme", "key-1"); again != id {
		t.Errorf("want ID stable, got %s then %s", id, again)
	}
	ids := map[string]string{id: "acme/key-1"}
	for _, ak := range [][2]string{{"globex", "key-1"}, {"acme", "key-2"}, {"acme", "key-1 "}, {"acmek", "ey-1"}, {"acme\x00key", "1"}} {
		other := event.ID(ak[0], ak[1])
		if prev, dup := ids[other]; dup {
			t.Errorf("ID(%q, %q) = %s, the id of %s", ak[0], ak[1], other, prev)
		}
		ids[other] = ak[0] + "/" + ak[1]
	}
}

// The id is pinned: stored records and published message ids depend on it,
// so a change to the derivation must be deliberate.
func TestIDPinned(t *testing.T) {
	t.Parallel()
	got := event.ID("acme", "order-42")
	env, err := event.New(event.Fields{Account: "acme", Kind: "k", IdempotencyKey: "order-42"}, []byte(`{}`), "", "", now)
	if err != nil || env.ID != got {
		t.Fatalf("want New to use ID(account, key) = %s, got %s (%v)", got, env.ID, err)
	}
	// pinnedID was computed outside Go: "ev_" + the first 26 characters of
	// base32 (alphabet 0-9a-v) of SHA-256("acme\x00order-42").
	const pinnedID = "ev_oi9rp6tun25qejlq8gbet26pjv"
	if got != pinnedID {
		t.Errorf("ID(acme, order-42): want %s (pinned), got %s", pinnedID, got)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	nb := now.Add(48 * time.Hour)
	env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", EntityID: "o-1", OrderingKey: "c-1",
		NotBefore: nb.Format(time.RFC3339)}, []byte(`{"total": 12.50, "note": "<b>&</b>"}`), "", "", now)
	if err != nil {
		t.Fatal(err)
	}
	b := env.Marshal()
	got, err := event.Unmarshal(b)
	if err != nil {
		t.Fatalf("Unmarshal(Marshal(env)): want no error, got %v\n%s", err, b)
	}
	// The payload is compacted on the wire; compare it as JSON.
	var want, back any
	_ = json.Unmarshal(env.Payload, &want)
	_ = json.Unmarshal(got.Payload, &back)
	if !reflect.DeepEqual(want, back) {
		t.Errorf("payload: want %s, got %s", env.Payload, got.Payload)
	}
	env.Payload, got.Payload = nil, nil
	if got.NotBefore == nil || !got.NotBefore.Equal(*env.NotBefore) || !got.CreatedAt.Equal(env.CreatedAt) {
		t.Errorf("times: want not_before %v created_at %v, got %v %v", env.NotBefore, env.CreatedAt, got.NotBefore, got.CreatedAt)
	}
	got.NotBefore, env.NotBefore = nil, nil
	got.CreatedAt, env.CreatedAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, env) {
		t.Errorf("want %+v back, got %+v", env, got)
	}
}

func TestUnmarshalChecksNames(t *testing.T) {
	t.Parallel()
	good, err := event.New(fields(nil), []byte(`{}`), "", "", now)
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		_ = json.Unmarshal(good.Marshal(), &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"not JSON", []byte(`{`), event.ErrMalformed},
		{"trailing data", append(good.Marshal(), '}'), event.ErrMalformed},
		{"bad id", mutate(func(m map[string]any) { m["id"] = "ev_../x" }), event.ErrInvalid},
		{"no id", mutate(func(m map[string]any) { delete(m, "id") }), event.ErrInvalid},
		{"wildcard account", mutate(func(m map[string]any) { m["account"] = "*" }), event.ErrInvalid},
		{"bad kind", mutate(func(m map[string]any) { m["kind"] = "a..b" }), event.ErrInvalid},
	}
	for _, tt := range tests {
		if _, err := event.Unmarshal(tt.in); !errors.Is(err, tt.want) {
			t.Errorf("%s: want an error wrapping %v, got %v", tt.name, tt.want, err)
		}
	}
}

// DecodeObject takes one JSON object and nothing after it, as
// json.Unmarshal does; Scalar reads its values as the sender wrote them.
func TestDecodeObjectAndScalar(t *testing.T) {
	t.Parallel()
	for body, ok := range map[string]bool{`{"v":1}`: true, ` {"v":"a"} `: true, `null`: false, `{"v":1} {"v":2}`: false, `{"v":1} x`: false, `{"v":1}}`: false, `[1]`: false, `{`: false} {
		if _, err := event.DecodeObject([]byte(body)); (err == nil) != ok {
			t.Errorf("DecodeObject(%s): want ok=%v, got %v", body, ok, err)
		}
	}
	for body, want := range map[string]string{
		`{"v":"ref_1"}`: "ref_1", `{"v":12345678901234567890}`: "12345678901234567890", `{"v":1e3}`: "1e3",
		`{"v":1000000}`: "1000000", `{"v":true}`: "true", `{"v":false}`: "false",
		`{"v":null}`: "", `{}`: "", `{"v":{"a":1}}`: "", `{"v":[1]}`: "",
	} {
		obj, err := event.DecodeObject([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if got := event.Scalar(obj["v"]); got != want {
			t.Errorf("Scalar of v in %s: want %q, got %q", body, want, got)
		}
	}
}

// An entity id or ordering key read from the payload's field that is not
// a valid key is refused naming that field: the caller sent no
// entity_id, and an error about one would send them looking for it.
func TestDerivedKeysRefusedNamingTheirField(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, c := range []struct{ payload, entity, order, want string }{
		{`{"order_id":"o 1"}`, "order_id", "", `entity_id (the payload's "order_id", the kind's entity field) must be printable ASCII`},
		{`{"customer":"c\u0000"}`, "", "customer", `ordering_key (the payload's "customer", the kind's ordering field) must be printable ASCII`},
	} {
		_, err := event.New(event.Fields{Account: "acme", Kind: "order.create"}, []byte(c.payload), c.entity, c.order, now)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error saying %q, got %v", c.payload, c.want, err)
		}
	}
	_, err := event.New(event.Fields{Account: "acme", Kind: "order.create", EntityID: "o 1"}, []byte(`{}`), "order_id", "", now)
	if err == nil || !strings.Contains(err.Error(), "entity_id must be printable ASCII") {
		t.Errorf("a caller's entity_id: want the error to name entity_id, got %v", err)
	}
}

// DecodeStrict refuses a name spelled otherwise than its field's at any
// depth (a struct in a slice, a map or behind a pointer, an embedded
// struct's field), and says which; the members of a raw value are the
// caller's.
func TestDecodeStrictSpelling(t *testing.T) {
	t.Parallel()
	type item struct {
		ID string `json:"id"`
	}
	type inner struct {
		Note string `json:"note"`
	}
	type req struct {
		inner
		Items []item            `json:"items"`
		ByKey map[string]*item  `json:"by_key"`
		Raw   json.RawMessage   `json:"raw"`
		Tags  map[string]string `json:"tags"`
	}
	for _, c := range []struct{ body, want string }{
		{`{"note":"a","items":[{"id":"1"}],"by_key":{"k":{"id":"2"}},"raw":{"ID":1,"id":2},"tags":{"A":"1","a":"2"}}`, ""},
		{`{"Note":"a"}`, `names the member "note" as "Note"`},
		{`{"items":[{"id":"1"},{"Id":"2"}]}`, `names the member "id" as "Id"`},
		{`{"by_key":{"k":{"iD":"2"}}}`, `names the member "id" as "iD"`},
		{`{"note":"a","note":"b"}`, `gives the member "note" twice`},
		{`{"note":"a"} {}`, "something follows the JSON object"},
	} {
		var r req
		err := event.DecodeStrict("request body", []byte(c.body), &r)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: want it taken, got %v", c.body, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error saying %q, got %v", c.body, c.want, err)
		}
	}
}
