package search_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is an embedded server with tenaz's layout (4 partitions), a store,
// an indexer and a searcher on it.
type env struct {
	js   jetstream.JetStream
	subj names.Subjects
	st   *store.Store
	x    *search.Indexer
	s    *search.Searcher
	set  *metrics.Set
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	st, err := store.Open(ctx(t), js, store.Options{})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	subj := names.NewSubjects("").WithPartitions(st.Partitions())
	e := &env{js: js, subj: subj, st: st}
	if e.set, err = metrics.New(prometheus.NewRegistry()); err != nil {
		t.Fatalf("metrics: %v", err)
	}
	e.startIndexer(t)
	if e.s, err = search.Open(ctx(t), js, st, subj); err != nil {
		t.Fatalf("search.Open: %v", err)
	}
	t.Cleanup(e.s.Close)
	return e
}

func (e *env) startIndexer(t *testing.T) {
	t.Helper()
	e.x = e.indexer(t, search.IndexerOptions{Follow: e.archive})
}

// archive writes each revision the indexer follows to the audit archive,
// as the deadletter service's archiver does (one message per revision,
// under the event's account and entity): a search by entity reads it.
// The writes are pipelined, as the archiver's.
func (e *env) archive(ctx context.Context, revs []search.Revision) error {
	pend := make([]jetstream.PubAckFuture, 0, len(revs))
	for _, rv := range revs {
		r, _ := audit.Diff(rv.Record, rv.Seq, audit.Mark{})
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		f, err := e.js.PublishAsync(audit.Subject(e.subj.Prefix, r.Account, r.EntityID, r.ID), b)
		if err != nil {
			return err
		}
		pend = append(pend, f)
	}
	for _, f := range pend {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// create stores a new pending event.
func (e *env) create(t *testing.T, account, kind, key, entity string, at time.Time) string {
	t.Helper()
	id := event.ID(account, key)
	r, _, err := state.New(state.Record{ID: id, IdempotencyKey: key, Account: account, Kind: kind, EntityID: entity},
		state.Action{Name: state.Accept}, at)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Create(ctx(t), r); err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return id
}

func (e *env) act(t *testing.T, account, id string, a state.Action) {
	t.Helper()
	if _, _, _, err := e.st.Transition(ctx(t), account, id, a); err != nil {
		t.Fatalf("%s %s: %v", a.Name, id, err)
	}
}

// hour is the creation hour of an event, as its state entry's key has it.
func (e *env) hour(t *testing.T, account, id string) string {
	t.Helper()
	r, _, err := e.st.Get(ctx(t), account, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.CreatedAt.UTC().Format("2006010215")
}

// find pages through q and returns the ids found, failing on a repeat.
func (e *env) find(t *testing.T, q ops.FindRequest) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	for page := 0; ; page++ {
		rep, err := e.s.Find(ctx(t), q)
		if err != nil {
			t.Fatalf("Find(%+v): %v", q, err)
		}
		for _, it := range rep.Items {
			if seen[it.ID] {
				t.Fatalf("Find(%+v): %s on two pages", q, it.ID)
			}
			seen[it.ID] = true
			ids = append(ids, it.ID)
		}
		if rep.NextCursor == "" {
			break
		}
		if page > 10_000 {
			t.Fatalf("Find(%+v): no end of pages", q)
		}
		q.Cursor = rep.NextCursor
	}
	slices.Sort(ids)
	return ids
}

// eventually waits until q finds exactly want.
func (e *env) eventually(t *testing.T, q ops.FindRequest, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var got []string
	natstest.Eventually(t, 20*time.Second, func() bool {
		got = e.find(t, q)
		return slices.Equal(got, want)
	}, "Find(%+v): want %v, last got %v", q, want, &got)
}

// accounts spread over the partitions.
var accounts = []string{"acme", "globex", "initech", "umbrella"}

func TestAccountsSpreadOverPartitions(t *testing.T) {
	subj := names.NewSubjects("").WithPartitions(4)
	ps := map[int]bool{}
	for _, a := range accounts {
		ps[subj.PartitionOf(a)] = true
	}
	if len(ps) < 3 {
		t.Fatalf("the test accounts fall in %d partitions; pick accounts over at least 3", len(ps))
	}
}

// Each filter finds exactly its events, over every partition.
func TestFindEachFilter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	type ev struct {
		id, account, kind, entity string
		at                        time.Time
	}
	var evs []ev
	for i := range 40 {
		a := accounts[i%len(accounts)]
		kind := []string{"order.create", "order.cancel", "credit.check"}[i%3]
		entity := fmt.Sprintf("proposal-%d", i%5)
		at := t0.Add(time.Duration(i) * time.Minute)
		evs = append(evs, ev{e.create(t, a, kind, fmt.Sprintf("key-%d", i), entity, at), a, kind, entity, at})
	}
	// A few run: retrying, done, and one polling with a provider reference.
	now := time.Now()
	e.act(t, evs[1].account, evs[1].id, state.Action{Name: state.Claim, Seq: 1})
	e.act(t, evs[1].account, evs[1].id, state.Action{Name: state.Retry, NextRunAt: &now, Error: &state.ErrorInfo{Class: "transient", Message: "503"}})
	e.act(t, evs[2].account, evs[2].id, state.Action{Name: state.Claim, Seq: 2})
	e.act(t, evs[2].account, evs[2].id, state.Action{Name: state.Succeed})
	dl := now.Add(time.Hour)
	e.act(t, evs[3].account, evs[3].id, state.Action{Name: state.Claim, Seq: 3})
	e.act(t, evs[3].account, evs[3].id, state.Action{Name: state.Poll, Reference: "job/42 *>", NextRunAt: &now, Deadline: &dl})

	where := func(f func(ev) bool) []string {
		var ids []string
		for _, x := range evs {
			if f(x) {
				ids = append(ids, x.id)
			}
		}
		return ids
	}
	all := where(func(ev) bool { return true })
	e.eventually(t, ops.FindRequest{}, all)
	e.eventually(t, ops.FindRequest{Account: "globex"}, where(func(x ev) bool { return x.account == "globex" }))
	e.eventually(t, ops.FindRequest{Kind: "order.cancel"}, where(func(x ev) bool { return x.kind == "order.cancel" }))
	e.eventually(t, ops.FindRequest{State: state.Retrying}, []string{evs[1].id})
	e.eventually(t, ops.FindRequest{State: state.Done}, []string{evs[2].id})
	e.eventually(t, ops.FindRequest{State: state.Polling}, []string{evs[3].id})
	e.eventually(t, ops.FindRequest{State: state.Pending}, where(func(x ev) bool { return x.id != evs[1].id && x.id != evs[2].id && x.id != evs[3].id }))
	e.eventually(t, ops.FindRequest{EntityID: "proposal-2"}, where(func(x ev) bool { return x.entity == "proposal-2" }))
	e.eventually(t, ops.FindRequest{Account: "acme", EntityID: "proposal-0"}, where(func(x ev) bool { return x.entity == "proposal-0" && x.account == "acme" }))
	e.eventually(t, ops.FindRequest{ProviderRef: "job/42 *>"}, []string{evs[3].id})
	e.eventually(t, ops.FindRequest{ProviderRef: "job/43"}, nil)
	e.eventually(t, ops.FindRequest{Account: evs[7].account, IdempotencyKey: "key-7"}, []string{evs[7].id})
	e.eventually(t, ops.FindRequest{Account: "acme", IdempotencyKey: "key-7"}, nil) // key-7 is another account's
	since, until := t0.Add(10*time.Minute), t0.Add(20*time.Minute)
	e.eventually(t, ops.FindRequest{Since: &since, Until: &until}, where(func(x ev) bool { return !x.at.Before(since) && x.at.Before(until) }))
	e.eventually(t, ops.FindRequest{Account: "initech", Kind: "credit.check", State: state.Pending, Since: &since},
		where(func(x ev) bool {
			return x.account == "initech" && x.kind == "credit.check" && !x.at.Before(since) && x.id != evs[1].id && x.id != evs[2].id && x.id != evs[3].id
		}))

	rep, err := e.s.Find(ctx(t), ops.FindRequest{Account: evs[3].account, ProviderRef: "job/42 *>"})
	if err != nil || len(rep.Items) != 1 {
		t.Fatalf("find by reference: %+v, %v", rep, err)
	}
	if it := rep.Items[0]; it.State != state.Polling || it.Kind != evs[3].kind || it.EntityID != evs[3].entity || it.NextRunAt == nil || !it.CreatedAt.Equal(evs[3].at) {
		t.Fatalf("item %+v does not say what the record says", it)
	}
}

// The state filter follows the transitions, and the entry of a state left
// behind is removed from the index (not only hidden by the record check).
func TestStateFilterFollowsTransitions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(t, "acme", "order.create", "k1", "", time.Now())
	e.eventually(t, ops.FindRequest{State: state.Pending}, []string{id})
	e.act(t, "acme", id, state.Action{Name: state.Claim, Seq: 1})
	e.eventually(t, ops.FindRequest{State: state.Running}, []string{id})
	e.eventually(t, ops.FindRequest{State: state.Pending}, nil)
	now := time.Now()
	e.act(t, "acme", id, state.Action{Name: state.Retry, NextRunAt: &now, Error: &state.ErrorInfo{Class: "transient"}})
	e.eventually(t, ops.FindRequest{Account: "acme", State: state.Retrying}, []string{id})
	e.eventually(t, ops.FindRequest{State: state.Running}, nil)
	e.eventually(t, ops.FindRequest{Account: "acme"}, []string{id})

	kv, err := e.js.KeyValue(ctx(t), e.subj.Bucket(search.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		keys, err := kv.ListKeys(ctx(t))
		if err != nil {
			return false
		}
		var got []string
		for k := range keys.Keys() {
			got = append(got, k)
		}
		return slices.Equal(got, []string{"acme.s.retrying.order/create." + e.hour(t, "acme", id) + "." + id})
	}, "the index should hold only the retrying entry of %s", id)
}

