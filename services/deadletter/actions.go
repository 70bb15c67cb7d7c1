package deadletter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// apiError is a refusal with an HTTP-like status and a machine code; every
// surface (HTTP, micro, the screen) answers it as it is.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func fail(status int, code, format string, args ...any) error {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// statusOf maps err to its status, code and message (500 for the unexpected).
func statusOf(err error) (int, string, string) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status, ae.code, ae.msg
	}
	return http.StatusInternalServerError, "internal", err.Error()
}

// actorOf is who acts, as the history records it: the principal that
// authenticated the request ("operator:alice"; the HTTP Guard or the micro
// endpoint put it in ctx), else "anonymous" (auth disabled). Never a
// name the request states.
func actorOf(ctx context.Context) string {
	if p, ok := auth.From(ctx); ok {
		return p.String()
	}
	return auth.Principal{Anonymous: true}.String()
}

// lookup returns the indexed item of an event, or why it cannot be acted on.
func (s *Service) lookup(ctx context.Context, id string) (ops.Item, error) {
	if seq, ok, err := seqOf(id); ok {
		if err != nil {
			return ops.Item{}, err
		}
		if _, _, listed := s.x.Get(seqKey(seq)); !listed {
			return ops.Item{}, fail(http.StatusNotFound, "not_found", "no listed DEAD entry without an event at sequence %d", seq)
		}
		return ops.Item{}, fail(http.StatusConflict, "no_envelope", "%s is a refused submission: it never became an event, so there is nothing to replay or resolve; discard it", id)
	}
	if err := names.ValidateEventID(id); err != nil {
		return ops.Item{}, fail(http.StatusBadRequest, "invalid_id", "%v", err)
	}
	if it, _, ok := s.x.Get(id); ok {
		return it, nil
	}
	rec, _, err := s.st.Get(ctx, "", id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ops.Item{}, fail(http.StatusNotFound, "not_found", "event %s not found", id)
	case err != nil:
		return ops.Item{}, err
	case rec.Status.Parked() && s.deadWaiting(ctx, rec.Account) > 0:
		return ops.Item{}, fail(http.StatusConflict, "waiting_for_room", "event %s is %s but its DEAD entry may still wait for room (%s has entries waiting: it is at its dead_letters bound, or DEAD is full); replay, resolve or discard some of its entries first, and it is kept within seconds", id, rec.Status, rec.Account)
	case rec.Status.Parked():
		return ops.Item{}, fail(http.StatusConflict, "not_indexed", "event %s is %s but its DEAD entry is not indexed yet; try again in a moment", id, rec.Status)
	}
	return ops.Item{}, notParked(id, rec.Status)
}

// lookupEntry is lookup, refused (409 entry_changed) when the event's
// listed entry is not entry, the one its action was decided on (0: any;
// see ops.Entries).
func (s *Service) lookupEntry(ctx context.Context, id string, entry uint64) (ops.Item, error) {
	it, err := s.lookup(ctx, id)
	if err != nil || entry == 0 || it.Seq == entry {
		return it, err
	}
	return ops.Item{}, fail(http.StatusConflict, "entry_changed", "%s is listed with another DEAD entry than the one acted on (%d, now %d: it was replayed and died again, %s): look at it again", id, entry, it.Seq, it.Error)
}

func notParked(id string, st state.State) error {
	return fail(http.StatusConflict, "not_parked", "event %s is %s: only dead or manual_review events can be acted on", id, st)
}

// entry reads the DEAD entry of an item.
func (s *Service) entry(ctx context.Context, it ops.Item) (dead.Entry, error) {
	raw, err := s.deadSt.GetMsg(ctx, it.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Expired (deadletter.retention): what the index keeps is left; an
		// event's record still has its payload for a replay.
		return dead.Entry{ID: it.ID, Account: it.Account, Kind: it.Kind, Reason: it.Reason, Class: it.Class, Error: it.Error, Status: it.HTTPStatus}, nil
	}
	if err != nil {
		return dead.Entry{}, fmt.Errorf("DEAD entry %d: %w", it.Seq, err)
	}
	var e dead.Entry
	if err := json.Unmarshal(raw.Data, &e); err != nil {
		e = dead.Entry{Account: it.Account, Kind: it.Kind, Reason: it.Reason, Error: it.Error, Raw: raw.Data, RawSubject: raw.Subject, RawHeader: raw.Header}
	}
	return e, nil
}

