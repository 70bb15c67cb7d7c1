package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/tenaz"
	"github.com/tenaz/tenaz/streams"
)

// consumerFile is the indexer's consumer, created on each partition's
// state bucket stream.
const consumerFile = "consumer-deadletter-search.json"

// purgeTTL is how long a moved entry's purge marker stays: a marker kept
// for ever would cost as much as the entry it removed, and a filter over
// the entries would have to step over it.
const purgeTTL = time.Second

// Defaults of IndexerOptions.
const (
	DefaultBatch    = 1024
	DefaultCacheMax = 100_000
)

// IndexerOptions configure an Indexer.
type IndexerOptions struct {
	// Retention is the TTL of a finished event's entries, as its record's
	// (streams.retention). Defaults to 7 days.
	Retention time.Duration
	// Batch is how many revisions one fetch takes. Defaults to DefaultBatch.
	Batch int
	// CacheMax bounds how many events the indexer remembers the entries
	// of (a revision of an event it remembers writes only what changed;
	// any other writes every entry and removes every state the record's
	// history names). Defaults to DefaultCacheMax.
	CacheMax int
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Metrics receives the lag and the writes. Defaults to metrics.Default.
	Metrics *metrics.Set
}

// Stats are an Indexer's counts since it was made.
type Stats struct {
	// Revisions is how many record revisions it indexed.
	Revisions int64
	// Puts and Purges are the index writes they took; Bytes their
	// subjects, headers and values.
	Puts, Purges, Bytes int64
}

// Indexer keeps the search entries of every event from the state
// buckets' change feeds: a durable consumer on each partition's
// KV_<state bucket> stream, whose every message is a revision of a record
// (the bucket keeps one per key, so a slow indexer sees the latest).
// Writes are idempotent, so a redelivered revision changes nothing.
type Indexer struct {
	js      jetstream.JetStream
	subj    tenaz.Subjects
	o       IndexerOptions
	log     zerolog.Logger
	prefix  string // $KV.<bucket>.
	stream0 string // KV_<bucket>

	revisions, puts, purges, bytes atomic.Int64
	lag                            []atomic.Int64

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewIndexer makes an indexer over subj's partitions; it does no I/O.
func NewIndexer(js jetstream.JetStream, subj tenaz.Subjects, o IndexerOptions) *Indexer {
	if o.Retention <= 0 {
		o.Retention = 7 * 24 * time.Hour
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.CacheMax <= 0 {
		o.CacheMax = DefaultCacheMax
	}
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("component", "search-indexer").Logger()
	}
	return &Indexer{js: js, subj: subj, o: o, log: log, prefix: "$KV." + subj.Bucket(Bucket) + ".", stream0: "KV_" + subj.Bucket(Bucket),
		lag: make([]atomic.Int64, subj.Parts())}
}

// consumerConfig is the data file's consumer.
func consumerConfig() (jetstream.ConsumerConfig, error) {
	var c jetstream.ConsumerConfig
	b, err := fs.ReadFile(streams.FS(), consumerFile)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", consumerFile, err)
	}
	return c, nil
}

func (x *Indexer) stream(p int) string { return "KV_" + x.subj.StateBucketOf(p) }

// Start creates (or resumes) the consumer of every partition and indexes
// in the background until Stop.
func (x *Indexer) Start(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cancel != nil {
		return nil
	}
	cfg, err := consumerConfig()
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	conss := make([]jetstream.Consumer, x.subj.Parts())
	for p := range conss {
		if conss[p], err = x.js.CreateOrUpdateConsumer(ctx, x.stream(p), cfg); err != nil {
			return fmt.Errorf("search: consumer %s on %s: %w", cfg.Durable, x.stream(p), err)
		}
	}
	run, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	for p, c := range conss {
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			x.run(run, p, c)
		}()
	}
	x.report()
	return nil
}

