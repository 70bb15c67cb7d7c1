package search

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/directget"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/streams"
)

// consumerFile is the feed's consumer, created on each partition's state
// bucket stream: the index and whatever follows it (IndexerOptions.Follow)
// read every revision through it once.
const consumerFile = "consumer-deadletter-feed.json"

// FeedConsumer is the durable name of the feed's consumers (the data
// file's).
const FeedConsumer = "deadletter-feed"

// replaced are the durables the feed replaced: the index's and the audit
// archive's own, before they shared one. The feed starts where the one
// further behind had got to, so that neither misses a revision.
var replaced = []string{"deadletter-search", "deadletter-audit"}

// priorityGroup is the consumers' pinned group: one indexer (one
// deadletter replica) at a time gets a partition's revisions, in order,
// so that two never index two revisions of one event at once (each reads
// what the index holds before it writes); another takes over when it
// stops pulling (the consumer's priority_timeout).
const priorityGroup = "search"

// purgeTTL is how long a moved entry's purge marker stays: a marker kept
// for ever would cost as much as the entry it removed, and a filter over
// the entries would have to step over it.
const purgeTTL = time.Second

// DefaultBatch is IndexerOptions.Batch unless set.
const DefaultBatch = 512

// DefaultSettle is IndexerOptions.Settle unless set: the index lags the
// records by about this, and an event that passes through several states
// within it is indexed once (run).
const DefaultSettle = 200 * time.Millisecond

// IndexerOptions configure an Indexer.
type IndexerOptions struct {
	// Retention is the TTL of a finished event's entries, as its record's
	// (streams.retention). Defaults to 7 days.
	Retention time.Duration
	// Batch is how many revisions one fetch takes. Defaults to DefaultBatch.
	Batch int
	// Settle is how old a revision is when it is followed: one that
	// another revision of its event replaces within it is never read.
	// Defaults to DefaultSettle; negative: no wait.
	Settle time.Duration
	// Follow, when set, is handed each batch's records (the last revision
	// of each event in it, in order) while the index's writes are in
	// flight and before the batch is acknowledged; after an error the
	// batch is handed over again, with what the feed delivered meanwhile.
	// The audit archive reads the feed this way.
	Follow func(ctx context.Context, revs []Revision) error
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Metrics receives the lag and the writes. Defaults to metrics.Default.
	Metrics *metrics.Set
}

// Revision is one revision of a record as the feed delivered it.
type Revision struct {
	Record state.Record
	// Seq is its sequence in its partition's state bucket stream.
	Seq uint64
}

// Stats are an Indexer's counts since it was made.
type Stats struct {
	// Revisions is how many record revisions it indexed.
	Revisions int64
	// Superseded is how many it passed over, since the bucket already
	// held a later revision of their event (latest).
	Superseded int64
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
	subj    names.Subjects
	o       IndexerOptions
	log     zerolog.Logger
	prefix  string // $KV.<bucket>.
	stream0 string // KV_<bucket>

	revisions, superseded, puts, purges, bytes atomic.Int64
	lag                                        []atomic.Int64
	got                                        []atomic.Bool // a partition's revisions came to this indexer: it holds the pin

	mu     sync.Mutex
	cancel context.CancelFunc
	gets   *directget.Mux // the lookups' direct gets, while it runs
	wg     sync.WaitGroup
}

// NewIndexer makes an indexer over subj's partitions; it does no I/O.
func NewIndexer(js jetstream.JetStream, subj names.Subjects, o IndexerOptions) *Indexer {
	if o.Retention <= 0 {
		o.Retention = 7 * 24 * time.Hour
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("component", "search-indexer").Logger()
	}
	return &Indexer{js: js, subj: subj, o: o, log: log, prefix: "$KV." + subj.Bucket(Bucket) + ".", stream0: "KV_" + subj.Bucket(Bucket),
		lag: make([]atomic.Int64, subj.Parts()), got: make([]atomic.Bool, subj.Parts())}
}

