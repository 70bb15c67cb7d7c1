// Package index is the deadletter service's in-memory view of what is dead
// or in manual review: one item per event (or per DEAD entry without an
// event), with posting lists per status, account, kind, account+kind, error
// class and reason, each sorted by DEAD sequence. A page of a filtered list
// walks only the smallest posting list the filter names, from the cursor
// down, so its cost depends on the page and the filter's selectivity, not
// on how many entries there are.
//
//	x := index.New()
//	x.Put("ev_1", 7, ops.Item{ID: "ev_1", Account: "acme", Status: state.Dead, Seq: 42, At: t})
//	page, err := x.List(state.Dead, ops.ListRequest{Account: "acme", Limit: 50})
package index

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// ErrBadCursor is returned by List for a cursor it did not hand out.
var ErrBadCursor = errors.New("index: bad cursor")

// compactAt is how many removed entries the posting lists may hold before
// they are rebuilt (and only once they outnumber the live ones).
const compactAt = 1024

type entry struct {
	key  string
	rev  uint64
	item ops.Item
	gone bool
}

// posting is a list of entries sorted by DEAD sequence; removed entries stay
// (gone) until the next compaction.
type posting struct {
	es   []*entry
	live int
}

func (p *posting) add(e *entry) {
	n := len(p.es)
	if n == 0 || p.es[n-1].item.Seq < e.item.Seq {
		p.es = append(p.es, e)
	} else {
		i := sort.Search(n, func(i int) bool { return p.es[i].item.Seq >= e.item.Seq })
		p.es = slices.Insert(p.es, i, e)
	}
	p.live++
}

// Index is safe for concurrent use.
type Index struct {
	mu      sync.RWMutex
	byKey   map[string]*entry
	lists   map[string]*posting
	gone    int
	version uint64
	totals  map[totalKey]int // cached totals of the current version
}

type totalKey struct {
	status state.State
	f      filter
}

// New returns an empty index.
func New() *Index {
	return &Index{byKey: map[string]*entry{}, lists: map[string]*posting{}, totals: map[totalKey]int{}}
}

// listKeys are the posting lists an item belongs to.
func listKeys(it ops.Item) [6]string {
	s := string(it.Status) + "\x00"
	return [6]string{
		s,
		s + "a\x00" + it.Account,
		s + "k\x00" + it.Kind,
		s + "ak\x00" + it.Account + "\x00" + it.Kind,
		s + "c\x00" + it.Class,
		s + "r\x00" + it.Reason,
	}
}

// Reset empties the index (a restarted watch loads it again).
func (x *Index) Reset() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byKey, x.lists, x.gone = map[string]*entry{}, map[string]*posting{}, 0
	x.changed()
}

// Put sets key's item (at revision rev of the index bucket), replacing the
// one it had. An older value (lower rev) than the one held is ignored.
func (x *Index) Put(key string, rev uint64, it ops.Item) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byKey[key]; ok {
		if old.rev > rev {
			return
		}
		if old.item.Seq == it.Seq && old.item.Status == it.Status {
			old.rev, old.item = rev, it // same place in every list
			x.changed()
			return
		}
		x.removeLocked(old)
	}
	e := &entry{key: key, rev: rev, item: it}
	x.byKey[key] = e
	for _, k := range listKeys(it) {
		p := x.lists[k]
		if p == nil {
			p = &posting{}
			x.lists[k] = p
		}
		p.add(e)
	}
	x.changed()
}

// Delete removes key (a no-op if absent).
func (x *Index) Delete(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.byKey[key]; ok {
		x.removeLocked(e)
		x.changed()
	}
}

// DeleteAt removes key if the revision held is at most rev (a purge this
// replica made at rev, applied before its watch delivers it; a newer value
// already delivered stays).
func (x *Index) DeleteAt(key string, rev uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.byKey[key]; ok && e.rev <= rev {
		x.removeLocked(e)
		x.changed()
	}
}

func (x *Index) changed() {
	x.version++
	clear(x.totals)
}

