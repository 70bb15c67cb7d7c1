// Package queue puts events on their way through the EVENTS stream: now
// (Enqueue), or later through a server-side message schedule on the
// event's own schedule subject (ScheduleAt), which survives every restart
// and is cancelled by purging that subject. Messages carry the envelope,
// so whoever receives one has everything needed to act.
//
//	q := queue.New(js, names.NewSubjects(""))
//	_, err := q.EnqueueFresh(ctx, env, rev, env.ID) // a just-accepted event; Nats-Msg-Id dedups re-sends
package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
)

// HeaderRev carries the state record's revision at the time the message
// was published: a dispatcher may claim by compare-and-set on it without
// reading the record first. In a store that was migrated it is
// "<revision> <epoch>" (names.Subjects.Epoch): a migration moves records
// to other buckets, where the same number may be another revision, so a
// revision is only used in the epoch it was written in (RevOf).
const HeaderRev = "Tenaz-Rev"

// revValue is HeaderRev's value for rev in epoch.
func revValue(rev uint64, epoch string) string {
	if epoch == "" {
		return strconv.FormatUint(rev, 10)
	}
	return strconv.FormatUint(rev, 10) + " " + epoch
}

// RevOf is the record revision h carries, when it was written in epoch;
// ok is false when it carries none, or one of another epoch (the record
// must be read).
func RevOf(h nats.Header, epoch string) (rev uint64, ok bool) {
	v, e, _ := strings.Cut(h.Get(HeaderRev), " ")
	if e != epoch {
		return 0, false
	}
	rev, err := strconv.ParseUint(v, 10, 64)
	return rev, err == nil && rev > 0
}

// Queue publishes to the EVENTS stream of each event's partition.
type Queue struct {
	js   jetstream.JetStream
	subj names.Subjects

	mu     sync.Mutex
	events map[string]jetstream.Stream // by name, cached: CancelSchedule runs once per completed callback
}

// stream returns the handle of account's EVENTS stream, looked up once.
func (q *Queue) stream(ctx context.Context, account string) (jetstream.Stream, error) {
	name := q.subj.EventsStream(account)
	q.mu.Lock()
	defer q.mu.Unlock()
	if s, ok := q.events[name]; ok {
		return s, nil
	}
	s, err := q.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	if q.events == nil {
		q.events = map[string]jetstream.Stream{}
	}
	q.events[name] = s
	return s, nil
}

// New returns a Queue.
func New(js jetstream.JetStream, s names.Subjects) *Queue { return &Queue{js: js, subj: s} }

func (q *Queue) msg(env event.Envelope, subject string, rev uint64, msgID string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = env.Marshal()
	m.Header.Set(names.HeaderEventID, env.ID)
	if rev > 0 {
		m.Header.Set(HeaderRev, revValue(rev, q.subj.Epoch))
	}
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	return m
}

// Enqueue publishes the event for dispatch now, for any record but a
// fresh one (a fallback, a replay, a repair): the dispatcher reads the
// record before it claims. msgID dedups re-sends within the stream's
// duplicate window.
func (q *Queue) Enqueue(ctx context.Context, env event.Envelope, msgID string) (*jetstream.PubAck, error) {
	return q.publish(ctx, env, 0, msgID)
}

// EnqueueFresh publishes a just-accepted event whose record is exactly
// Initial(env) at revision rev: the dispatcher may claim it by
// compare-and-set on rev without reading it. Never use it for a record
// that moved on: the claim would overwrite that record with Initial(env).
func (q *Queue) EnqueueFresh(ctx context.Context, env event.Envelope, rev uint64, msgID string) (*jetstream.PubAck, error) {
	return q.publish(ctx, env, rev, msgID)
}

func (q *Queue) publish(ctx context.Context, env event.Envelope, rev uint64, msgID string) (*jetstream.PubAck, error) {
	subj, err := q.subj.Event(env.Account, env.Kind)
	if err != nil {
		return nil, err
	}
	ack, err := q.js.PublishMsg(ctx, q.msg(env, subj, rev, msgID))
	if err != nil {
		return nil, fmt.Errorf("queue: enqueue %s: %w", env.ID, err)
	}
	return ack, nil
}

