package poller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// Repairs the reconciler makes (Report.Repaired keys).
const (
	RepairRequeued        = "requeued"         // pending/scheduled/retrying with no message on its way: published again
	RepairLostRun         = "lost_run"         // running far past any call, its message gone: put back to retrying and requeued
	RepairDeadlineMissed  = "deadline_missed"  // awaiting_callback past its deadline with no timer: deadline handled now
	RepairPollRescheduled = "poll_rescheduled" // polling past its next poll with no timer: poll scheduled now
)

// CountKey is one cell of the events-by-state census.
type CountKey struct {
	Account string      `json:"account"`
	Kind    string      `json:"kind"`
	State   state.State `json:"state"`
}

// Count is a census cell with its value (JSON-friendly).
type Count struct {
	CountKey
	N int `json:"n"`
}

// Report is what one sweep saw and did.
type Report struct {
	Started  time.Time      `json:"started"`
	Took     time.Duration  `json:"took_ns"`
	Scanned  int            `json:"scanned"`
	Overdue  int            `json:"overdue"`  // next step late by more than the grace
	Repaired map[string]int `json:"repaired"` // by kind of repair
	Failed   int            `json:"failed"`   // repairs that could not be made (next sweep tries again)
	Counts   []Count        `json:"counts"`   // events by account, kind and state
	Skipped  bool           `json:"skipped,omitempty"`
}

// Repairs is the total of r.Repaired.
func (r Report) Repairs() int {
	n := 0
	for _, v := range r.Repaired {
		n += v
	}
	return n
}

func (s *Service) reconcileLoop() {
	defer s.bg.Done()
	every := s.cfg.Poller.ReconcileEvery.D()
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-t.C:
		}
		wait := every
		if s.lease(every) {
			rep, err := s.Reconcile(s.runCtx)
			if err != nil && s.runCtx.Err() == nil {
				s.log.Warn().Err(err).Msg("reconciler sweep failed")
			}
			// A sweep reads every record: on a very large bucket, keep it
			// to at most a tenth of the time.
			wait = max(every, 10*rep.Took)
		}
		t.Reset(wait)
	}
}

// lease lets one poller replica sweep per period: the first to create the
// lease key (per-key TTL of one period) sweeps, the others skip.
func (s *Service) lease(ttl time.Duration) bool {
	kv, err := s.js.KeyValue(s.runCtx, s.subj.Bucket(names.BucketCallbacks))
	if err != nil {
		return true // sweeping twice is safe; not sweeping is not
	}
	_, err = kv.Create(s.runCtx, "lease.reconciler", []byte(s.actor), jetstream.KeyTTL(max(ttl-time.Second, time.Second)))
	return !store.IsKeyTaken(err)
}

// Reconcile sweeps every record once. It counts events by account, kind
// and state, and puts every non-terminal event whose next step is overdue
// by more than poller.grace back on its path: the invariant it keeps is
// that no event sits in a non-terminal state without a pending next step.
// Every repair is logged and counted. Repairs are safe to race with the
// normal path (compare-and-set, and a duplicate message is dropped by the
// dispatcher's claim).
func (s *Service) Reconcile(ctx context.Context) (Report, error) {
	rep := Report{Started: time.Now().UTC(), Repaired: map[string]int{}}
	counts := map[CountKey]int{}
	c := &sweep{s: s, backlog: map[string]int{}, streams: map[string]jetstream.Stream{}}
	now := s.st.Now()
	for _, kv := range s.st.KVs() { // a partition at a time
		if err := c.sweepBucket(ctx, kv, now, &rep, counts); err != nil {
			return rep, err
		}
	}
	census := make(map[metrics.EventsKey]int, len(counts))
	for k, n := range counts {
		rep.Counts = append(rep.Counts, Count{k, n})
		census[metrics.EventsKey{State: k.State, Account: k.Account, Kind: k.Kind}] = n
	}
	s.o.Metrics.SetEventsByState(census)
	rep.Took = time.Since(rep.Started)
	if f := s.o.OnSweep; f != nil {
		f(rep)
	}
	s.log.Info().Int("scanned", rep.Scanned).Int("overdue", rep.Overdue).Int("repaired", rep.Repairs()).
		Dur("took", rep.Took).Msg("reconciler sweep")
	return rep, nil
}

// sweepBucket is Reconcile over one partition's state bucket.
func (c *sweep) sweepBucket(ctx context.Context, kv jetstream.KeyValue, now time.Time, rep *Report, counts map[CountKey]int) error {
	s := c.s
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil {
			return nil // the initial values are all in
		}
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		rep.Scanned++
		h, err := state.DecodeHead(e.Value())
		if err != nil {
			continue
		}
		counts[CountKey{h.Account, h.Kind, h.Status}]++
		kind, due := c.overdue(h, now)
		if kind == "" {
			continue
		}
		rep.Overdue++
		ok, err := c.repair(ctx, kind, h, due)
		switch {
		case err != nil:
			rep.Failed++
			s.log.Warn().Err(err).Str("event_id", h.ID).Str("repair", kind).Msg("reconciler could not repair")
		case ok:
			rep.Repaired[kind]++
			s.o.Metrics.ReconcilerRepair(kind)
			s.log.Warn().Str("event_id", h.ID).Str("account", h.Account).Str("status", string(h.Status)).
				Str("repair", kind).Time("was_due", due).Msg("reconciler repaired a stuck event")
		}
	}
}

// sweep caches per-account facts for one pass.
type sweep struct {
	s       *Service
	backlog map[string]int              // account → its messages in EVENTS; -1 = unknown
	streams map[string]jetstream.Stream // EVENTS partitions looked up so far
}

