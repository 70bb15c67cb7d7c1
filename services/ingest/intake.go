package ingest

import (
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

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tenaz"
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
	if err := tenaz.ValidateAccount(f.Account); err != nil {
		return event.Envelope{}, refuse(http.StatusBadRequest, "invalid_account", "%v", err)
	}
	if err := tenaz.ValidateKind(f.Kind); err != nil {
		return event.Envelope{}, refuse(http.StatusBadRequest, "invalid_kind", "%v", err)
	}
	k, ok := s.cfg.Kind(f.Kind)
	if !ok {
		return event.Envelope{}, refuse(http.StatusUnprocessableEntity, "unknown_kind", "kind %q is not configured", f.Kind)
	}
	env, err := event.New(f, payload, k.Entity, k.OrderedBy, now)
	if err != nil {
		return event.Envelope{}, refuse(http.StatusBadRequest, "malformed", "%v", err)
	}
	sch, err := s.cfg.SchemaFor(f.Kind)
	if err != nil {
		return event.Envelope{}, refuse(http.StatusInternalServerError, "schema_unavailable", "schema of %q: %v", f.Kind, err)
	}
	if sch != nil {
		var doc any
		if err := json.Unmarshal(payload, &doc); err != nil {
			return event.Envelope{}, refuse(http.StatusBadRequest, "malformed", "payload: %v", err)
		}
		if err := sch.Validate(doc); err != nil {
			return event.Envelope{}, refuse(http.StatusUnprocessableEntity, "schema_violation", "payload does not match the schema of %q: %v", f.Kind, err)
		}
	}
	return env, nil
}

