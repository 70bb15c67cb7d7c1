package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// The search phase: records written to the state buckets in bulk (as
// ingest and the dispatcher leave them, with their timelines) while the
// real indexer (pkg/search, as the deadletter service runs it) follows
// them, then the real query path (Searcher.Find: the index's batched
// direct gets, then each hit's record) timed for each filter.
const (
	searchAccounts = 100
	// searchLive is the events of the live run: created and taken
	// through their transitions one by one while the indexer follows.
	searchLive = 20000
	// searchReps is how many queries of each filter are timed.
	searchReps = 100
)

var searchKinds = []string{"order.create", "order.cancel", "credit.check", "invoice.send", "kyc.verify"}

// searchEvents is how many events the phase holds: 1,000,000 (50,000
// with BENCH_QUICK).
func searchEvents(sz Sizes) int {
	if sz == Quick {
		return 50_000
	}
	return 1_000_000
}

// searchRecord is the i-th event's record, in the state i calls for (of
// every 20: 14 done, one each pending, retrying, dead, scheduled, polling
// with a provider reference, manual review), with the timeline that got
// it there. Events of an account come in threes per entity; the i-th was
// created at (the load spreads them over the week before it).
func searchRecord(i int, at time.Time) (state.Record, error) {
	now := at
	account := "acct" + strconv.Itoa(i%searchAccounts)
	key := "k" + strconv.Itoa(i)
	base := state.Record{ID: event.ID(account, key), IdempotencyKey: key, Account: account, Kind: searchKinds[(i/(20*searchAccounts))%len(searchKinds)],
		EntityID: "prop-" + strconv.Itoa(i/(3*searchAccounts)), Payload: []byte(`{"n":1}`)}
	later := now.Add(time.Hour)
	var acts []state.Action
	switch (i / searchAccounts) % 20 {
	case 14:
	case 15:
		acts = []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Retry, NextRunAt: &later, Error: &state.ErrorInfo{Class: "transient", Message: "503", HTTPStatus: 503}}}
	case 16:
		acts = []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Fail, Error: &state.ErrorInfo{Class: "permanent", Message: "422", HTTPStatus: 422}}}
	case 17:
		return stateNew(base, state.Action{Name: state.Delay, NextRunAt: &later}, now, nil)
	case 18:
		acts = []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Poll, Reference: "job-" + strconv.Itoa(i), NextRunAt: &later, Deadline: &later}}
	case 19:
		acts = []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Poll, Reference: "job-" + strconv.Itoa(i), NextRunAt: &later, Deadline: &later}, {Name: state.Escalate}}
	default:
		acts = []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Succeed}}
	}
	return stateNew(base, state.Action{Name: state.Accept}, now, acts)
}

func stateNew(base state.Record, first state.Action, now time.Time, then []state.Action) (state.Record, error) {
	r, _, err := state.New(base, first, now)
	for _, a := range then {
		if err != nil {
			break
		}
		r, _, err = state.Apply(r, a, now)
	}
	return r, err
}