// overdue says which repair h may need (checked further by repair), and
// when its next step was due.
func (c *sweep) overdue(h state.Head, now time.Time) (string, time.Time) {
	grace := c.s.cfg.Poller.Grace.D()
	late := func(t *time.Time) bool { return t != nil && now.After(t.Add(grace)) }
	switch h.Status {
	case state.Pending:
		if now.After(h.UpdatedAt.Add(grace)) {
			return RepairRequeued, h.UpdatedAt
		}
	case state.Scheduled, state.Retrying:
		if late(h.NextRunAt) {
			return RepairRequeued, *h.NextRunAt
		}
	case state.Running:
		if now.After(h.UpdatedAt.Add(c.s.cfg.Poller.RunningGrace.D())) {
			return RepairLostRun, h.UpdatedAt
		}
	case state.AwaitingCallback:
		if late(h.NextRunAt) {
			return RepairDeadlineMissed, *h.NextRunAt
		}
	case state.Polling:
		if late(h.NextRunAt) {
			return RepairPollRescheduled, *h.NextRunAt
		}
	}
	return "", time.Time{}
}

// accountBacklog is the account's messages in EVENTS: waiting, in
// flight, or settled and not trimmed yet (its owner trims within
// streams.trim_after).
func (c *sweep) accountBacklog(ctx context.Context, account string) int {
	if n, ok := c.backlog[account]; ok {
		return n
	}
	n := -1
	if st, err := c.stream(ctx, c.s.subj.EventsStream(account)); err == nil {
		if info, err := st.Info(ctx, jetstream.WithSubjectFilter(c.s.subj.EventsOf(account))); err == nil {
			n = 0
			for _, k := range info.State.Subjects {
				n += int(k)
			}
		}
	}
	c.backlog[account] = n
	return n
}

// runMessageKept reports whether the message rec's run was claimed for
// is still in EVENTS: then the run is not lost, however long it has been
// running. Its dispatcher holds it while the call waits for the
// account's rate or the target's limit (at a slow rate, for longer than
// running_grace), and if that dispatcher died the server hands the
// message out again (the consumer never gives a message up). Taking such
// a run for lost made a second call: the first went out once its turn
// came, its outcome ignored. A run is lost only once its message is gone
// (settled, or removed) with the record still running.
func (c *sweep) runMessageKept(ctx context.Context, rec state.Record) (bool, error) {
	if rec.RunSeq == 0 {
		return false, nil
	}
	st, err := c.stream(ctx, c.s.subj.EventsStream(rec.Account))
	if err != nil {
		return false, err
	}
	m, err := st.GetMsg(ctx, rec.RunSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The event's own message, not its schedule's (a schedule holds the
	// same envelope, and a migration maps a run's sequence to the
	// nearest message it copied).
	if !strings.HasPrefix(m.Subject, strings.TrimSuffix(c.s.subj.EventsOf(rec.Account), ">")) {
		return false, nil
	}
	env, err := event.Unmarshal(m.Data)
	return err == nil && env.ID == rec.ID, nil
}

// stream is the named EVENTS partition, looked up once a sweep: each
// account's count then costs one round trip, not two.
func (c *sweep) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if st, ok := c.streams[name]; ok {
		return st, nil
	}
	st, err := c.s.js.Stream(ctx, name)
	if err == nil {
		c.streams[name] = st
	}
	return st, err
}

// repair makes the repair if the event really has no next step on its
// way; ok is false when it turned out to have one.
func (c *sweep) repair(ctx context.Context, kind string, h state.Head, due time.Time) (bool, error) {
	s := c.s
	now := s.st.Now()
	if kind != RepairLostRun {
		// A pending schedule (delay, retry, lane park, deadline, poll)
		// is a next step on its way, however late the server is.
		if has, err := s.q.HasSchedule(ctx, h.Account, h.ID); err != nil || has {
			return false, err
		}
	}
	rec, rev, err := s.st.Get(ctx, h.Account, h.ID)
	if err != nil {
		return false, err
	}
	if rec.Status != h.Status {
		return false, nil // moved on since the sweep read it
	}
	env, err := s.st.Envelope(rec)
	if err != nil {
		return false, err
	}
	switch kind {
	case RepairRequeued:
		// A message may be queued behind others on a busy or paused
		// account; only once the account has nothing on its way, or the
		// event is late beyond the running grace, is it taken for lost.
		if b := c.accountBacklog(ctx, h.Account); b > 0 && now.Sub(due) < s.cfg.Poller.RunningGrace.D() {
			return false, nil
		}
		_, err := s.q.Enqueue(ctx, env, fmt.Sprintf("%s/reconcile/%d", h.ID, rev))
		return err == nil, err
	case RepairLostRun:
		if held, err := c.runMessageKept(ctx, rec); err != nil || held {
			return false, err
		}
		at := now.UTC()
		next, _, err := state.Apply(rec, state.Action{Name: state.Recover, Actor: "reconciler", NextRunAt: &at,
			Detail: fmt.Sprintf("running since %s with no outcome: the run is taken for lost", rec.UpdatedAt.Format(time.RFC3339))}, now)
		if err != nil {
			return false, err
		}
		nrev, err := s.write(ctx, next, rev)
		if err != nil {
			return false, err
		}
		_, err = s.q.Enqueue(ctx, env, fmt.Sprintf("%s/reconcile/%d", h.ID, nrev))
		return err == nil, err
	case RepairDeadlineMissed:
		err := s.deadlinePassed(ctx, env, rec, rev, now)
		return err == nil, err
	case RepairPollRescheduled:
		err := s.q.Timer(ctx, env, now, queue.TimerPoll, fmt.Sprintf("%s/reconcile/%d", h.ID, rev))
		return err == nil, err
	}
	return false, nil
}
