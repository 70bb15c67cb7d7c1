package dead_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/store"
)

// newBounded starts a server and a Writer whose bound is every account's,
// bound, 1 until changed.
func newBounded(t *testing.T) (context.Context, jetstream.JetStream, names.Subjects, *dead.Writer, *atomic.Int64) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	subj := names.NewSubjects("")
	bound := new(atomic.Int64)
	bound.Store(1)
	return ctx, js, subj, &dead.Writer{JS: js, Subj: subj, Bound: func(string) int64 { return bound.Load() }}, bound
}

// Entries DEAD has no room for wait (Keep), and move into DEAD once their
// account has room, each once: a re-park of the same message id (a
// redelivery after a crash) is one entry, two movers racing write it
// once, and one account's wait does not keep another's entries waiting.
// What moves is the entry as parked, raw submission and headers too.
func TestWaitingEntriesMoveOnceThereIsRoom(t *testing.T) {
	t.Parallel()
	ctx, js, subj, w, _ := newBounded(t)
	at := time.Now().UTC().Truncate(time.Millisecond)
	entry := func(account, body string) dead.Entry {
		return dead.Entry{Account: account, Kind: "order.create", Reason: dead.ReasonRejected, Class: "unknown_kind",
			Error: "unknown kind", At: at, Raw: []byte(body),
			RawSubject: "tenaz.intake." + account + ".order.create", RawHeader: map[string][]string{"Idempotency-Key": {body}}}
	}
	keep := func(account, id string, want bool) {
		t.Helper()
		if waiting, err := w.Keep(ctx, entry(account, id), id); err != nil || waiting != want {
			t.Fatalf("keep %s's %s: want waiting %v, got %v, %v", account, id, want, waiting, err)
		}
	}
	keep("noisy", "n-0", false)
	if err := w.Publish(ctx, entry("noisy", "n-1"), "n-1"); !store.IsFull(err) {
		t.Fatalf("want noisy at its bound, got %v", err)
	}
	for _, id := range []string{"n-1", "n-2", "n-1"} {
		keep("noisy", id, true)
	}
	keep("calm", "c-0", false)
	keep("calm", "c-1", true)
	ds, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	discard := func(account string) {
		if err := ds.Purge(ctx, jetstream.WithPurgeSubject(subj.DeadOf(account))); err != nil {
			t.Fatal(err)
		}
	}
	discard("calm")
	waiting := func(account string) int {
		n, err := w.WaitingOf(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := waiting("noisy"); n != 2 {
		t.Fatalf("want noisy's 2 entries waiting (n-1 parked twice is one), got %d", n)
	}
	var reportMu sync.Mutex
	var report map[string]int // what Move told Waiting last
	w.Waiting = func(counts map[string]int) {
		reportMu.Lock()
		defer reportMu.Unlock()
		report = counts
	}
	reported := func() map[string]int {
		reportMu.Lock()
		defer reportMu.Unlock()
		return report
	}
	if n, err := w.Move(ctx); err != nil || n != 1 {
		t.Fatalf("want calm's entry moved while noisy has no room, got %d, %v", n, err)
	}
	if got := reported(); !maps.Equal(got, map[string]int{"noisy": 2}) {
		t.Fatalf("after calm's entry moved: want reported waiting noisy 2 and no calm, got %v", got)
	}
	if n := waiting("calm"); n != 0 {
		t.Fatalf("want calm's entry moved, %d wait", n)
	}
	discard("noisy")
	moved := make(chan int, 2)
	for range 2 { // two movers, as two ingest replicas
		go func() {
			n, err := w.Move(ctx)
			if err != nil {
				t.Error(err)
			}
			moved <- n
		}()
	}
	<-moved
	<-moved
	if n := waiting("noisy"); n != 1 {
		t.Fatalf("want one of noisy's entries moved into its one room, %d wait", n)
	}
	discard("noisy")
	if _, err := w.Move(ctx); err != nil {
		t.Fatal(err)
	}
	if n := waiting("noisy"); n != 0 {
		t.Fatalf("want noisy's last entry moved, %d wait", n)
	}
	if got := reported(); got == nil || len(got) != 0 {
		t.Fatalf("once nothing waits: want reported an empty count, got %v", got)
	}
	info, err := ds.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 5 { // n-0, c-0, c-1, n-1, n-2
		t.Fatalf("want 5 entries written to DEAD, each once, got %d", info.State.LastSeq)
	}
	raw, err := ds.GetLastMsgForSubject(ctx, subj.DeadOf("noisy"))
	if err != nil {
		t.Fatal(err)
	}
	var got dead.Entry
	if err := json.Unmarshal(raw.Data, &got); err != nil {
		t.Fatal(err)
	}
	want := entry("noisy", "n-2")
	if string(got.Raw) != "n-2" || got.RawSubject != want.RawSubject || !slices.Equal(got.RawHeader["Idempotency-Key"], []string{"n-2"}) ||
		got.Class != want.Class || !got.At.Equal(want.At) {
		t.Fatalf("want the entry as parked, %+v, got %+v", want, got)
	}
}

// While an account's entries wait for room, its new ones wait behind
// them: the room an operator frees goes to the oldest, which a steady
// stream of new failures would otherwise take first, every time.
func TestNewEntriesWaitBehindTheOlderOnes(t *testing.T) {
	t.Parallel()
	ctx, js, subj, w, _ := newBounded(t)
	keep := func(id string, want bool) {
		t.Helper()
		e := dead.Entry{Account: "noisy", Kind: "order.create", Reason: dead.ReasonPermanent, Error: id, At: time.Now()}
		if waiting, err := w.Keep(ctx, e, id); err != nil || waiting != want {
			t.Fatalf("keep %s: want waiting %v, got %v, %v", id, want, waiting, err)
		}
	}
	keep("n-0", false)
	keep("n-1", true)
	ds, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Purge(ctx, jetstream.WithPurgeSubject(subj.DeadOf("noisy"))); err != nil { // the operator frees the room
		t.Fatal(err)
	}
	keep("n-2", true) // room, but n-1 was first
	if n, err := w.Move(ctx); n != 1 || err != nil {
		t.Fatalf("want one entry moved into the one room, got %d, %v", n, err)
	}
	m, err := ds.GetLastMsgForSubject(ctx, subj.DeadOf("noisy"))
	if err != nil {
		t.Fatal(err)
	}
	var got dead.Entry
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Error != "n-1" {
		t.Fatalf("want the oldest waiting entry, n-1, in the freed room, got %s", got.Error)
	}
	if n, err := w.WaitingOf(ctx, "noisy"); n != 1 || err != nil {
		t.Fatalf("want n-2 still waiting, got %d, %v", n, err)
	}
}

// While DEAD itself is full, the room freed between the mover's passes
// goes to the waiting accounts in turn: a pass that always started at the
// first account in order would give it every room as long as it had
// entries waiting.
func TestMoveServesTheAccountsInTurnWhileDEADIsFull(t *testing.T) {
	t.Parallel()
	ctx, js, _, w, bound := newBounded(t)
	bound.Store(0)
	keep := func(account, id string, want bool) {
		t.Helper()
		e := dead.Entry{Account: account, Kind: "order.create", Reason: dead.ReasonPermanent, Error: id, At: time.Now()}
		if waiting, err := w.Keep(ctx, e, id); err != nil || waiting != want {
			t.Fatalf("keep %s: want waiting %v, got %v, %v", id, want, waiting, err)
		}
	}
	keep("mmm", "m-0", false)
	ds, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ds.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 1, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		keep("aaa", fmt.Sprint("a-", i), true)
		keep("zzz", fmt.Sprint("z-", i), true)
	}
	var got []string
	for range 4 { // the operator frees one room at a time
		if err := ds.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := w.Move(ctx); n != 1 || err != nil {
			t.Fatalf("want one entry moved into the one room, got %d, %v", n, err)
		}
		info, err := ds.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ds.GetMsg(ctx, info.State.LastSeq)
		if err != nil {
			t.Fatal(err)
		}
		var e dead.Entry
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Error)
	}
	if slices.Sort(got); !slices.Equal(got, []string{"a-0", "a-1", "z-0", "z-1"}) {
		t.Fatalf("want each account's two oldest in the four rooms freed, got %v", got)
	}
}

