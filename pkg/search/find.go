package search

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/directget"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// MaxScan bounds the index entries one page scans, so that a filter
// whose entries mostly fail the rest of the query (a narrow time range
// over a busy state) answers in bounded time: the page is then short and
// its cursor goes on from there.
const MaxScan = 20_000

// clockMargin widens a search's start in the index's time (the server's
// clock) against its since bound (the creation time, ingest's clock).
const clockMargin = 10 * time.Second

// readers bounds the records one page reads at once.
const readers = 32

// readWait bounds one read of the index: a request the server never
// answers (a NATS user not allowed it) fails the search, not hangs it.
const readWait = 10 * time.Second

// Searcher answers searches from the index, the audit archive and the
// records.
type Searcher struct {
	nc     *nats.Conn
	gets   *directget.Mux
	st     *store.Store
	index  string // KV_<bucket>
	prefix string // $KV.<bucket>.
	// The audit archive answers a search by entity: its subjects hold the
	// entity (audit.EntityFilter), so the index needs no entry for it.
	archive     string // TENAZ_AUDIT
	auditPrefix string // subj.Prefix
}

// Open binds the index bucket and the audit archive (streams.Apply
// creates them); Close lets them go.
func Open(ctx context.Context, js jetstream.JetStream, st *store.Store, subj names.Subjects) (*Searcher, error) {
	s := &Searcher{nc: js.Conn(), st: st, index: "KV_" + subj.Bucket(Bucket), prefix: "$KV." + subj.Bucket(Bucket) + ".",
		archive: subj.Stream(streams.StreamAudit), auditPrefix: subj.Prefix}
	for _, name := range []string{s.index, s.archive} {
		if _, err := js.Stream(ctx, name); err != nil {
			return nil, fmt.Errorf("search: stream %s: %w", name, err)
		}
	}
	var err error
	if s.gets, err = directget.New(js.Conn()); err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	return s, nil
}

// Close ends the subscription the index's reads are answered on.
func (s *Searcher) Close() { s.gets.Close() }

// source is the stream a search reads: the index, or for an entity the
// archive.
func (s *Searcher) source(q ops.FindRequest) string {
	if fromArchive(q) {
		return s.archive
	}
	return s.index
}

// fromArchive reports whether q is answered from the archive: an entity, not
// narrowed to a provider reference (the index's reference entries are
// fewer).
func fromArchive(q ops.FindRequest) bool { return q.EntityID != "" && q.ProviderRef == "" }

// get reads stream (the index or the archive), bounded by readWait.
func (s *Searcher) get(ctx context.Context, stream string, req directget.Request) ([]*nats.Msg, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	msgs, pending, err := s.gets.Get(ctx, stream, req)
	if err != nil {
		return nil, 0, fmt.Errorf("search: read %s: %w", stream, err)
	}
	return msgs, pending, nil
}

// filter is the subject of q's source that answers q, for the s entries
// of the hour token hour ("*": any).
func (s *Searcher) filter(q ops.FindRequest, hour string) string {
	a := anyOr(q.Account)
	switch {
	case q.ProviderRef != "":
		return s.prefix + a + "." + fieldRef + "." + hashToken(q.ProviderRef) + ".*"
	case q.EntityID != "":
		return audit.EntityFilter(s.auditPrefix, a, q.EntityID)
	}
	kind := "*"
	if q.Kind != "" {
		kind = kindToken(q.Kind)
	}
	return s.prefix + a + "." + fieldState + "." + anyOr(string(q.State)) + "." + kind + "." + hour + ".*"
}

// MaxHours is the longest time range searched an hour at a time; a longer
// (or open) one is one scan of every hour, bounded by MaxScan a page.
const MaxHours = 24 * 31

// hours are the creation hours q's time range spans, when it is searched
// an hour at a time.
func hours(q ops.FindRequest, now time.Time) []time.Time {
	if q.Since == nil || q.EntityID != "" || q.ProviderRef != "" {
		return nil
	}
	until := now.Add(clockMargin)
	if q.Until != nil {
		until = *q.Until
	}
	first, last := q.Since.UTC().Truncate(time.Hour), until.Add(-time.Nanosecond).UTC().Truncate(time.Hour)
	if last.Sub(first) >= MaxHours*time.Hour {
		return nil
	}
	var hs []time.Time
	for h := first; !h.After(last); h = h.Add(time.Hour) {
		hs = append(hs, h)
	}
	return hs
}

