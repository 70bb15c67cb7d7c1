package ingest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tracing"
)

// headerReply is set by the HTTP handler on the INTAKE message it
// publishes: the core NATS subject on which the outcome is announced.
const headerReply = "Tenaz-Reply"

// submitError is a refused submission, with the HTTP status and code that
// report it.
type submitError struct {
	Status int
	Code   string
	Err    error
}

func (e *submitError) Error() string { return e.Err.Error() }
func (e *submitError) Unwrap() error { return e.Err }

func refuse(status int, code string, format string, args ...any) *submitError {
	return &submitError{Status: status, Code: code, Err: fmt.Errorf(format, args...)}
}

// build validates a submission against the config and makes its envelope.
// Both the HTTP handler (to answer at once) and the intake consumer (the
// authority) call it.
func (s *Service) build(f event.Fields, payload []byte, now time.Time) (event.Envelope, *submitError) {
	if max := s.cfg.HTTP.MaxBodyBytes; max > 0 && int64(len(payload)) > max {
		return event.Envelope{}, refuse(http.StatusRequestEntityTooLarge, "too_large", "payload is %d bytes; the limit is %d", len(payload), max)
	}
	// What the server carries may have shrunk since the start-up check
	// (or an embedding program skipped it): an event refused now is one
	// never answered 202 and then lost.
	if fit, l := size.MaxBody(s.nc); int64(len(payload)) > fit {
		return event.Envelope{}, refuse(http.StatusRequestEntityTooLarge, "too_large", "payload is %d bytes; with %s at %d, at most %d fit", len(payload), l.What, l.Bytes, fit)
	}
	if err := names.ValidateAccount(f.Account); err != nil {
		return event.Envelope{}, refuse(http.StatusBadRequest, "invalid_account", "%v", err)
	}
	if err := names.ValidateKind(f.Kind); err != nil {
		return event.Envelope{}, refuse(http.StatusBadRequest, "invalid_kind", "%v", err)
	}
	k, ok := s.cfg.Kind(f.Kind)
	if !ok {
		// The envelope is still made (when it can be): a replica whose
		// config lacks a kind that another replica accepted keeps the
		// submission as that event (see reject).
		env, _ := event.New(f, payload, "", "", now)
		return env, refuse(http.StatusUnprocessableEntity, "unknown_kind", "kind %q is not configured", f.Kind)
	}
	env, err := event.New(f, payload, k.Entity, k.OrderedBy, now)
	if err != nil {
		return event.Envelope{}, refuse(http.StatusBadRequest, "malformed", "%v", err)
	}
	sch, err := s.cfg.SchemaFor(f.Kind)
	if err != nil {
		return env, refuse(http.StatusInternalServerError, "schema_unavailable", "schema of %q: %v", f.Kind, err)
	}
	if sch != nil {
		if err := config.MatchSchema(sch, payload); err != nil {
			return env, refuse(http.StatusUnprocessableEntity, "schema_violation", "payload does not match the schema of %q: %s", f.Kind, config.SchemaViolation(err))
		}
	}
	return env, nil
}

// codeKeyReused answers a submission that reuses an event's idempotency
// key with another kind or payload.
const codeKeyReused = "idempotency_key_reused"

// reused refuses env if rec, the event its idempotency key already names,
// was submitted with another kind or payload: a key names one submission,
// and mapping a different one to the old event would lose it silently.
func reused(rec state.Record, env event.Envelope) *submitError {
	if rec.Kind == env.Kind && samePayload(rec, env.Payload) {
		return nil
	}
	return refuse(http.StatusConflict, codeKeyReused,
		"idempotency key %q is already used by event %s with another kind or payload; send a new key for a new submission", env.IdempotencyKey, rec.ID)
}

// samePayload reports whether p is the payload rec was created with.
func samePayload(rec state.Record, p []byte) bool {
	if rec.PayloadSHA256 == "" {
		return true // a record written before the hash was kept: as before, a duplicate
	}
	if event.PayloadSHA256(p) == rec.PayloadSHA256 {
		return true
	}
	// The dispatcher's fresh claim rewrites the record from the EVENTS
	// envelope, whose payload encoding/json compacted (hash included).
	var c bytes.Buffer
	if json.Compact(&c, p) == nil && event.PayloadSHA256(c.Bytes()) == rec.PayloadSHA256 {
		return true
	}
	if len(rec.Payload) == 0 || event.PayloadSHA256(rec.Payload) != rec.PayloadSHA256 {
		return false // a replay replaced the payload: only the hash is left to compare
	}
	a, errA := event.Canonical(p)
	b, errB := event.Canonical(rec.Payload)
	return errA == nil && errB == nil && bytes.Equal(a, b) // the same JSON written differently
}

