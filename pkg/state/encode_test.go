package state

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func genString(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.StringMatching(`[a-z0-9_.:-]{0,12}`),
		rapid.String(),
		rapid.SampledFrom([]string{"", "<a&b>", "\"q\"\\", "\u2028\u2029", "tab\tnl\ncr\r", "\x00\x1f\x7f", "\xff\xfe bad utf8", "é中🙂"}),
	).Draw(t, label)
}

func genTime(t *rapid.T, label string) time.Time {
	sec := rapid.Int64Range(0, 4102444800).Draw(t, label+".s")
	ns := rapid.Int64Range(0, 999999999).Draw(t, label+".ns")
	loc := rapid.SampledFrom([]*time.Location{time.UTC, time.FixedZone("x", 3*3600+1800)}).Draw(t, label+".loc")
	return time.Unix(sec, ns).In(loc)
}

// genRecord draws a record of any content: strings that need escaping
// or hold invalid UTF-8, times in other zones, nil or empty histories.
func genRecord(t *rapid.T) Record {
	r := Record{
		ID: genString(t, "id"), IdempotencyKey: genString(t, "key"), Account: genString(t, "acct"),
		Kind: genString(t, "kind"), EntityID: genString(t, "entity"), OrderingKey: genString(t, "ok"),
		Status: State(genString(t, "status")), Stage: genString(t, "stage"),
		Attempts: rapid.IntRange(-3, 1000).Draw(t, "attempts"), Replays: rapid.IntRange(-1, 1000).Draw(t, "replays"), Reference: genString(t, "ref"),
		CreatedAt: genTime(t, "created"), UpdatedAt: genTime(t, "updated"),
		RunSeq: rapid.Uint64().Draw(t, "runseq"), Truncated: rapid.IntRange(0, 50).Draw(t, "trunc"),
		After: genString(t, "after"), Next: genString(t, "next"), Traceparent: genString(t, "traceparent"),
	}
	if rapid.Bool().Draw(t, "err") {
		r.LastError = &ErrorInfo{Class: genString(t, "class"), Message: genString(t, "msg"), HTTPStatus: rapid.IntRange(0, 599).Draw(t, "status")}
	}
	if rapid.Bool().Draw(t, "next") {
		n := genTime(t, "next")
		r.NextRunAt = &n
	}
	if rapid.Bool().Draw(t, "deadline") {
		d := genTime(t, "deadline")
		r.Deadline = &d
	}
	r.Polls = rapid.IntRange(0, 300).Draw(t, "polls")
	if rapid.Bool().Draw(t, "payload") {
		r.Payload = json.RawMessage(rapid.SampledFrom([]string{`{"order_id":"o-1","total":1990}`, `[]`, `{"a":{"history":[1]},"b":1}`}).Draw(t, "payload"))
	}
	if rapid.Bool().Draw(t, "hash") {
		r.PayloadSHA256 = genString(t, "hash")
	}
	if rapid.Bool().Draw(t, "result") {
		r.Result = json.RawMessage(rapid.SampledFrom([]string{`{"id":"ref_1","ok":true}`, `[1,2]`, `"s"`, `null`}).Draw(t, "res"))
	}
	if rapid.Bool().Draw(t, "hasHistory") {
		r.History = []Entry{}
		for range rapid.IntRange(0, 5).Draw(t, "n") {
			r.History = append(r.History, Entry{
				At: genTime(t, "at"), Action: ActionName(genString(t, "action")), From: State(genString(t, "from")),
				To: State(genString(t, "to")), Attempt: rapid.IntRange(0, 9).Draw(t, "attempt"),
				Stage: genString(t, "estage"), Actor: genString(t, "actor"), Detail: genString(t, "detail"),
				HTTPStatus: rapid.IntRange(0, 599).Draw(t, "hs"), Count: rapid.IntRange(0, 3).Draw(t, "count"),
			})
		}
	}
	return r
}

// AppendJSON writes exactly what encoding/json writes for any record.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRecord(t)
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); string(got) != string(want) {
			t.Fatalf("AppendJSON differs from encoding/json\n got: %s\nwant: %s", got, want)
		}
	})
}

func BenchmarkEncodeRecord(b *testing.B) {
	now := time.Now()
	r := Record{ID: "ev_0123456789abcdefghijklmnop", IdempotencyKey: "o-1", Account: "acme", Kind: "order.create",
		Status: Done, Stage: StagePrimary, Attempts: 1, CreatedAt: now, UpdatedAt: now, RunSeq: 42,
		History: []Entry{{At: now, Action: Accept, To: Pending, Stage: StagePrimary, Actor: "ingest"},
			{At: now, Action: Claim, From: Pending, To: Running, Attempt: 1, Stage: StagePrimary, Actor: "dispatcher/x"},
			{At: now, Action: Succeed, From: Running, To: Done, Attempt: 1, Stage: StagePrimary, Actor: "dispatcher/x", Detail: "target answered 200"}}}
	b.Run("AppendJSON", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = r.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(r)
		}
	})
}

// maxJSONLen is never under the length appendJSON writes, for any entry:
// evict trusts it to skip encoding a history within its limits. Strings
// of bytes that escape to six, ints of 20 characters and times at their
// longest come up often, so that a bound too tight by a little fails.
func TestEntryMaxJSONLen(t *testing.T) {
	str := func(t *rapid.T, label string) string {
		if rapid.Bool().Draw(t, label+".worst") {
			return strings.Repeat(rapid.SampledFrom([]string{"\x00", "\xff", "\u2028"}).Draw(t, label+".c"), rapid.IntRange(0, 400).Draw(t, label+".n"))
		}
		return genString(t, label)
	}
	num := func(t *rapid.T, label string) int {
		return rapid.OneOf(rapid.Int(), rapid.Just(math.MinInt64)).Draw(t, label)
	}
	rapid.Check(t, func(t *rapid.T) {
		at := genTime(t, "at")
		if rapid.Bool().Draw(t, "extreme time") {
			at = time.Unix(rapid.SampledFrom([]int64{math.MinInt64 / 2, -62135596800 * 4700000, 1 << 62}).Draw(t, "s"), 999999999).
				In(time.FixedZone("z", rapid.OneOf(rapid.Int(), rapid.Just(math.MinInt64)).Draw(t, "offset")))
		}
		e := Entry{
			At: at, Action: ActionName(str(t, "action")), From: State(str(t, "from")),
			To: State(str(t, "to")), Attempt: num(t, "attempt"),
			Stage: str(t, "stage"), Actor: str(t, "actor"), Detail: str(t, "detail"),
			HTTPStatus: num(t, "hs"), Count: num(t, "count"),
		}
		if n, bound := len(e.appendJSON(nil)), e.maxJSONLen(); n > bound {
			t.Fatalf("appendJSON wrote %d bytes, over the bound %d: %s", n, bound, e.appendJSON(nil))
		}
	})
}

func BenchmarkApplyClaim(b *testing.B) {
	now := time.Now()
	r, _, err := New(Record{ID: "ev_0123456789abcdefghijklmnop", IdempotencyKey: "o-1", Account: "acme", Kind: "order.create", Stage: StagePrimary},
		Action{Name: Accept, Actor: "ingest"}, now)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		_, _, _ = Apply(r, Action{Name: Claim, Seq: 42, Actor: "dispatcher/x"}, now)
	}
}