// Paging with a cursor returns every event once, across partitions: over
// a filter the subject index lists at once (an account's) and over one it
// holds too many of, which is scanned (every event).
func TestPagingReturnsEveryEventOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var want []string
	acme := map[string]bool{}
	for i := range 1300 {
		id := e.create(t, accounts[i%len(accounts)], "order.create", fmt.Sprintf("p-%d", i), "", time.Now())
		want = append(want, id)
		acme[id] = accounts[i%len(accounts)] == "acme"
	}
	slices.Sort(want)
	acmeIDs := slices.DeleteFunc(slices.Clone(want), func(id string) bool { return !acme[id] })
	e.eventually(t, ops.FindRequest{Limit: 500}, want)
	for _, limit := range []int{7, 100, 500} {
		if got := e.find(t, ops.FindRequest{Limit: limit}); !slices.Equal(got, want) {
			t.Fatalf("every event, limit %d: %d events found, want %d", limit, len(got), len(want))
		}
		if got := e.find(t, ops.FindRequest{Account: "acme", Limit: limit}); !slices.Equal(got, acmeIDs) {
			t.Fatalf("acme's, limit %d: %d events found, want %d", limit, len(got), len(acmeIDs))
		}
		// An hour with more entries than the subject index lists at once.
		since, until := time.Now().Add(-2*time.Hour), time.Now().Add(time.Hour)
		if got := e.find(t, ops.FindRequest{Since: &since, Until: &until, Limit: limit}); !slices.Equal(got, want) {
			t.Fatalf("every event of the last hours, limit %d: %d events found, want %d", limit, len(got), len(want))
		}
	}
	rep, err := e.s.Find(ctx(t), ops.FindRequest{Limit: 17})
	if err != nil || len(rep.Items) != 17 || rep.NextCursor == "" {
		t.Fatalf("first page of 17: %d items, cursor %q, %v", len(rep.Items), rep.NextCursor, err)
	}
	// A cursor goes on only with its own filter.
	_, err = e.s.Find(ctx(t), ops.FindRequest{Account: "acme", Cursor: rep.NextCursor})
	var pe *search.ParamError
	if !errors.As(err, &pe) || pe.Param != "cursor" {
		t.Fatalf("a cursor used with another filter: want a ParamError naming cursor, got %v", err)
	}
}