// fieldsOf reads a submission's fields from an intake message: its
// subject and headers, tenaz's or a binary CloudEvent's.
func (s *Service) fieldsOf(subject string, h nats.Header) (event.Fields, *submitError) {
	account, kind, err := s.subj.ParseIntake(subject)
	if err != nil {
		return event.Fields{Account: account}, refuse(http.StatusBadRequest, "invalid_subject", "%v", err)
	}
	if name := givenTwice(h); name != "" {
		return event.Fields{Account: account, Kind: kind}, refuse(http.StatusBadRequest, "malformed", "the %s header is given twice, with different values: send one", name)
	}
	// The idempotency key: Idempotency-Key, else (for publishers written
	// before it was advised against) Nats-Msg-Id, less an "<account>:"
	// prefix. The server dedups Nats-Msg-Id over every account's INTAKE
	// messages, so another account can take one first (docs/producers.md).
	get := func(name string) string { return headerOf(h, name) }
	key := get(names.HeaderIdempotencyKey)
	if key == "" {
		key = strings.TrimPrefix(get(names.HeaderMsgID), account+":")
	}
	return intakeCloudEvent(event.Fields{
		Account: account, Kind: kind, IdempotencyKey: key,
		EntityID: get(names.HeaderEntityID), OrderingKey: get(names.HeaderOrderingKey),
		NotBefore: get(names.HeaderNotBefore), Traceparent: tracing.From(get),
	}, h)
}

// fieldHeaders are the headers that give a submission's fields.
var fieldHeaders = []string{names.HeaderIdempotencyKey, names.HeaderEntityID, names.HeaderOrderingKey, names.HeaderNotBefore}

// givenTwice is the first of fieldHeaders that h gives two different
// values of, in one spelling of its name or several, or "". Such a
// submission is refused, as a JSON member given twice is: its key (or
// entity, order, delay) would be the first value to tenaz, and maybe the
// other to a proxy or a reviewer that read another.
func givenTwice(h map[string][]string) string {
	for _, name := range fieldHeaders {
		first, seen := "", false
		for k, vs := range h {
			if !strings.EqualFold(k, name) {
				continue
			}
			for _, v := range vs {
				if seen && v != first {
					return name
				}
				first, seen = v, true
			}
		}
	}
	return ""
}

// headerOf is h's value of name, whatever the case its publisher wrote
// the name in: NATS keeps header names as sent, and a producer's
// "idempotency-key" or "tenaz-not-before" ignored would make its
// submission another (a derived key, no delay, no order).
// A name sent in several spellings reads the same on every delivery: the
// exact (canonical) one first, else the smallest spelling, not whichever
// the map ranges to first (a redelivery would then derive another key).
func headerOf(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	found, v := "", ""
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) && (found == "" || k < found) {
			found, v = k, vs[0]
		}
	}
	return v
}

// outcomeMsg is what the intake consumer tells a waiting HTTP handler.
type outcomeMsg struct {
	Created bool          `json:"created"`
	Record  *state.Record `json:"record,omitempty"`
	Status  int           `json:"status,omitempty"`
	Code    string        `json:"code,omitempty"`
	Message string        `json:"message,omitempty"`
}

// parseIntake validates one intake message; a refused one is settled
// (answered or kept) and ok is false.
func (s *Service) parseIntake(ctx context.Context, m jetstream.Msg) (event.Envelope, bool) {
	meta, err := m.Metadata()
	if err != nil {
		s.log.Error().Err(err).Msg("intake message without metadata")
		_ = m.Term()
		return event.Envelope{}, false
	}
	if meta.NumDelivered > maxDeliveries {
		s.giveUp(ctx, m, meta)
		return event.Envelope{}, false
	}
	f, serr := s.fieldsOf(m.Subject(), m.Headers())
	var env event.Envelope
	if serr == nil {
		env, serr = s.build(f, m.Data(), meta.Timestamp)
	}
	if serr != nil {
		s.reject(ctx, m, f, env, serr)
		return env, false
	}
	return env, true
}

// handleIntake accepts one intake message on its own (the slow path of a
// batch: duplicates and anything a batch could not settle).
func (s *Service) handleIntake(ctx context.Context, m jetstream.Msg) {
	env, ok := s.parseIntake(ctx, m)
	if !ok {
		return
	}
	rec, created, err := s.accept(ctx, env)
	s.settle(ctx, m, env, rec, created, err)
}