func (x *Index) removeLocked(e *entry) {
	delete(x.byKey, e.key)
	e.gone = true
	for _, k := range listKeys(e.item) {
		if p := x.lists[k]; p != nil {
			p.live--
		}
	}
	x.gone++
	if x.gone >= compactAt && x.gone > len(x.byKey) {
		x.compactLocked()
	}
}

// compactLocked rebuilds the posting lists without removed entries.
func (x *Index) compactLocked() {
	for k, p := range x.lists {
		if p.live == 0 {
			delete(x.lists, k)
			continue
		}
		p.es = slices.DeleteFunc(p.es, func(e *entry) bool { return e.gone })
	}
	x.gone = 0
}

// Get returns key's item and revision.
func (x *Index) Get(key string) (ops.Item, uint64, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.byKey[key]
	if !ok {
		return ops.Item{}, 0, false
	}
	return e.item, e.rev, true
}

// Len is how many items are held.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byKey)
}

// Count is how many items have status s.
func (x *Index) Count(s state.State) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if p := x.lists[string(s)+"\x00"]; p != nil {
		return p.live
	}
	return 0
}

// Version changes with every Put and Delete.
func (x *Index) Version() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.version
}

// MaxSeq is the highest DEAD sequence held (0 when empty).
func (x *Index) MaxSeq() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var m uint64
	for _, s := range []state.State{state.Dead, state.ManualReview} {
		if p := x.lists[string(s)+"\x00"]; p != nil && len(p.es) > 0 {
			m = max(m, p.es[len(p.es)-1].item.Seq)
		}
	}
	return m
}

// filter is a ListRequest without its paging.
type filter struct {
	account, kind, class, reason string
	since, until                 int64 // unix nanos (see nanos); MinInt64 and MaxInt64 when open
}

func filterOf(q ops.ListRequest) filter {
	f := filter{account: q.Account, kind: q.Kind, class: q.Class, reason: q.Reason, since: math.MinInt64, until: math.MaxInt64}
	if q.Since != nil {
		f.since = nanos(*q.Since)
	}
	if q.Until != nil {
		f.until = nanos(*q.Until)
	}
	return f
}