// Stop ends indexing (what is fetched and not written is redelivered to
// the next indexer); it is idempotent.
func (x *Indexer) Stop(ctx context.Context) error {
	x.mu.Lock()
	cancel := x.cancel
	x.cancel = nil
	x.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() { x.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Rebuild drops the index and the indexer's consumers, so that the next
// Start indexes every record again from the state buckets. Call it with
// no indexer running.
func (x *Indexer) Rebuild(ctx context.Context) error {
	cfg, err := consumerConfig()
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	for p := range x.subj.Parts() {
		if err := x.js.DeleteConsumer(ctx, x.stream(p), cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("search: delete consumer %s on %s: %w", cfg.Durable, x.stream(p), err)
		}
	}
	s, err := x.js.Stream(ctx, "KV_"+x.subj.Bucket(Bucket))
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	if err := s.Purge(ctx); err != nil {
		return fmt.Errorf("search: purge the index: %w", err)
	}
	return nil
}

// Stats returns the counts so far.
func (x *Indexer) Stats() Stats {
	return Stats{Revisions: x.revisions.Load(), Puts: x.puts.Load(), Purges: x.purges.Load(), Bytes: x.bytes.Load()}
}

// Lag is how many revisions the consumers had still to deliver when each
// last fetched.
func (x *Indexer) Lag() int64 {
	var n int64
	for i := range x.lag {
		n += x.lag[i].Load()
	}
	return n
}

func (x *Indexer) report() { x.o.Metrics.SearchLag(int(x.Lag())) }

// entries is what the indexer remembers of an event's entries.
type entries struct {
	account, kind, entity string
	created               time.Time
	state                 tenaz.State
	refs                  []string
	ttl                   bool // written with the retention TTL
}

// run indexes partition p until ctx ends.
func (x *Indexer) run(ctx context.Context, p int, c jetstream.Consumer) {
	cache := map[string]*entries{}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		batch, err := c.Fetch(x.o.Batch, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			x.log.Warn().Err(err).Int("partition", p).Msg("fetching state revisions to index")
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			x.log.Warn().Err(err).Int("partition", p).Msg("fetching state revisions to index")
		}
		if len(msgs) == 0 {
			x.lag[p].Store(0)
			x.report()
			backoff = 0
			continue
		}
		if err := x.index(ctx, cache, msgs); err != nil {
			// Forget what was remembered: the redelivered revisions are
			// indexed in full.
			clear(cache)
			for _, m := range msgs {
				_ = m.NakWithDelay(time.Second)
			}
			if ctx.Err() == nil {
				x.log.Warn().Err(err).Int("partition", p).Msg("writing search entries; the revisions come back")
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			continue
		}
		backoff = 0
		last := msgs[len(msgs)-1]
		if err := last.Ack(); err != nil { // ack_policy all: acks the batch
			x.log.Warn().Err(err).Int("partition", p).Msg("acknowledging indexed revisions; they come back")
		}
		if md, err := last.Metadata(); err == nil {
			x.lag[p].Store(int64(md.NumPending))
		}
		x.report()
	}
}

// index writes the entries of one batch of revisions and waits for the
// server to have them all.
func (x *Indexer) index(ctx context.Context, cache map[string]*entries, msgs []jetstream.Msg) error {
	revs := make([]*revision, len(msgs))
	var stale []string // the state entries an event the cache does not know may have left
	for i, m := range msgs {
		if len(m.Data()) == 0 {
			continue
		}
		var r revision
		if err := json.Unmarshal(m.Data(), &r); err != nil || r.ID == "" || r.Account == "" {
			x.log.Warn().Err(err).Str("subject", m.Subject()).Msg("a state revision that is not a record: not indexed")
			continue
		}
		revs[i] = &r
		if _, hit := cache[r.ID]; !hit {
			for _, st := range r.left() {
				stale = append(stale, x.prefix+stateKey(r.Account, st, r.Kind, r.CreatedAt, r.ID))
			}
		}
	}
	exists, err := x.existing(ctx, stale)
	if err != nil {
		exists = nil // purge them all: a purge of nothing costs a marker, never an entry
		x.log.Debug().Err(err).Msg("reading which stale entries exist")
	}
	var pending []jetstream.PubAckFuture
	for i, m := range msgs {
		var ws []*nats.Msg
		if revs[i] == nil {
			if len(m.Data()) == 0 {
				ws = x.gone(cache, kvKey(m.Subject()))
			}
		} else {
			ws = x.writes(cache, revs[i], exists)
		}
		for _, w := range ws {
			f, err := x.js.PublishMsgAsync(w)
			if err != nil {
				return err
			}
			pending = append(pending, f)
		}
	}
	for _, f := range pending {
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

// existing returns which of the index subjects hold an entry, asking the
// server for their last messages in a few batched requests.
func (x *Indexer) existing(ctx context.Context, subjects []string) (map[string]bool, error) {
	found := map[string]bool{}
	const chunk = 256
	for len(subjects) > 0 {
		n := min(chunk, len(subjects))
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, x.js, x.stream0, subjects[:n])
		if err != nil {
			return nil, err
		}
		for m, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return nil, err
			}
			if len(m.Data) > 0 && m.Header.Get(kvOperation) == "" {
				found[m.Subject] = true
			}
		}
		subjects = subjects[n:]
	}
	return found, nil
}

// revision is what the index needs of a record.
type revision struct {
	ID        string      `json:"id"`
	Account   string      `json:"account"`
	Kind      string      `json:"kind"`
	EntityID  string      `json:"entity_id"`
	Status    tenaz.State `json:"status"`
	Reference string      `json:"reference"`
	CreatedAt time.Time   `json:"created_at"`
	History   []struct {
		From tenaz.State `json:"from"`
		To   tenaz.State `json:"to"`
	} `json:"history"`
}

// left is every state the record's history says it has been in, but the
// one it is in.
func (r *revision) left() []tenaz.State {
	var out []tenaz.State
	seen := map[tenaz.State]bool{r.Status: true, "": true}
	for _, h := range r.History {
		for _, st := range []tenaz.State{h.From, h.To} {
			if !seen[st] {
				seen[st] = true
				out = append(out, st)
			}
		}
	}
	return out
}

// gone are the writes of a deletion, a purge or an expiry of record id.
func (x *Indexer) gone(cache map[string]*entries, id string) []*nats.Msg {
	e, ok := cache[id]
	if !ok {
		// Not remembered: its entries stay until their TTL, and a search
		// skips an entry whose record is gone.
		return nil
	}
	delete(cache, id)
	out := []*nats.Msg{x.purge(stateKey(e.account, e.state, e.kind, e.created, id))}
	if e.entity != "" {
		out = append(out, x.purge(entityKey(e.account, e.entity, id)))
	}
	for _, r := range e.refs {
		out = append(out, x.purge(refKey(e.account, r, id)))
	}
	return out
}

// writes are the index writes of one revision. An event the cache knows
// writes what changed; another writes every entry, and removes the
// entries of the states it has left that exists names (all of them when
// exists is nil).
func (x *Indexer) writes(cache map[string]*entries, r *revision, exists map[string]bool) []*nats.Msg {
	var out []*nats.Msg
	x.revisions.Add(1)
	val := []byte(strconv.FormatInt(r.CreatedAt.UnixMilli(), 10))
	terminal := r.Status.Terminal()
	var ttl time.Duration
	if terminal {
		ttl = x.o.Retention
	}
	prev, hit := cache[r.ID]
	all := !hit || terminal && !prev.ttl // write every entry again
	if all || prev.state != r.Status {
		out = append(out, x.put(stateKey(r.Account, r.Status, r.Kind, r.CreatedAt, r.ID), val, ttl))
	}
	if hit {
		if prev.state != r.Status {
			out = append(out, x.purge(stateKey(r.Account, prev.state, r.Kind, r.CreatedAt, r.ID)))
		}
	} else {
		for _, st := range r.left() {
			if k := stateKey(r.Account, st, r.Kind, r.CreatedAt, r.ID); exists == nil || exists[x.prefix+k] {
				out = append(out, x.purge(k))
			}
		}
	}
	if r.EntityID != "" && all {
		out = append(out, x.put(entityKey(r.Account, r.EntityID, r.ID), val, ttl))
	}
	e := &entries{account: r.Account, kind: r.Kind, entity: r.EntityID, created: r.CreatedAt, state: r.Status, ttl: terminal}
	if hit {
		e.refs = prev.refs
	}
	if r.Reference != "" && !contains(e.refs, r.Reference) {
		e.refs = append(e.refs, r.Reference)
		if !all {
			out = append(out, x.put(refKey(r.Account, r.Reference, r.ID), val, ttl))
		}
	}
	if all {
		for _, ref := range e.refs {
			out = append(out, x.put(refKey(r.Account, ref, r.ID), val, ttl))
		}
	}
	if len(cache) >= x.o.CacheMax && !hit {
		clear(cache) // forgetting costs writes, never an entry
	}
	cache[r.ID] = e
	return out
}

func contains(refs []string, r string) bool {
	for _, x := range refs {
		if x == r {
			return true
		}
	}
	return false
}

// kvKey is the key of a $KV.<bucket>.<key> subject.
func kvKey(subject string) string {
	n := 0
	for i := 0; i < len(subject); i++ {
		if subject[i] == '.' {
			if n++; n == 2 {
				return subject[i+1:]
			}
		}
	}
	return ""
}

func (x *Indexer) put(key string, val []byte, ttl time.Duration) *nats.Msg {
	m := nats.NewMsg(x.prefix + key)
	m.Data = val
	n := len(m.Subject) + len(val)
	if ttl > 0 {
		v := ttl.String()
		m.Header.Set(jetstream.MsgTTLHeader, v)
		n += len(jetstream.MsgTTLHeader) + len(v)
	}
	x.puts.Add(1)
	x.bytes.Add(int64(n))
	x.o.Metrics.SearchWrite("put")
	return m
}

// purge removes an entry: a KV purge marker (which rolls the entry up)
// that itself expires after purgeTTL.
func (x *Indexer) purge(key string) *nats.Msg {
	m := nats.NewMsg(x.prefix + key)
	m.Header.Set(kvOperation, "PURGE")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(jetstream.MsgTTLHeader, purgeTTL.String())
	x.purges.Add(1)
	x.bytes.Add(int64(len(m.Subject) + len(kvOperation) + 5 + len(jetstream.MsgRollup) + 3 + len(jetstream.MsgTTLHeader) + 2))
	x.o.Metrics.SearchWrite("purge")
	return m
}

const kvOperation = "KV-Operation"