// consumerConfig is the data file's consumer.
func consumerConfig() (jetstream.ConsumerConfig, error) { return streams.DataConsumer(consumerFile) }

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
		if conss[p], err = x.consumer(ctx, x.stream(p), cfg); err != nil {
			return fmt.Errorf("search: consumer %s on %s: %w", cfg.Durable, x.stream(p), err)
		}
	}
	if x.gets, err = directget.New(x.js.Conn()); err != nil {
		return fmt.Errorf("search: %w", err)
	}
	run, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		x.dropEntityEntries(run)
	}()
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

// legacyEntity matches the entity entries an earlier version wrote
// (<account>.e.<hash>.<id>): the audit archive answers a search by entity
// now, whose subjects hold the entity already.
const legacyEntity = "*.e.>"

// dropEntityEntries removes the entity entries an earlier version left:
// it asks the index's subject index whether there are any, and purges
// them by subject when there are.
func (x *Indexer) dropEntityEntries(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := func() error {
		n, _, err := subjects(ctx, x.js.Conn(), x.stream0, x.prefix+legacyEntity)
		if err != nil || n == 0 {
			return err
		}
		st, err := x.js.Stream(ctx, x.stream0)
		if err != nil {
			return err
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(x.prefix+legacyEntity)); err != nil {
			return err
		}
		x.log.Info().Int("entries", n).Msg("removed the entity entries of an earlier version: the audit archive answers a search by entity")
		return nil
	}()
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled): // stopped
	default:
		x.log.Warn().Err(err).Str("stream", x.stream0).Msg("removing the entity entries of an earlier version; they stay, unread, and the next start tries again")
	}
}

// consumer creates or updates stream's feed consumer. A new one starts
// after the last revision both durables it replaced had acknowledged
// (every revision, when there were none), and those are then deleted.
// One an earlier version made with cumulative acks (ack_policy all,
// which the server cannot change on a consumer) is replaced by one
// starting after the last revision it had acknowledged.
func (x *Indexer) consumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	for attempt := 0; ; attempt++ {
		c, err := x.js.Consumer(ctx, stream, cfg.Durable)
		switch {
		case err == nil && c.CachedInfo().Config.AckPolicy != cfg.AckPolicy:
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, c.CachedInfo().AckFloor.Stream+1
			if err := x.js.DeleteConsumer(ctx, stream, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, fmt.Errorf("replace the consumer %s of an earlier version: %w", cfg.Durable, err)
			}
			x.log.Info().Str("stream", stream).Uint64("from", cfg.OptStartSeq).Msg("replaced the feed's consumer of an earlier version (cumulative acks)")
		case err == nil: // where it starts cannot change
			cfg.DeliverPolicy, cfg.OptStartSeq = c.CachedInfo().Config.DeliverPolicy, c.CachedInfo().Config.OptStartSeq
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			if cfg.OptStartSeq, err = x.replacedFloor(ctx, stream); err != nil {
				return nil, err
			}
			if cfg.OptStartSeq > 0 {
				cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			}
		default:
			return nil, err
		}
		c, err = x.js.CreateOrUpdateConsumer(ctx, stream, cfg)
		if err != nil && attempt == 0 {
			continue // another replica made it meanwhile, from elsewhere: take its start
		}
		if err != nil {
			return nil, err
		}
		for _, name := range replaced {
			if err := x.js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, fmt.Errorf("delete the replaced consumer %s: %w", name, err)
			}
		}
		return c, nil
	}
}

// replacedFloor is the first revision of stream that one of the replaced
// durables had not acknowledged; 0 when there is neither.
func (x *Indexer) replacedFloor(ctx context.Context, stream string) (uint64, error) {
	var floor uint64
	found := false
	for _, name := range replaced {
		c, err := x.js.Consumer(ctx, stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read the replaced consumer %s: %w", name, err)
		}
		if f := c.CachedInfo().AckFloor.Stream; !found || f < floor {
			floor, found = f, true
		}
	}
	if !found {
		return 0, nil
	}
	return floor + 1, nil
}