// fieldsOf reads a submission's fields from an intake message.
func (s *Service) fieldsOf(subject string, h nats.Header) (event.Fields, *submitError) {
	account, kind, err := s.subj.ParseIntake(subject)
	if err != nil {
		return event.Fields{}, refuse(http.StatusBadRequest, "invalid_subject", "%v", err)
	}
	// The idempotency key: Idempotency-Key, else Nats-Msg-Id. The server
	// dedups Nats-Msg-Id across the whole INTAKE stream (not per account)
	// for 100 ms, so publishers that use it should send "<account>:<key>";
	// that prefix is not part of the key.
	key := h.Get(tenaz.HeaderIdempotencyKey)
	if key == "" {
		key = strings.TrimPrefix(h.Get(tenaz.HeaderMsgID), account+":")
	}
	return event.Fields{
		Account: account, Kind: kind, IdempotencyKey: key,
		EntityID: h.Get(tenaz.HeaderEntityID), OrderingKey: h.Get(tenaz.HeaderOrderingKey),
		NotBefore: h.Get(tenaz.HeaderNotBefore),
	}, nil
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
// (kept in DEAD or answered) and ok is false.
func (s *Service) parseIntake(ctx context.Context, m jetstream.Msg) (event.Envelope, bool) {
	meta, err := m.Metadata()
	if err != nil {
		s.log.Error().Err(err).Msg("intake message without metadata")
		_ = m.Term()
		return event.Envelope{}, false
	}
	h := m.Headers()
	f, serr := s.fieldsOf(m.Subject(), h)
	var env event.Envelope
	if serr == nil {
		env, serr = s.build(f, m.Data(), meta.Timestamp)
	}
	if serr != nil {
		s.reject(ctx, m, f, serr, h.Get(headerReply))
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

// settle acks (and answers a waiting HTTP handler) or hands the message
// back for redelivery.
func (s *Service) settle(ctx context.Context, m jetstream.Msg, env event.Envelope, rec state.Record, created bool, err error) {
	reply := m.Headers().Get(headerReply)
	if err != nil {
		if !errors.Is(context.Cause(ctx), ErrStopped) {
			s.log.Warn().Err(err).Str("event_id", env.ID).Msg("accept failed; will retry")
		}
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err := m.Ack(); err != nil {
		s.log.Debug().Err(err).Str("event_id", env.ID).Msg("intake ack")
	}
	if created { // a redelivery finds the record: counted once
		s.metrics.Accepted(env.Account, env.Kind)
	}
	s.log.Debug().Str("event_id", env.ID).Bool("created", created).Msg("accepted")
	if reply != "" {
		s.publishReply(reply, outcomeMsg{Created: created, Record: &rec})
	}
}

func (s *Service) publishReply(reply string, o outcomeMsg) {
	b, _ := json.Marshal(o)
	_ = s.nc.Publish(reply, b)
}

// reject keeps a refused NATS submission in DEAD (nothing is lost; an
// operator sees why) and terminates the message.
func (s *Service) reject(ctx context.Context, m jetstream.Msg, f event.Fields, serr *submitError, reply string) {
	if reply != "" { // HTTP already answered the caller with the error; nothing to keep
		s.metrics.Rejected(serr.Code)
		s.publishReply(reply, outcomeMsg{Status: serr.Status, Code: serr.Code, Message: serr.Error()})
		_ = m.Term()
		return
	}
	meta, _ := m.Metadata()
	e := dead.Entry{Account: f.Account, Kind: f.Kind, Reason: dead.ReasonRejected, Class: serr.Code,
		Error: serr.Error(), Status: serr.Status, At: time.Now().UTC(), Raw: m.Data(), RawSubject: m.Subject()}
	msgID := ""
	if meta != nil {
		msgID = fmt.Sprintf("intake-%d", meta.Sequence.Stream)
	}
	if err := dead.Publish(ctx, s.js, s.subj, e, msgID); err != nil {
		s.log.Warn().Err(err).Msg("keeping a rejected submission failed; will retry")
		_ = m.NakWithDelay(time.Second)
		return
	}
	s.metrics.Rejected(serr.Code) // after the publish: a retried one counts once
	s.log.Warn().Str("subject", m.Subject()).Str("code", serr.Code).Str("reason", serr.Error()).Msg("submission rejected; kept in DEAD")
	_ = m.TermWithReason(serr.Code)
}

// accept makes env an event exactly once: create the record (the
// uniqueness check), enqueue it, and report whether it was new. For an
// existing record that has not started yet it enqueues again, which
// recovers a crash between the create and the publish (the re-publish is
// deduplicated by the stream, or dropped by the dispatcher's claim).
func (s *Service) accept(ctx context.Context, env event.Envelope) (state.Record, bool, error) {
	rec := queue.Initial(env)
	var rev uint64
	var err error
	if env.OrderingKey != "" {
		// An ordered event joins its lane before its record exists, so the
		// record carries its predecessor from the start. A duplicate must not
		// join: look first (a racing duplicate re-appends the same id, which
		// Append answers with the same predecessor).
		if cur, crev, gerr := s.st.Get(ctx, env.ID); gerr == nil {
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
		rec, rev, err = s.st.Get(ctx, env.ID)
		if err != nil {
			return rec, false, err
		}
		if !notStarted(rec) {
			return rec, false, nil
		}
	case err != nil:
		return rec, false, err
	}
	if s.o.Hooks != nil && s.o.Hooks.AfterCreate != nil {
		if err := s.o.Hooks.AfterCreate(env.ID); err != nil {
			return rec, false, err
		}
	}
	if rec.After != "" {
		if err := s.link(ctx, rec.After, env.ID); err != nil {
			return rec, false, err
		}
		rev = 0 // no read-free claim: the record is not queue.Initial(env)
	}
	if err := s.prov.Ensure(ctx, env.Account); err != nil {
		return rec, false, err
	}
	if rec.Status == tenaz.StateScheduled && rec.NextRunAt != nil {
		err = s.q.ScheduleFresh(ctx, env, *rec.NextRunAt, rev)
	} else {
		_, err = s.q.EnqueueFresh(ctx, env, rev, env.ID)
	}
	if err != nil {
		return rec, false, err
	}
	if created {
		zerolog.Ctx(ctx).Debug().Str("event_id", env.ID).Msg("created")
	}
	return rec, created, nil
}

// notStarted: the record is as ingest created it, so its first message may
// be missing.
func notStarted(r state.Record) bool {
	return (r.Status == tenaz.StatePending || r.Status == tenaz.StateScheduled) && len(r.History) == 1
}

// errUnchanged ends a store.Update without a write.
var errUnchanged = errors.New("unchanged")

// link points the predecessor's record at its successor, so that whoever
// finishes the predecessor wakes the successor. A predecessor whose record
// is gone (expired) has nothing to hold.
func (s *Service) link(ctx context.Context, prev, next string) error {
	_, _, err := s.st.Update(ctx, prev, func(p state.Record) (state.Record, error) {
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