// show returns an entry in full: the event as it died and its current
// record. req.ID may be seq_<n>, as the API names an entry without an event.
func (s *Service) show(ctx context.Context, req ops.ShowRequest) (ops.ShowReply, error) {
	if seq, ok, err := seqOf(req.ID); ok {
		if err != nil {
			return ops.ShowReply{}, err
		}
		req = ops.ShowRequest{Seq: seq}
	}
	var it ops.Item
	switch {
	case req.ID != "":
		var err error
		if it, err = s.lookup(ctx, req.ID); err != nil {
			// A parked event whose entry waits for room (it may for long,
			// while its account's DEAD is full) is shown from its record:
			// only the actions on it need the entry. One not indexed yet
			// is a moment away from its entry, which says more (reason,
			// time): asked again, it is shown from that.
			if ae := (*apiError)(nil); errors.As(err, &ae) && ae.code == "waiting_for_room" {
				return s.showLive(ctx, req.ID)
			}
			return ops.ShowReply{}, err
		}
	case req.Seq != 0:
		var ok bool
		if it, _, ok = s.x.Get(seqKey(req.Seq)); !ok {
			return ops.ShowReply{}, fail(http.StatusNotFound, "not_found", "no listed DEAD entry without an event at sequence %d", req.Seq)
		}
	default:
		return ops.ShowReply{}, fail(http.StatusBadRequest, "id_required", "give id (or seq for an entry without an event)")
	}
	e, err := s.entry(ctx, it)
	if err != nil {
		return ops.ShowReply{}, err
	}
	rep := ops.ShowReply{Item: it, Event: e.Event, Record: e.Record, Raw: e.Raw, RawSubject: e.RawSubject, RawHeader: e.RawHeader}
	if it.ID != "" {
		if rec, _, err := s.st.Get(ctx, it.Account, it.ID); err == nil {
			rep.Record = &rec
			rep.Item.Status = rec.Status
		}
	}
	return rep, nil
}

// checkPayload validates an edited payload as ingest validates a submission.
func (s *Service) checkPayload(kind string, p json.RawMessage) error {
	if max := s.cfg.HTTP.MaxBodyBytes; max > 0 && int64(len(p)) > max {
		return fail(http.StatusRequestEntityTooLarge, "too_large", "payload is %d bytes; the limit is %d", len(p), max)
	}
	if err := event.CheckPayload(p); err != nil {
		return fail(http.StatusBadRequest, "malformed", "%v", err)
	}
	return s.checkSchema(kind, p)
}

// checkSchema checks p against kind's schema in the config in force.
func (s *Service) checkSchema(kind string, p json.RawMessage) error {
	sch, err := s.cfg.SchemaFor(kind)
	if err != nil {
		return fmt.Errorf("schema of %q: %w", kind, err)
	}
	if sch != nil {
		if err := config.MatchSchema(sch, p); err != nil {
			return fail(http.StatusUnprocessableEntity, "schema_violation", "payload does not match the schema of %q: %s", kind, config.SchemaViolation(err))
		}
	}
	return nil
}

// replay starts a fresh attempt cycle of a dead or reviewed event, in stage
// ("" keeps its stage), optionally with an edited payload. The transition
// is a compare-and-set from dead/manual_review, so an event that is
// already pending or running is refused (409), never run twice; so is
// one listed with another entry than entry, when not 0 (ops.Entries).
func (s *Service) replay(ctx context.Context, id string, entry uint64, payload json.RawMessage, stage, actor, why string) error {
	switch stage {
	case "", state.StagePrimary, state.StageFallback:
	default:
		return fail(http.StatusBadRequest, "invalid_stage", "stage must be primary, fallback or empty, got %q", stage)
	}
	it, err := s.lookupEntry(ctx, id, entry)
	if err != nil {
		return err
	}
	return s.replayItem(ctx, it, payload, stage, actor, why)
}