// An indexer that was down catches up from its durable consumers: what
// changed meanwhile is found, and nothing it missed stays stale.
func TestIndexerCatchesUpAfterRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var ids []string
	for i := range 20 {
		ids = append(ids, e.create(t, accounts[i%len(accounts)], "order.create", fmt.Sprintf("r-%d", i), "", time.Now()))
	}
	e.eventually(t, ops.FindRequest{State: state.Pending}, ids)
	if err := e.x.Stop(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// While it is down: every event runs to done (its pending entry must
	// go, though the indexer will see only the last revision), and more come.
	for i, id := range ids {
		e.act(t, accounts[i%len(accounts)], id, state.Action{Name: state.Claim, Seq: uint64(i + 1)})
		e.act(t, accounts[i%len(accounts)], id, state.Action{Name: state.Succeed})
	}
	var later []string
	for i := range 10 {
		later = append(later, e.create(t, accounts[i%len(accounts)], "order.create", fmt.Sprintf("l-%d", i), "", time.Now()))
	}
	// Stopped, the index still says pending; the record check hides them.
	e.eventually(t, ops.FindRequest{State: state.Pending}, nil)
	e.startIndexer(t)
	e.eventually(t, ops.FindRequest{State: state.Done}, ids)
	e.eventually(t, ops.FindRequest{State: state.Pending}, later)
	natstest.Eventually(t, 10*time.Second, func() bool { return e.x.Lag() == 0 }, "lag should come back to 0, is %v", natstest.Lazy(func() any { return e.x.Lag() }))
	// No pending entry is left of the events that went on to done.
	kv, err := e.js.KeyValue(ctx(t), e.subj.Bucket(search.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		k := accounts[i%len(accounts)] + ".s.pending.order/create." + e.hour(t, accounts[i%len(accounts)], id) + "." + id
		natstest.Eventually(t, 10*time.Second, func() bool {
			_, err := kv.Get(ctx(t), k)
			return errors.Is(err, jetstream.ErrKeyNotFound)
		}, "stale entry %s should be purged", k)
	}
	// Rebuilt from nothing, the index finds the same.
	if err := e.x.Stop(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := e.x.Rebuild(ctx(t)); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	e.eventually(t, ops.FindRequest{}, nil)
	e.startIndexer(t)
	e.eventually(t, ops.FindRequest{}, append(slices.Clone(ids), later...))
	e.eventually(t, ops.FindRequest{State: state.Done}, ids)
	if st := e.x.Stats(); st.Revisions != int64(len(ids)+len(later)) || st.Puts != st.Revisions {
		t.Fatalf("a rebuild should index each record once with one entry each: %+v", st)
	}
}

// Bad parameters are refused, each naming its parameter.
func TestParseQueryNamesTheBadParameter(t *testing.T) {
	t.Parallel()
	for raw, param := range map[string]string{
		"account=a.b":                            "account",
		"kind=order..create":                     "kind",
		"state=sleeping":                         "state",
		"entity=" + url.QueryEscape("has space"): "entity",
		"idempotency_key=k1":                     "idempotency_key", // without account
		"since=yesterday":                        "since",
		"until=2026-13-01T00:00:00Z":             "until",
		"since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z": "until",
		"limit=0x10":    "limit",
		"limit=501":     "limit",
		"cursor=abc":    "cursor",
		"colour=red":    "colour",
		"kind=a&kind=b": "kind",
	} {
		v, err := url.ParseQuery(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = search.ParseQuery(v)
		var pe *search.ParamError
		if !errors.As(err, &pe) || pe.Param != param || !errors.Is(err, search.ErrBadQuery) {
			t.Errorf("%s: want a ParamError naming %s, got %v", raw, param, err)
		}
	}
	v, _ := url.ParseQuery("account=acme&kind=order.create&state=retrying&entity=p-1&idempotency_key=k&provider_ref=j&since=2026-03-01T00:00:00Z&until=2026-03-02T00:00:00Z&limit=10")
	q, err := search.ParseQuery(v)
	if err != nil || q.Account != "acme" || q.State != state.Retrying || q.Limit != 10 || q.Since == nil || q.ProviderRef != "j" {
		t.Fatalf("a good query: %+v, %v", q, err)
	}
}

// A time range is searched an hour of creation at a time (or, longer than
// MaxHours, in one scan): either way each page goes on where the last
// stopped, and every event created in the range is found once.
func TestTimeRangeAcrossHours(t *testing.T) {
	t.Parallel()
	e := setup(t)
	now := time.Now().UTC()
	type ev struct {
		id string
		at time.Time
	}
	var evs []ev
	for i := range 90 {
		at := now.Add(-time.Duration(i) * 40 * time.Minute) // about 60 hours, some hours with two
		evs = append(evs, ev{e.create(t, accounts[i%2], "order.create", fmt.Sprintf("t-%d", i), "", at), at})
	}
	in := func(since, until time.Time, account string) []string {
		var ids []string
		for _, x := range evs {
			if !x.at.Before(since) && x.at.Before(until) && (account == "" || accounts[slices.IndexFunc(evs, func(y ev) bool { return y.id == x.id })%2] == account) {
				ids = append(ids, x.id)
			}
		}
		return ids
	}
	e.eventually(t, ops.FindRequest{}, in(now.Add(-1000*time.Hour), now.Add(time.Hour), ""))
	since, until := now.Add(-50*time.Hour), now.Add(-20*time.Hour)
	for _, limit := range []int{1, 7, 50} {
		if got, want := e.find(t, ops.FindRequest{Since: &since, Until: &until, Limit: limit}), in(since, until, ""); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Fatalf("limit %d: got %d events, want %d", limit, len(got), len(want))
		}
		if got, want := e.find(t, ops.FindRequest{Account: accounts[1], State: state.Pending, Since: &since, Limit: limit}), in(since, now.Add(time.Hour), accounts[1]); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Fatalf("%s since, limit %d: got %d events, want %d", accounts[1], limit, len(got), len(want))
		}
	}
	long := now.Add(-(search.MaxHours + 5) * time.Hour)
	if got, want := e.find(t, ops.FindRequest{Since: &long, Until: &until, Limit: 9}), in(long, until, ""); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("a range over MaxHours: got %d events, want %d", len(got), len(want))
	}
}