// settle acks (and answers a waiting HTTP handler), rejects a submission
// accept refused, or hands the message back for redelivery.
func (s *Service) settle(ctx context.Context, m jetstream.Msg, env event.Envelope, rec state.Record, created bool, err error) {
	reply := s.replies.of(m.Headers())
	log := tracing.Log(s.log, cmp.Or(rec.Traceparent, env.Traceparent))
	if serr := (*submitError)(nil); errors.As(err, &serr) {
		s.reject(ctx, m, event.Fields{Account: env.Account, Kind: env.Kind}, env, serr)
		return
	}
	if err != nil {
		if !errors.Is(context.Cause(ctx), ErrStopped) {
			log.Warn().Err(err).Str("event_id", env.ID).Msg("accept failed; will retry")
		}
		_ = m.NakWithDelay(retryDelay(m, err))
		return
	}
	if err := m.Ack(); err != nil {
		log.Debug().Err(err).Str("event_id", env.ID).Msg("intake ack")
	}
	if created { // a redelivery finds the record: counted once
		s.metrics.Accepted(env.Account, env.Kind)
	}
	log.Debug().Str("event_id", env.ID).Bool("created", created).Msg("accepted")
	if reply != "" {
		// A record made from this very message (by the accept of a newer
		// ordered submission, or a delivery of it that died after) is its
		// submitter's first: 202, not a duplicate's 200.
		first := created || rec.CreatedAt.Equal(env.CreatedAt)
		s.publishReply(reply, outcomeMsg{Created: first, Record: &rec})
	}
}

func (s *Service) publishReply(reply string, o outcomeMsg) {
	if reply == "" {
		return
	}
	if o.Record != nil {
		// The handler shows no payload: without it the reply stays small
		// (with it, and each < of a payload written as six bytes, it could
		// be over max_payload and lost, leaving the caller a bare 202).
		r := *o.Record
		r.Payload = nil
		o.Record = &r
	}
	b, _ := json.Marshal(o)
	_ = s.nc.Publish(reply, b)
}

// retryDelay is how long an intake message that could not be settled
// waits before its redelivery: 1s, or, when the storage is full (which
// only an operator or retention clears), longer with each delivery, so
// that the consumer's 20 deliveries last minutes instead of seconds.
func retryDelay(m jetstream.Msg, err error) time.Duration {
	meta, merr := m.Metadata()
	if !store.IsFull(err) || merr != nil {
		return time.Second
	}
	return min(time.Second<<min(meta.NumDelivered, 6), 30*time.Second)
}

// Answers of an HTTP handler offered a refusal (see tell).
const (
	replyTaken = "taken" // the handler answers its caller with the refusal
	replyGone  = "gone"  // no handler waits any more (it answered 202, or gave up)
)

// tellTimeout bounds the offer of a refusal to a waiting HTTP handler.
const tellTimeout = 2 * time.Second

// tell offers a refusal to the HTTP handler waiting on reply and reports
// whether the handler took it, and so answers its caller with it.
func (s *Service) tell(ctx context.Context, reply string, serr *submitError) bool {
	b, _ := json.Marshal(outcomeMsg{Status: serr.Status, Code: serr.Code, Message: serr.Error()})
	ctx, cancel := context.WithTimeout(ctx, tellTimeout)
	defer cancel()
	ans, err := s.nc.RequestWithContext(ctx, reply, b)
	return err == nil && string(ans.Data) == replyTaken
}

