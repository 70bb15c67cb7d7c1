package event

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Marshal writes exactly what encoding/json writes for any envelope, and
// what it writes when encoding/json fails (a time past year 9999, a
// payload that is not JSON).
func TestMarshalMatchesEncodingJSON(t *testing.T) {
	str := rapid.OneOf(
		rapid.StringMatching(`[a-z0-9_.:-]{0,12}`),
		rapid.String(),
		rapid.SampledFrom([]string{"", "<a&b>", "\"q\"\\", "\u2028\u2029", "tab\tnl\ncr\r\b\f", "\x00\x1f\x7f", "\xff\xfe bad utf8", "é中🙂"}),
	)
	when := func(t *rapid.T, label string) time.Time {
		sec := rapid.OneOf(rapid.Int64Range(-62135596800-86400, 253402300799+86400), rapid.Int64()).Draw(t, label+".s")
		zone := rapid.SampledFrom([]*time.Location{time.UTC, time.FixedZone("x", 3*3600+1800), time.FixedZone("y", -23*3600-59*60), time.FixedZone("z", 24*3600)}).Draw(t, label+".zone")
		return time.Unix(sec, rapid.Int64Range(0, 999999999).Draw(t, label+".ns")).In(zone)
	}
	payload := rapid.OneOf(
		rapid.SampledFrom([]string{`{"order_id":"o-1","total":1990}`, ` { "a" : [ 1 , 2 ] ,"b":"<&>"} `, `[]`, `"s"`, `null`, `1e3`, "\t{\n}\n", `{"x":"\u2028"}`, `{"bad":`, ``, `{} {}`}),
		rapid.String(),
	)
	rapid.Check(t, func(t *rapid.T) {
		e := Envelope{ID: str.Draw(t, "id"), IdempotencyKey: str.Draw(t, "key"), Account: str.Draw(t, "account"), Kind: str.Draw(t, "kind"),
			EntityID: str.Draw(t, "entity"), OrderingKey: str.Draw(t, "ordering"), CreatedAt: when(t, "created"), Traceparent: str.Draw(t, "tp")}
		if rapid.Bool().Draw(t, "not before") {
			nb := when(t, "nb")
			e.NotBefore = &nb
		}
		if p := payload.Draw(t, "payload"); p != "" || rapid.Bool().Draw(t, "empty, not nil") {
			e.Payload = json.RawMessage(p)
		}
		if got, want := e.Marshal(), e.marshalJSON(); string(got) != string(want) {
			t.Fatalf("Marshal differs from encoding/json\n got: %q\nwant: %q", got, want)
		}
	})
}

// Whatever parseMarshaled accepts, json.Unmarshal decodes to the same
// envelope: Marshal's output (payloads of every shape, with and without
// the optional fields) and that output cut, spliced and altered. Half the
// cases are plain (strings of the characters it reads without escapes, a
// payload that is not null, Marshal's output as is), which it must
// accept: so every run checks accepted envelopes, not only refusals.
func TestUnmarshalMatchesEncodingJSON(t *testing.T) {
	str := rapid.OneOf(
		rapid.StringMatching(`[a-zA-Z0-9_.:-]{0,12}`),
		rapid.SampledFrom([]string{"", "a\\b", "q\"", "é", ",\"traceparent\":\"x", "}", "null"}),
	)
	payload := rapid.SampledFrom([]string{`{"order_id":"o-1","total":1990}`, ` { "a" : [ 1 , 2 ] } `, `[]`, `"s"`, `null`, `1e3`, `{"x":1,"traceparent":"t"}`,
		`{"traceparent":"t"}`, `"\",\"traceparent\":\"t"`, `{"a":"}"}`, `[1,{"b":null}]`})
	plainStr := rapid.StringMatching(`[a-zA-Z0-9_.:-]{0,12}`)
	plainPayload := rapid.SampledFrom([]string{`{"order_id":"o-1","total":1990}`, ` { "a" : [ 1 , 2 ] } `, `[]`, `"s"`, `1e3`, `{"x":1,"traceparent":"t"}`})
	rapid.Check(t, func(t *rapid.T) {
		plain := rapid.Bool().Draw(t, "plain")
		str, payload := str, payload
		if plain {
			str, payload = plainStr, plainPayload
		}
		created := time.Unix(rapid.Int64Range(0, 4102444800).Draw(t, "s"), rapid.Int64Range(0, 999999999).Draw(t, "ns")).
			In(rapid.SampledFrom([]*time.Location{time.UTC, time.FixedZone("x", 3*3600+1800)}).Draw(t, "zone"))
		e := Envelope{ID: str.Draw(t, "id"), IdempotencyKey: str.Draw(t, "key"), Account: str.Draw(t, "account"), Kind: str.Draw(t, "kind"),
			EntityID: str.Draw(t, "entity"), OrderingKey: str.Draw(t, "ordering"), CreatedAt: created, Traceparent: str.Draw(t, "tp"),
			Payload: json.RawMessage(payload.Draw(t, "payload"))}
		if rapid.Bool().Draw(t, "not before") {
			nb := created.Add(time.Hour)
			e.NotBefore = &nb
		}
		b := e.Marshal()
		mutation := 0
		if !plain {
			mutation = rapid.IntRange(0, 3).Draw(t, "mutation")
		}
		switch mutation {
		case 1: // cut
			b = b[:rapid.IntRange(0, len(b)).Draw(t, "cut")]
		case 2: // a byte changed
			b = slices.Clone(b)
			b[rapid.IntRange(0, len(b)-1).Draw(t, "at")] = rapid.SampledFrom([]byte(`"{}[],:\ xZ0`)).Draw(t, "byte")
		case 3: // a field added at the end
			b = append(slices.Clone(b[:len(b)-1]), rapid.SampledFrom([]string{`,"traceparent":"t"}`, `,"id":"other"}`, `,"x":1}`}).Draw(t, "extra")...)
		}
		got, ok := parseMarshaled(b)
		if !ok && plain {
			t.Fatalf("parseMarshaled refused Marshal's plain output %q", b)
		}
		if !ok {
			return
		}
		var want Envelope
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("parseMarshaled accepted %q, which json.Unmarshal refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nparseMarshaled: %#v\njson.Unmarshal: %#v", b, got, want)
		}
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	e := Envelope{ID: "ev_0123456789abcdefghijklmnop", IdempotencyKey: "o-1", Account: "acme", Kind: "order.create",
		CreatedAt: time.Now().UTC(), Payload: json.RawMessage(`{"order_id":"o","total":1990}`), Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	m := e.Marshal()
	b.Run("parseMarshaled", func(b *testing.B) {
		for b.Loop() {
			_, _ = parseMarshaled(m)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var e Envelope
			_ = json.Unmarshal(m, &e)
		}
	})
}

func BenchmarkMarshal(b *testing.B) {
	e := Envelope{ID: "ev_0123456789abcdefghijklmnop", IdempotencyKey: "o-1", Account: "acme", Kind: "order.create",
		CreatedAt: time.Now().UTC(), Payload: json.RawMessage(`{"order_id":"o","total":1990}`)}
	b.Run("Marshal", func(b *testing.B) {
		for b.Loop() {
			_ = e.Marshal()
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_ = e.marshalJSON()
		}
	})
}
