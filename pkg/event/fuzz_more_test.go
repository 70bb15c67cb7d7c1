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

// FuzzUnmarshalAgreesWithEncodingJSON checks the envelope decoder on any
// bytes: it never panics; its fast path decodes only what json.Unmarshal
// decodes, to the same envelope (as parseMarshaled documents), so the
// result is json.Unmarshal's; a body json refuses is ErrMalformed, and one
// it reads is refused only as ErrInvalid, for a name that does not
// validate.
func FuzzUnmarshalAgreesWithEncodingJSON(f *testing.F) {
	good, err := event.New(event.Fields{Account: "acme", Kind: "order.create", EntityID: "o-1", OrderingKey: "c-1",
		NotBefore: now.Add(48 * time.Hour).Format(time.RFC3339)}, []byte(`{"total": 12.50, "note": "<b>&</b>"}`), "", "", now)
	if err != nil {
		f.Fatal(err)
	}
	traced := good
	traced.NotBefore, traced.EntityID, traced.OrderingKey = nil, "", ""
	traced.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	traced.Payload = json.RawMessage(`{"x":1,"traceparent":"t"}`)
	for _, b := range [][]byte{
		good.Marshal(),
		traced.Marshal(),
		append(good.Marshal(), '}'),
		[]byte(`{`),
		[]byte(`{"id":"ev_../x","idempotency_key":"k","account":"acme","kind":"order.create","created_at":"2026-03-01T12:00:00Z","payload":{}}`),
		[]byte(`{"id":"ev_oi9rp6tun25qejlq8gbet26pjv","idempotency_key":"k","account":"*","kind":"order.create","created_at":"2026-03-01T12:00:00Z","payload":{}}`),
		[]byte(`{"id":"ev_oi9rp6tun25qejlq8gbet26pjv","idempotency_key":"k","account":"acme","kind":"a..b","created_at":"2026-03-01T12:00:00Z","payload":{}}`),
		[]byte(`{"id":"ev_oi9rp6tun25qejlq8gbet26pjv","idempotency_key":"k","account":"ac\u006de","kind":"k","created_at":"2026-03-01T12:00:00+03:30","payload":null}`),
		[]byte(`{"id":"ev_oi9rp6tun25qejlq8gbet26pjv","idempotency_key":"k","account":"acme","kind":"k","created_at":"2026-03-01T12:00:00Z","payload":"\",\"traceparent\":\"t","traceparent":"x"}`),
		[]byte(`{"id":"ev_oi9rp6tun25qejlq8gbet26pjv","idempotency_key":"k","account":"acme","kind":"k","created_at":"2026-03-01T12:00:00Z","payload":{"a":"}"},"id":"other"}`),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := event.Unmarshal(data)
		var want event.Envelope
		if jerr := json.Unmarshal(data, &want); jerr != nil {
			if !errors.Is(err, event.ErrMalformed) {
				t.Fatalf("Unmarshal(%q): json.Unmarshal refuses it (%v), want ErrMalformed, got %v (%#v)", data, jerr, err, got)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Unmarshal(%q):\n got: %#v\njson: %#v", data, got, want)
		}
		if (err == nil) != namesValid(want) || err != nil && !errors.Is(err, event.ErrInvalid) {
			t.Fatalf("Unmarshal(%q) of id %q, account %q, kind %q: got error %v", data, want.ID, want.Account, want.Kind, err)
		}
	})
}