// Two indexers (two deadletter replicas) share the partitions' feeds, so
// an event's revisions may reach either: whichever indexes a revision
// reads what the index holds, and each event ends with its one entry.
func TestTwoIndexersLeaveOneEntryPerEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.indexer(t, search.IndexerOptions{Batch: 3})
	for i := range 60 {
		a := accounts[i%len(accounts)]
		id := e.create(t, a, "order.create", fmt.Sprintf("two-%d", i), "", time.Now())
		now := time.Now()
		e.act(t, a, id, state.Action{Name: state.Claim, Seq: 1})
		e.act(t, a, id, state.Action{Name: state.Retry, NextRunAt: &now, Error: &state.ErrorInfo{Class: "transient"}})
		e.act(t, a, id, state.Action{Name: state.Claim, Seq: 2})
		e.act(t, a, id, state.Action{Name: state.Poll, Reference: "job-" + id, NextRunAt: &now, Deadline: &now})
	}
	kv, err := e.js.KeyValue(ctx(t), e.subj.Bucket(search.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	natstest.Eventually(t, 20*time.Second, func() bool {
		keys, err := kv.ListKeys(ctx(t))
		if err != nil {
			return false
		}
		got = got[:0]
		for k := range keys.Keys() {
			got = append(got, k)
		}
		states, refs := 0, 0
		for _, k := range got {
			switch {
			case strings.Contains(k, ".s.polling."):
				states++
			case strings.Contains(k, ".r."):
				refs++
			default:
				return false // an entry of a state the event has left
			}
		}
		return states == 60 && refs == 60 && len(got) == 120
	}, "want one polling and one reference entry for each of 60 events, got %v", &got)
}

// indexerSettling replaces e's indexer with one whose Settle is d.
func (e *env) indexerSettling(t *testing.T, d time.Duration) *search.Indexer {
	t.Helper()
	_ = e.x.Stop(ctx(t))
	return e.indexer(t, search.IndexerOptions{Settle: d})
}

// indexer starts another indexer on e's feed, stopped at the test's end.
func (e *env) indexer(t *testing.T, o search.IndexerOptions) *search.Indexer {
	t.Helper()
	o.Metrics = e.set
	x := search.NewIndexer(e.js, e.subj, o)
	if err := x.Start(ctx(t)); err != nil {
		t.Fatalf("indexer Start: %v", err)
	}
	t.Cleanup(func() { _ = x.Stop(context.Background()) })
	return x
}

// followLog is a Follow that counts the revisions followed, by event.
type followLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *followLog) follow(_ context.Context, revs []search.Revision) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	for _, r := range revs {
		l.n[r.Record.ID]++
	}
	return nil
}

