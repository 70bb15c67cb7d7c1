package search

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tenaz"
)

// MaxScan bounds the index entries one page examines, so that a filter
// whose entries mostly fail the rest of the query (a narrow time range
// over a busy state) answers in bounded time: the page is then short and
// its cursor goes on from there.
const MaxScan = 20_000

// clockMargin widens a search's start in the index's time (the server's
// clock) against its since bound (the creation time, ingest's clock).
const clockMargin = time.Minute

// readers bounds the records one page reads at once.
const readers = 32

// Searcher answers searches from the index and the records.
type Searcher struct {
	js     jetstream.JetStream
	st     *store.Store
	stream string // KV_<bucket>
	prefix string // $KV.<bucket>.
}

// Open binds the index bucket (streams.Apply creates it).
func Open(ctx context.Context, js jetstream.JetStream, st *store.Store, subj tenaz.Subjects) (*Searcher, error) {
	name := "KV_" + subj.Bucket(Bucket)
	if _, err := js.Stream(ctx, name); err != nil {
		return nil, fmt.Errorf("search: bucket %s: %w", subj.Bucket(Bucket), err)
	}
	return &Searcher{js: js, st: st, stream: name, prefix: "$KV." + subj.Bucket(Bucket) + "."}, nil
}

// filter is the index subject that answers q.
func (s *Searcher) filter(q ops.FindRequest) string {
	a := anyOr(q.Account)
	switch {
	case q.ProviderRef != "":
		return s.prefix + a + "." + fieldRef + "." + hashToken(q.ProviderRef) + ".*"
	case q.EntityID != "":
		return s.prefix + a + "." + fieldEntity + "." + hashToken(q.EntityID) + ".*"
	}
	kind := "*"
	if q.Kind != "" {
		kind = kindToken(q.Kind)
	}
	return s.prefix + a + "." + fieldState + "." + anyOr(string(q.State)) + "." + kind + ".*"
}

// Find returns one page of the events matching q. Each event is read from
// its record, which has the last word: an entry the indexer has not yet
// moved (its lag) is not shown for the state it has left.
func (s *Searcher) Find(ctx context.Context, q ops.FindRequest) (ops.FindReply, error) {
	if err := Validate(q); err != nil {
		return ops.FindReply{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = ops.DefaultLimit
	}
	rep := ops.FindReply{Items: []ops.EventItem{}}
	if q.IdempotencyKey != "" {
		return s.byKey(ctx, q)
	}
	var start uint64
	if q.Cursor != "" {
		start, _ = decodeCursor(q) // Validate has read it
	}
	filter := s.filter(q)
	seen := map[string]bool{} // an entry not yet moved can name an event twice
	scanned := 0
	for len(rep.Items) < limit {
		want := min(max(2*(limit-len(rep.Items)), 64), 1000)
		opts := []jetstreamext.GetBatchOpt{jetstreamext.GetBatchSubject(filter)}
		switch {
		case start > 0:
			opts = append(opts, jetstreamext.GetBatchSeq(start))
		case q.Since != nil:
			opts = append(opts, jetstreamext.GetBatchStartTime(q.Since.Add(-clockMargin)))
		}
		hits, last, more, err := s.batch(ctx, q, want, opts)
		if err != nil {
			return ops.FindReply{}, err
		}
		scanned += want
		items, upTo, err := s.read(ctx, q, hits, limit-len(rep.Items), seen)
		if err != nil {
			return ops.FindReply{}, err
		}
		rep.Items = append(rep.Items, items...)
		if upTo != 0 { // the page filled before the batch's end
			rep.NextCursor = encodeCursor(q, upTo+1)
			return rep, nil
		}
		if !more {
			return rep, nil
		}
		start = last + 1
		if scanned >= MaxScan {
			break
		}
	}
	rep.NextCursor = encodeCursor(q, start)
	return rep, nil
}

// hit is one index entry that passed the checks the index can make.
type hit struct {
	seq         uint64
	account, id string
}

// batch reads up to want entries of the filter: those that pass q's time
// bounds, the last sequence read, and whether the filter has more.
func (s *Searcher) batch(ctx context.Context, q ops.FindRequest, want int, opts []jetstreamext.GetBatchOpt) (hits []hit, last uint64, more bool, err error) {
	msgs, err := jetstreamext.GetBatch(ctx, s.js, s.stream, want, opts...)
	if err != nil {
		return nil, 0, false, fmt.Errorf("search: read the index: %w", err)
	}
	n := 0
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return hits, last, false, nil
		}
		if err != nil {
			return nil, 0, false, fmt.Errorf("search: read the index: %w", err)
		}
		n++
		last = m.Sequence
		more = m.Header.Get("Nats-Num-Pending") != "0"
		if len(m.Data) == 0 || m.Header.Get(kvOperation) != "" {
			continue // a purge marker
		}
		ms, err := strconv.ParseInt(string(m.Data), 10, 64)
		if err != nil {
			continue
		}
		created := time.UnixMilli(ms)
		if q.Since != nil && created.Before(q.Since.Truncate(time.Millisecond)) || q.Until != nil && !created.Before(*q.Until) {
			continue
		}
		account, id, ok := parseKey(m.Subject[len(s.prefix):])
		if !ok {
			continue
		}
		hits = append(hits, hit{seq: m.Sequence, account: account, id: id})
	}
	return hits, last, more && n > 0, nil
}

