package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// The index: DEAD is the durable feed of everything dead or in manual
// review; the bucket tenaz_deadindex holds one small item per event that
// is still dead or in review; every replica watches the bucket into an
// in-memory index.Index that serves the lists.
//
// Why a bucket and not an index rebuilt by each replica from DEAD: an
// arrival is confirmed against the event's record once (by whichever
// replica the durable consumer hands it to), not once per replica; an
// operator's action on any replica removes the item from every replica's
// lists through the watch; and a replica starts by loading only what is
// still dead (small items), not every DEAD entry ever written with its
// payload and history. The bucket is derived data: deleting it together
// with the consumer deadletter-index rebuilds it from DEAD.

// pendingWrite is how long after its arrival in DEAD an entry whose record
// is still active is waited for: the dispatcher publishes the entry before
// it writes the record, so the record may still read running for a moment.
const pendingWrite = 2 * time.Minute

// arrivalWorkers is how many DEAD arrivals one replica confirms at once
// (each is a few round trips; the consumer allows 256 in flight).
const arrivalWorkers = 32

// markerTTL is how long the purge marker of an item that left stays.
const markerTTL = 10 * time.Minute

// ReasonTerminated is the reason of an entry moved to DEAD because a
// client terminated its EVENTS message while the event was still active.
const ReasonTerminated = "terminated"

// dataConsumer returns the consumer config of a streams/data file with the
// subject prefix applied.
func (s *Service) dataConsumer(name string) func() (jetstream.ConsumerConfig, error) {
	return func() (jetstream.ConsumerConfig, error) {
		c, err := streams.DataConsumer(name)
		if err != nil {
			return c, err
		}
		if rest, ok := strings.CutPrefix(c.FilterSubject, "tenaz."); ok {
			c.FilterSubject = s.cfg.Prefix + "." + rest
		}
		return c, nil
	}
}

// startView watches the index bucket into s.x and returns once the
// current items are loaded.
func (s *Service) startView(ctx context.Context) error {
	s.x.Reset() // a restart must not keep what was purged while stopped
	w, err := s.kvIdx.WatchAll(s.runCtx)
	if err != nil {
		return fmt.Errorf("deadletter: watch %s: %w", s.subj.Bucket(BucketIndex), err)
	}
	s.watch, s.watchEnd = w, make(chan struct{})
	ready := make(chan struct{})
	go func(ready chan struct{}) {
		defer close(s.watchEnd)
		for e := range w.Updates() {
			if e == nil {
				if ready != nil {
					close(ready)
					ready = nil
				}
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				s.x.Delete(e.Key())
				continue
			}
			var it ops.Item
			if err := json.Unmarshal(e.Value(), &it); err != nil {
				s.log.Warn().Err(err).Str("key", e.Key()).Msg("undecodable index item ignored")
				continue
			}
			s.x.Put(e.Key(), e.Revision(), it)
		}
	}(ready)
	select {
	case <-ready:
		return nil
	case <-s.watchEnd:
		return fmt.Errorf("deadletter: watch %s ended before the initial values", s.subj.Bucket(BucketIndex))
	case <-ctx.Done():
		return fmt.Errorf("deadletter: loading the index: %w", context.Cause(ctx))
	}
}

// seqKey is the index key of a DEAD entry without an event.
func seqKey(seq uint64) string { return "seq_" + strconv.FormatUint(seq, 10) }

// keyOf is the index key of an item.
func keyOf(it ops.Item) string {
	if it.ID != "" {
		return it.ID
	}
	return seqKey(it.Seq)
}