// reject settles a refused submission without losing it. A submitter that
// still waits for the answer (an HTTP or micro caller) is told, and
// nothing is kept. Otherwise the submission is kept: as its event, dead
// with the refusal, when it came through HTTP (its caller may hold a 202
// and the event's status URL: a replica with another config refused what
// the answering one took), else in DEAD as a refused submission. The
// message is terminated only once it is kept.
func (s *Service) reject(ctx context.Context, m jetstream.Msg, f event.Fields, env event.Envelope, serr *submitError) {
	reply := s.replies.of(m.Headers())
	if reply != "" && s.tell(ctx, reply, serr) {
		s.metrics.Rejected(serr.Code)
		_ = m.Term()
		return
	}
	var msgID string
	if meta, err := m.Metadata(); err == nil {
		msgID = fmt.Sprintf("intake-%d", meta.Sequence.Stream)
	}
	kept, waiting := false, false
	var err error
	if reply != "" && serr.Code != codeKeyReused {
		if id := s.replies.promised(m.Headers(), reply); id != "" && id != env.ID {
			env = promisedEnvelope(env, f, id, m)
		}
		if env.ID != "" {
			kept, waiting, err = s.keepDeadEvent(ctx, m, env, serr, msgID)
		}
	}
	if err == nil && !kept {
		e := dead.Entry{Account: f.Account, Kind: f.Kind, Reason: dead.ReasonRejected, Class: serr.Code,
			Error: serr.Error(), Status: serr.Status, At: time.Now().UTC(), Raw: m.Data(), RawSubject: m.Subject(), RawHeader: m.Headers()}
		keep := s.dead.KeepRefusal // from NATS: its publisher was told nothing
		if reply != "" {
			keep = s.dead.Keep // its HTTP caller may hold a 202
		}
		waiting, err = keep(ctx, e, msgID)
	}
	if errors.Is(err, dead.ErrRefusalsAtBound) {
		// Its account's entries waiting for room are at their bound:
		// counted, logged (sampled: a flood would flood the log too), not
		// kept.
		s.metrics.DeadNotKept(f.Account)
		s.floodLog.Warn().Str("account", f.Account).Str("subject", m.Subject()).Str("code", serr.Code).
			Msg("refused submission not kept: its account keeps deadletter.max_refusals_per_account entries in DEAD and waiting for room")
		_ = m.TermWithReason(dead.ReasonRejected)
		return
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("keeping a rejected submission failed; will retry")
		if !store.IsFull(err) || !s.holdRefusal(m) {
			_ = m.NakWithDelay(retryDelay(m, err))
		}
		return
	}
	s.metrics.Rejected(serr.Code) // after the write: a retried one counts once
	log := tracing.Log(s.log, env.Traceparent)
	l := log.Warn().Str("subject", m.Subject()).Str("code", serr.Code).Str("reason", serr.Error())
	switch {
	case kept:
		l = l.Str("event_id", env.ID)
		if waiting {
			l.Msg("submission rejected after it was answered; dead, its entry waits for room in DEAD")
		} else {
			l.Msg("submission rejected after it was answered; kept as a dead event")
		}
	case waiting:
		l.Msg("submission rejected; it waits for room in DEAD")
	default:
		l.Msg("submission rejected; kept in DEAD")
	}
	_ = m.TermWithReason(serr.Code)
}

// promisedEnvelope is env as the event id its HTTP handler promised: this
// replica's config may have made no envelope of the submission (it is too
// large here, or a key its entity field gives is not valid here), or
// another id (a derived key, from another entity field). Without one the
// envelope is made of the submission's fields, its payload kept when it
// is JSON of a size this replica takes.
func promisedEnvelope(env event.Envelope, f event.Fields, id string, m jetstream.Msg) event.Envelope {
	if env.ID == "" {
		if names.ValidateAccount(f.Account) != nil || names.ValidateKind(f.Kind) != nil {
			return env // no event can be made: kept as a refused submission
		}
		env = event.Envelope{Account: f.Account, Kind: f.Kind, IdempotencyKey: f.IdempotencyKey, Traceparent: f.Traceparent, CreatedAt: time.Now().UTC()}
		if meta, err := m.Metadata(); err == nil {
			env.CreatedAt = meta.Timestamp.UTC()
		}
		if p := m.Data(); len(p) <= maxKeptPayload && event.CheckPayload(p) == nil {
			env.Payload = append(json.RawMessage(nil), p...)
		}
	}
	env.ID = id
	return env
}

// maxKeptPayload bounds the payload of a promised event kept dead without
// an envelope of its own: a larger one is kept without it, its DEAD entry
// keeping the message, cut to what DEAD takes (keepDeadEvent); a replay
// then needs an edited payload.
const maxKeptPayload = 64 << 10

// keepDeadEvent creates env's record, dead with the refusal, and its DEAD
// entry (listed by event id, replayable once the config accepts it).
// kept is false when the id holds another event: the refusal is then kept
// as a refused submission. waiting: the entry waits for room
// (dead.Writer.Keep).
func (s *Service) keepDeadEvent(ctx context.Context, m jetstream.Msg, env event.Envelope, serr *submitError, msgID string) (kept, waiting bool, err error) {
	base := queue.Initial(env) // New replaces its status and history
	detail := dead.ReasonRejected + ": " + serr.Error()
	rec, _, err := state.New(base, state.Action{Name: state.Reject, Actor: queue.ActorIngest, Detail: detail,
		Error: &state.ErrorInfo{Class: serr.Code, Message: serr.Error()}}, env.CreatedAt)
	if err != nil {
		return false, false, err
	}
	if _, err := s.st.Create(ctx, rec); errors.Is(err, store.ErrExists) {
		// A redelivery finds its own record; any other is another event.
		cur, _, gerr := s.st.Get(ctx, env.Account, env.ID)
		if gerr != nil {
			return false, false, gerr
		}
		if len(cur.History) == 0 || cur.History[0].Action != state.Reject || !samePayload(cur, env.Payload) {
			return false, false, nil
		}
		rec = cur
	} else if err != nil {
		return false, false, err
	}
	e := dead.Entry{ID: env.ID, Account: env.Account, Kind: env.Kind, Reason: dead.ReasonRejected, Class: serr.Code,
		Error: serr.Error(), Status: serr.Status, At: rec.CreatedAt, Event: &env, Record: &rec}
	if len(env.Payload) == 0 {
		// A promised event whose payload was not kept (promisedEnvelope):
		// its message is, cut to what DEAD takes.
		e.Raw, e.RawSubject, e.RawHeader = m.Data(), m.Subject(), m.Headers()
	}
	if waiting, err = s.dead.Keep(ctx, e, msgID); err != nil {
		return false, false, err
	}
	dead.Advise(s.nc, s.subj, rec)
	return true, waiting, nil
}

