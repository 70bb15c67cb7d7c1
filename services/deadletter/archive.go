package deadletter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// The archiver writes the audit archive (TENAZ_AUDIT, pkg/audit) from the
// state buckets' change feed: a durable consumer on each partition's
// KV_<bucket> stream (streams/data/consumer-deadletter-audit.json),
// shared by every replica, turns each revision of a record into one
// message holding the history entries it added. It is off the events'
// path: nothing the dispatcher, poller or ingest do waits for it, and
// what it has not read yet waits in its consumer (tenaz_audit_lag_revisions).
//
// Each message is written with the expected last sequence of its event's
// subject, so two replicas (or a redelivery) racing on one event never
// write an entry twice: the loser re-reads what the archive holds and
// writes only what is still missing. Deleting the consumers rebuilds the
// archive's missing entries from the records there are.
//
// A batch of revisions is written pipelined (async publishes, then their
// acks), each on the last write of its event this replica remembers; an
// event it does not remember is taken for a new one, and the server's
// refusal (the subject has messages) sends that revision down the
// one-at-a-time path, which reads the event's last message first. Two
// revisions of one event in a batch are written one after the other.

// Tuning of the archiver.
const (
	// archiveBatch is how many revisions of a partition are written
	// pipelined at once (the consumer's max_ack_pending).
	archiveBatch = 512
	// archiveFetchWait is how long a fetch waits to fill: hardly at all,
	// since every revision that arrives while a fetch is open is
	// delivered, superseded or not.
	archiveFetchWait = 10 * time.Millisecond
	archiveAttempts  = 8
	// archiveMarks bounds the marks kept in memory (the last message of
	// recently seen events); a miss costs one direct get.
	archiveMarks    = 1 << 16
	archiveLagEvery = 10 * time.Second
	// consumerAudit is the archiver's durable on every KV_<bucket>.
	consumerAudit = "deadletter-audit"
)

// mark is what the archive's last message of an event left, and its
// sequence (the expected last sequence of the next write).
type mark struct {
	seq uint64
	audit.Mark
}

type marks struct {
	mu sync.Mutex
	m  map[string]mark
}

func (k *marks) get(subject string) (mark, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[subject]
	return v, ok
}

func (k *marks) put(subject string, v mark) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil || len(k.m) >= archiveMarks {
		k.m = make(map[string]mark) // recent events come back soon enough
	}
	k.m[subject] = v
}

func (k *marks) drop(subject string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, subject)
}

// startArchive binds TENAZ_AUDIT and starts the archiver's consumers and
// its lag reader.
func (s *Service) startArchive(ctx context.Context) error {
	var err error
	name := s.subj.Stream(streams.StreamAudit)
	if s.archive, err = s.js.Stream(ctx, name); err != nil {
		return fmt.Errorf("deadletter: stream %s: %w", name, err)
	}
	var cons []jetstream.Consumer
	for p := range s.subj.Parts() {
		bucket := s.subj.StateBucketOf(p)
		cfg := func() (jetstream.ConsumerConfig, error) {
			c, err := s.dataConsumer("consumer-deadletter-audit.json")()
			c.FilterSubject = "$KV." + bucket + ".>"
			return c, err
		}
		cc, err := cfg()
		if err != nil {
			return fmt.Errorf("deadletter: %w", err)
		}
		c, err := s.js.CreateOrUpdateConsumer(ctx, "KV_"+bucket, cc)
		if err != nil {
			return fmt.Errorf("deadletter: consumer %s on KV_%s: %w", consumerAudit, bucket, err)
		}
		cons = append(cons, c)
	}
	s.bg.Add(len(cons) + 1)
	for _, c := range cons {
		go s.runArchiver(c)
	}
	go s.watchArchiveLag(cons)
	return nil
}