// archiveFollow writes what the indexer hands it to the audit archive,
// pipelined, as the deadletter service's archiver does from the same feed
// (a message per record read, under its account and entity): a search by
// entity reads it.
func archiveFollow(js jetstream.JetStream, prefix string) func(context.Context, []search.Revision) error {
	return func(ctx context.Context, revs []search.Revision) error {
		pend := make([]jetstream.PubAckFuture, 0, len(revs))
		for _, rv := range revs {
			r, _ := audit.Diff(rv.Record, rv.Seq, audit.Mark{})
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			f, err := js.PublishAsync(audit.Subject(prefix, r.Account, r.EntityID, r.ID), b, jetstream.WithStallWait(search.StallWait))
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
}

// Search measures the search at searchEvents events held: the index's
// cost per event (writes, bytes) live and over the bulk load, how fast the
// indexer follows, and each filter's query time.
func Search(ctx context.Context, sz Sizes, r Report) error {
	srv, stopNATS, err := startNATS("tenaz-bench-*", false)
	if err != nil {
		return err
	}
	defer stopNATS()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		return err
	}
	l, err := streams.Apply(ctx, js, streams.Options{})
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, js, store.Options{Layout: l})
	if err != nil {
		return err
	}
	subj := names.NewSubjects("").WithPartitions(l.Partitions)
	x := search.NewIndexer(js, subj, search.IndexerOptions{Follow: archiveFollow(js, subj.Prefix)})
	if err := x.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = x.Stop(context.Background()) }()
	s, err := search.Open(ctx, js, st, subj)
	if err != nil {
		return err
	}
	defer s.Close()

	// Live: each event created, claimed and finished (some retried once,
	// some polled with a reference), the indexer following as it would.
	before := x.Stats()
	if err := searchLiveRun(ctx, st); err != nil {
		return err
	}
	if err := caughtUp(ctx, js, subj); err != nil {
		return err
	}
	live := x.Stats()
	r.Figure("search_index_live_writes_per_event", float64(live.Puts+live.Purges-before.Puts-before.Purges)/searchLive, "writes")
	r.Figure("search_index_live_revisions_per_event", float64(live.Revisions-before.Revisions)/searchLive, "revisions")

	// Bulk: n records as they stand after their transitions, pipelined,
	// the indexer following; its lag sampled.
	n := searchEvents(sz)
	var maxLag atomic.Int64
	sampling, stopSampling := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling.Done():
				return
			case <-t.C:
				if l := x.Lag(); l > maxLag.Load() {
					maxLag.Store(l)
				}
			}
		}
	}()
	start := time.Now()
	week := start.UTC().Add(-searchWeek)
	if err := searchLoad(ctx, st, n, week); err != nil {
		stopSampling()
		return err
	}
	loaded := time.Since(start)
	if err := caughtUp(ctx, js, subj); err != nil {
		stopSampling()
		return err
	}
	indexed := time.Since(start)
	stopSampling()
	bulk := x.Stats()
	writes := bulk.Puts + bulk.Purges - live.Puts - live.Purges
	r.Figure("search_events", float64(n+searchLive), "events")
	r.Figure("search_load_events_per_s", float64(n)/loaded.Seconds(), "events/s")
	r.Figure("search_index_events_per_s", float64(n)/indexed.Seconds(), "events/s")
	r.Figure("search_index_lag_max_revisions", float64(maxLag.Load()), "revisions")
	r.Figure("search_index_writes_per_event", float64(writes)/float64(n), "writes")
	r.Figure("search_index_puts_per_event", float64(bulk.Puts-live.Puts)/float64(n), "writes")
	// What stays: the purge markers expire within a second.
	var info *jetstream.StreamInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		si, err := js.Stream(ctx, "KV_"+subj.Bucket(search.Bucket))
		if err != nil {
			return err
		}
		if info, err = si.Info(ctx); err != nil {
			return err
		}
		if info.State.Msgs <= uint64(bulk.Puts) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.Figure("search_index_bytes_per_event", float64(info.State.Bytes)/float64(n+searchLive), "bytes")
	r.Figure("search_index_entries_per_event", float64(info.State.Msgs)/float64(n+searchLive), "entries")

	// The queries, each with values that change from one to the next.
	created := func(i int) time.Time { return week.Add(time.Duration(i) * (searchWeek / time.Duration(searchReps))) }
	queries := []struct {
		name string
		q    func(i int) ops.FindRequest
	}{
		{"account", func(i int) ops.FindRequest { return ops.FindRequest{Account: searchAccount(i)} }},
		{"kind", func(i int) ops.FindRequest { return ops.FindRequest{Kind: searchKinds[i%len(searchKinds)]} }},
		{"state", func(i int) ops.FindRequest {
			return ops.FindRequest{Account: searchAccount(i), State: state.Retrying}
		}},
		{"state_all_accounts", func(i int) ops.FindRequest {
			return ops.FindRequest{State: []state.State{state.Dead, state.ManualReview, state.Polling}[i%3]}
		}},
		{"entity", func(i int) ops.FindRequest {
			j := (i * 7919) % n
			return ops.FindRequest{Account: searchAccount(j), EntityID: "prop-" + strconv.Itoa(j/(3*searchAccounts))}
		}},
		{"idempotency_key", func(i int) ops.FindRequest {
			j := (i * 7919) % n
			return ops.FindRequest{Account: searchAccount(j), IdempotencyKey: "k" + strconv.Itoa(j)}
		}},
		{"provider_ref", func(i int) ops.FindRequest {
			j := ((i*7919)%(n/(20*searchAccounts)))*20*searchAccounts + 18*searchAccounts + i%searchAccounts
			return ops.FindRequest{ProviderRef: "job-" + strconv.Itoa(j)}
		}},
		{"time_range", func(i int) ops.FindRequest {
			since := created(i % (searchReps - 10))
			until := since.Add(6 * time.Hour)
			return ops.FindRequest{Account: searchAccount(i), Since: &since, Until: &until}
		}},
		{"time_range_all_accounts", func(i int) ops.FindRequest {
			since := created(i % (searchReps - 10))
			until := since.Add(time.Hour)
			return ops.FindRequest{Since: &since, Until: &until}
		}},
		{"combined", func(i int) ops.FindRequest {
			since := created(i % (searchReps - 20))
			until := since.Add(24 * time.Hour)
			// The account and kind of the event created mid-window: with
			// BENCH_QUICK's fewer events a day need not hold every kind.
			j := int(since.Add(12*time.Hour).Sub(week) / (searchWeek / time.Duration(n)))
			return ops.FindRequest{Account: searchAccount(j), Kind: searchKinds[(j/(20*searchAccounts))%len(searchKinds)], State: state.Done, Since: &since, Until: &until}
		}},
	}
	for _, qq := range queries {
		var ms []float64
		for i := range searchReps + 3 {
			t0 := time.Now()
			rep, err := s.Find(ctx, qq.q(i))
			if err != nil {
				return fmt.Errorf("search %s: %w", qq.name, err)
			}
			if len(rep.Items) == 0 {
				return fmt.Errorf("search %s (%+v): found nothing", qq.name, qq.q(i))
			}
			took := float64(time.Since(t0).Microseconds()) / 1000
			if i >= 3 { // the first warm the connection and the server's caches
				ms = append(ms, took)
			}
			if took > 200 && i >= 3 {
				fmt.Fprintf(r.W, "# search_%s: %.0f ms for %s\n", qq.name, took, describe(qq.q(i)))
			}
		}
		sort.Float64s(ms)
		r.Figure("search_"+qq.name+"_p50_ms", pct(ms, 0.50), "ms")
		r.Figure("search_"+qq.name+"_p99_ms", pct(ms, 0.99), "ms")
	}
	// Paging: the tenth page of an account's events, by its cursor.
	var ms []float64
	for i := range 20 {
		q := ops.FindRequest{Account: searchAccount(i), Limit: 50}
		for range 9 {
			rep, err := s.Find(ctx, q)
			if err != nil {
				return err
			}
			q.Cursor = rep.NextCursor
		}
		t0 := time.Now()
		if _, err := s.Find(ctx, q); err != nil {
			return err
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
	}
	sort.Float64s(ms)
	r.Figure("search_next_page_p50_ms", pct(ms, 0.50), "ms")
	r.Figure("search_next_page_p99_ms", pct(ms, 0.99), "ms")
	return nil
}