// of is how many revisions of event id were followed.
func (l *followLog) of(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[id]
}

// all reports whether each of ids was followed.
func (l *followLog) all(ids ...string) bool {
	for _, id := range ids {
		if l.of(id) == 0 {
			return false
		}
	}
	return true
}

// inPartitionOf creates events of account until n of them fall in the
// partition of id's record (its bucket), and returns those.
func (e *env) inPartitionOf(t *testing.T, account, id, keyPrefix string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 200 {
			t.Fatalf("no event id fell in the partition of %s", id)
		}
		other := e.create(t, account, "order.create", fmt.Sprintf("%s-%d", keyPrefix, i), "", time.Now())
		if e.st.Bucket(account, other) == e.st.Bucket(account, id) {
			out = append(out, other)
		}
	}
	return out
}

// The indexer follows a revision once it is Settle old, and the state
// bucket keeps only a record's last revision, so an event that passes
// through several states within it is read once: an event's revisions
// written within one settle cost one revision indexed, not one each.
func TestSettleReadsAnEventChangedMeanwhileOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	x := e.indexerSettling(t, 5*time.Second)
	a := accounts[0]
	first := e.create(t, a, "order.create", "settle-first", "", time.Now())
	natstest.Eventually(t, 20*time.Second, func() bool { return x.Stats().Revisions == 1 }, "the first event indexed")
	// The second event's revisions all come within the settle of its first.
	created := time.Now()
	id := e.create(t, a, "order.create", "settle-second", "", created)
	e.act(t, a, id, state.Action{Name: state.Claim, Seq: 1})
	e.act(t, a, id, state.Action{Name: state.Succeed})
	if took := time.Since(created); took >= 5*time.Second {
		t.Fatalf("the create, claim and done took %s, not within the settle: the case was not made", took)
	}
	e.eventually(t, ops.FindRequest{Account: a, State: state.Done}, []string{id})
	if got := x.Stats().Revisions; got != 2 {
		t.Fatalf("revisions indexed: %d, want 2 (%s's, and %s's last only)", got, first, id)
	}
}