// replayItem replays the event of the listed item it (replay).
func (s *Service) replayItem(ctx context.Context, it ops.Item, payload json.RawMessage, stage, actor, why string) error {
	id := it.ID
	if stage == state.StageFallback {
		if k, ok := s.cfg.Kind(it.Kind); !ok || k.Fallback == nil {
			return fail(http.StatusBadRequest, "no_fallback", "kind %q has no fallback stage", it.Kind)
		}
	}
	e, err := s.entry(ctx, it)
	if err != nil {
		return err
	}
	if e.Event == nil {
		// The record keeps the payload too (records written since payloads
		// are kept): rebuild the envelope from it.
		if rec, _, err := s.st.Get(ctx, it.Account, id); err == nil {
			if env, err := s.st.Envelope(rec); err == nil {
				e.Event = &env
			}
		}
	}
	if e.Event == nil {
		return fail(http.StatusConflict, "no_envelope", "the DEAD entry of %s keeps no event to replay", id)
	}
	env := *e.Event
	if payload == nil && len(env.Payload) == 0 {
		// A submission refused after its 202 whose payload could not be
		// kept as its event's (too large, or not JSON, where it was
		// refused): its entry keeps the message, maybe cut.
		return fail(http.StatusConflict, "no_payload", "event %s keeps no payload (its DEAD entry keeps the message it came in, cut to fit): replay it with the payload edited", id)
	}
	detail := why
	if payload != nil {
		if err := s.checkPayload(env.Kind, payload); err != nil {
			return err
		}
		env.Payload = append(json.RawMessage(nil), payload...)
		sum := sha256.Sum256(payload)
		detail = strings.TrimSpace(why + " (payload edited, sha256 " + hex.EncodeToString(sum[:6]) + ")")
	}
	if _, ok := s.cfg.Kind(env.Kind); !ok {
		return fail(http.StatusUnprocessableEntity, "unknown_kind", "kind %q is no longer configured", env.Kind)
	}
	if payload == nil {
		// Replayable once the config accepts it: a submission refused for
		// its schema (kept dead, by a replica whose config had it) goes
		// out only once the schema, or an edit, lets it.
		if err := s.checkSchema(env.Kind, env.Payload); err != nil {
			return err
		}
	}
	// From the transition on, finish even if the caller goes away (a
	// stopping job, a closed connection): a replayed record without its
	// EVENTS message would wait for the reconciler.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	rec, effects, err := s.transition(ctx, it, state.Action{Name: state.Replay, Actor: actor, Detail: detail, Stage: stage, Payload: payload})
	if err != nil {
		return err
	}
	for _, ef := range effects {
		if ef != state.EffectEnqueue {
			continue
		}
		if err := s.enqueue(ctx, env, rec); err != nil {
			return fmt.Errorf("event %s is pending but its message could not be published (the next replica to start, or the reconciler, will put it back on its path): %w", id, err)
		}
	}
	// Only now, the event on its way: a replica killed before leaves the
	// item listed, and the next one to start finishes the replay from it
	// (checkView); and the entry may be all that has the payload. The
	// item goes only if it still lists this entry: the replayed event may
	// have died again meanwhile.
	s.forgetEntry(ctx, it.ID, it.Seq)
	s.dropEntry(ctx, it)
	s.log.Info().Str("event_id", id).Str("actor", actor).Str("stage", rec.Stage).Bool("edited", payload != nil).Msg("replayed")
	return nil
}

// enqueue publishes a replayed event with Enqueue, never EnqueueFresh: a
// replayed record is not queue.Initial(env), so the dispatcher must claim
// it by reading it (a read-free claim would overwrite its history).
func (s *Service) enqueue(ctx context.Context, env event.Envelope, rec state.Record) error {
	msgID := fmt.Sprintf("%s/replay/%d", env.ID, rec.Truncated+len(rec.History))
	return thrice(ctx, func() error {
		_, err := s.q.Enqueue(ctx, env, msgID)
		return err
	}, nil)
}

// thrice runs op up to three times, 200 and 400 ms apart, until it
// succeeds, ctx ends, or final (when not nil) says of its error that
// another try cannot help; it returns op's last error. It serves the
// steps that follow a stored change (a replay's publish, a DEAD entry's
// removal, a list item's purge), so that a server restart does not leave
// them undone.
func thrice(ctx context.Context, op func() error, final func(error) bool) error {
	var err error
	for i := range 3 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(i) * 200 * time.Millisecond):
			}
		}
		if err = op(); err == nil || final != nil && final(err) {
			return err
		}
	}
	return err
}