func searchAccount(i int) string { return "acct" + strconv.Itoa(i%searchAccounts) }

// searchLiveRun takes searchLive events through their transitions, 32 at
// a time.
func searchLiveRun(ctx context.Context, st *store.Store) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= searchLive {
					return
				}
				account, key := searchAccount(i), "live-"+strconv.Itoa(i)
				r, _, err := state.New(state.Record{ID: event.ID(account, key), IdempotencyKey: key, Account: account, Kind: searchKinds[i%len(searchKinds)],
					EntityID: "live-" + strconv.Itoa(i/3)}, state.Action{Name: state.Accept}, time.Now())
				if err == nil {
					_, err = st.Create(ctx, r)
				}
				steps := []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Succeed}}
				now := time.Now()
				switch i % 10 {
				case 0:
					steps = []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Retry, NextRunAt: &now, Error: &state.ErrorInfo{Class: "transient"}},
						{Name: state.Claim, Seq: 2}, {Name: state.Succeed}}
				case 1:
					steps = []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Poll, Reference: "live-job-" + strconv.Itoa(i), NextRunAt: &now, Deadline: &now},
						{Name: state.Complete}}
				}
				for _, a := range steps {
					if err != nil {
						break
					}
					_, _, _, err = st.Transition(ctx, account, r.ID, a)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// searchWeek is how far back the load's creation times go.
const searchWeek = 7 * 24 * time.Hour

// searchLoad writes n records created over the week from week, pipelined.
func searchLoad(ctx context.Context, st *store.Store, n int, week time.Time) error {
	const window = 8192
	pending := make([]store.Pending, 0, window)
	flush := func() error {
		for _, p := range pending {
			if _, err := p.Wait(ctx); err != nil {
				return err
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := range n {
		rec, err := searchRecord(i, week.Add(time.Duration(i)*(searchWeek/time.Duration(n))))
		if err != nil {
			return err
		}
		p, err := st.CreateAsync(rec)
		if err != nil {
			return err
		}
		if pending = append(pending, p); len(pending) == window {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// caughtUp waits until the indexer's consumers have nothing left to
// deliver or acknowledge.
func caughtUp(ctx context.Context, js jetstream.JetStream, subj names.Subjects) error {
	deadline := time.Now().Add(5 * time.Minute)
	for p := range subj.Parts() {
		for {
			c, err := js.Consumer(ctx, "KV_"+subj.StateBucketOf(p), search.FeedConsumer)
			if err != nil {
				return err
			}
			ci, err := c.Info(ctx)
			if err != nil {
				return err
			}
			if ci.NumPending == 0 && ci.NumAckPending == 0 {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("search: the indexer did not catch up in 5 minutes")
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// describe is a query as its HTTP parameters.
func describe(q ops.FindRequest) string {
	v := url.Values{}
	for k, x := range map[string]string{"account": q.Account, "kind": q.Kind, "state": string(q.State), "entity": q.EntityID,
		"idempotency_key": q.IdempotencyKey, "provider_ref": q.ProviderRef} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if q.Since != nil {
		v.Set("since", q.Since.UTC().Format(time.RFC3339))
	}
	if q.Until != nil {
		v.Set("until", q.Until.UTC().Format(time.RFC3339))
	}
	return v.Encode()
}
