package state

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// DecodeHead of a stored record is the head of the record decoded whole,
// whatever its result, payload and history hold (a "history" key of their
// own included).
func TestDecodeHeadOfStoredRecord(t *testing.T) {
	tricky := []string{`{"a":1,"history":[1]}`, `{"x":{"history":"}"},"history":{}}`, `[",\"history\":"]`, `null`}
	rapid.Check(t, func(t *rapid.T) {
		r := Record{
			ID: genString(t, "id"), Account: genString(t, "acct"), Kind: genString(t, "kind"),
			Status: State(genString(t, "status")), Stage: genString(t, "stage"),
			CreatedAt: genTime(t, "created"), UpdatedAt: genTime(t, "updated"),
			Truncated: rapid.IntRange(0, 3).Draw(t, "trunc"),
			NextRunAt: genTimeOrNil(t, "next"), Deadline: genTimeOrNil(t, "deadline"),
		}
		if rapid.Bool().Draw(t, "result") {
			r.Result = json.RawMessage(rapid.SampledFrom(tricky).Draw(t, "res"))
		}
		if rapid.Bool().Draw(t, "payload") {
			r.Payload = json.RawMessage(rapid.SampledFrom(tricky).Draw(t, "pay"))
		}
		for range rapid.IntRange(0, 3).Draw(t, "n") {
			r.History = append(r.History, Entry{At: genTime(t, "at"), Action: Note,
				Detail: rapid.SampledFrom([]string{`,"history":`, `"},"history":[`, genString(t, "d")}).Draw(t, "detail")})
		}
		b := r.AppendJSON(nil)
		var whole Record
		if err := json.Unmarshal(b, &whole); err != nil {
			t.Fatalf("stored record: %v", err)
		}
		h, err := DecodeHead(b)
		if err != nil {
			t.Fatalf("DecodeHead: %v", err)
		}
		if !sameHead(h, whole) {
			t.Fatalf("DecodeHead of %s: want the head of %+v, got %+v", b, whole, h)
		}
	})
}

// JSON in another key order (history first) is decoded whole.
func TestDecodeHeadOtherKeyOrder(t *testing.T) {
	b := []byte(`{"history":[{"action":"accept","to":"pending"}],"id":"ev_1","account":"acme","kind":"order.create",` +
		`"status":"retrying","stage":"fallback","next_run_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T09:00:00Z"}`)
	h, err := DecodeHead(b)
	if err != nil {
		t.Fatalf("DecodeHead: %v", err)
	}
	if h.ID != "ev_1" || h.Account != "acme" || h.Kind != "order.create" || h.Status != Retrying ||
		h.Stage != StageFallback || h.NextRunAt == nil || h.NextRunAt.Hour() != 10 || h.UpdatedAt.Hour() != 9 {
		t.Fatalf("DecodeHead: want every field of the head, got %+v", h)
	}
}

func genTimeOrNil(t *rapid.T, label string) *time.Time {
	if !rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	at := genTime(t, label)
	return &at
}

func sameHead(h Head, r Record) bool {
	eqPtr := func(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
	return h.ID == r.ID && h.Account == r.Account && h.Kind == r.Kind && h.Status == r.Status && h.Stage == r.Stage &&
		eqPtr(h.NextRunAt, r.NextRunAt) && eqPtr(h.Deadline, r.Deadline) && h.UpdatedAt.Equal(r.UpdatedAt)
}

// The history is not parsed: a record whose history would not decode
// still gives its head.
func TestDecodeHeadReadsNoHistory(t *testing.T) {
	r := Record{ID: "ev_1", Account: "acme", Status: Done, History: []Entry{{Action: Accept}}}
	b := r.AppendJSON(nil)
	b = append(b[:bytes.LastIndex(b, historyKey)], `,"history":[{"at":`...)
	h, err := DecodeHead(b)
	if err != nil || h.ID != "ev_1" || h.Status != Done {
		t.Fatalf("DecodeHead: want ev_1 done without reading the history, got %+v, %v", h, err)
	}
}