// A revision the indexer fetched while younger than Settle is held, not
// followed: an event that moves on meanwhile is indexed once, at its last
// revision, however the fetches cut its revisions.
func TestSettleHoldsAYoungRevisionUntilItsEventMovesOn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// The claim and the done must come within the settle of the create:
	// under -race on a loaded machine, 4 s was once too short.
	const settle = 10 * time.Second
	var followed followLog // revisions indexed, by event
	_ = e.x.Stop(ctx(t))
	e.indexer(t, search.IndexerOptions{Settle: settle, Follow: followed.follow})
	a := accounts[0]
	// An idle indexer fetches once a settle, so the create is fetched
	// anywhere within its settle. Fetched late, the done would land next
	// to the fetch that ripens the create, and a loaded server may answer
	// that fetch before it delivers the done: the case is then made again
	// with a fresh event (its revisions are counted apart).
	var id string
	for attempt := 1; ; attempt++ {
		created := time.Now()
		id = e.create(t, a, "order.create", fmt.Sprintf("held-%d", attempt), "", created)
		_, rev, err := e.st.Get(ctx(t), a, id)
		if err != nil {
			t.Fatal(err)
		}
		feed, err := e.js.Consumer(ctx(t), "KV_"+e.st.Bucket(a, id), search.FeedConsumer)
		if err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 2*settle, func() bool {
			ci, err := feed.Info(ctx(t))
			return err == nil && ci.Delivered.Stream >= rev
		}, "the created revision of %s fetched", id)
		if early := followed.of(id); early != 0 {
			t.Fatalf("revisions of %s indexed right after the fetch: %d, want 0 (held until ripe)", id, early)
		}
		if time.Since(created) < settle/2 {
			e.act(t, a, id, state.Action{Name: state.Claim, Seq: 1})
			e.act(t, a, id, state.Action{Name: state.Succeed})
			if time.Since(created) < 3*settle/4 {
				break
			}
		}
		if attempt == 3 {
			t.Fatalf("three events were fetched, claimed and done later than half their settle (%s): the case was not made", settle)
		}
		t.Logf("%s fetched or moved on late in its settle: again with a fresh event", id)
	}
	// Found as done once the done revision is read: two settles at most.
	natstest.Eventually(t, 3*settle, func() bool {
		return slices.Equal(e.find(t, ops.FindRequest{Account: a, State: state.Done}), []string{id})
	}, "%s found as done", id)
	if got := followed.of(id); got != 1 {
		t.Fatalf("revisions of %s indexed: %d, want 1 (the last only)", id, got)
	}
}

// The feed replaced the index's and the archive's own consumers: on its
// first start it begins after the last revision both had acknowledged,
// so the one further behind misses nothing, and it deletes them.
func TestFeedStartsWhereTheConsumersItReplacedLeftOff(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	st, err := store.Open(ctx(t), js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	subj := names.NewSubjects("").WithPartitions(st.Partitions())
	e := &env{js: js, subj: subj, st: st}
	a := accounts[0]
	// Six records of one bucket (records are placed by event id).
	var ids []string
	for i := 0; len(ids) < 6; i++ {
		key := fmt.Sprintf("old-%d", i)
		if len(ids) > 0 && st.Bucket(a, event.ID(a, key)) != st.Bucket(a, ids[0]) {
			continue
		}
		ids = append(ids, e.create(t, a, "order.create", key, "", time.Now()))
	}
	stream := "KV_" + st.Bucket(a, ids[0])
	// What each replaced consumer had acknowledged: the index 4 records,
	// the archive 2.
	for name, acked := range map[string]int{"deadletter-search": 4, "deadletter-audit": 2} {
		c, err := js.CreateOrUpdateConsumer(ctx(t), stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Fetch(acked, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			if err := m.DoubleAck(ctx(t)); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != acked {
			t.Fatalf("%s: fetched %d, want %d", name, n, acked)
		}
	}
	followed := make(chan string, 100)
	x := search.NewIndexer(js, subj, search.IndexerOptions{Follow: func(_ context.Context, revs []search.Revision) error {
		for _, r := range revs {
			followed <- r.Record.ID
		}
		return nil
	}})
	if err := x.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Stop(context.Background()) })
	var got []string
	natstest.Eventually(t, 20*time.Second, func() bool {
		for {
			select {
			case id := <-followed:
				got = append(got, id)
			default:
				return len(got) >= 4
			}
		}
	}, "the records the archive had not acknowledged followed")
	if !slices.Equal(got, ids[2:]) {
		t.Fatalf("followed %v, want %v (the archive's unacknowledged records, in order)", got, ids[2:])
	}
	for _, name := range []string{"deadletter-search", "deadletter-audit"} {
		if _, err := js.Consumer(ctx(t), stream, name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("the replaced consumer %s: %v, want it deleted", name, err)
		}
	}
}

// An entity of more events than the server lists at once (1,024) is
// scanned in the archive, where each event has a message per revision:
// paging lists each event once, where its last revision is, and only the
// entity's.
func TestEntityOfManyEventsPagesEachOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const n = 1100
	at := time.Now().Add(-time.Hour)
	var want []string
	for i := range n {
		want = append(want, e.create(t, "acme", "order.create", fmt.Sprintf("many-%d", i), "customer-7", at))
	}
	other := e.create(t, "acme", "order.create", "other", "customer-8", at)
	elsewhere := e.create(t, "globex", "order.create", "many-0", "customer-7", at)
	stream, err := e.js.Stream(ctx(t), e.subj.Stream("TENAZ_AUDIT"))
	if err != nil {
		t.Fatal(err)
	}
	archived := func(msgs uint64) func() bool {
		return func() bool {
			info, err := stream.Info(ctx(t))
			return err == nil && info.State.Msgs >= msgs
		}
	}
	natstest.Eventually(t, 30*time.Second, archived(n+2), "the archive has not got every event")
	// Every other event moves on: a second message, after the first
	// messages of the others.
	for i := 0; i < n; i += 2 {
		e.act(t, "acme", want[i], state.Action{Name: state.Claim, Seq: uint64(i + 1)})
	}
	natstest.Eventually(t, 30*time.Second, archived(n+2+n/2), "the archive has not got every claim")
	slices.Sort(want)
	got := e.find(t, ops.FindRequest{Account: "acme", EntityID: "customer-7", Limit: 100})
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("found %d events of the entity, want %d (never %s or %s)", len(got), len(want), other, elsewhere)
	}
}

