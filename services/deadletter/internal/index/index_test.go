package index_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter/internal/index"
)

var (
	accounts = []string{"acme", "globex", "initech", "umbrella", "hooli"}
	kinds    = []string{"order.create", "invoice.send", "credit.evaluate"}
	classes  = []string{"permanent", "transient", "timeout", "crash"}
	reasons  = []string{"permanent", "attempts_exhausted", "max_deliveries", "manual_review"}
	t0       = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
)

// fill puts n items with skewed values (acme is half of everything) and
// returns them by key.
func fill(x *index.Index, n int, r *rand.Rand) map[string]ops.Item {
	all := make(map[string]ops.Item, n)
	for i := range n {
		acct := accounts[r.IntN(len(accounts))]
		if r.IntN(2) == 0 {
			acct = "acme"
		}
		reason := reasons[r.IntN(len(reasons))]
		status := state.Dead
		if reason == "manual_review" {
			status = state.ManualReview
		}
		it := ops.Item{
			ID: fmt.Sprintf("ev_%06d", i), Account: acct, Kind: kinds[r.IntN(len(kinds))],
			Class: classes[r.IntN(len(classes))], Reason: reason, Status: status,
			Seq: uint64(i + 1), At: t0.Add(time.Duration(i) * time.Second),
		}
		all[it.ID] = it
		x.Put(it.ID, uint64(i+1), it)
	}
	return all
}

// want is the list the brute force gives: every matching item, newest first.
func want(all map[string]ops.Item, s state.State, q ops.ListRequest) []ops.Item {
	var out []ops.Item
	for _, it := range all {
		if it.Status != s || q.Account != "" && it.Account != q.Account || q.Kind != "" && it.Kind != q.Kind ||
			q.Class != "" && it.Class != q.Class || q.Reason != "" && it.Reason != q.Reason ||
			q.Since != nil && it.At.Before(*q.Since) || q.Until != nil && !it.At.Before(*q.Until) {
			continue
		}
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b ops.Item) int { return int(b.Seq) - int(a.Seq) })
	return out
}

