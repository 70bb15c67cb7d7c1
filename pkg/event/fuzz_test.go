package event_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
)

func FuzzParseSubmission(f *testing.F) {
	f.Add([]byte(`{"account":"acme","kind":"order.create","payload":{"a":1}}`))
	f.Add([]byte(`{"account":"acme","kind":"k","payload":null}`))
	f.Add([]byte(`{"account":"acme","kind":"k","payload":{}}}`))
	f.Add([]byte(`{"account":"acme","kind":"k","not_before":"2026-03-02T00:00:00Z","entity_id":"e","ordering_key":"o","payload":[1]}`))
	f.Add([]byte(`{"payload":{}} {}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"account":"acme","kind":"k","payload":{"amount":100,"amount":5}}`))
	f.Add([]byte(`{"account":"acme","kind":"k","payload":{"note":"A\ud800"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := event.ParseSubmission(body)
		if err != nil {
			if !errors.Is(err, event.ErrMalformed) && !errors.Is(err, event.ErrInvalid) {
				t.Fatalf("ParseSubmission(%q): want ErrMalformed or ErrInvalid, got %v", body, err)
			}
			return
		}
		if len(s.Payload) == 0 || string(s.Payload) == "null" || !json.Valid(s.Payload) {
			t.Fatalf("ParseSubmission(%q) accepted payload %q", body, s.Payload)
		}
		// What the HTTP ingest does next must not panic either, and hold
		// New's promises.
		f := event.Fields{Account: s.Account, Kind: s.Kind, EntityID: s.EntityID, OrderingKey: s.OrderingKey, NotBefore: s.NotBefore}
		checkNew(t, f, s.Payload, "id", "", now)
	})
}

func FuzzNew(f *testing.F) {
	f.Add("acme", "order.create", "", "", "", "", []byte(`{"id":"o-1"}`), "id", "id")
	f.Add("acme", "order.create", "e", "o", "2026-03-02T00:00:00Z", "k-1", []byte(`{}`), "", "")
	f.Add("ac.me", "order.>", "e 1", "", "tomorrow", "k 1", []byte(`{`), "x", "y")
	f.Add("acme", "k", "", "", "2099-01-01T00:00:00Z", "", []byte(`{"n":12345678901234567890}`), "n", "n")
	f.Add("acme", "k", "", "", "", "", []byte(`[1,2]`), "n", "")
	f.Add("acme", "k", "", "", "", "", []byte("{\"n\":\"Jos\xe9\"}"), "n", "")
	f.Add("acme", "k", "", "", "", "", deep(event.MaxDepth+1), "", "")
	f.Add("acme", "k", "", "", "", "", []byte(`{"n":"A\ud800"}`), "n", "")
	f.Add("acme", "k", "", "", "", "k-1", []byte(`{"n":"\ud83d\ude00","m":"\\ud800"}`), "n", "")
	f.Add("acme", "k", "", "", "", "", []byte(`{"order_id":5,"order_id":"o-1"}`), "order_id", "")
	f.Add("acme", "k", "", "", "", "k-1", []byte(`[{"a":1},{"a":{"a":1,"\u0061":2}}]`), "", "")
	f.Fuzz(func(t *testing.T, account, kind, entity, ordering, notBefore, key string, payload []byte, entityField, orderField string) {
		checkNew(t, event.Fields{Account: account, Kind: kind, EntityID: entity, OrderingKey: ordering, NotBefore: notBefore, IdempotencyKey: key},
			payload, entityField, orderField, now)
	})
}

// checkNew runs New and checks what a success promises.
func checkNew(t *testing.T, f event.Fields, payload []byte, entityField, orderField string, now time.Time) {
	t.Helper()
	env, err := event.New(f, payload, entityField, orderField, now)
	if err != nil {
		if !errors.Is(err, event.ErrMalformed) && !errors.Is(err, event.ErrInvalid) {
			t.Fatalf("New(%+v, %q): want ErrMalformed or ErrInvalid, got %v", f, payload, err)
		}
		return
	}
	if err := names.ValidateAccount(env.Account); err != nil || env.Account != f.Account {
		t.Fatalf("accepted account %q: %v", env.Account, err)
	}
	if err := names.ValidateKind(env.Kind); err != nil || env.Kind != f.Kind {
		t.Fatalf("accepted kind %q: %v", env.Kind, err)
	}
	if err := names.ValidateEventID(env.ID); err != nil {
		t.Fatalf("made id %q: %v", env.ID, err)
	}
	if env.ID != event.ID(env.Account, env.IdempotencyKey) {
		t.Fatalf("id %s is not ID(%q, %q)", env.ID, env.Account, env.IdempotencyKey)
	}
	if f.IdempotencyKey != "" && env.IdempotencyKey != f.IdempotencyKey {
		t.Fatalf("client key %q replaced by %q", f.IdempotencyKey, env.IdempotencyKey)
	}
	for name, v := range map[string]string{"entity id": env.EntityID, "ordering key": env.OrderingKey} {
		if v != "" {
			if err := names.ValidateKey(name, v); err != nil {
				t.Fatalf("accepted %s %q: %v", name, v, err)
			}
		}
	}
	if f.EntityID != "" && env.EntityID != f.EntityID || f.OrderingKey != "" && env.OrderingKey != f.OrderingKey {
		t.Fatalf("caller's entity/ordering %q/%q replaced by %q/%q", f.EntityID, f.OrderingKey, env.EntityID, env.OrderingKey)
	}
	if !json.Valid(env.Payload) || !utf8.Valid(env.Payload) {
		t.Fatalf("accepted invalid payload %q", env.Payload)
	}
	if d := state.Depth(env.Payload); d > event.MaxDepth {
		t.Fatalf("accepted a payload nested %d levels, deeper than %d", d, event.MaxDepth)
	}
	// Nothing in it that decoders may read two ways (refRead, on
	// encoding/json's Token API): what tenaz hashes and checks is what
	// the target reads.
	if problem, _, err := refRead(env.Payload); problem != "" || err != nil {
		t.Fatalf("accepted payload %q, which has %s (%v)", env.Payload, problem, err)
	}
	if nb := env.NotBefore; nb != nil && (!nb.After(now) || nb.After(now.Add(event.MaxNotBefore))) {
		t.Fatalf("not_before %v outside (now, now+%s]", nb, event.MaxNotBefore)
	}
	back, err := event.Unmarshal(env.Marshal())
	if err != nil || back.ID != env.ID {
		t.Fatalf("Unmarshal(Marshal(env)): want id %s back, got %s (%v)", env.ID, back.ID, err)
	}
}

// FuzzDecodeObject: a provider's answer or webhook never panics the
// decoder; what it takes is valid JSON (one object, nothing after), and
// Scalar gives a string as is and a number as its literal.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{`{"id":12345678901234567890,"ok":true,"s":"x"}`, `{"a":1e3} `, `null`, `{"a":1}}`, `[1]`, `{"a":{"b":[]}}`, "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		obj, err := event.DecodeObject(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("DecodeObject took %q, which is not valid JSON", b)
		}
		for k, v := range obj {
			s := event.Scalar(v)
			switch x := v.(type) {
			case string:
				if s != x {
					t.Fatalf("field %q: Scalar of the string %q is %q", k, x, s)
				}
			case json.Number:
				if s != x.String() || !json.Valid([]byte(s)) {
					t.Fatalf("field %q: Scalar of the number %s is %q, want its literal", k, x, s)
				}
			case map[string]any, []any, nil:
				if s != "" {
					t.Fatalf("field %q: Scalar of %v is %q, want \"\"", k, x, s)
				}
			}
		}
	})
}

// FuzzMembers checks the reader of a body's top-level members: it never
// panics; what it accepts is exactly what encoding/json reads into a map
// (same names, same values); a name it reports as given twice is one
// that json keeps only the last of.
func FuzzMembers(f *testing.F) {
	f.Add([]byte(`{"account":"acme","kind":"order.create","payload":{"a":1}}`))
	f.Add([]byte(`{"account":"acme","account":"globex"}`))
	f.Add([]byte(`{"a":{"b":1,"b":2}}`))
	f.Add([]byte(`{"a":1} {}`))
	f.Add([]byte(`{"\u0061":1,"a":2}`))
	f.Add([]byte(`[1]`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		members, dup, err := event.Members(data)
		var want map[string]json.RawMessage
		jerr := json.Unmarshal(data, &want)
		switch {
		case dup != "":
			if _, ok := want[dup]; jerr != nil || !ok {
				t.Fatalf("Members(%q) says %q is given twice; json reads %v (%v)", data, dup, want, jerr)
			}
		case err != nil:
			if jerr == nil && want != nil {
				t.Fatalf("Members(%q) refused what json reads as an object: %v", data, err)
			}
		default:
			if jerr != nil || len(members) != len(want) {
				t.Fatalf("Members(%q) = %v; json reads %v (%v)", data, members, want, jerr)
			}
			for k, v := range want {
				if string(members[k]) != string(v) {
					t.Fatalf("Members(%q)[%q] = %s, json reads %s", data, k, members[k], v)
				}
			}
		}
	})
}

// FuzzDecodeStrict checks the reader of request bodies: it never panics,
// and what it takes names each member once, exactly as a field does, at
// the top and inside the items: what encoding/json read is what a reader
// of the exact names sees.
func FuzzDecodeStrict(f *testing.F) {
	f.Add([]byte(`{"account":"acme","items":[{"id":"1"}]}`))
	f.Add([]byte(`{"account":"acme","Account":"globex"}`))
	f.Add([]byte(`{"items":[{"ID":"1"}]}`))
	f.Add([]byte(`{"\u212account":"a"}`))
	f.Add([]byte(`{"account":"a"} x`))
	type item struct {
		ID string `json:"id"`
	}
	type req struct {
		Account string `json:"account"`
		Items   []item `json:"items"`
	}
	exact := func(t *testing.T, data []byte, names ...string) {
		members, dup, err := event.Members(data)
		if err != nil || dup != "" {
			t.Fatalf("DecodeStrict took %q: Members says %q twice (%v)", data, dup, err)
		}
		for k := range members {
			if !slices.Contains(names, k) {
				t.Fatalf("DecodeStrict took %q, naming %q", data, k)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r req
		if event.DecodeStrict("body", data, &r) != nil {
			return
		}
		exact(t, data, "account", "items")
		members, _, _ := event.Members(data)
		var items []json.RawMessage
		if json.Unmarshal(members["items"], &items) == nil {
			for _, it := range items {
				if string(it) != "null" {
					exact(t, it, "id")
				}
			}
		}
	})
}