// read reads the records of hits (in parallel) and keeps, in order, up to
// room of those that match q. upTo is the sequence of the last hit used
// when room ran out before the hits did (0 otherwise).
func (s *Searcher) read(ctx context.Context, q ops.FindRequest, hits []hit, room int, seen map[string]bool) (items []ops.EventItem, upTo uint64, err error) {
	recs := make([]*state.Record, len(hits))
	errs := make([]error, len(hits))
	sem := make(chan struct{}, readers)
	var wg sync.WaitGroup
	for i, h := range hits {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, _, err := s.st.Get(ctx, h.account, h.id)
			switch {
			case errors.Is(err, store.ErrNotFound): // expired or deleted since it was indexed
			case err != nil:
				errs[i] = err
			default:
				recs[i] = &r
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, fmt.Errorf("search: read records: %w", err)
	}
	for i, r := range recs {
		if r == nil || seen[r.ID] || !matches(*r, q) {
			continue
		}
		if len(items) == room {
			return items, hits[i-1].seq, nil
		}
		seen[r.ID] = true
		items = append(items, item(*r))
	}
	return items, 0, nil
}

// byKey finds the one event of an account's idempotency key.
func (s *Searcher) byKey(ctx context.Context, q ops.FindRequest) (ops.FindReply, error) {
	rep := ops.FindReply{Items: []ops.EventItem{}}
	if q.Cursor != "" { // the one page has been read
		return rep, nil
	}
	r, _, err := s.st.Get(ctx, q.Account, event.ID(q.Account, q.IdempotencyKey))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rep, nil
	case err != nil:
		return rep, fmt.Errorf("search: %w", err)
	}
	if matches(r, q) {
		rep.Items = append(rep.Items, item(r))
	}
	return rep, nil
}

// matches checks a record against everything q asks.
func matches(r state.Record, q ops.FindRequest) bool {
	switch {
	case q.Account != "" && r.Account != q.Account,
		q.Kind != "" && r.Kind != q.Kind,
		q.State != "" && r.Status != q.State,
		q.EntityID != "" && r.EntityID != q.EntityID,
		q.IdempotencyKey != "" && r.IdempotencyKey != q.IdempotencyKey,
		q.Since != nil && r.CreatedAt.Before(*q.Since),
		q.Until != nil && !r.CreatedAt.Before(*q.Until):
		return false
	}
	return true
}

func item(r state.Record) ops.EventItem {
	return ops.EventItem{ID: r.ID, Account: r.Account, Kind: r.Kind, State: r.Status, Stage: r.Stage, EntityID: r.EntityID,
		Attempts: r.Attempts, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, NextRunAt: r.NextRunAt}
}