// nanos is t in unix nanoseconds, held to the int64 range: UnixNano wraps
// outside 1677-2262, and a bound like since=1600-01-01 must still mean
// "from the start", as it does to /v1/events, which compares times.
func nanos(t time.Time) int64 {
	switch {
	case t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minTime, maxTime = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

func (f filter) match(it ops.Item) bool {
	if f.account != "" && it.Account != f.account || f.kind != "" && it.Kind != f.kind ||
		f.class != "" && it.Class != f.class || f.reason != "" && it.Reason != f.reason {
		return false
	}
	at := nanos(it.At)
	return at >= f.since && (at < f.until || f.until == math.MaxInt64)
}

func (f filter) timed() bool { return f.since != math.MinInt64 || f.until != math.MaxInt64 }

// smallest is the shortest posting list the filter names, and whether it
// alone decides membership (no other field filters).
func (x *Index) smallest(s state.State, f filter) (*posting, bool) {
	st := string(s) + "\x00"
	var cands []string
	n := 0
	add := func(set bool, k string) {
		if set {
			cands = append(cands, k)
			n++
		}
	}
	add(f.account != "" && f.kind != "", st+"ak\x00"+f.account+"\x00"+f.kind)
	add(f.account != "" && f.kind == "", st+"a\x00"+f.account)
	add(f.kind != "" && f.account == "", st+"k\x00"+f.kind)
	add(f.class != "", st+"c\x00"+f.class)
	add(f.reason != "", st+"r\x00"+f.reason)
	if len(cands) == 0 {
		cands = append(cands, st)
	}
	var best *posting
	for _, k := range cands {
		p := x.lists[k]
		if p == nil {
			return nil, true // nothing matches
		}
		if best == nil || p.live < best.live {
			best = p
		}
	}
	return best, n <= 1
}

// span is the index range [lo, hi) of p whose arrival times fall in the
// filter's time range (arrival times grow with the DEAD sequence).
func span(p *posting, f filter) (int, int) {
	lo, hi := 0, len(p.es)
	if f.since != math.MinInt64 {
		lo = sort.Search(len(p.es), func(i int) bool { return nanos(p.es[i].item.At) >= f.since })
	}
	if f.until != math.MaxInt64 {
		hi = sort.Search(len(p.es), func(i int) bool { return nanos(p.es[i].item.At) >= f.until })
	}
	return lo, max(lo, hi)
}

// List returns one page of the items with status s matching q, newest
// first, and the cursor of the next page.
func (x *Index) List(s state.State, q ops.ListRequest) (ops.ListReply, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = ops.DefaultLimit
	case limit < 0 || limit > ops.MaxLimit:
		return ops.ListReply{}, fmt.Errorf("index: limit %d: want 1..%d", limit, ops.MaxLimit)
	}
	before := uint64(math.MaxUint64)
	if q.Cursor != "" {
		c, err := strconv.ParseUint(q.Cursor, 10, 64)
		if err != nil || c == 0 {
			return ops.ListReply{}, fmt.Errorf("%w %q", ErrBadCursor, q.Cursor)
		}
		before = c
	}
	f := filterOf(q)
	x.mu.RLock()
	p, alone := x.smallest(s, f)
	rep := ops.ListReply{Items: []ops.Item{}}
	if p == nil {
		x.mu.RUnlock()
		return rep, nil
	}
	lo, hi := span(p, f)
	total, cached := x.totals[totalKey{s, f}]
	if !cached {
		if alone && !f.timed() {
			total = p.live
		} else {
			for _, e := range p.es[lo:hi] {
				if !e.gone && f.match(e.item) {
					total++
				}
			}
		}
	}
	if before != math.MaxUint64 {
		hi = lo + sort.Search(hi-lo, func(i int) bool { return p.es[lo+i].item.Seq >= before })
	}
	for i := hi - 1; i >= lo; i-- {
		e := p.es[i]
		if e.gone || !f.match(e.item) {
			continue
		}
		if len(rep.Items) == limit {
			rep.NextCursor = strconv.FormatUint(rep.Items[limit-1].Seq, 10)
			break
		}
		rep.Items = append(rep.Items, e.item)
	}
	version := x.version
	x.mu.RUnlock()
	rep.Total = total
	if !cached {
		x.mu.Lock()
		if x.version == version {
			x.totals[totalKey{s, f}] = total
		}
		x.mu.Unlock()
	}
	return rep, nil
}

// Counts groups the items with status s by account, by kind, by reason and
// by class (for the digest and the screen's filter choices).
type Counts struct {
	Accounts, Kinds, Reasons, Classes map[string]int
}

// Facets returns the distinct values present for status s.
func (x *Index) Facets(s state.State) Counts {
	x.mu.RLock()
	defer x.mu.RUnlock()
	c := Counts{Accounts: map[string]int{}, Kinds: map[string]int{}, Reasons: map[string]int{}, Classes: map[string]int{}}
	st := string(s) + "\x00"
	for k, p := range x.lists {
		if p.live == 0 || len(k) <= len(st) || k[:len(st)] != st {
			continue
		}
		rest := k[len(st):]
		switch {
		case len(rest) > 2 && rest[:2] == "a\x00":
			c.Accounts[rest[2:]] = p.live
		case len(rest) > 2 && rest[:2] == "k\x00":
			c.Kinds[rest[2:]] = p.live
		case len(rest) > 2 && rest[:2] == "r\x00":
			c.Reasons[rest[2:]] = p.live
		case len(rest) > 2 && rest[:2] == "c\x00":
			c.Classes[rest[2:]] = p.live
		}
	}
	return c
}

// Oldest is the arrival time of the oldest item with status s (zero when none).
func (x *Index) Oldest(s state.State) time.Time {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if p := x.lists[string(s)+"\x00"]; p != nil {
		for _, e := range p.es {
			if !e.gone {
				return e.item.At
			}
		}
	}
	return time.Time{}
}