// handleArrival confirms one DEAD entry against its event's record and
// indexes it while the event is dead or in review.
func (s *Service) handleArrival(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	it := ops.Item{Seq: meta.Sequence.Stream, At: meta.Timestamp.UTC(), Status: state.Dead}
	var e dead.Entry
	if err := json.Unmarshal(m.Data(), &e); err != nil {
		// Kept as it is: an operator sees it and may discard it.
		it.Reason, it.Class, it.Error = dead.ReasonRejected, "malformed_entry", "undecodable DEAD entry: "+err.Error()
		if acct, kind, ok := s.parseDead(m.Subject()); ok {
			it.Account, it.Kind = acct, kind
		}
		s.settleArrival(ctx, m, it, nil)
		return
	}
	it.ID, it.Account, it.Kind, it.Reason = e.ID, e.Account, e.Kind, e.Reason
	it.Class, it.Error, it.HTTPStatus = e.Class, e.Error, e.Status
	if e.Record != nil {
		it.Attempts, it.Stage = e.Record.Attempts, e.Record.Stage
	}
	if e.ID == "" {
		s.settleArrival(ctx, m, it, nil)
		if e.Reason == dead.ReasonRejected { // nobody else advises a refused submission
			s.adviseRaw(it)
		}
		return
	}
	rec, _, err := s.st.Get(ctx, e.Account, e.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		_ = m.Ack() // the record is gone (expired after it was resolved)
		return
	case errors.Is(err, store.ErrUndecodable) && e.Record != nil:
		// Read again it never would: listed from the entry's copy, so
		// that an operator sees it, its error saying why.
		it.Error = err.Error() + "; listed from its DEAD entry: " + it.Error
		rec = *e.Record
	case err != nil:
		_ = m.NakWithDelay(time.Second)
		return
	}
	if !rec.Status.Parked() {
		if !rec.Status.Terminal() && s.now().Sub(it.At) < pendingWrite {
			_ = m.NakWithDelay(500 * time.Millisecond) // the writer has not stored the record yet
			return
		}
		_ = m.Ack() // replayed, resolved or discarded since: nothing to list
		return
	}
	it.Status, it.Attempts, it.Stage = rec.Status, rec.Attempts, rec.Stage
	if it.Class == "" && rec.LastError != nil {
		it.Class, it.Error, it.HTTPStatus = rec.LastError.Class, rec.LastError.Message, rec.LastError.HTTPStatus
	}
	s.settleArrival(ctx, m, it, &rec)
}

// settleArrival puts it in the index bucket unless a newer entry of the
// same event is there, then acks m.
func (s *Service) settleArrival(ctx context.Context, m jetstream.Msg, it ops.Item, rec *state.Record) {
	rev, err := s.putItem(ctx, it)
	if err != nil {
		s.log.Warn().Err(err).Uint64("seq", it.Seq).Msg("indexing a DEAD entry; will retry")
		_ = m.NakWithDelay(time.Second)
		return
	}
	if rev != 0 { // a new arrival (a redelivered one finds its entry in place)
		kind := it.Kind
		if _, ok := s.cfg.Kind(kind); !ok {
			kind = metrics.Unconfigured
		}
		if it.Reason == dead.ReasonReview {
			metrics.Review(it.Account, kind)
		} else {
			metrics.Dead(it.Account, kind, it.Reason)
		}
	}
	if rec != nil && rev != 0 {
		// An operator may have acted between the read above and the write:
		// the action purges the item after its transition, so read again.
		if cur, _, err := s.st.Get(ctx, it.Account, it.ID); err == nil && !cur.Status.Parked() {
			s.purge(ctx, it.ID, rev)
		}
	}
	_ = m.Ack()
}

// putItem writes it under its key by compare-and-set, unless the key holds
// an entry at least as new; rev is the revision written (0 if none).
func (s *Service) putItem(ctx context.Context, it ops.Item) (uint64, error) {
	key := keyOf(it)
	val, err := json.Marshal(it)
	if err != nil {
		return 0, err
	}
	var ttl jetstream.KVCreateOpt
	if it.ID == "" {
		// A refused submission lives in its DEAD entry alone: its item
		// goes when deadletter.retention removes the entry.
		ttl = jetstream.KeyTTL(max(s.cfg.Deadletter.Retention.D()-s.now().Sub(it.At), time.Second))
	}
	for range 16 {
		// Most arrivals are an event's first: try to create first.
		rev, err := s.kvIdx.Create(ctx, key, val, ttl)
		if !store.IsKeyTaken(err) {
			return rev, err
		}
		if it.ID == "" {
			return 0, nil // a redelivered arrival: its item is in place
		}
		cur, err := s.kvIdx.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return 0, err
		}
		var old ops.Item
		if json.Unmarshal(cur.Value(), &old) == nil && old.Seq > it.Seq {
			return 0, nil // a newer death of the same event is indexed
		}
		rev, err = s.kvIdx.Update(ctx, key, val, cur.Revision())
		if isWrongLast(err) {
			continue
		}
		return rev, err
	}
	return 0, fmt.Errorf("index %s: too many conflicting writers", key)
}

func isWrongLast(err error) bool { return store.IsWrongSequence(err) }

// forget removes key from the index (every replica's view), unless it was
// rewritten since this replica saw it.
func (s *Service) forget(ctx context.Context, key string) {
	_, rev, ok := s.x.Get(key)
	if !ok {
		e, err := s.kvIdx.Get(ctx, key)
		if err != nil {
			return
		}
		rev = e.Revision()
	}
	s.purge(ctx, key, rev)
}