// accept makes env an event exactly once: create the record (the
// uniqueness check), enqueue it, and report whether it was new. For an
// existing record that has not started yet it enqueues again, which
// recovers a crash between the create and the publish (the re-publish is
// deduplicated by the stream, or dropped by the dispatcher's claim).
func (s *Service) accept(ctx context.Context, env event.Envelope) (state.Record, bool, error) {
	ctx, span := tracing.Accept(ctx, &env)
	defer span.End()
	rec := queue.Initial(env)
	var rev uint64
	var err error
	if env.OrderingKey != "" {
		// An ordered event joins its lane before its record exists, so the
		// record carries its predecessor from the start. A duplicate must not
		// join: look first (a racing duplicate re-appends the same id, which
		// Append answers with the same predecessor).
		if cur, crev, gerr := s.st.Get(ctx, env.Account, env.ID); gerr == nil {
			rec, rev, err = cur, crev, store.ErrExists
		} else if !errors.Is(gerr, store.ErrNotFound) {
			return rec, false, gerr
		} else if rec.After, err = s.lanes.Append(ctx, env.Account, env.OrderingKey, env.ID); err != nil {
			return rec, false, err
		}
	}
	if err == nil {
		rev, err = s.st.Create(ctx, rec)
	}
	created := true
	switch {
	case errors.Is(err, store.ErrExists):
		created = false
		rec, _, err = s.st.Get(ctx, env.Account, env.ID)
		if err != nil {
			return rec, false, err
		}
		// No read-free claim: the record may have changed since its
		// create (a lane's link to the next event), and this envelope is
		// the resubmission's, not the one it was made from.
		rev = 0
		if serr := reused(rec, env); serr != nil {
			return rec, false, serr
		}
		tracing.Record(ctx, tracing.Result{Outcome: "duplicate"})
		if !notStarted(rec) {
			return rec, false, nil
		}
		env.Traceparent = rec.Traceparent // the event's messages stay in its first trace
	case err != nil:
		return rec, false, err
	}
	if s.o.Hooks != nil && s.o.Hooks.AfterCreate != nil {
		if err := s.o.Hooks.AfterCreate(env.ID); err != nil {
			return rec, false, err
		}
	}
	if rec.After != "" {
		if err := s.link(ctx, env.Account, rec.After, env.ID); err != nil {
			return rec, false, err
		}
		rev = 0 // no read-free claim: the record is not queue.Initial(env)
	}
	if rec.Status == state.Scheduled && rec.NextRunAt != nil {
		err = s.q.ScheduleFresh(ctx, env, *rec.NextRunAt, rev)
	} else {
		_, err = s.q.EnqueueFresh(ctx, env, rev, env.ID)
	}
	if err != nil {
		return rec, false, err
	}
	if created {
		tracing.Record(ctx, tracing.Result{Outcome: "created"})
		zerolog.Ctx(ctx).Debug().Str("event_id", env.ID).Msg("created")
	}
	return rec, created, nil
}

// notStarted: the record is as ingest created it, so its first message may
// be missing.
func notStarted(r state.Record) bool {
	return (r.Status == state.Pending || r.Status == state.Scheduled) && len(r.History) == 1
}

// errUnchanged ends a store.Update without a write.
var errUnchanged = errors.New("unchanged")

// link points the predecessor's record at its successor (both of
// account), so that whoever finishes the predecessor wakes the successor.
// A predecessor whose record is gone (expired) has nothing to hold.
func (s *Service) link(ctx context.Context, account, prev, next string) error {
	_, _, err := s.st.Update(ctx, account, prev, func(p state.Record) (state.Record, error) {
		if p.Next == next {
			return p, errUnchanged
		}
		p.Next = next
		return p, nil
	})
	if errors.Is(err, errUnchanged) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