// The entity entries an earlier version kept in the index are removed
// when an indexer starts; the rest of the index stays.
func TestIndexerRemovesEntityEntriesOfAnEarlierVersion(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.create(t, "acme", "order.create", "kept", "customer-1", time.Now())
	e.eventually(t, ops.FindRequest{Account: "acme"}, []string{id})
	kv, err := e.js.KeyValue(ctx(t), e.subj.Bucket(search.Bucket))
	if err != nil {
		t.Fatal(err)
	}
	legacy := "acme.e.0123456789abcdef0123456789abcdef." + id
	if _, err := kv.Put(ctx(t), legacy, []byte("1764800000000")); err != nil {
		t.Fatal(err)
	}
	if err := e.x.Stop(ctx(t)); err != nil {
		t.Fatal(err)
	}
	e.startIndexer(t)
	natstest.Eventually(t, 10*time.Second, func() bool {
		_, err := kv.Get(ctx(t), legacy)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, "the entity entry of an earlier version is still there")
	keys, err := kv.ListKeys(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for k := range keys.Keys() {
		left = append(left, k)
	}
	if len(left) != 1 || !strings.Contains(left[0], ".s.pending.") {
		t.Fatalf("the index holds %v, want the event's state entry alone", left)
	}
}

// An entity's events are listed from the archive's subjects in the order
// of their ids, page after page: each once, the last page without a
// cursor, whatever moves on between two pages.
func TestEntityPagesInIDOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	at := time.Now().Add(-time.Hour)
	var want []string
	for i := range 30 {
		want = append(want, e.create(t, "acme", "order.create", fmt.Sprintf("paged-%d", i), "cust-3", at))
		e.create(t, "acme", "order.create", fmt.Sprintf("not-%d", i), "cust-4", at)
	}
	slices.Sort(want)
	e.eventually(t, ops.FindRequest{Account: "acme", EntityID: "cust-3"}, want)
	q := ops.FindRequest{Account: "acme", EntityID: "cust-3", Limit: 7}
	var got []string
	for page := 0; ; page++ {
		rep, err := e.s.Find(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range rep.Items {
			got = append(got, it.ID)
		}
		if page == 1 { // an event of the first page moves on: it is not listed again
			e.act(t, "acme", got[0], state.Action{Name: state.Claim, Seq: 1})
		}
		if rep.NextCursor == "" {
			break
		}
		if len(rep.Items) != q.Limit || page > 10 {
			t.Fatalf("page %d: %d events with a next cursor", page, len(rep.Items))
		}
		q.Cursor = rep.NextCursor
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages listed\n%v\nwant, in the order of their ids,\n%v", got, want)
	}
}

// A batch whose following fails comes back, even when a newer batch of
// the same partition is followed first: acknowledging the newer batch
// must not acknowledge the failed one unfollowed.
func TestFailedBatchIsFollowedAfterANewerOne(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_ = e.x.Stop(ctx(t))
	a := accounts[0]
	var (
		calls    atomic.Int32
		followed followLog
	)
	failing := make(chan struct{}) // the first batch is being followed
	newer := make(chan struct{})   // newer revisions of its partition are stored
	e.indexer(t, search.IndexerOptions{Follow: func(ctx context.Context, revs []search.Revision) error {
		if calls.Add(1) == 1 {
			close(failing)
			<-newer
			return errors.New("the archive is unavailable")
		}
		return followed.follow(ctx, revs)
	}})
	old := e.create(t, a, "order.create", "failed-first", "", time.Now())
	select {
	case <-failing:
	case <-ctx(t).Done():
		t.Fatal("the first batch was never followed")
	}
	later := e.inPartitionOf(t, a, old, "failed-later", 3)
	close(newer)
	natstest.Eventually(t, 20*time.Second, func() bool {
		return followed.all(append([]string{old}, later...)...)
	}, "the failed event %s and the newer %v should all be followed", old, later)
}

// A replica whose step outlives the feed's pin (priority_timeout, 10 s)
// loses the feed to another, which follows what comes next; stopped
// then, the first gives its revisions back, and the other follows them:
// acknowledging its own revisions must not acknowledge those.
func TestRevisionsOfAReplicaThatLostThePinAreFollowed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_ = e.x.Stop(ctx(t))
	a := accounts[0]
	var followed followLog
	stuck := make(chan struct{}) // replica 1 is in its step
	one := e.indexer(t, search.IndexerOptions{Follow: func(ctx context.Context, _ []search.Revision) error {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
		<-ctx.Done() // until stopped
		return ctx.Err()
	}})
	held := e.create(t, a, "order.create", "pin-held", "", time.Now())
	select {
	case <-stuck:
	case <-ctx(t).Done():
		t.Fatal("replica 1 never followed a batch")
	}
	e.indexer(t, search.IndexerOptions{Follow: followed.follow})
	// Newer events in the held event's partition, which replica 2 gets once
	// the pin lapses.
	later := e.inPartitionOf(t, a, held, "pin-later", 2)
	natstest.Eventually(t, 30*time.Second, func() bool {
		return followed.all(later...)
	}, "replica 2 should follow the newer events once the pin lapses")
	if err := one.Stop(ctx(t)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		return followed.all(held)
	}, "replica 2 should follow %s, which replica 1 gave back when stopped", held)
}