// A parked entry holds its event's payload once, as DEAD's does.
func TestKeepParksThePayloadOnce(t *testing.T) {
	t.Parallel()
	ctx, js, subj, w, _ := newBounded(t)
	if err := w.Publish(ctx, dead.Entry{Account: "acme", Kind: "order.create", Reason: dead.ReasonPermanent, At: time.Now()}, "first"); err != nil {
		t.Fatal(err)
	}
	e, payload := bigEntry(t)
	if waiting, err := w.Keep(ctx, e, e.ID+"/dead/1"); err != nil || !waiting {
		t.Fatalf("want the entry waiting for room, got %v, %v", waiting, err)
	}
	ws, err := js.Stream(ctx, names.StreamDeadWaiting)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ws.GetLastMsgForSubject(ctx, subj.DeadWaiting("acme"))
	if err != nil {
		t.Fatal(err)
	}
	wantPayloadOnce(t, m.Data, payload)
}

// An entry that cannot be moved (here one DEAD refuses for its size, as
// a DEAD whose max_msg_size was lowered would) fails its own account's
// moves, not the others': the accounts after it are still moved, and the
// failure is reported.
func TestMoveGoesOnPastAnAccountThatFails(t *testing.T) {
	t.Parallel()
	ctx, js, subj, w, bound := newBounded(t)
	for i, want := range []bool{false, true} {
		e := dead.Entry{Account: "zzz", Kind: "order.create", Reason: dead.ReasonRejected, At: time.Now()}
		if waiting, err := w.Keep(ctx, e, fmt.Sprint("z-", i)); err != nil || waiting != want {
			t.Fatalf("keep #%d: want waiting %v, got %v, %v", i, want, waiting, err)
		}
	}
	ds, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ds.CachedInfo().Config
	cfg.MaxMsgSize = 4096
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	big, err := json.Marshal(dead.Entry{Account: "aaa", Kind: "order.create", Reason: dead.ReasonRejected, At: time.Now(), Raw: []byte(strings.Repeat("x", 8192))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subj.DeadWaiting("aaa"), big); err != nil {
		t.Fatal(err)
	}
	bound.Store(2)
	n, err := w.Move(ctx)
	if n != 1 || err == nil || !strings.Contains(err.Error(), subj.DeadWaiting("aaa")) {
		t.Fatalf("want zzz's entry moved and aaa's failure reported, got %d moved, %v", n, err)
	}
}

// What waits on an account's subject but is not that account's entry
// (not an entry at all, or one naming another account: only a NATS user
// allowed to park could write it) is kept in DEAD as it is, as a
// malformed entry of the account it waited as: it does not keep the
// account's later entries waiting behind it, nor reach another account.
func TestMoveKeepsWhatIsNotAnEntryAsMalformed(t *testing.T) {
	t.Parallel()
	ctx, js, subj, w, bound := newBounded(t)
	other, err := json.Marshal(dead.Entry{Account: "bbb", Kind: "order.create", Reason: dead.ReasonPermanent, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{[]byte("not an entry"), other} {
		if _, err := js.Publish(ctx, subj.DeadWaiting("aaa"), data); err != nil {
			t.Fatal(err)
		}
	}
	e := dead.Entry{Account: "aaa", Kind: "order.create", Reason: dead.ReasonPermanent, At: time.Now()}
	if waiting, err := w.Keep(ctx, e, "a-0"); err != nil || !waiting { // behind the two
		t.Fatalf("keep aaa's entry: want it waiting, got %v, %v", waiting, err)
	}
	bound.Store(10)
	if n, err := w.Move(ctx); n != 3 || err != nil {
		t.Fatalf("want all 3 of aaa's waiting moved, got %d, %v", n, err)
	}
	if n, err := w.WaitingOf(ctx, "aaa"); n != 0 || err != nil {
		t.Fatalf("want nothing of aaa's waiting, got %d, %v", n, err)
	}
	ds, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	var got []dead.Entry
	for seq := uint64(1); ; seq++ {
		m, err := ds.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.Subject, strings.TrimSuffix(subj.DeadOf("aaa"), ">")) {
			t.Fatalf("want every entry kept as aaa's, one on %s", m.Subject)
		}
		var e dead.Entry
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != 3 || got[0].Class != "malformed_entry" || string(got[0].Raw) != "not an entry" ||
		got[1].Class != "malformed_entry" || string(got[1].Raw) != string(other) || !strings.Contains(got[1].Error, `"bbb"`) ||
		got[2].Class != "" || got[2].Account != "aaa" {
		t.Fatalf("want the two malformed entries kept as received, then aaa's own, got %+v", got)
	}
}