// EnqueueAsync is EnqueueFresh without waiting for the server's answer
// (the same rule: only for a record exactly as Initial(env) built it).
func (q *Queue) EnqueueAsync(env event.Envelope, rev uint64, msgID string) (jetstream.PubAckFuture, error) {
	subj, err := q.subj.Event(env.Account, env.Kind)
	if err != nil {
		return nil, err
	}
	return q.js.PublishMsgAsync(q.msg(env, subj, rev, msgID))
}

// DueTime rounds t up to the whole second: schedules fire with second
// precision, so the recorded due time is never later than the firing.
func DueTime(t time.Time) time.Time {
	r := t.UTC().Truncate(time.Second)
	if r.Before(t) {
		r = r.Add(time.Second)
	}
	return r
}

// DueSlack is the clock skew tolerated between a replica and the server
// that fired a schedule or a timer.
const DueSlack = 2 * time.Second

// Early reports whether a schedule or timer firing at now came before
// the step due at at (nil: none is due) by more than DueSlack: a stale
// copy, or one that replaced the event's own.
func Early(now time.Time, at *time.Time) bool {
	return at != nil && now.Before(at.Add(-DueSlack))
}

// HeaderParked marks a schedule that parks an event waiting in its ordered
// lane (as opposed to a delay or a retry): only such a schedule may be
// fired early by the event's predecessor.
const HeaderParked = "Tenaz-Parked"

// FiredParking reports whether a message with headers h was fired by the
// server from a parking schedule (Park): the safety net, not a wake,
// which publishes the envelope without the mark.
func FiredParking(h nats.Header) bool {
	return h.Get(HeaderParked) != "" && h.Get(jetstream.SchedulerHeader) != ""
}

// Park is ScheduleAt for an event waiting in its ordered lane: the
// schedule is the safety net that fires at time at; the predecessor's
// finisher normally fires it early (queue users check HeaderParked).
func (q *Queue) Park(ctx context.Context, env event.Envelope, at time.Time) error {
	return q.schedule(ctx, env, at, 0, "", true)
}

// ScheduleAt makes the server publish the event to its dispatch subject at
// time at (rounded up to the second). The event's schedule subject holds
// one schedule: a newer one replaces it (rollup).
func (q *Queue) ScheduleAt(ctx context.Context, env event.Envelope, at time.Time, msgID string) error {
	return q.schedule(ctx, env, at, 0, msgID, false)
}

// ScheduleFresh is ScheduleAt for a just-accepted delayed event whose
// record is exactly Initial(env) at revision rev: the fired message
// carries rev, so the dispatcher claims it (due, then claim) without a
// read, as it does a fresh event. The rule of EnqueueFresh applies.
func (q *Queue) ScheduleFresh(ctx context.Context, env event.Envelope, at time.Time, rev uint64) error {
	return q.schedule(ctx, env, at, rev, "", false)
}

func (q *Queue) schedule(ctx context.Context, env event.Envelope, at time.Time, rev uint64, msgID string, parked bool) error {
	target, err := q.subj.Event(env.Account, env.Kind)
	if err != nil {
		return err
	}
	m := q.msg(env, q.subj.Schedule(env.Account, env.ID), rev, msgID)
	m.Header.Set("Nats-Schedule", "@at "+DueTime(at).Format(time.RFC3339))
	m.Header.Set("Nats-Schedule-Target", target)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if parked {
		m.Header.Set(HeaderParked, "lane")
	}
	if err := q.arm(ctx, env, m); err != nil {
		return fmt.Errorf("queue: schedule %s: %w", env.ID, err)
	}
	return nil
}

// arm publishes m, a schedule on env's schedule subject. The server drops
// a message whose id it has seen within the stream's duplicate window,
// even when the schedule first published under that id has fired or was
// purged since (a fired schedule purges its subject; another copy of the
// same timer, fired meanwhile, does too): the event would wait for a step
// that nothing fires. So a duplicate that leaves the subject without a
// schedule is published again, without its id. One still there, this
// decision's or a newer one's, stands.
func (q *Queue) arm(ctx context.Context, env event.Envelope, m *nats.Msg) error {
	ack, err := q.js.PublishMsg(ctx, m)
	if err != nil || !ack.Duplicate {
		return err
	}
	if has, err := q.HasSchedule(ctx, env.Account, env.ID); err != nil || has {
		return err
	}
	m.Header.Del(jetstream.MsgIDHeader)
	_, err = q.js.PublishMsg(ctx, m)
	return err
}