// The feed's consumer of an earlier version acknowledged cumulatively,
// which the server cannot change on a consumer: it is replaced by one
// that acknowledges each revision, starting after the last revision the
// old one had acknowledged, so nothing is followed twice or missed.
func TestFeedOfAnEarlierVersionIsReplacedFromItsAckFloor(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_ = e.x.Stop(ctx(t))
	a := accounts[0]
	var streamsOf []string
	for p := range e.subj.Parts() {
		s := "KV_" + e.subj.StateBucketOf(p)
		streamsOf = append(streamsOf, s)
		if err := e.js.DeleteConsumer(ctx(t), s, search.FeedConsumer); err != nil {
			t.Fatal(err)
		}
		if _, err := e.js.CreateConsumer(ctx(t), s, jetstream.ConsumerConfig{Durable: search.FeedConsumer,
			AckPolicy: jetstream.AckAllPolicy, MaxDeliver: -1}); err != nil {
			t.Fatal(err)
		}
	}
	var before, after []string
	for i := range 8 {
		before = append(before, e.create(t, a, "order.create", fmt.Sprintf("old-%d", i), "", time.Now()))
	}
	// The earlier version followed these: its cumulative ack of each
	// partition's last one.
	for _, s := range streamsOf {
		c, err := e.js.Consumer(ctx(t), s, search.FeedConsumer)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var last jetstream.Msg
		for m := range batch.Messages() {
			last = m
		}
		if last != nil {
			if err := last.DoubleAck(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 8 {
		after = append(after, e.create(t, a, "order.create", fmt.Sprintf("new-%d", i), "", time.Now()))
	}
	var followed followLog
	x := e.indexer(t, search.IndexerOptions{Follow: followed.follow})
	natstest.Eventually(t, 20*time.Second, func() bool {
		return followed.all(after...)
	}, "every event created after the old feed's ack floor should be followed")
	natstest.Eventually(t, 10*time.Second, func() bool { return x.Lag() == 0 }, "the feed should be caught up, lag %v", natstest.Lazy(func() any { return x.Lag() }))
	for _, id := range before {
		if followed.of(id) != 0 {
			t.Errorf("%s was followed by the earlier version and again", id)
		}
	}
	for _, s := range streamsOf {
		c, err := e.js.Consumer(ctx(t), s, search.FeedConsumer)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CachedInfo().Config.AckPolicy; got != jetstream.AckExplicitPolicy {
			t.Errorf("%s: the feed's consumer acknowledges %v, want explicit", s, got)
		}
	}
}