// discard cancels a dead or reviewed event (listed with entry, unless 0),
// or drops an entry without an event named seq_<n>.
func (s *Service) discard(ctx context.Context, id string, entry uint64, actor, why string) error {
	if seq, ok, err := seqOf(id); ok {
		if err != nil {
			return err
		}
		return s.discardSeq(ctx, seq, actor, why)
	}
	it, err := s.lookupEntry(ctx, id, entry)
	if err != nil {
		return err
	}
	return s.settle(ctx, it, state.Action{Name: state.Discard, Actor: actor, Detail: why})
}

// settle applies a transition that ends a dead or reviewed event's stay,
// and deletes its DEAD entry.
func (s *Service) settle(ctx context.Context, it ops.Item, a state.Action) error {
	if _, _, err := s.transitionParked(ctx, it, a); err != nil {
		return err
	}
	s.dropEntry(ctx, it)
	s.log.Info().Str("event_id", it.ID).Str("actor", a.Actor).Str("action", string(a.Name)).Msg("settled by an operator")
	return nil
}

// transitionParked applies a to the parked event of it; the index forgets
// the event once it has left its parked state.
func (s *Service) transitionParked(ctx context.Context, it ops.Item, a state.Action) (state.Record, []state.EffectKind, error) {
	rec, effects, err := s.transition(ctx, it, a)
	if err == nil {
		s.forget(ctx, it.ID)
	}
	return rec, effects, err
}

// transition applies a to the parked event of it, leaving its item
// listed. A record that does not decode (store.ErrUndecodable) is made
// again from the copy its DEAD entry keeps, so that an operator can still
// replay, resolve or discard the event. An event no longer parked is
// refused (notParked) and forgotten; a replay of it that was cut short
// is finished (finishReplay).
func (s *Service) transition(ctx context.Context, it ops.Item, a state.Action) (state.Record, []state.EffectKind, error) {
	rec, _, effects, err := s.st.Transition(ctx, it.Account, it.ID, a)
	if errors.Is(err, store.ErrUndecodable) {
		rec, effects, err = s.transitionCopy(ctx, it, a, err)
	}
	if errors.Is(err, state.ErrInvalidTransition) {
		switch {
		case unfinishedReplay(rec):
			s.finishReplay(ctx, it.Account, it.ID, it.Seq)
		case !rec.Status.Parked():
			s.forget(ctx, it.ID)
		}
		return rec, nil, notParked(it.ID, rec.Status)
	}
	return rec, effects, err
}

// unfinishedReplay reports whether rec waits as a replay left it:
// pending, the replay its last step. A replica killed during the replay
// may not have published its EVENTS message.
func unfinishedReplay(rec state.Record) bool {
	n := len(rec.History)
	return rec.Status == state.Pending && n > 0 && rec.History[n-1].Action == state.Replay
}

// finishReplay does what a replay of event id (its DEAD entry at seq)
// cut short by a kill may have left undone. While the record still waits
// as the replay left it, its EVENTS message is published again under the
// replay's message id, so the server drops it if the first got there;
// otherwise the event would wait for the reconciler's sweep. Then the
// DEAD entry goes, if it is still there, and the event's item if it
// still lists that entry.
func (s *Service) finishReplay(ctx context.Context, account, id string, seq uint64) {
	rec, _, err := s.st.Get(ctx, account, id)
	if err == nil && unfinishedReplay(rec) {
		if env, err := s.st.Envelope(rec); err == nil {
			if err := s.enqueue(ctx, env, rec); err != nil {
				s.log.Warn().Err(err).Str("event_id", id).Msg("publishing a replayed event again failed; the reconciler puts it back on its path")
			}
		}
	}
	s.dropEntry(ctx, ops.Item{ID: id, Seq: seq})
	s.forgetEntry(ctx, id, seq)
}

