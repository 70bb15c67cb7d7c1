package state

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Every record AppendJSON writes is read by the decoder's own scanner (not
// handed to encoding/json), into what encoding/json reads from it.
func TestDecodeJSONReadsAppendJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRecord(t)
		b := r.AppendJSON(nil)
		d := decoder{b: b}
		got, ok := d.record()
		if !ok {
			t.Fatalf("the decoder's scanner gave up on AppendJSON's %s", b)
		}
		var want Record
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeJSON of %s\n got %+v\nwant %+v", b, got, want)
		}
	})
}

// Whatever the input, DecodeJSON fails when encoding/json does, and
// otherwise decodes what encoding/json decodes into a zero Record.
func FuzzDecodeJSON(f *testing.F) {
	now := time.Date(2026, 12, 4, 18, 0, 0, 123456789, time.FixedZone("x", 3600))
	r := Record{ID: "ev_0123456789abcdefghijklmnop", IdempotencyKey: "o-1", Account: "acme", Kind: "order.create",
		EntityID: "<cust & co>", Status: AwaitingCallback, Stage: StagePrimary, Attempts: 1, CreatedAt: now, UpdatedAt: now,
		LastError: &ErrorInfo{Class: "transient", Message: "503 \"busy\"\n", HTTPStatus: 503}, NextRunAt: &now, Deadline: &now,
		Polls: 2, Reference: "job/1 \u2028", Result: json.RawMessage(`{"a":[1,-2.5e3,true,null,"\u00e9"]}`),
		Payload: json.RawMessage(`{"history":[]}`), PayloadSHA256: "ab", RunSeq: 1 << 63, After: "ev_a", Next: "ev_b", Traceparent: "00-x",
		History: []Entry{{At: now, Action: Accept, To: Pending, Stage: StagePrimary, Actor: "ingest", Detail: "\xff bad 🙂"},
			{At: now, Action: Claim, From: Pending, To: Running, Attempt: 1, HTTPStatus: 200, Count: 3}}, Truncated: 4}
	f.Add(r.AppendJSON(nil))
	f.Add([]byte(`{"id":"x","history":null,"last_error":null,"next_run_at":null,"result":null}`))
	f.Add([]byte(`{"id":"x","id":"y"}`))
	f.Add([]byte(`{"attempts":01}`))
	f.Add([]byte(`{"attempts":1.5,"polls":-0}`))
	f.Add([]byte(`{"ID":"x", "kind" : "k"} `))
	f.Add([]byte(`{"created_at":"2026-12-04T18:00:00Z","updated_at":null}`))
	f.Add([]byte(`{"id":"\ud83d\ude00\ud800x\u00"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want Record
		err := DecodeJSON(b, &got)
		werr := json.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: DecodeJSON says %v, encoding/json %v", b, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

func BenchmarkDecodeRecord(b *testing.B) {
	now := time.Now()
	r := Record{ID: "ev_0123456789abcdefghijklmnop", IdempotencyKey: "o-1", Account: "acme", Kind: "order.create",
		Status: Done, Stage: StagePrimary, Attempts: 1, CreatedAt: now, UpdatedAt: now, RunSeq: 42, Payload: json.RawMessage(`{"order_id":"o-1","total":1990}`),
		History: []Entry{{At: now, Action: Accept, To: Pending, Stage: StagePrimary, Actor: "ingest"},
			{At: now, Action: Claim, From: Pending, To: Running, Attempt: 1, Stage: StagePrimary, Actor: "dispatcher/x"},
			{At: now, Action: Succeed, From: Running, To: Done, Attempt: 1, Stage: StagePrimary, Actor: "dispatcher/x", Detail: "target answered 200"}}}
	data := r.AppendJSON(nil)
	b.Run("DecodeJSON", func(b *testing.B) {
		for b.Loop() {
			var got Record
			_ = DecodeJSON(data, &got)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			var got Record
			_ = json.Unmarshal(data, &got)
		}
	})
}