// Stop ends indexing (what is fetched and not written is redelivered to
// the next indexer); it is idempotent.
func (x *Indexer) Stop(ctx context.Context) error {
	x.mu.Lock()
	cancel, gets := x.cancel, x.gets
	x.cancel = nil
	x.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() { x.wg.Wait(); gets.Close(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	// Hand the pins over now rather than after the priority timeout.
	cfg, err := consumerConfig()
	if err != nil {
		return err
	}
	for p := range x.got {
		if !x.got[p].Swap(false) {
			continue
		}
		if s, err := x.js.Stream(ctx, x.stream(p)); err == nil {
			_ = s.UnpinConsumer(ctx, cfg.Durable, priorityGroup)
		}
	}
	return nil
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
	return Stats{Revisions: x.revisions.Load(), Superseded: x.superseded.Load(), Puts: x.puts.Load(), Purges: x.purges.Load(), Bytes: x.bytes.Load()}
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

// run indexes partition p until ctx ends.
//
// A revision is followed once it is Settle old (ripe): what is fetched
// younger is held, unacknowledged, and followed with the next fetch, so
// that an event whose later revision arrives meanwhile is read at that one
// only (the record carries its whole history). Without the wait, an event
// created, claimed and done within a few milliseconds of each other is
// indexed and archived at each revision a fetch happens to cut it at,
// which under sync: always cost one fsync each.
func (x *Indexer) run(ctx context.Context, p int, c jetstream.Consumer) {
	backoff := time.Duration(0)
	var held []fed // fetched, not followed yet: not ripe, or its batch failed
	defer func() {
		for _, f := range held {
			_ = f.m.Nak() // to the next indexer now, not after AckWait
		}
	}()
	for ctx.Err() == nil {
		if backoff > 0 && !queue.SleepUntil(ctx, time.Now().Add(backoff)) {
			return
		}
		msgs, full, err := x.fetch(ctx, p, c, x.o.Batch-len(held))
		if errors.Is(err, errPinMoved) {
			// Nothing ripens on a read cut short: a revision held
			// until its event's next one came would be followed alone
			// if that next one was still to be delivered. Read again.
			held = append(held, msgs...)
			continue
		}
		if err != nil {
			x.log.Warn().Err(err).Int("partition", p).Msg("fetching state revisions to index")
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			continue
		}
		batch := append(held, msgs...)
		held = nil
		if len(batch) == 0 {
			x.lag[p].Store(0)
			x.report()
			backoff = 0
			queue.SleepUntil(ctx, time.Now().Add(x.o.Settle))
			continue
		}
		x.got[p].Store(true)
		ripe, young := x.ripen(batch, time.Now())
		if len(ripe) == 0 {
			held = young
			queue.SleepUntil(ctx, x.ripeAt(held))
			continue
		}
		if err := x.step(ctx, p, ripe, young); err != nil {
			// Kept in hand and followed again with what comes next.
			held = batch
			if ctx.Err() == nil {
				x.log.Warn().Err(err).Int("partition", p).Msg("following a batch of revisions; it is followed again")
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			continue
		}
		backoff = 0
		// Each revision its own ack: acknowledged cumulatively (ack_policy
		// all), a batch would acknowledge revisions delivered to another
		// replica before it, which that replica had not followed yet (it
		// lost the pin in a long step, and was stopped).
		var pending uint64
		for _, f := range ripe {
			if err := f.m.Ack(); err != nil {
				x.log.Warn().Err(err).Int("partition", p).Msg("acknowledging an indexed revision; it comes back")
			}
			pending = f.pending
		}
		x.lag[p].Store(int64(pending) + int64(len(young)))
		x.report()
		held = young
		if full {
			continue // a backlog: work already due
		}
		// Otherwise wait a settle, by when what is held is ripe: one read
		// a settle, not one each time the oldest held revision ripens.
		queue.SleepUntil(ctx, time.Now().Add(x.o.Settle))
	}
}

// fed is a revision as the feed delivered it.
type fed struct {
	m           jetstream.Msg
	seq         uint64    // in the stream
	at          time.Time // written
	pending     uint64    // the revisions after it the feed had still to deliver
	redelivered bool      // given to a replica before (that one gave it back, or died)
}

// fetch takes up to n revisions, and reports whether it got all n.
func (x *Indexer) fetch(ctx context.Context, p int, c jetstream.Consumer, n int) ([]fed, bool, error) {
	if n <= 0 {
		return nil, true, nil
	}
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(fetchWait), jetstream.FetchPriorityGroup(priorityGroup))
	if err != nil {
		return nil, false, err
	}
	var out []fed
	for m := range batch.Messages() {
		f := fed{m: m}
		if md, err := m.Metadata(); err == nil {
			f.seq, f.at, f.pending, f.redelivered = md.Sequence.Stream, md.Timestamp, md.NumPending, md.NumDelivered > 1
		}
		out = append(out, f)
	}
	switch err := batch.Error(); {
	case errors.Is(err, jetstream.ErrPinIDMismatch):
		return out, false, errPinMoved
	case err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil:
		x.log.Warn().Err(err).Int("partition", p).Msg("fetching state revisions to index")
	}
	return out, len(out) == n, nil
}

// errPinMoved is fetch's error when the feed's pin lapsed (the indexer
// read nothing for the priority timeout) or went to another replica: the
// read was cut short, so it says nothing of what else is there.
var errPinMoved = errors.New("search: the feed's pin moved")

// ripen splits a batch, in delivery order, into the revisions to follow
// now (older than Settle) and those to hold.
func (x *Indexer) ripen(batch []fed, now time.Time) (ripe, young []fed) {
	for _, f := range batch {
		if now.Sub(f.at) < x.o.Settle {
			young = append(young, f)
		} else {
			ripe = append(ripe, f)
		}
	}
	return ripe, young
}

// ripeAt is when the oldest of held is ripe.
func (x *Indexer) ripeAt(held []fed) time.Time {
	oldest := held[0].at
	for _, f := range held[1:] {
		if f.at.Before(oldest) {
			oldest = f.at
		}
	}
	return oldest.Add(x.o.Settle)
}

// fetchWait is how long a fetch waits to fill: hardly at all, since
// every revision that arrives while a fetch is open is delivered,
// superseded or not; holding young revisions (run) is what merges.
const fetchWait = 10 * time.Millisecond

// entry is what the index holds under a key, as a batch sees it.
type entry struct {
	exists bool
	ttl    bool // written with the retention TTL
}

// step follows the ripe revisions of one batch, each event at its last
// one unless a held (young) revision follows it: the index's writes, then
// Follow while they are in flight, then their acknowledgements.
func (x *Indexer) step(ctx context.Context, p int, ripe, young []fed) error {
	revs, behind := x.records(ripe, young)
	revs = x.latest(ctx, p, revs, behind)
	pending, err := x.index(ctx, revs)
	if err == nil && x.o.Follow != nil && len(revs) > 0 {
		err = x.o.Follow(ctx, revs)
	}
	for _, f := range pending {
		if err != nil {
			break
		}
		select {
		case <-f.Ok():
		case err = <-f.Err():
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	return err
}

// records reads the records of the ripe revisions, the last revision of
// each event only, and none of an event a young one follows: a record
// carries its whole history, so the last one knows every state the event
// left, and the states it passed through meanwhile were never written.
// Only those last revisions are decoded (a revision's subject is its
// event's key), so an event claimed and done within one settle costs one
// decode, its final entries and one lookup. behind holds, for each
// revision the feed delivered with more after it, or delivered again, its
// index in revs by its subject.
func (x *Indexer) records(ripe, young []fed) (revs []Revision, behind map[string]int) {
	last := make(map[string]int, len(ripe))
	for i, f := range ripe {
		m := f.m
		if !isData(m.Data(), m.Headers()) {
			// A deletion, a purge or an expiry: the entries of a finished
			// event expire with it; any other stays until a search meets
			// it without its record and skips it.
			continue
		}
		last[m.Subject()] = i
	}
	for _, f := range young {
		delete(last, f.m.Subject())
	}
	revs = make([]Revision, 0, len(last))
	for i, f := range ripe {
		if j, ok := last[f.m.Subject()]; !ok || j != i {
			continue
		}
		var r Revision
		if err := state.DecodeJSON(f.m.Data(), &r.Record); err != nil || r.Record.ID == "" || r.Record.Account == "" {
			x.log.Warn().Err(err).Str("subject", f.m.Subject()).Msg("a state revision that is not a record: not indexed")
			continue
		}
		r.Seq = f.seq
		if (f.pending > 0 || f.redelivered) && !r.Record.Status.Terminal() {
			if behind == nil {
				behind = map[string]int{}
			}
			behind[f.m.Subject()] = len(revs)
		}
		revs = append(revs, r)
	}
	return revs, behind
}

// latest drops from revs the revisions whose event partition p's bucket
// already holds a later revision of: the feed delivers that one later
// (or did, to a replica that took over while this one was given back),
// and it carries the whole history, so following this one would write
// what the later one undoes or repeats (an entry for a state the event
// has left, an archive message). The settle merges the revisions of an
// event only when they are written within it of each other; a feed that
// has fallen behind meets a busy account's events at each revision it
// was written at (accepted, then done once their backlog drained, seconds
// later), and followed both, which doubled the followers' writes under
// load. Only the revisions delivered with more behind them (the feed
// behind) or delivered again, not terminal, are looked up, in one batched read of the
// bucket's last revisions; a deletion that followed does not drop one
// (its entries would reach the archive through no later revision), and a
// failed read drops none.
func (x *Indexer) latest(ctx context.Context, p int, revs []Revision, behind map[string]int) []Revision {
	if len(behind) > 0 {
		subjects := make([]string, 0, len(behind))
		for s := range behind {
			subjects = append(subjects, s)
		}
		drop := map[int]bool{}
		err := x.lasts(ctx, x.stream(p), subjects, func(subject string, seq uint64, m *nats.Msg) {
			if i, ok := behind[subject]; ok && seq > revs[i].Seq && isData(m.Data, m.Header) {
				drop[i] = true
			}
		})
		if err != nil {
			x.log.Warn().Err(err).Int("partition", p).Msg("reading the last revisions of a batch's events; each is followed")
			drop = nil
		}
		kept := revs[:0]
		for i, r := range revs {
			if drop[i] {
				x.superseded.Add(1)
				continue
			}
			kept = append(kept, r)
		}
		revs = kept
	}
	x.revisions.Add(int64(len(revs)))
	return revs
}

// index sends the entries of one batch's records and returns the writes
// in flight. It keeps nothing between batches: what each record must
// write is read from the index itself (one batched request for the
// batch), so that any replica, a restarted one too, may index any
// revision, and a redelivered one writes nothing.
func (x *Indexer) index(ctx context.Context, revs []Revision) ([]jetstream.PubAckFuture, error) {
	var filters []string
	for _, rv := range revs {
		r := &rv.Record
		// The state entries it can have are those of the states its
		// history names: each is looked up by its exact key, which the
		// server finds in its subject index without matching a wildcard.
		for _, st := range append([]state.State{r.Status}, left(r)...) {
			filters = append(filters, x.prefix+stateKey(r.Account, st, r.Kind, r.CreatedAt, r.ID))
		}
		if r.Reference != "" {
			filters = append(filters, x.prefix+refKey(r.Account, r.Reference, r.ID))
		}
	}
	index, err := x.lookup(ctx, filters)
	if err != nil {
		index = nil // write as if nothing were there: a redundant write costs a write, never an entry
		x.log.Debug().Err(err).Msg("reading the entries of a batch of revisions")
	}
	var pending []jetstream.PubAckFuture
	for i := range revs {
		for _, w := range x.writes(&revs[i].Record, index) {
			f, err := x.js.PublishMsgAsync(w, jetstream.WithStallWait(StallWait))
			if err != nil {
				return pending, err
			}
			pending = append(pending, f)
		}
	}
	return pending, nil
}

// StallWait is how long a follower's write waits for room when its
// JetStream context bounds the writes in flight
// (jetstream.WithPublishAsyncMaxPending) before its batch fails and comes
// back.
const StallWait = 30 * time.Second

// lookup reads the entries the filters name from the server's subject
// index (the last message of each subject), by subject.
func (x *Indexer) lookup(ctx context.Context, filters []string) (map[string]entry, error) {
	found := map[string]entry{}
	err := x.lasts(ctx, x.stream0, filters, func(subject string, _ uint64, m *nats.Msg) {
		if isData(m.Data, m.Header) {
			found[subject] = entry{exists: true, ttl: m.Header.Get(jetstream.MsgTTLHeader) != ""}
		}
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// lasts hands fn the last message of each of the subjects of stream
// that has one, bounded by lookupWait.
func (x *Indexer) lasts(ctx context.Context, stream string, subjects []string, fn func(subject string, seq uint64, m *nats.Msg)) error {
	// A request the server refuses (a NATS user not allowed it) or loses
	// is never answered.
	ctx, cancel := context.WithTimeout(ctx, lookupWait)
	defer cancel()
	return lastsOf(ctx, x.gets, stream, subjects, fn)
}

// lastsOf hands fn the last message of each of the subjects of stream
// that has one, a few hundred subjects a request.
func lastsOf(ctx context.Context, gets *directget.Mux, stream string, subjects []string, fn func(subject string, seq uint64, m *nats.Msg)) error {
	const chunk = 256
	for len(subjects) > 0 {
		n := min(chunk, len(subjects))
		msgs, _, err := gets.Get(ctx, stream, directget.Request{MultiLast: subjects[:n]})
		if err != nil {
			return err
		}
		for _, m := range msgs {
			subject, seq, _, err := directget.Meta(m)
			if err != nil {
				return err
			}
			fn(subject, seq, m)
		}
		subjects = subjects[n:]
	}
	return nil
}

// lookupWait bounds the reads of one batch.
const lookupWait = 5 * time.Second

// isData reports whether a KV message is a value, not a deletion, a
// purge or an expiry.
func isData(data []byte, h nats.Header) bool {
	return len(data) > 0 && h.Get(kvOperation) == "" && h.Get(jetstream.MarkerReasonHeader) == ""
}

// left is every state the record's history says it has been in, but the
// one it is in.
func left(r *state.Record) []state.State {
	var out []state.State
	seen := map[state.State]bool{r.Status: true, "": true}
	for _, h := range r.History {
		for _, st := range []state.State{h.From, h.To} {
			if !seen[st] {
				seen[st] = true
				out = append(out, st)
			}
		}
	}
	return out
}

// writes are the index writes of one revision, given what index holds
// (nil: not known), which they update: the entries the record calls for
// that are missing, or lack the TTL a finished event's carry, and the
// removal of the state entries of the states it has left.
func (x *Indexer) writes(r *state.Record, index map[string]entry) []*nats.Msg {
	var out []*nats.Msg
	val := []byte(strconv.FormatInt(r.CreatedAt.UnixMilli(), 10))
	var ttl time.Duration
	if r.Status.Terminal() {
		ttl = x.o.Retention
	}
	want := []string{stateKey(r.Account, r.Status, r.Kind, r.CreatedAt, r.ID)}
	if r.Reference != "" {
		want = append(want, refKey(r.Account, r.Reference, r.ID))
	}
	for _, k := range want {
		if e, ok := index[x.prefix+k]; index != nil && ok && e.exists && (ttl == 0 || e.ttl) {
			continue
		}
		out = append(out, x.put(k, val, ttl))
		if index != nil {
			index[x.prefix+k] = entry{exists: true, ttl: ttl > 0}
		}
	}
	for _, st := range left(r) {
		k := stateKey(r.Account, st, r.Kind, r.CreatedAt, r.ID)
		if index != nil && !index[x.prefix+k].exists {
			continue
		}
		out = append(out, x.purge(k))
		if index != nil {
			delete(index, x.prefix+k)
		}
	}
	return out
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