// transitionCopy applies a to the record kept in it's DEAD entry and
// writes the result over the stored record that does not decode (cause),
// by compare-and-set on its revision.
func (s *Service) transitionCopy(ctx context.Context, it ops.Item, a state.Action, cause error) (state.Record, []state.EffectKind, error) {
	e, err := s.entry(ctx, it)
	if err != nil {
		return state.Record{}, nil, err
	}
	if e.Record == nil {
		return state.Record{}, nil, fail(http.StatusConflict, "undecodable_record", "%v, and its DEAD entry keeps no copy of it", cause)
	}
	_, rev, err := s.st.Get(ctx, it.Account, it.ID)
	if err == nil { // put right meanwhile
		err = store.ErrConflict
	}
	if !errors.Is(err, store.ErrUndecodable) {
		return state.Record{}, nil, fmt.Errorf("the record of %s changed while it was made again: %w", it.ID, err)
	}
	a.Detail = strings.TrimSpace(a.Detail + " (its stored record did not decode: made again from its DEAD entry)")
	next, effects, err := state.Apply(*e.Record, a, s.st.Now())
	if err != nil {
		return *e.Record, nil, err
	}
	if _, err := s.st.Write(ctx, next, rev); err != nil {
		return state.Record{}, nil, err
	}
	s.log.Warn().Err(cause).Str("event_id", it.ID).Str("action", string(a.Name)).Msg("a record that did not decode was made again from its DEAD entry")
	return next, effects, nil
}

// dropEntry deletes an item's DEAD message, and with it the payload it
// keeps, once the operator's action is stored. A failure is logged, not
// returned: the action stands, and deadletter.retention removes the entry.
func (s *Service) dropEntry(ctx context.Context, it ops.Item) {
	if err := thrice(ctx, func() error { return deleteMsg(ctx, s.deadSt, it.Seq) }, nil); err != nil {
		s.log.Warn().Err(err).Str("event_id", it.ID).Uint64("seq", it.Seq).Msg("deleting a settled DEAD entry failed; retention removes it")
	}
}

// discardSeq drops an entry without an event: its DEAD message (the
// refused submission) is deleted, then its item.
func (s *Service) discardSeq(ctx context.Context, seq uint64, actor, why string) error {
	key := seqKey(seq)
	it, _, ok := s.x.Get(key)
	if !ok {
		return fail(http.StatusNotFound, "not_found", "no listed DEAD entry without an event at sequence %d", seq)
	}
	if err := deleteMsg(ctx, s.deadSt, seq); err != nil {
		return fmt.Errorf("deleting DEAD entry %d: %w", seq, err)
	}
	s.forget(ctx, key)
	s.log.Info().Uint64("seq", seq).Str("actor", actor).Str("reason", why).Msg("DEAD entry discarded")
	// The entry is gone with what it said; the audit keeps who dropped
	// what, as an event's history would.
	return s.audit(ctx, ops.Action{At: time.Now().UTC(), Action: ops.ActionDiscardEntry, Account: dead.AccountToken(it.Account),
		Seq: seq, Entry: entrySummary(it), Actor: actor, Reason: why})
}

// entrySummary is what an audit keeps of a discarded entry: its kind, class
// and error, the error cut to ops.MaxReason bytes.
func entrySummary(it ops.Item) string {
	s := fmt.Sprintf("%s %s: %s", it.Kind, it.Class, it.Error)
	if len(s) > ops.MaxReason {
		s = strings.ToValidUTF8(s[:ops.MaxReason], "")
	}
	return s
}

// resolve decides a review (or a dead event).
func (s *Service) resolve(ctx context.Context, req ops.ResolveRequest) error {
	actor := actorOf(ctx)
	switch req.Outcome {
	case ops.OutcomeDone:
		if err := event.CheckDepth("result", req.Result); err != nil { // first: json.Valid says only "not JSON" past its own depth
			return fail(http.StatusBadRequest, "malformed", "%v", err)
		}
		if req.Result != nil && !json.Valid(req.Result) {
			return fail(http.StatusBadRequest, "malformed", "result is not JSON")
		}
		it, err := s.lookupEntry(ctx, req.ID, req.Entry)
		if err != nil {
			return err
		}
		return s.settle(ctx, it, state.Action{Name: state.Resolve, Actor: actor, Detail: req.Reason, Result: req.Result})
	case ops.OutcomeDiscard:
		if err := discardReason(req.Reason); err != nil {
			return err
		}
		return s.discard(ctx, req.ID, req.Entry, actor, req.Reason)
	case ops.OutcomeRequeuePrimary:
		return s.replay(ctx, req.ID, req.Entry, nil, state.StagePrimary, actor, req.Reason)
	case ops.OutcomeRequeueFallback:
		return s.replay(ctx, req.ID, req.Entry, nil, state.StageFallback, actor, req.Reason)
	}
	return fail(http.StatusBadRequest, "invalid_outcome", "outcome must be done, discard, requeue_primary or requeue_fallback, got %q", req.Outcome)
}

