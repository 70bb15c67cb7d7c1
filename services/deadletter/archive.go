package deadletter

import (
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
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// The archiver writes the audit archive (TENAZ_AUDIT, pkg/audit) from the
// state buckets' change feed, which it reads with the search index: the
// indexer hands it each batch's records (search.IndexerOptions.Follow),
// and acknowledges the batch once both have written it, so that one
// consumer per partition (streams/data/consumer-deadletter-feed.json)
// delivers and decodes each revision once. Each record becomes one
// message holding the history entries it added. It is off the events'
// path: nothing the dispatcher, poller or ingest do waits for it, and
// what it has not read yet waits in the feed (tenaz_audit_lag_revisions).
//
// Each message is written with the expected last sequence of its event's
// subject, so a redelivery, or another replica taking the feed over, never
// writes an entry twice: the loser re-reads what the archive holds and
// writes only what is still missing. Deleting the feed's consumers
// rebuilds the archive's missing entries from the records there are.
//
// A batch is written pipelined (async publishes, then their acks), each
// on the last write of its event this replica remembers; an event it does
// not remember is taken for a new one, and the server's refusal (the
// subject has messages) sends that record down the one-at-a-time path,
// which reads the event's last message first.

// Tuning of the archiver.
const (
	archiveAttempts = 8
	// archiveMarks bounds the marks kept in memory (the last message of
	// recently seen events); a miss costs one direct get.
	archiveMarks    = 1 << 16
	archiveLagEvery = 10 * time.Second
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

// startArchive binds TENAZ_AUDIT; the archiver runs in the indexer's
// steps (startSearch).
func (s *Service) startArchive(ctx context.Context) error {
	var err error
	name := s.subj.Stream(streams.StreamAudit)
	if s.archive, err = s.js.Stream(ctx, name); err != nil {
		return fmt.Errorf("deadletter: stream %s: %w", name, err)
	}
	return nil
}

// archiveWrite is one record's write in flight.
type archiveWrite struct {
	rv      search.Revision
	subject string
	r       audit.Revision
	f       jetstream.PubAckFuture
}

// archiveRevisions writes what each of a batch's records (one per event)
// adds, pipelined; after an error the indexer hands the batch over again.
func (s *Service) archiveRevisions(ctx context.Context, revs []search.Revision) error {
	pend := make([]archiveWrite, 0, len(revs))
	for _, rv := range revs {
		subject := audit.Subject(s.cfg.Prefix, rv.Record.Account, rv.Record.EntityID, rv.Record.ID)
		last, _ := s.marks.get(subject) // none remembered: taken for a new event
		r, add := audit.Diff(rv.Record, rv.Seq, last.Mark)
		if !add {
			metrics.Default.AuditArchived("unchanged")
			continue
		}
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("audit: encode %s: %w", rv.Record.ID, err)
		}
		f, err := s.follow.PublishMsgAsync(&nats.Msg{Subject: subject, Data: b}, jetstream.WithExpectLastSequencePerSubject(last.seq), jetstream.WithStallWait(search.StallWait))
		if err != nil {
			return fmt.Errorf("audit: archive %s: %w", rv.Record.ID, err)
		}
		pend = append(pend, archiveWrite{rv: rv, subject: subject, r: r, f: f})
	}
	for _, w := range pend {
		select {
		case ack := <-w.f.Ok():
			s.marks.put(w.subject, mark{seq: ack.Sequence, Mark: audit.MarkOf(w.r)})
			metrics.Default.AuditArchived("written")
		case err := <-w.f.Err():
			s.marks.drop(w.subject)
			if !store.IsWrongSequence(err) {
				return fmt.Errorf("audit: archive %s: %w", w.rv.Record.ID, err)
			}
			// Not new, or written meanwhile: see what the archive holds.
			result, err := s.archiveRecord(ctx, w.rv.Record, w.rv.Seq)
			if err != nil {
				return fmt.Errorf("audit: archive %s: %w", w.rv.Record.ID, err)
			}
			metrics.Default.AuditArchived(result)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// watchArchiveLag reports the feed's backlog as the archive's.
func (s *Service) watchArchiveLag(x *search.Indexer) {
	defer s.bg.Done()
	t := time.NewTicker(archiveLagEvery)
	defer t.Stop()
	for {
		metrics.Default.AuditLag(int(x.Lag()))
		select {
		case <-s.runCtx.Done():
			return
		case <-t.C:
		}
	}
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