// pages follows the cursor to the end and returns everything seen.
func pages(t *testing.T, x *index.Index, s state.State, q ops.ListRequest) ([]ops.Item, int) {
	t.Helper()
	var got []ops.Item
	total := -1
	for n := 0; ; n++ {
		rep, err := x.List(s, q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		if total >= 0 && rep.Total != total {
			t.Fatalf("total changed between pages without a change: %d then %d", total, rep.Total)
		}
		total = rep.Total
		limit := q.Limit
		if limit == 0 {
			limit = ops.DefaultLimit
		}
		if len(rep.Items) > limit {
			t.Fatalf("page of %d items over limit %d", len(rep.Items), limit)
		}
		got = append(got, rep.Items...)
		if rep.NextCursor == "" {
			return got, total
		}
		if len(rep.Items) != limit {
			t.Fatalf("a page with a next cursor must be full: %d of %d", len(rep.Items), limit)
		}
		q.Cursor = rep.NextCursor
		if n > 100000 {
			t.Fatal("cursor does not end")
		}
	}
}

func ptr(t time.Time) *time.Time { return &t }

func check(t *testing.T, x *index.Index, all map[string]ops.Item, s state.State, q ops.ListRequest) {
	t.Helper()
	w := want(all, s, q)
	got, total := pages(t, x, s, q)
	if total != len(w) {
		t.Fatalf("%s %+v: total %d, want %d", s, q, total, len(w))
	}
	if len(got) != len(w) {
		t.Fatalf("%s %+v: paged through %d items, want %d", s, q, len(got), len(w))
	}
	for i := range w {
		if got[i].ID != w[i].ID {
			t.Fatalf("%s %+v: item %d is %s, want %s", s, q, i, got[i].ID, w[i].ID)
		}
	}
}

// Every combination of filters, paged by cursor to the end over 20,000
// items, gives exactly what a full scan gives, in order, with the right
// total; and still does after a third of the items left and some came
// back with a newer entry.
func TestListMatchesFullScan(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	x := index.New()
	all := fill(x, 20000, r)
	queries := []ops.ListRequest{
		{},
		{Account: "acme"},
		{Account: "globex", Kind: "invoice.send"},
		{Kind: "credit.evaluate", Limit: 500},
		{Class: "timeout", Limit: 7},
		{Reason: "attempts_exhausted"},
		{Account: "acme", Kind: "order.create", Class: "crash", Reason: "permanent", Limit: 13},
		{Since: ptr(t0.Add(3 * time.Hour)), Until: ptr(t0.Add(4 * time.Hour))},
		{Account: "hooli", Since: ptr(t0.Add(time.Hour))},
		{Kind: "order.create", Until: ptr(t0.Add(90 * time.Minute)), Limit: 100},
		{Account: "nobody"},
		{Since: ptr(t0.Add(100 * 24 * time.Hour))},
	}
	run := func() {
		for _, s := range []state.State{state.Dead, state.ManualReview} {
			for _, q := range queries {
				check(t, x, all, s, q)
			}
		}
	}
	run()
	// A third leave (replayed, discarded), enough to trigger a compaction.
	for i := 0; i < 20000; i += 3 {
		id := fmt.Sprintf("ev_%06d", i)
		x.Delete(id)
		delete(all, id)
	}
	// Some die again: a newer entry with a higher sequence.
	for i := 1; i < 20000; i += 97 {
		id := fmt.Sprintf("ev_%06d", i)
		it, ok := all[id]
		if !ok {
			continue
		}
		it.Seq, it.At, it.Class = uint64(20000+i), t0.Add(time.Duration(20000+i)*time.Second), "transient"
		all[id] = it
		x.Put(id, uint64(20000+i), it)
	}
	if x.Len() != len(all) {
		t.Fatalf("Len %d, want %d", x.Len(), len(all))
	}
	run()
}

// A list changed between two pages keeps its order: nothing already seen is
// shown again and nothing older than the cursor is skipped.
func TestCursorSurvivesChanges(t *testing.T) {
	t.Parallel()
	x := index.New()
	all := fill(x, 1000, rand.New(rand.NewPCG(3, 4)))
	q := ops.ListRequest{Limit: 10}
	first, err := x.List(state.Dead, q)
	if err != nil {
		t.Fatal(err)
	}
	x.Delete(first.Items[3].ID) // seen item leaves
	newer := ops.Item{ID: "ev_new", Account: "acme", Status: state.Dead, Seq: 5000, At: t0.Add(5000 * time.Second)}
	x.Put("ev_new", 5000, newer) // a new arrival does not shift the cursor
	delete(all, first.Items[3].ID)
	q.Cursor = first.NextCursor
	rest, _ := pages(t, x, state.Dead, q)
	w := want(all, state.Dead, ops.ListRequest{Until: ptr(first.Items[9].At)})
	if len(rest) != len(w) {
		t.Fatalf("after the cursor: %d items, want %d", len(rest), len(w))
	}
	for i := range w {
		if rest[i].ID != w[i].ID {
			t.Fatalf("item %d: %s, want %s", i, rest[i].ID, w[i].ID)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	x := index.New()
	if _, err := x.List(state.Dead, ops.ListRequest{Cursor: "abc"}); !errors.Is(err, index.ErrBadCursor) {
		t.Fatalf("cursor abc: want ErrBadCursor, got %v", err)
	}
	if _, err := x.List(state.Dead, ops.ListRequest{Limit: ops.MaxLimit + 1}); err == nil {
		t.Fatal("limit over MaxLimit: want an error")
	}
	rep, err := x.List(state.Dead, ops.ListRequest{})
	if err != nil || rep.Total != 0 || rep.Items == nil || rep.NextCursor != "" {
		t.Fatalf("empty index: want an empty page with a non-nil item list, got %+v, %v", rep, err)
	}
}

// Put of an older revision than the one held is ignored (a late watch
// value); Put at the same sequence updates in place.
func TestPutOrder(t *testing.T) {
	t.Parallel()
	x := index.New()
	it := ops.Item{ID: "ev_1", Account: "acme", Status: state.Dead, Seq: 10, Class: "transient"}
	x.Put("ev_1", 5, it)
	old := it
	old.Class = "permanent"
	x.Put("ev_1", 4, old)
	if got, rev, _ := x.Get("ev_1"); got.Class != "transient" || rev != 5 {
		t.Fatalf("older revision must be ignored, got %+v rev %d", got, rev)
	}
	it.Attempts = 3
	x.Put("ev_1", 6, it)
	if got, _, _ := x.Get("ev_1"); got.Attempts != 3 || x.Count(state.Dead) != 1 {
		t.Fatalf("update in place: got %+v, count %d", got, x.Count(state.Dead))
	}
	it.Status = state.ManualReview
	x.Put("ev_1", 7, it)
	if x.Count(state.Dead) != 0 || x.Count(state.ManualReview) != 1 {
		t.Fatalf("moved to review: dead %d, review %d", x.Count(state.Dead), x.Count(state.ManualReview))
	}
}

// TestPageAt100k logs how long one filtered page takes at 100,000 items (a
// figure for the README and the report; no timing is asserted).
func TestPageAt100k(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := index.New()
	fill(x, 100000, rand.New(rand.NewPCG(5, 6)))
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("100,000 items: %d bytes of heap per item", (after.HeapAlloc-before.HeapAlloc)/100000)
	for _, q := range []ops.ListRequest{
		{}, {Account: "acme", Kind: "order.create"}, {Account: "hooli", Class: "crash"},
		{Kind: "invoice.send", Since: ptr(t0.Add(10 * time.Hour))},
	} {
		if _, err := x.List(state.Dead, q); err != nil { // first call computes the total
			t.Fatal(err)
		}
		const n = 200
		start := time.Now()
		var rep ops.ListReply
		for range n {
			rep, _ = x.List(state.Dead, q)
			q2 := q
			q2.Cursor = rep.NextCursor
			rep, _ = x.List(state.Dead, q2)
		}
		t.Logf("100,000 items, filter %+v: %v per page (total %d)", q, time.Since(start)/(2*n), rep.Total)
	}
}

func BenchmarkListPage100k(b *testing.B) {
	x := index.New()
	fill(x, 100000, rand.New(rand.NewPCG(5, 6)))
	q := ops.ListRequest{Account: "acme", Kind: "order.create"}
	first, _ := x.List(state.Dead, q)
	q.Cursor = first.NextCursor
	b.ResetTimer()
	for b.Loop() {
		if _, err := x.List(state.Dead, q); err != nil {
			b.Fatal(err)
		}
	}
}

// DeleteAt removes only what is not newer than the purge.
func TestDeleteAt(t *testing.T) {
	t.Parallel()
	x := index.New()
	x.Put("ev_1", 5, ops.Item{ID: "ev_1", Status: state.Dead, Seq: 1})
	x.DeleteAt("ev_1", 4)
	if _, _, ok := x.Get("ev_1"); !ok {
		t.Fatal("a newer value than the purge must stay")
	}
	x.DeleteAt("ev_1", 5)
	if _, _, ok := x.Get("ev_1"); ok || x.Count(state.Dead) != 0 {
		t.Fatal("the purged value must go")
	}
}

// Bounds outside the years UnixNano holds (1677-2262) are still times: a
// since before them is the start, an until after them the end, and one
// far beyond the entries on the other side leaves nothing.
func TestListFarTimes(t *testing.T) {
	t.Parallel()
	x := index.New()
	it := ops.Item{ID: "ev_1", Account: "acme", Status: state.Dead, Seq: 1, At: t0}
	x.Put(it.ID, 1, it)
	day := func(s string) *time.Time {
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			t.Fatal(err)
		}
		return &d
	}
	for _, c := range []struct {
		name         string
		since, until string
		want         int
	}{
		{"since 1600", "1600-01-01", "", 1},
		{"since 1677-09-20", "1677-09-20", "", 1},
		{"since year 1", "0001-01-01", "", 1},
		{"until 9999", "", "9999-12-31", 1},
		{"until 2262-04-12", "", "2262-04-12", 1},
		{"since 1600 until 9999", "1600-01-01", "9999-12-31", 1},
		{"since 9999", "9999-12-31", "", 0},
		{"until 1600", "", "1600-01-01", 0},
	} {
		q := ops.ListRequest{}
		if c.since != "" {
			q.Since = day(c.since)
		}
		if c.until != "" {
			q.Until = day(c.until)
		}
		rep, err := x.List(state.Dead, q)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if rep.Total != c.want || len(rep.Items) != c.want {
			t.Errorf("%s: want %d item(s) and total %d, got %d and total %d", c.name, c.want, c.want, len(rep.Items), rep.Total)
		}
	}
}