// forEach runs fn on each id with a few at a time and collects the counts.
func forEach(ids []string, fn func(id string) error) (done, skipped int, errs []ops.ItemError) {
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := fn(id)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				done++
				return
			}
			status, code, msg := statusOf(err)
			if code == "not_parked" {
				skipped++
				return
			}
			errs = append(errs, ops.ItemError{ID: id, Code: status, Message: msg})
		}()
	}
	wg.Wait()
	return done, skipped, errs
}

func checkSelection(n int) error {
	if n == 0 {
		return fail(http.StatusBadRequest, "ids_required", "give ids (or a filter)")
	}
	if n > ops.MaxSelection {
		return fail(http.StatusBadRequest, "too_many", "at most %d ids at once, got %d; replay by filter instead", ops.MaxSelection, n)
	}
	return nil
}

// replayRequest replays ids now, or starts a job for a filter.
func (s *Service) replayRequest(ctx context.Context, req ops.ReplayRequest) (ops.ReplayReply, error) {
	actor := actorOf(ctx)
	if req.Filter != nil {
		if len(req.IDs) > 0 || req.Payload != nil {
			return ops.ReplayReply{}, fail(http.StatusBadRequest, "bad_request", "give either ids or a filter, and an edited payload only with one id")
		}
		j, err := s.createJob(ctx, *req.Filter, req.Stage, actor, req.Reason, req.RatePerSecond)
		if err != nil {
			return ops.ReplayReply{}, err
		}
		return ops.ReplayReply{JobID: j.JobID}, nil
	}
	if err := checkSelection(len(req.IDs)); err != nil {
		return ops.ReplayReply{}, err
	}
	if req.Payload != nil && len(req.IDs) != 1 {
		return ops.ReplayReply{}, fail(http.StatusBadRequest, "bad_request", "an edited payload goes with exactly one id, got %d", len(req.IDs))
	}
	if len(req.IDs) == 1 { // one id: its error is the answer
		if err := s.replay(ctx, req.IDs[0], req.Entries[req.IDs[0]], req.Payload, req.Stage, actor, req.Reason); err != nil {
			return ops.ReplayReply{}, err
		}
		return ops.ReplayReply{Replayed: 1}, nil
	}
	done, skipped, errs := forEach(req.IDs, func(id string) error {
		return s.replay(ctx, id, req.Entries[id], nil, req.Stage, actor, req.Reason)
	})
	return ops.ReplayReply{Replayed: done, Skipped: skipped, Errors: errs}, nil
}

// discardReason refuses a discard without a reason, whichever route asks
// for it (dead discard, or a review resolved by discarding): it cancels
// the event for good, and the reason is all its history keeps of why.
func discardReason(why string) error {
	if strings.TrimSpace(why) == "" {
		return fail(http.StatusBadRequest, "reason_required", "say why: a discard needs a reason")
	}
	return nil
}

// discardRequest discards ids and event-less entries.
func (s *Service) discardRequest(ctx context.Context, req ops.DiscardRequest) (ops.ActionReply, error) {
	actor := actorOf(ctx)
	if err := discardReason(req.Reason); err != nil {
		return ops.ActionReply{}, err
	}
	if err := checkSelection(len(req.IDs) + len(req.Seqs)); err != nil {
		return ops.ActionReply{}, err
	}
	if len(req.IDs)+len(req.Seqs) == 1 {
		var err error
		if len(req.IDs) == 1 {
			err = s.discard(ctx, req.IDs[0], req.Entries[req.IDs[0]], actor, req.Reason)
		} else {
			err = s.discardSeq(ctx, req.Seqs[0], actor, req.Reason)
		}
		if err != nil {
			return ops.ActionReply{}, err
		}
		return ops.ActionReply{Done: 1}, nil
	}
	done, skipped, errs := forEach(req.IDs, func(id string) error { return s.discard(ctx, id, req.Entries[id], actor, req.Reason) })
	for _, seq := range req.Seqs {
		if err := s.discardSeq(ctx, seq, actor, req.Reason); err != nil {
			status, _, msg := statusOf(err)
			errs = append(errs, ops.ItemError{ID: seqKey(seq), Code: status, Message: msg})
			continue
		}
		done++
	}
	return ops.ActionReply{Done: done, Skipped: skipped, Errors: errs}, nil
}