// Timer kinds (the value of names.HeaderTimer).
const (
	TimerDeadline = "deadline" // a callback is awaited until then
	TimerPoll     = "poll"     // the poller asks the target then
)

// Timer makes the server publish the event onto its timer subject (the
// poller's) at time at: a callback deadline or the next poll. It shares
// the event's schedule subject, so it replaces any earlier schedule.
func (q *Queue) Timer(ctx context.Context, env event.Envelope, at time.Time, what, msgID string) error {
	target, err := q.subj.Timer(env.Account, env.Kind)
	if err != nil {
		return err
	}
	m := q.msg(env, q.subj.Schedule(env.Account, env.ID), 0, msgID)
	m.Header.Set("Nats-Schedule", "@at "+DueTime(at).Format(time.RFC3339))
	m.Header.Set("Nats-Schedule-Target", target)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(names.HeaderTimer, what)
	if err := q.arm(ctx, env, m); err != nil {
		return fmt.Errorf("queue: timer %s: %w", env.ID, err)
	}
	return nil
}

// HasSchedule reports whether account's event id has a schedule waiting
// to fire.
func (q *Queue) HasSchedule(ctx context.Context, account, id string) (bool, error) {
	s, err := q.stream(ctx, account)
	if err != nil {
		return false, err
	}
	_, err = s.GetLastMsgForSubject(ctx, q.subj.Schedule(account, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// EnsureNext makes sure the event's schedule subject holds the step rec
// waits for: its retry or its delay (a dispatch schedule at NextRunAt), its
// callback deadline or its next poll (a timer). It publishes nothing when
// the subject holds a schedule, and logs a warning (to ctx's logger) when
// it does publish.
//
// Whoever gets a message that finds the event waiting for another step
// calls it: such a message (a dispatch message for an event awaiting its
// callback, a timer for a retrying event, a retry that fires before the
// event is due) came from a schedule that replaced the event's own on its
// subject, the outcome of a run another replica had taken over, published
// after the winner's (docs/chaos.md, bugs 7 and 10). The event's own step
// went with it.
func (q *Queue) EnsureNext(ctx context.Context, env event.Envelope, rec state.Record, now time.Time) error {
	var at *time.Time
	timer := ""
	switch rec.Status {
	case state.Retrying, state.Scheduled:
		at = rec.NextRunAt
	case state.AwaitingCallback:
		at, timer = rec.Deadline, TimerDeadline
	case state.Polling:
		at, timer = rec.NextRunAt, TimerPoll
	}
	if at == nil {
		return nil
	}
	if has, err := q.HasSchedule(ctx, env.Account, env.ID); err != nil || has {
		return err
	}
	when := *at
	if when.Before(now) {
		when = now
	}
	zerolog.Ctx(ctx).Warn().Str("status", string(rec.Status)).Msg("the event's next step was replaced by another schedule: set again")
	if timer != "" {
		return q.Timer(ctx, env, when, timer, "")
	}
	return q.ScheduleAt(ctx, env, when, "")
}

// Wake fires the parking schedule of account's event id now: it
// re-publishes the parked event to its dispatch subject and deletes that
// schedule. Only a parking schedule is fired (HeaderParked): the event may
// have moved on and hold a retry or a timer there, which must keep its
// time. scheduled reports whether the event held a schedule of any kind;
// one that holds none has not parked yet (its own message is on its way)
// or has left its lane's wait for good (cancelled, finished).
func (q *Queue) Wake(ctx context.Context, account, id string) (scheduled bool, err error) {
	s, err := q.stream(ctx, account)
	if err != nil {
		return false, fmt.Errorf("queue: wake %s: %w", id, err)
	}
	sm, err := s.GetLastMsgForSubject(ctx, q.subj.Schedule(account, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("queue: wake %s: %w", id, err)
	}
	if sm.Header.Get(HeaderParked) == "" {
		return true, nil
	}
	env, err := event.Unmarshal(sm.Data)
	if err != nil {
		return true, nil // not an envelope: nothing to fire; its schedule fires what it holds
	}
	subj, err := q.subj.Event(env.Account, env.Kind)
	if err != nil {
		return true, nil
	}
	m := nats.NewMsg(subj)
	m.Data = sm.Data
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s/wake/%d", id, sm.Sequence))
	if _, err := q.js.PublishMsg(ctx, m); err != nil {
		return true, fmt.Errorf("queue: wake %s: %w", id, err)
	}
	// Delete exactly the parking schedule that was fired: by now the event
	// may have run, failed and stored a retry schedule on the same subject,
	// which purging the subject would lose.
	_ = s.DeleteMsg(ctx, sm.Sequence)
	return true, nil
}

// CancelSchedule purges the schedule subject of account's event id so
// that it never fires.
func (q *Queue) CancelSchedule(ctx context.Context, account, id string) error {
	s, err := q.stream(ctx, account)
	if err != nil {
		return fmt.Errorf("queue: cancel schedule %s: %w", id, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(q.subj.Schedule(account, id))); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("queue: cancel schedule %s: %w", id, err)
	}
	return nil
}

// ActorIngest is the actor of an event's first history entry.
const ActorIngest = "ingest"

// Initial is the record ingest creates for env. It is a pure function of
// the envelope, so a dispatcher holding the message and the revision from
// HeaderRev can rebuild it and claim by compare-and-set without a read.
func Initial(env event.Envelope) state.Record {
	base := state.Record{
		ID: env.ID, IdempotencyKey: env.IdempotencyKey, Account: env.Account, Kind: env.Kind,
		EntityID: env.EntityID, OrderingKey: env.OrderingKey, Payload: env.Payload, PayloadSHA256: event.PayloadSHA256(env.Payload),
		Traceparent: env.Traceparent,
	}
	a := state.Action{Name: state.Accept, Actor: ActorIngest}
	if env.NotBefore != nil {
		due := DueTime(*env.NotBefore)
		a = state.Action{Name: state.Delay, Actor: ActorIngest, NextRunAt: &due, Detail: "held until " + due.Format(time.RFC3339)}
	}
	r, _, _ := state.New(base, a, env.CreatedAt) // Accept and Delay always create
	return r
}

// Batches calls fn with each message received from in together with
// whatever more is already waiting there (up to max in all), until in is
// closed: a consumer handles a burst in one go (pipelined writes, one
// round trip) without ever waiting to fill a batch. fn must not keep the
// slice: it is cleared once fn returns, so that a consumer waiting for its
// next message does not hold the last batch's.
func Batches[M any](in <-chan M, max int, fn func([]M)) {
	batch := make([]M, 0, max)
	for m := range in {
		batch = Take(in, append(batch[:0], m), max)
		fn(batch)
		clear(batch)
	}
}

// Take appends to batch what waits in in, without waiting, until batch
// holds max or in is empty or closed.
func Take[M any](in <-chan M, batch []M, max int) []M {
	for len(batch) < max {
		select {
		case m, ok := <-in:
			if !ok {
				return batch
			}
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

// SleepUntil waits until t, or until ctx ends; it reports whether ctx is
// still live.
func SleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// LookAgainLooks bounds how often LookAgainLater hands a message back:
// its delays (1, 2, then 3 s) add up to 6 s, far under any consumer's
// MaxDeliver, so a message handed back is never taken for a poison one.
const LookAgainLooks = 4

// LookAgainLater hands back a message that arrived before the record was
// ready for it, to be delivered again after as many seconds as it has
// been delivered: a step a run published (a retry's schedule, a poll's or
// a deadline's timer) can fire before that run stores the state that
// waits for it, when the publish waited out a nats-server restart and
// arrived at its due time. It reports false, leaving m alone, once m has
// been looked at LookAgainLooks times; the caller then settles it as it
// would have.
func LookAgainLater(m jetstream.Msg) bool {
	md, err := m.Metadata()
	if err != nil || md.NumDelivered >= LookAgainLooks {
		return false
	}
	_ = m.NakWithDelay(time.Duration(md.NumDelivered) * time.Second)
	return true
}