// runArchiver archives one partition's revisions, a batch at a time,
// until the service stops (what it has not acknowledged then is
// delivered again, and found archived).
func (s *Service) runArchiver(c jetstream.Consumer) {
	defer s.bg.Done()
	ctx := s.runCtx
	for ctx.Err() == nil {
		batch, err := c.Fetch(archiveBatch, jetstream.FetchMaxWait(archiveFetchWait))
		if err != nil {
			s.log.Debug().Err(err).Msg("audit: fetching revisions")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		s.archiveBatch(ctx, msgs)
		queue.Settle(ctx, len(msgs), archiveBatch, cmp.Or(s.o.Settle, search.DefaultSettle))
	}
}

// archiveWrite is one revision's write in flight.
type archiveWrite struct {
	m       jetstream.Msg
	rec     state.Record
	rev     uint64
	subject string
	r       audit.Revision
	f       jetstream.PubAckFuture
}

// archiveBatch writes what each revision of msgs adds, pipelined.
func (s *Service) archiveBatch(ctx context.Context, msgs []jetstream.Msg) {
	var pend []archiveWrite
	inflight := map[string]bool{}
	flush := func() {
		for _, w := range pend {
			select {
			case ack := <-w.f.Ok():
				s.marks.put(w.subject, mark{seq: ack.Sequence, Mark: audit.MarkOf(w.r)})
				metrics.Default.AuditArchived("written")
				_ = w.m.Ack()
			case err := <-w.f.Err():
				s.marks.drop(w.subject)
				if store.IsWrongSequence(err) { // not new, or written meanwhile: see what the archive holds
					s.archiveOne(ctx, w.m, w.rec, w.rev)
					continue
				}
				s.log.Warn().Err(err).Str("event_id", w.rec.ID).Msg("audit: archiving a revision failed; it is retried")
				_ = w.m.NakWithDelay(time.Second)
			case <-ctx.Done():
				return // unacknowledged: delivered again
			}
		}
		pend = pend[:0]
		clear(inflight)
	}
	type revision struct {
		m   jetstream.Msg
		rec state.Record
		rev uint64
	}
	var revs []revision
	latest := map[string]int{} // event id → its last revision in the batch
	for _, m := range msgs {
		rec, rev, ok := s.revisionOf(m)
		if !ok {
			continue
		}
		latest[rec.ID] = len(revs)
		revs = append(revs, revision{m, rec, rev})
	}
	for i, rv := range revs {
		m, rec, rev := rv.m, rv.rec, rv.rev
		if latest[rec.ID] != i {
			// A later revision of the event is in the batch, and its
			// history holds this one's entries: it writes them all. Were
			// it lost before its write, its redelivery would.
			metrics.Default.AuditArchived("merged")
			_ = m.Ack()
			continue
		}
		subject := audit.Subject(s.cfg.Prefix, rec.Account, rec.EntityID, rec.ID)
		if inflight[subject] {
			flush() // the event's previous write first: this one expects its sequence
		}
		last, _ := s.marks.get(subject) // none remembered: taken for a new event
		r, add := audit.Diff(rec, rev, last.Mark)
		if !add {
			metrics.Default.AuditArchived("unchanged")
			_ = m.Ack()
			continue
		}
		b, err := json.Marshal(r)
		if err != nil {
			_ = m.Term()
			continue
		}
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: b}, jetstream.WithExpectLastSequencePerSubject(last.seq))
		if err != nil {
			s.log.Warn().Err(err).Str("event_id", rec.ID).Msg("audit: archiving a revision failed; it is retried")
			_ = m.NakWithDelay(time.Second)
			continue
		}
		inflight[subject] = true
		pend = append(pend, archiveWrite{m: m, rec: rec, rev: rev, subject: subject, r: r, f: f})
	}
	flush()
}

// watchArchiveLag reports the archiver's consumers' backlog.
func (s *Service) watchArchiveLag(cons []jetstream.Consumer) {
	defer s.bg.Done()
	t := time.NewTicker(archiveLagEvery)
	defer t.Stop()
	for {
		lag := 0
		for _, c := range cons {
			ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Second)
			info, err := c.Info(ctx)
			cancel()
			if err != nil {
				lag = -1
				break
			}
			lag += int(info.NumPending) + info.NumAckPending
		}
		if lag >= 0 {
			metrics.Default.AuditLag(lag)
		}
		select {
		case <-s.runCtx.Done():
			return
		case <-t.C:
		}
	}
}

// revisionOf reads a revision of the state bucket; ok is false for one
// that is no record (a deletion, a purge, an expiry: the record's history
// was archived as it was written), which it settles.
func (s *Service) revisionOf(m jetstream.Msg) (state.Record, uint64, bool) {
	if op := m.Headers().Get("KV-Operation"); op != "" || m.Headers().Get("Nats-Marker-Reason") != "" || len(m.Data()) == 0 {
		metrics.Default.AuditArchived("skipped")
		_ = m.Ack()
		return state.Record{}, 0, false
	}
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return state.Record{}, 0, false
	}
	var rec state.Record
	if err := json.Unmarshal(m.Data(), &rec); err != nil || rec.ID == "" || rec.Account == "" {
		s.log.Error().Err(err).Str("subject", m.Subject()).Msg("audit: a state revision that is not a record; not archived")
		metrics.Default.AuditArchived("skipped")
		_ = m.Term()
		return state.Record{}, 0, false
	}
	return rec, meta.Sequence.Stream, true
}