// FuzzMarshalUnmarshalRoundTrip checks that an envelope Marshal can write
// comes back from Unmarshal as it was, up to what JSON carries (a
// compacted payload, U+FFFD for invalid UTF-8, an instant in its own
// offset), whenever its names validate; and that one it cannot write (a
// payload that is not JSON, a year past 9999) is never read back.
func FuzzMarshalUnmarshalRoundTrip(f *testing.F) {
	const id = "ev_oi9rp6tun25qejlq8gbet26pjv"
	at := now.Unix()
	f.Add(id, "order-42", "acme", "order.create", "o-1", "c-1", "", at, int64(0), int16(0), true, at+48*3600, []byte(`{"total": 12.50, "note": "<b>&</b>"}`))
	f.Add(id, "k", "acme", "k", "", "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", at, int64(500000000), int16(3*60+30), false, int64(0), []byte(`{"x":1,"traceparent":"t"}`))
	f.Add(id, "a\\b", "acme", "k", "q\"", ",\"traceparent\":\"x", "}", at, int64(1), int16(-23*60-59), false, int64(0), []byte(` { "a" : [ 1 , 2 ] } `))
	f.Add(id, "\xff\xfe bad utf8", "acme", "k", "é中🙂", "\u2028", "tab\tnl\n", at, int64(0), int16(0), false, int64(0), []byte(`null`))
	f.Add(id, "k", "acme", "k", "", "", "", at, int64(0), int16(0), false, int64(0), []byte(nil))
	f.Add("ev_../x", "k", "*", "a..b", "", "", "", at, int64(0), int16(0), false, int64(0), []byte(`{}`))
	f.Add(id, "k", "acme", "k", "", "", "", int64(253402300800), int64(0), int16(0), false, int64(0), []byte(`{}`))
	f.Add(id, "k", "acme", "k", "", "", "", at, int64(0), int16(0), false, int64(0), []byte(`{"bad":`))
	f.Fuzz(func(t *testing.T, id, key, account, kind, entity, ordering, traceparent string,
		createdSec, nsec int64, offsetMinutes int16, hasNotBefore bool, notBeforeSec int64, payload []byte) {
		// Whole minutes: RFC 3339 writes no seconds of an offset, so
		// encoding/json itself loses them.
		zone := time.FixedZone("z", int(offsetMinutes)*60)
		e := event.Envelope{ID: id, IdempotencyKey: key, Account: account, Kind: kind, EntityID: entity, OrderingKey: ordering,
			CreatedAt: time.Unix(createdSec, nsec).In(zone), Payload: payload, Traceparent: traceparent}
		if hasNotBefore {
			nb := time.Unix(notBeforeSec, nsec).In(zone)
			e.NotBefore = &nb
		}
		b := e.Marshal()
		got, err := event.Unmarshal(b)
		if !writable(e) {
			if err == nil {
				t.Fatalf("Unmarshal read back %#v from %q, written for an envelope Marshal cannot write (%#v)", got, b, e)
			}
			return
		}
		want := event.Envelope{ID: carried(id), IdempotencyKey: carried(key), Account: carried(account), Kind: carried(kind),
			EntityID: carried(entity), OrderingKey: carried(ordering), Traceparent: carried(traceparent), Payload: json.RawMessage("null")}
		if payload != nil {
			var c bytes.Buffer
			_ = json.Compact(&c, payload)
			want.Payload = c.Bytes()
		}
		if !namesValid(want) {
			if !errors.Is(err, event.ErrInvalid) {
				t.Fatalf("Unmarshal(%q) with id %q, account %q, kind %q: want ErrInvalid, got %v", b, want.ID, want.Account, want.Kind, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Unmarshal(Marshal(%#v)) = %v\n%s", e, err, b)
		}
		if !sameInstant(got.CreatedAt, e.CreatedAt) || (got.NotBefore == nil) != (e.NotBefore == nil) ||
			e.NotBefore != nil && !sameInstant(*got.NotBefore, *e.NotBefore) {
			t.Fatalf("times: wrote created_at %v not_before %v, read %v %v\n%s", e.CreatedAt, e.NotBefore, got.CreatedAt, got.NotBefore, b)
		}
		got.CreatedAt, got.NotBefore = time.Time{}, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Unmarshal(Marshal(e))\n got: %#v\nwant: %#v\n%s", got, want, b)
		}
	})
}

// namesValid reports whether Unmarshal's name checks pass.
func namesValid(e event.Envelope) bool {
	return names.ValidateEventID(e.ID) == nil && names.ValidateAccount(e.Account) == nil && names.ValidateKind(e.Kind) == nil
}

// writable reports whether encoding/json can write e: times in years
// 0–9999 with an offset under a day, and a payload that is JSON or nil.
func writable(e event.Envelope) bool {
	if _, err := e.CreatedAt.MarshalText(); err != nil {
		return false
	}
	if e.NotBefore != nil {
		if _, err := e.NotBefore.MarshalText(); err != nil {
			return false
		}
	}
	return e.Payload == nil || json.Valid(e.Payload)
}

// carried is s as a JSON string carries it: each byte of invalid UTF-8
// becomes U+FFFD (ranging over a string yields exactly that).
func carried(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// sameInstant: the same instant, written with the same offset.
func sameInstant(a, b time.Time) bool {
	_, ao := a.Zone()
	_, bo := b.Zone()
	return a.Equal(b) && ao == bo
}