// forgetEntry removes an event's item if it still lists its DEAD entry at
// seq: a newer death of the event, listed under the same key, stays.
func (s *Service) forgetEntry(ctx context.Context, id string, seq uint64) {
	cur, err := s.kvIdx.Get(ctx, id)
	if err != nil {
		return
	}
	var it ops.Item
	if json.Unmarshal(cur.Value(), &it) == nil && it.Seq == seq {
		s.purge(ctx, id, cur.Revision())
	}
}

// checkRate bounds the reads of checkView, per second.
const checkRate = 200

// checkView removes the items whose event is no longer dead or in review,
// once, when the replica starts. An action stores its transition, then
// purges the item: a replica that died between the two (a deploy, an
// OOM kill) left the event listed where it is not, and the replica that
// replaces it is the one to look. An item is purged only at the revision
// read before its record, so a newer death of the event, which rewrites
// the item, stays listed. A replay purges the item only once its EVENTS
// message is published: an item whose replay was cut short before is
// finished here (finishReplay).
func (s *Service) checkView() {
	defer s.bg.Done()
	ctx := s.runCtx
	rl := ratelimiter.NewSmoothWithMaxRate[any](time.Second / checkRate)
	purged, finished := 0, 0
	for _, st := range []state.State{state.Dead, state.ManualReview} {
		q := ops.ListRequest{Limit: ops.MaxLimit}
		for {
			page, err := s.x.List(st, q)
			if err != nil {
				return
			}
			for _, it := range page.Items {
				if it.ID == "" {
					continue // a refused submission: its entry is all there is
				}
				if rl.AcquirePermit(ctx) != nil {
					return
				}
				_, rev, ok := s.x.Get(it.ID)
				if !ok {
					continue
				}
				rec, _, err := s.st.Get(ctx, it.Account, it.ID)
				switch {
				case err == nil && unfinishedReplay(rec):
					s.finishReplay(ctx, it.Account, it.ID, it.Seq)
					finished++
				case errors.Is(err, store.ErrNotFound) || err == nil && !rec.Status.Parked():
					if s.purge(ctx, it.ID, rev) {
						purged++
					}
				}
			}
			if q.Cursor = page.NextCursor; q.Cursor == "" {
				break
			}
		}
	}
	if purged > 0 {
		s.log.Info().Int("items", purged).Msg("removed listed events that were no longer dead or in review")
	}
	if finished > 0 {
		s.log.Info().Int("events", finished).Msg("finished replays that a stopped replica had left undone")
	}
}

// purge removes key if its revision is still rev, and reports whether it
// did. A purge that fails for another reason than a rewrite (the server
// restarting, a timeout) is tried again: an item left behind lists its
// event where it no longer is until a replica starts (checkView).
func (s *Service) purge(ctx context.Context, key string, rev uint64) bool {
	err := thrice(ctx, func() error {
		return s.kvIdx.Purge(ctx, key, jetstream.PurgeTTL(markerTTL), jetstream.LastRevision(rev))
	}, isWrongLast)
	switch {
	case err == nil:
		s.x.DeleteAt(key, rev) // this replica's lists change at once; the watch confirms
		return true
	case isWrongLast(err):
		s.log.Debug().Err(err).Str("key", key).Msg("index purge skipped (rewritten meanwhile)")
	default:
		s.log.Warn().Err(err).Str("key", key).Msg("removing a settled event's list item failed; the next replica to start removes it")
	}
	return false
}

// parseDead splits <prefix>.dead.<account>.<kind>.
func (s *Service) parseDead(subject string) (string, string, bool) {
	rest, ok := strings.CutPrefix(subject, s.cfg.Prefix+".dead.")
	if !ok {
		return "", "", false
	}
	acct, kind, ok := strings.Cut(rest, ".")
	return acct, kind, ok
}

// adviseRaw publishes the dead advisory of an entry without an event.
func (s *Service) adviseRaw(it ops.Item) {
	acct, kind := dead.Tokens(it.Account, it.Kind)
	b, _ := json.Marshal(dead.Advisory{Account: it.Account, Kind: it.Kind, Reason: it.Reason, Class: it.Class,
		Error: it.Error, HTTPStatus: it.HTTPStatus, At: it.At})
	_ = s.o.Conn.Publish(s.subj.AdvisoryDead(acct, kind), b)
}