// archiveOne archives one revision the one-at-a-time way.
func (s *Service) archiveOne(ctx context.Context, m jetstream.Msg, rec state.Record, rev uint64) {
	result, err := s.archiveRecord(ctx, rec, rev)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Str("event_id", rec.ID).Msg("audit: archiving a revision failed; it is retried")
		}
		_ = m.NakWithDelay(time.Second)
		return
	}
	metrics.Default.AuditArchived(result)
	_ = m.Ack()
}

// archiveRecord writes what revision rev of rec adds to the archive:
// "written", or "unchanged" when the archive has it all already.
func (s *Service) archiveRecord(ctx context.Context, rec state.Record, rev uint64) (string, error) {
	subject := audit.Subject(s.cfg.Prefix, rec.Account, rec.EntityID, rec.ID)
	for range archiveAttempts {
		last, ok := s.marks.get(subject)
		if !ok {
			var err error
			if last, err = s.lastMark(ctx, subject); err != nil {
				return "", err
			}
		}
		r, add := audit.Diff(rec, rev, last.Mark)
		if !add {
			return "unchanged", nil
		}
		b, err := json.Marshal(r)
		if err != nil {
			return "", err
		}
		ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: b}, jetstream.WithExpectLastSequencePerSubject(last.seq))
		if store.IsWrongSequence(err) {
			s.marks.drop(subject) // another write came first: see what it left
			continue
		}
		if err != nil {
			return "", fmt.Errorf("writing %s: %w", subject, err)
		}
		s.marks.put(subject, mark{seq: ack.Sequence, Mark: audit.MarkOf(r)})
		return "written", nil
	}
	return "", fmt.Errorf("writing %s: %d conflicting writes in a row", subject, archiveAttempts)
}

// lastMark reads the archive's last message of an event.
func (s *Service) lastMark(ctx context.Context, subject string) (mark, error) {
	raw, err := s.archive.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return mark{}, nil
	}
	if err != nil {
		return mark{}, fmt.Errorf("reading %s: %w", subject, err)
	}
	var r audit.Revision
	if err := json.Unmarshal(raw.Data, &r); err != nil {
		return mark{}, fmt.Errorf("reading %s: %w", subject, err)
	}
	return mark{seq: raw.Sequence, Mark: audit.MarkOf(r)}, nil
}

// archiveAction writes an operator action on an account or a breaker to
// the archive (its id in the duplicate window is its tenaz_ops key).
func (s *Service) archiveAction(ctx context.Context, key string, at time.Time, a []byte, account string) error {
	msg := &nats.Msg{Subject: audit.OpsSubject(s.cfg.Prefix, account, at.UnixNano()), Data: a, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, key)
	_, err := s.js.PublishMsg(ctx, msg)
	return err
}

// readArchive calls fn with every archived message matching filter (from
// since, when not zero), in the archive's order, and stops at what the
// archive held when it began.
func (s *Service) readArchive(ctx context.Context, filter string, since time.Time, fn func(subject string, data []byte) error) error {
	// A read's consumer is deleted when it ends (a screen that refreshes
	// must not pile them up); the short threshold is for a read cut off.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: 10 * time.Second}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	stream := s.subj.Stream(streams.StreamAudit)
	c, err := s.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("reading the audit archive: %w", err)
	}
	defer func() {
		if ci := c.CachedInfo(); ci != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.js.DeleteConsumer(dctx, stream, ci.Name)
			cancel()
		}
	}()
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the audit archive: %w", err)
	}
	// Each fetch asks for no more than is left, so that it completes at
	// once rather than waiting out its expiry.
	for left := info.NumPending; left > 0; {
		batch, err := c.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return fmt.Errorf("reading the audit archive: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			left--
			if err := fn(m.Subject(), m.Data()); err != nil {
				for range batch.Messages() { // let the fetch end
				}
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("reading the audit archive: %w", err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			// What was pending expired (audit.retention) meanwhile.
			return nil
		}
	}
	return nil
}