// Find returns one page of the events matching q. Each event is read from
// its record, which has the last word: an entry the indexer has not yet
// moved (its lag) is not shown for the state it has left.
func (s *Searcher) Find(ctx context.Context, q ops.FindRequest) (ops.FindReply, error) {
	if err := Validate(q); err != nil {
		return ops.FindReply{}, err
	}
	if q.IdempotencyKey != "" {
		return s.byKey(ctx, q)
	}
	var at cursor
	if q.Cursor != "" {
		at, _ = decodeCursor(q) // Validate has read it
	}
	p := &page{q: q, limit: cmp.Or(q.Limit, ops.DefaultLimit), seen: map[string]bool{}, rep: ops.FindReply{Items: []ops.EventItem{}}}
	if s.source(q) == s.archive {
		next, err := s.byEntity(ctx, p, at)
		if err != nil {
			return ops.FindReply{}, err
		}
		if next != (cursor{}) {
			p.rep.NextCursor = encodeCursor(q, next)
		}
		return p.rep, nil
	}
	hs := hours(q, time.Now())
	if hs == nil {
		next, err := s.fill(ctx, p, s.filter(q, "*"), at.seq, q.Since)
		if err != nil {
			return ops.FindReply{}, err
		}
		if next != 0 {
			p.rep.NextCursor = encodeCursor(q, cursor{seq: next})
		}
		return p.rep, nil
	}
	for i, h := range hs {
		hour := h.Unix() / 3600
		if hour < at.hour {
			continue
		}
		start := uint64(0)
		if hour == at.hour {
			start = at.seq
		}
		from := maxTime(*q.Since, h)
		next, err := s.fill(ctx, p, s.filter(q, hourToken(h)), start, &from)
		if err != nil {
			return ops.FindReply{}, err
		}
		switch {
		case next != 0:
			p.rep.NextCursor = encodeCursor(q, cursor{hour: hour, seq: next})
			return p.rep, nil
		case len(p.rep.Items) == p.limit && i+1 < len(hs):
			p.rep.NextCursor = encodeCursor(q, cursor{hour: hour + 1, seq: 1})
			return p.rep, nil
		}
	}
	return p.rep, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// page is one page of a search being filled.
type page struct {
	q       ops.FindRequest
	limit   int
	seen    map[string]bool // an entry not yet moved can name an event twice
	scanned int
	rep     ops.FindReply
}

// want is how many entries a scan takes at a time. Entries are small: it
// takes many, the most when the time bounds leave out what the filter
// cannot.
func (p *page) want() int {
	if p.q.Since != nil || p.q.Until != nil {
		return 1000
	}
	return min(max(2*(p.limit-len(p.rep.Items)), 256), 1000)
}

// fill adds to the page the events of filter's entries from sequence
// start on (from the index's time since, when start is 0 and since is
// set), until the page is full or the filter has no more: next is the
// sequence to go on from, 0 when the filter has no more.
func (s *Searcher) fill(ctx context.Context, p *page, filter string, start uint64, since *time.Time) (next uint64, err error) {
	// Listing a filter's entries from the subject index costs as many as
	// it has before the server says they are too many: it is tried unless
	// the filter spans every account's events of a state or kind.
	// An entity's archive subjects are listed by byEntity: here they are
	// only scanned.
	stream := s.source(p.q)
	try := stream == s.index && (p.q.Account != "" || p.q.ProviderRef != "" || !strings.HasSuffix(filter, ".*.*"))
	var hits []hit
	listed := false
	if try {
		hits, listed = s.sparse(ctx, p.q, filter, start)
	}
	if listed {
		for len(hits) > 0 {
			n := min(len(hits), p.want())
			items, upTo, err := s.read(ctx, p.q, hits[:n], p.limit-len(p.rep.Items), p.seen)
			if err != nil {
				return 0, err
			}
			p.rep.Items = append(p.rep.Items, items...)
			hits = hits[n:]
			switch {
			case upTo != 0:
				return upTo + 1, nil
			case len(p.rep.Items) == p.limit && len(hits) > 0:
				return hits[0].seq, nil
			}
		}
		return 0, nil
	}
	if stream == s.index && !try && start == 0 {
		// Every account's events of a kind or a state: often dense, and
		// the server matches such a filter against every subject of its
		// kind, where 1,000 entries read unfiltered cost a millisecond or
		// two. A page one such batch fills is answered from it; another
		// goes on as the server finds the filter's entries from the start
		// (the events already met are not listed twice).
		if next, ok, err := s.probe(ctx, p, filter, since); err != nil || ok {
			return next, err
		}
	}
	for len(p.rep.Items) < p.limit {
		want := p.want()
		hits, last, more, err := s.batch(ctx, stream, p.q, from(directget.Request{NextFor: filter, Batch: want}, start, since))
		if err == nil && stream == s.archive {
			hits, err = s.lastOnly(ctx, hits)
		}
		if err != nil {
			return 0, err
		}
		p.scanned += want
		items, upTo, err := s.read(ctx, p.q, hits, p.limit-len(p.rep.Items), p.seen)
		if err != nil {
			return 0, err
		}
		p.rep.Items = append(p.rep.Items, items...)
		if upTo != 0 { // the page filled before the batch's end
			return upTo + 1, nil
		}
		if !more {
			return 0, nil
		}
		start = last + 1
		if p.scanned >= MaxScan {
			break
		}
	}
	return start, nil
}

// probe reads the first 1,000 entries of the stream (from the index's
// time since, when set) unfiltered and adds the filter's events to the
// page; ok is true when they filled it (next is then where to go on).
func (s *Searcher) probe(ctx context.Context, p *page, filter string, since *time.Time) (next uint64, ok bool, err error) {
	msgs, _, err := s.get(ctx, s.index, from(directget.Request{Batch: 1000}, 0, since))
	if err != nil {
		return 0, false, err
	}
	var hits []hit
	for _, m := range msgs {
		if h, ok := s.hitOf(p.q, m); ok && subjectMatch(filter, h.subject) {
			hits = append(hits, h)
		}
	}
	items, upTo, err := s.read(ctx, p.q, hits, p.limit-len(p.rep.Items), p.seen)
	if err != nil {
		return 0, false, err
	}
	p.rep.Items = append(p.rep.Items, items...)
	switch {
	case upTo != 0:
		return upTo + 1, true, nil
	case len(p.rep.Items) == p.limit && len(hits) > 0:
		return hits[len(hits)-1].seq + 1, true, nil
	}
	return 0, false, nil
}

// subjectMatch reports whether subj matches filter, whose tokens are
// literal or *.
func subjectMatch(filter, subj string) bool {
	for {
		fi, si := strings.IndexByte(filter, '.'), strings.IndexByte(subj, '.')
		if (fi < 0) != (si < 0) {
			return false
		}
		ft, st := filter, subj
		if fi >= 0 {
			ft, st = filter[:fi], subj[:si]
		}
		if ft != "*" && ft != st {
			return false
		}
		if fi < 0 {
			return true
		}
		filter, subj = filter[fi+1:], subj[si+1:]
	}
}

// from is req read from sequence start, or when that is 0 from the
// index's time since (less clockMargin), or else from the first entry.
func from(req directget.Request, start uint64, since *time.Time) directget.Request {
	switch {
	case start > 0:
		req.Seq = start
	case since != nil:
		t := since.Add(-clockMargin)
		req.StartTime = &t
	default:
		req.Seq = 1
	}
	return req
}

// hit is one index entry that passed the checks the index can make.
type hit struct {
	seq         uint64
	subject     string
	account, id string
}

// byEntity fills the page with an entity's events from the archive. An
// entity of at most maxSparse events is listed from the server's subject
// index, in the order of their ids (at.after: the last id of the page
// before): the stream's subjects, no message read, since the archive is
// compressed and the last message of each event would load a block of its
// own. A larger one is scanned by sequence (at.seq). A cursor of the other
// way, the entity having crossed maxSparse between two pages, starts over.
func (s *Searcher) byEntity(ctx context.Context, p *page, at cursor) (cursor, error) {
	filter := s.filter(p.q, "*")
	if at.seq == 0 {
		all, ok, err := s.entityEvents(ctx, filter)
		if err != nil {
			return cursor{}, err
		}
		if ok {
			return s.fillListed(ctx, p, all, at.after)
		}
	}
	next, err := s.fill(ctx, p, filter, at.seq, p.q.Since)
	if err != nil || next == 0 {
		return cursor{}, err
	}
	return cursor{seq: next}, nil
}

// fillListed adds to the page the events of all (an entity's, in the
// order of their ids) after the id after, and returns where the next page
// goes on (none when all are read).
func (s *Searcher) fillListed(ctx context.Context, p *page, all []hit, after string) (cursor, error) {
	slices.SortFunc(all, func(a, b hit) int { return strings.Compare(a.id, b.id) })
	for i := range all {
		all[i].seq = uint64(i + 1) // read's upTo names a hit by it
	}
	i, _ := slices.BinarySearchFunc(all, after, func(h hit, id string) int { return strings.Compare(h.id, id) })
	if i < len(all) && all[i].id == after {
		i++
	}
	hits := all[i:]
	for len(hits) > 0 {
		n := min(len(hits), p.want())
		items, upTo, err := s.read(ctx, p.q, hits[:n], p.limit-len(p.rep.Items), p.seen)
		if err != nil {
			return cursor{}, err
		}
		p.rep.Items = append(p.rep.Items, items...)
		hits = hits[n:]
		switch {
		case upTo != 0:
			return cursor{after: all[upTo-1].id}, nil
		case len(p.rep.Items) == p.limit && len(hits) > 0:
			return cursor{after: all[hits[0].seq-2].id}, nil
		}
	}
	return cursor{}, nil
}

// entityEvents lists the events of filter (an entity's subjects in the
// archive) from the server's subject index; ok is false when there are
// more than maxSparse.
func (s *Searcher) entityEvents(ctx context.Context, filter string) (hits []hit, ok bool, err error) {
	total, list, err := subjects(ctx, s.nc, s.archive, filter)
	if err != nil {
		return nil, false, fmt.Errorf("search: %w", err)
	}
	if total > maxSparse {
		return nil, false, nil
	}
	for subject := range list {
		if h, ok := archiveHit(subject); ok {
			hits = append(hits, h)
		}
	}
	return hits, true, nil
}

// subjects asks the server which subjects of stream match filter, and how
// many there are (a stream info request: it reads the stream's subject
// index, no message; it lists at most 100,000).
func subjects(ctx context.Context, nc *nats.Conn, stream, filter string) (total int, list map[string]uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	req, err := json.Marshal(map[string]string{"subjects_filter": filter})
	if err != nil {
		return 0, nil, err
	}
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+stream, req)
	if err != nil {
		return 0, nil, fmt.Errorf("subjects of %s: %w", stream, err)
	}
	var rep struct {
		Total int `json:"total"`
		State struct {
			Subjects map[string]uint64 `json:"subjects"`
		} `json:"state"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return 0, nil, fmt.Errorf("subjects of %s: %w", stream, err)
	}
	if rep.Error != nil {
		return 0, nil, fmt.Errorf("subjects of %s: %s (%d)", stream, rep.Error.Description, rep.Error.Code)
	}
	return max(rep.Total, len(rep.State.Subjects)), rep.State.Subjects, nil
}

// archiveHit reads the account and the event id of an archive subject,
// <prefix>.audit.<account>.<entity token>.<id>.
func archiveHit(subject string) (hit, bool) {
	t := strings.Split(subject, ".")
	if len(t) < 5 {
		return hit{}, false
	}
	return hit{subject: subject, account: t[len(t)-3], id: t[len(t)-1]}, true
}

// maxSparse is how many entries a filter may have for the server's
// subject index to list them all at once (its multi-last limit).
const maxSparse = 1024

// sparse lists every entry of a filter that has at most maxSparse, from
// the server's subject index (one request, whatever the size of the
// index), in order; ok is false for a filter with more, which is scanned.
func (s *Searcher) sparse(ctx context.Context, q ops.FindRequest, filter string, start uint64) (hits []hit, ok bool) {
	msgs, _, err := s.get(ctx, s.index, directget.Request{MultiLast: []string{filter}, Batch: maxSparse})
	if err != nil { // too many entries (413), or a failure the scan meets again
		return nil, false
	}
	for _, m := range msgs {
		if h, ok := s.hitOf(q, m); ok && h.seq >= start {
			hits = append(hits, h)
		}
	}
	slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(a.seq, b.seq) })
	return hits, true
}

// batch reads the entries req asks for: those that pass q's time bounds,
// the last sequence read, and whether the filter has more.
func (s *Searcher) batch(ctx context.Context, stream string, q ops.FindRequest, req directget.Request) (hits []hit, last uint64, more bool, err error) {
	msgs, pending, err := s.get(ctx, stream, req)
	if err != nil || len(msgs) == 0 {
		return nil, 0, false, err
	}
	for _, m := range msgs {
		h, ok := s.hitOf(q, m)
		last = max(last, h.seq)
		if ok {
			hits = append(hits, h)
		}
	}
	return hits, last, pending > 0, nil
}

// lastOnly keeps the hits that are their event's last archive message.
// A scan of the archive meets every revision of an event; the page lists
// the event where its last one is, so that paging lists it once.
func (s *Searcher) lastOnly(ctx context.Context, hits []hit) ([]hit, error) {
	var subjects []string
	last := map[string]uint64{}
	for _, h := range hits {
		if _, ok := last[h.subject]; !ok {
			last[h.subject] = 0
			subjects = append(subjects, h.subject)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	err := lastsOf(ctx, s.gets, s.archive, subjects, func(subject string, seq uint64, _ *nats.Msg) { last[subject] = seq })
	if err != nil {
		return nil, fmt.Errorf("search: read %s: %w", s.archive, err)
	}
	kept := hits[:0]
	for _, h := range hits {
		if last[h.subject] == h.seq {
			kept = append(kept, h)
		}
	}
	return kept, nil
}

// hitOf reads an index entry or an archive message (its sequence, even
// when not ok): its event, unless it is a purge marker or q's time bounds
// leave it out.
func (s *Searcher) hitOf(q ops.FindRequest, m *nats.Msg) (hit, bool) {
	subject, seq, _, err := directget.Meta(m)
	if err != nil {
		return hit{}, false
	}
	h := hit{seq: seq, subject: subject}
	if !strings.HasPrefix(subject, s.prefix) { // an archive message: its time bounds are the record's to check
		a, ok := archiveHit(subject)
		h.account, h.id = a.account, a.id
		return h, ok && len(m.Data) > 0
	}
	if len(m.Data) == 0 || m.Header.Get(kvOperation) != "" || len(subject) <= len(s.prefix) {
		return h, false
	}
	ms, err := strconv.ParseInt(string(m.Data), 10, 64)
	if err != nil {
		return h, false
	}
	created := time.UnixMilli(ms)
	if q.Since != nil && created.Before(q.Since.Truncate(time.Millisecond)) || q.Until != nil && !created.Before(*q.Until) {
		return h, false
	}
	var ok bool
	h.account, h.id, ok = parseKey(subject[len(s.prefix):])
	return h, ok
}

// read reads the records of hits, as many at a time as the page has
// room for (in parallel), and keeps, in order, up to room of those that
// match q. upTo is the sequence of the last hit used when room ran out
// before the hits did (0 otherwise).
func (s *Searcher) read(ctx context.Context, q ops.FindRequest, hits []hit, room int, seen map[string]bool) (items []ops.EventItem, upTo uint64, err error) {
	for i := 0; i < len(hits); {
		n := min(len(hits)-i, max(room-len(items), 8))
		recs, err := s.records(ctx, hits[i:i+n])
		if err != nil {
			return nil, 0, err
		}
		for j, r := range recs {
			if r == nil || seen[r.ID] || !matches(*r, q) {
				continue
			}
			if len(items) == room {
				return items, hits[i+j-1].seq, nil
			}
			seen[r.ID] = true
			items = append(items, item(*r))
		}
		if i += n; len(items) == room && i < len(hits) {
			return items, hits[i-1].seq, nil
		}
	}
	return items, 0, nil
}

// records reads the records of hits in parallel; nil for one that is gone
// (expired or deleted since it was indexed).
func (s *Searcher) records(ctx context.Context, hits []hit) ([]*state.Record, error) {
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
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				errs[i] = err
			default:
				recs[i] = &r
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("search: read records: %w", err)
	}
	return recs, nil
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
