package state

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzDecodeHeadAgreesWithDecodeJSON checks the head reader on any bytes:
// it never panics, and never fails on a record the full decoder reads.
// DecodeHead may read more than DecodeJSON (it does not look at the
// history) and, on JSON another encoder wrote, differ from it (a key
// repeated after "history"), so agreement is asserted where DecodeHead
// promises it: on what AppendJSON writes of every record that decodes.
func FuzzDecodeHeadAgreesWithDecodeJSON(f *testing.F) {
	now := time.Date(2026, 12, 4, 18, 0, 0, 123456789, time.FixedZone("x", 3600))
	full := Record{ID: "ev_0123456789abcdefghijklmnop", IdempotencyKey: "o-1", Account: "acme", Kind: "order.create",
		EntityID: "<cust & co>", Status: AwaitingCallback, Stage: StagePrimary, Attempts: 1, CreatedAt: now, UpdatedAt: now,
		LastError: &ErrorInfo{Class: "transient", Message: "503 \"busy\"\n", HTTPStatus: 503}, NextRunAt: &now, Deadline: &now,
		Polls: 2, Reference: "job/1 \u2028", Result: json.RawMessage(`{"x":{"history":"}"},"history":{}}`),
		Payload: json.RawMessage(`{"a":1,"history":[1]}`), PayloadSHA256: "ab", RunSeq: 1 << 63, After: "ev_a", Next: "ev_b", Traceparent: "00-x",
		History: []Entry{{At: now, Action: Accept, To: Pending, Stage: StagePrimary, Actor: "ingest", Detail: `,"history":`},
			{At: now, Action: Note, To: Pending, Detail: `"},"history":[`, Count: 3}}, Truncated: 4}
	f.Add(full.AppendJSON(nil))
	small := Record{ID: "ev_1", Account: "acme", Status: Done, Result: json.RawMessage(`[",\"history\":"]`), History: []Entry{{Action: Accept}}}
	b := small.AppendJSON(nil)
	f.Add(b)
	// The history cut off: the head still reads, the whole does not.
	f.Add(append(bytes.Clone(b[:bytes.LastIndex(b, historyKey)]), `,"history":[{"at":`...))
	f.Add([]byte(`{"history":[{"action":"accept","to":"pending"}],"id":"ev_1","account":"acme","kind":"order.create",` +
		`"status":"retrying","stage":"fallback","next_run_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T09:00:00Z"}`))
	f.Add([]byte(`{"id":"a","history":null,"id":"b"}`))
	f.Add([]byte(`{"id":1,"history":[]}`))
	f.Add([]byte(`,"history":`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodeHead(b)
		var whole Record
		if werr := DecodeJSON(b, &whole); werr != nil {
			return
		}
		if err != nil {
			t.Fatalf("DecodeHead(%q) = %v; DecodeJSON reads %+v", b, err, whole)
		}
		// What the package itself writes of that record.
		b = whole.AppendJSON(nil)
		var r Record
		if err := DecodeJSON(b, &r); err != nil {
			t.Fatalf("DecodeJSON of AppendJSON's %q: %v", b, err)
		}
		h, err := DecodeHead(b)
		if err != nil || !sameHead(h, r) {
			t.Fatalf("DecodeHead(%q) = %+v, %v; want the head of %+v", b, h, err, r)
		}
	})
}
