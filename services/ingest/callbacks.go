package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/callbacks"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tracing"
	"github.com/tenaz/tenaz/pkg/webhook"
)

// Outcomes of a verified callback, answered as {"outcome": …}.
const (
	CallbackApplied   = "applied"             // it carried the result: the event is done
	CallbackDuplicate = "duplicate"           // its webhook-id was applied before
	CallbackLate      = "late"                // the event no longer waits for this target
	CallbackProgress  = "progress"            // not final (done_when): recorded, still waiting
	CallbackUnknown   = "unknown_event"       // no event (of the webhook's account) matches its id or reference
	CallbackAmbiguous = "ambiguous_reference" // its reference is held in several accounts and it names none
)

// Refused webhooks of one target: refusalBurst answers 401 per second,
// then 429 with Retry-After until the second ends; refusal logs are
// sampled to refusalLogBurst lines per refusalLogPeriod. The metric
// counts every refusal.
const (
	refusalBurst     = 20
	refusalLogBurst  = 5
	refusalLogPeriod = 10 * time.Second
)

// refusals is one target's refusal budget and its sampled log.
type refusals struct {
	limit ratelimiter.RateLimiter[any]
	log   zerolog.Logger
}

// newRefusals builds the refusal budget of every target that receives
// webhooks, and under "" the one budget the targets given a
// callback_secret by a reload share.
func newRefusals(cfg *config.Config, log zerolog.Logger) map[string]*refusals {
	m := map[string]*refusals{"": {
		limit: ratelimiter.NewBursty[any](refusalBurst, time.Second),
		log:   log.Sample(&zerolog.BurstSampler{Burst: refusalLogBurst, Period: refusalLogPeriod}),
	}}
	for name, t := range cfg.Targets {
		if t.CallbackSecret != "" {
			m[name] = &refusals{
				limit: ratelimiter.NewBursty[any](refusalBurst, time.Second),
				log:   log.Sample(&zerolog.BurstSampler{Burst: refusalLogBurst, Period: refusalLogPeriod}),
			}
		}
	}
	return m
}

// CallbackReply is the body of a 200 answer to a webhook.
type CallbackReply struct {
	Outcome string `json:"outcome"`
	ID      string `json:"id,omitempty"`
}

// handleCallback: POST /v1/callbacks/{target} and
// POST /v1/callbacks/{target}/{account}. A provider's webhook, verified
// with the target's callback_secret (Standard Webhooks: HMAC over
// id.timestamp.body, timestamp tolerance). The headers and the timestamp
// are checked before the body is read. Whatever a verified webhook turns
// out to be — applied, a duplicate, late, unknown — it is answered 200 and
// recorded in the event's history (a repeat of the same webhook-id is not
// recorded again); a bad signature is refused (401, then 429 past the
// target's refusal budget), and a store outage is 503 so that the
// provider retries. The account form resolves references in that
// account only and never touches another account's event.
func (s *Service) handleCallback(w http.ResponseWriter, r *http.Request) {
	name, account := r.PathValue("target"), r.PathValue("account")
	t, ok := s.conf().Target(name)
	if !ok || t.CallbackSecret == "" {
		httpapi.Error(w, http.StatusNotFound, "unknown_target", fmt.Sprintf("no target %q receives callbacks", name))
		return
	}
	if account != "" && names.ValidateAccount(account) != nil {
		httpapi.Error(w, http.StatusNotFound, "unknown_account", "the account in the callback URL is not a valid account name")
		return
	}
	sig, err := webhook.Check(r.Header, t.Callback.Tolerance.D(), s.st.Now())
	if err != nil {
		s.refuse(w, name, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.HTTP.MaxBodyBytes)) // a provider's body: no envelope around it
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httpapi.Error(w, http.StatusRequestEntityTooLarge, "too_large", "request body is over the limit")
			return
		}
		httpapi.Error(w, http.StatusBadRequest, "malformed", "reading body: "+err.Error())
		return
	}
	secret, _ := s.conf().CallbackSecret(account, name)
	if err := sig.Verify(secret.Reveal(), body); err != nil {
		s.refuse(w, name, err)
		return
	}
	doc, err := event.DecodeObject(body)
	if err != nil {
		httpapi.Error(w, http.StatusBadRequest, "malformed", "a callback body must be a JSON object: "+err.Error())
		return
	}
	// Read two ways, the body's status or reference would be one value
	// to tenaz and maybe another to whoever reads the stored result.
	if err := event.ReadsTwoWays("callback body", body); err != nil {
		httpapi.Error(w, http.StatusBadRequest, "malformed", err.Error())
		return
	}
	reply, err := s.ApplyCallback(tracing.Remote(r.Context(), r.Header.Get), account, name, sig.ID, doc, body)
	if errors.Is(err, ErrMalformedCallback) {
		httpapi.Error(w, http.StatusBadRequest, "malformed", err.Error())
		return
	}
	if err != nil {
		s.log.Error().Err(err).Str("target", name).Msg("callback not applied: store unavailable")
		httpapi.Error(w, http.StatusServiceUnavailable, "unavailable", "the callback could not be stored; send it again")
		return
	}
	switch reply.Outcome {
	case CallbackApplied:
		s.metrics.Callback(name, metrics.CallbackApplied)
	case CallbackUnknown, CallbackAmbiguous:
		s.metrics.Callback(name, metrics.CallbackUnknown)
	default:
		s.metrics.Callback(name, metrics.CallbackNoop)
	}
	httpapi.JSON(w, http.StatusOK, reply)
}

// refuse answers a webhook that failed verification: 401 within the
// target's refusal budget, 429 beyond it. Either way the connection is
// closed, so a sender of forgeries pays a new connection for each.
func (s *Service) refuse(w http.ResponseWriter, target string, err error) {
	s.metrics.Callback(target, metrics.CallbackForged)
	w.Header().Set("Connection", "close")
	rf, ok := s.refused[target]
	if !ok {
		rf = s.refused[""]
	}
	if !rf.limit.TryAcquirePermit() {
		w.Header().Set("Retry-After", "1")
		httpapi.Error(w, http.StatusTooManyRequests, "too_many_refusals", "too many refused webhooks for this target; retry later")
		return
	}
	rf.log.Warn().Str("target", target).Err(err).Msg("webhook refused")
	httpapi.Error(w, http.StatusUnauthorized, "invalid_signature", err.Error())
}

// ApplyCallback applies a verified callback of target to the event it
// names (by event id, else by the provider's reference), once: only an
// event that still waits for this target's result moves (to done); every
// other case is a recorded no-op, recorded once per webhook-id and
// outcome. With account set, the reference is looked up in that account
// only, and an event of another account is unknown (and left untouched).
// account is the one whose key verified the webhook: without one (the
// target's key), an event of an account with a callback secret of its
// own is unknown too. A message (webhookID and body: its copies, and the
// provider's retries of it) is applied to one event at most, whichever
// URL it came to. It is safe to call concurrently with copies of the
// same callback.
func (s *Service) ApplyCallback(ctx context.Context, account, target, webhookID string, doc map[string]any, body []byte) (reply CallbackReply, err error) {
	began, tp := time.Now(), ""
	defer func() {
		if err == nil {
			tracing.Callback(ctx, tp, began, reply.ID, target, webhookID, reply.Outcome)
		}
	}()
	t, _ := s.conf().Target(target)
	log := s.log.With().Str("target", target).Str("webhook_id", webhookID).Logger()
	if account != "" {
		log = log.With().Str("account", account).Logger()
	}
	id, _ := doc[t.Callback.EventField].(string)
	ref := event.Scalar(doc[t.Callback.ReferenceField])
	replay, echoed, err := replayOf(doc, t.Callback.ReplayField)
	if err != nil {
		return CallbackReply{}, err
	}
	byRef := names.ValidateEventID(id) != nil && ref != ""
	if byRef {
		id, err = s.refs.Lookup(ctx, account, target, ref, s.ownKey(target))
		if errors.Is(err, callbacks.ErrNotFound) {
			msg := sha256.Sum256([]byte(webhookContent(webhookID, body)))
			id, err = s.awaitRef(log.WithContext(ctx), account, target, ref, msg, s.conf().TargetFor(account, target).Timeout.D())
		}
		switch {
		case errors.Is(err, callbacks.ErrNotFound):
			id = ""
		case errors.Is(err, callbacks.ErrAmbiguous):
			log.Warn().Err(err).Msg("callback not applied: its reference is held in several accounts; send it to /v1/callbacks/{target}/{account}")
			return CallbackReply{Outcome: CallbackAmbiguous}, nil
		case err != nil:
			return CallbackReply{}, err
		}
	}
	if names.ValidateEventID(id) != nil {
		log.Warn().Msg("callback for an unknown event")
		return CallbackReply{Outcome: CallbackUnknown}, nil
	}
	final, status := true, ""
	if dw := t.Callback.DoneWhen; dw.Field != "" {
		status = event.Scalar(doc[dw.Field])
		final = status != "" && slices.Contains(dw.In, status)
	}
	actor := "callback:" + target
	// earlierJob reports whether ref is a job the event was given (the
	// index keeps each until its TTL). A reference it never held, with the
	// event's id, is the provider's own business (a field that is not the
	// job id): the id alone decides then.
	earlierJob := func(cur state.Record) bool {
		if byRef {
			return true
		}
		held, err := s.refs.Lookup(ctx, cur.Account, target, ref, nil)
		return err == nil && held == id
	}
	outcome, heldBy := "", ""
	now := s.st.Now()
	rec, _, err := s.st.Update(ctx, account, id, func(cur state.Record) (state.Record, error) {
		if account != "" && cur.Account != account {
			return cur, errOtherAccount
		}
		if _, own := s.conf().CallbackSecret(cur.Account, target); own && account == "" {
			// Verified with the target's key, which the account's
			// provider tenancy does not sign with: whoever holds it
			// could complete this account's events.
			return cur, errOtherAccount
		}
		if !s.calledBack(cur, target) {
			return cur, errNotThisTarget
		}
		note := func(o, detail string) (state.Record, error) {
			outcome = o
			if webhookID != "" && noted(cur, actor, detail) {
				return cur, errUnchanged
			}
			n, _, err := state.Apply(cur, state.Action{Name: state.Note, Actor: actor, Detail: detail}, now)
			return n, err
		}
		waiting := (cur.Status == state.AwaitingCallback || cur.Status == state.Running || unanswered(cur)) && s.awaits(cur, target)
		switch {
		case webhookID != "" && applied(cur, actor, webhookID):
			return note(CallbackDuplicate, fmt.Sprintf("duplicate callback (webhook-id %s, applied before) ignored", webhookID))
		case !waiting:
			return note(CallbackLate, fmt.Sprintf("late callback %s from %s ignored: the event is %s at stage %s", webhookID, target, cur.Status, cur.Stage))
		case byRef && cur.Status == state.Retrying || ref != "" && cur.Reference != "" && ref != cur.Reference && earlierJob(cur):
			// A webhook naming a job the event was given before, not the
			// one it waits on, is a run's before a replay; so is one found
			// by reference while the event retries (its last attempt got
			// no answer, so recorded none).
			return note(CallbackLate, fmt.Sprintf("late callback %s from %s ignored: it names the reference of an earlier run, not the one the event waits on", webhookID, target))
		case echoed && replay != cur.Replays:
			// The provider echoes the replay count its call carried: this
			// webhook answers a call made before (or for none of) the
			// event's replays, maybe for a payload the replay changed.
			return note(CallbackLate, fmt.Sprintf("late callback %s from %s ignored: it answers a call of replay %d (its %s), the event is at replay %d", webhookID, target, replay, t.Callback.ReplayField, cur.Replays))
		case !final:
			return note(CallbackProgress, fmt.Sprintf("callback %s: %s is %q, not final; still waiting", webhookID, t.Callback.DoneWhen.Field, status))
		}
		if webhookID != "" && byRef {
			// Found by reference, the event is the one the URL's account
			// holds the reference in, and that account is not signed: a
			// copy sent to another account's URL must find this one's
			// hold. An event id in the body is signed, so a copy names
			// this event wherever it is sent, and its history's
			// webhook-id makes it a duplicate: no hold, no round trip.
			other, err := s.refs.HoldWebhook(ctx, target, webhookContent(webhookID, body), cur.ID, webhookHold(t.Callback.Tolerance.D()))
			if err != nil {
				return cur, err
			}
			if other != "" {
				heldBy = other
				return cur, errWebhookElsewhere
			}
		}
		outcome = CallbackApplied
		a := state.Action{Name: state.Complete, Actor: actor, Detail: appliedDetail(webhookID), Reference: ref}
		if json.Valid(body) {
			a.Result = json.RawMessage(body) // one too large is dropped with a note (state.Action)
		}
		n, _, err := state.Apply(cur, a, now)
		return n, err
	})
	tp = rec.Traceparent
	log = tracing.Log(log, tp)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, errOtherAccount) || errors.Is(err, errNotThisTarget) {
		log.Warn().Str("event_id", id).AnErr("why", err).Msg("callback for an unknown event")
		return CallbackReply{Outcome: CallbackUnknown}, nil
	}
	if errors.Is(err, errWebhookElsewhere) {
		// Answered as a copy, without the other event's id (another
		// account's, maybe), and written nowhere.
		log.Warn().Str("event_id", id).Str("applied_to", heldBy).Msg("callback not applied: the same signed webhook was applied to another event; a copy sent to another URL")
		return CallbackReply{Outcome: CallbackDuplicate}, nil
	}
	if errors.Is(err, errUnchanged) {
		if outcome == CallbackDuplicate {
			// Sent again: the answer to the first copy may have been lost
			// with this process, before it woke the lane's next event.
			s.advanceLane(ctx, log, rec)
		}
		log.Debug().Str("event_id", rec.ID).Str("outcome", outcome).Msg("callback repeated; already recorded")
		return CallbackReply{Outcome: outcome, ID: rec.ID}, nil
	}
	if err != nil {
		return CallbackReply{}, err
	}
	if outcome == CallbackApplied {
		s.advanceLane(ctx, log, rec)
		s.deadlines.add(rec.Account, rec.ID)
	}
	log.Info().Str("event_id", rec.ID).Str("outcome", outcome).Msg("callback")
	return CallbackReply{Outcome: outcome, ID: rec.ID}, nil
}

// slots bounds the webhooks awaitRef holds, per target: beyond
// Options.EarlyWebhooks, one naming a reference nobody recorded is
// answered unknown at once. Per target, so that a provider sending
// webhooks for work tenaz never gave it (its other customers' jobs, a
// misconfigured endpoint) fills its own target's slots, not those of
// every other provider's early webhooks. The copies of one signed
// message share its slot, at most maxCopiesHeld of them at once: the
// account in the callback URL is not signed, so a captured webhook sent
// again inside its tolerance to other accounts' URLs would otherwise
// take a slot for each, and leave the provider's real early webhooks
// answered unknown.
type slots struct {
	size int
	mu   sync.Mutex
	by   map[string]map[[sha256.Size]byte]int // target → signed message → copies held
}

// maxCopiesHeld is how many copies of one signed message awaitRef holds
// at once; a provider sends a message again only when its first send
// got no answer.
const maxCopiesHeld = 4

// take holds a slot of target for the signed message msg, or joins the
// copies holding one; ok is false when none is left. release gives it
// back.
func (sl *slots) take(target string, msg [sha256.Size]byte) (release func(), ok bool) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	held := sl.by[target]
	switch n, holds := held[msg]; {
	case holds && n >= maxCopiesHeld, !holds && len(held) >= sl.size:
		return nil, false
	}
	if held == nil {
		if sl.by == nil {
			sl.by = map[string]map[[sha256.Size]byte]int{}
		}
		held = map[[sha256.Size]byte]int{}
		sl.by[target] = held
	}
	held[msg]++
	return func() {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		if held[msg]--; held[msg] == 0 {
			delete(held, msg)
		}
	}, true
}

// webhookContent is what makes two webhooks one message: its id and its
// body. The signature also covers the timestamp, which a provider's
// retry of the message signs anew: a retry is the same message, and a
// copy of it sent to another account's URL must find its hold too.
func webhookContent(webhookID string, body []byte) string {
	return webhookID + "." + string(body)
}

// maxEarlyWait bounds how long awaitRef holds a webhook, whatever its
// target's call timeout.
const maxEarlyWait = 30 * time.Second

// awaitRef holds a webhook that names a reference nobody recorded, for up
// to wait (its target's call timeout), and looks the reference up again
// once it is recorded. A provider may call back before its answer to the
// call reaches tenaz, and the dispatcher records the reference only on
// that answer; a call that takes longer than its timeout is abandoned by
// tenaz (its event retries), so a reference recorded later answers
// nothing this webhook could complete. Answered unknown at once, the
// webhook would be lost, and its event left to its deadline.
func (s *Service) awaitRef(ctx context.Context, account, target, ref string, msg [sha256.Size]byte, wait time.Duration) (string, error) {
	release, ok := s.early.take(target, msg)
	if !ok {
		return "", callbacks.ErrNotFound
	}
	defer release()
	zerolog.Ctx(ctx).Debug().Msg("webhook names a reference not recorded yet: waiting for the call's answer")
	wctx, cancel := context.WithTimeout(ctx, min(wait, maxEarlyWait))
	defer cancel()
	if err := s.refs.Await(wctx, account, target, ref, s.ownKey(target)); err != nil {
		if wctx.Err() != nil { // waited long enough, or the sender hung up
			return "", callbacks.ErrNotFound
		}
		return "", err
	}
	return s.refs.Lookup(ctx, account, target, ref, s.ownKey(target))
}

// ownKey says the accounts with a callback key of their own for target:
// a webhook verified with the target's key completes none of their
// events, so a reference they hold is not one it can name.
func (s *Service) ownKey(target string) func(account string) bool {
	cfg := s.conf()
	return func(account string) bool {
		_, own := cfg.CallbackSecret(account, target)
		return own
	}
}

// unanswered reports whether rec is retrying after an attempt that got no
// answer: it timed out, its connection was lost, or its run was lost with
// its dispatcher. The provider may have taken it, and its callback then
// brings the result the retry would wait for. After an answer (a 5xx, a
// 429) or a yield, no callback can be this run's.
func unanswered(rec state.Record) bool {
	if rec.Status != state.Retrying {
		return false
	}
	for i := len(rec.History) - 1; i >= 0; i-- {
		switch e := rec.History[i]; e.Action {
		case state.Note:
			continue
		case state.Recover:
			return true
		case state.Retry:
			return e.HTTPStatus == 0
		default:
			return false
		}
	}
	return false
}

// advanceLane wakes the next event of rec's ordered lane, rec being
// finished, before the webhook is answered: a sender that gets no answer
// (this process died) sends it again, and the copy wakes it (a duplicate).
// An event of no lane costs nothing (lane.Order.Advance). If the wake fails, the event's
// deadline timer (its purge comes after) or the next event's parking
// schedule wakes it later.
func (s *Service) advanceLane(ctx context.Context, log zerolog.Logger, rec state.Record) {
	if !state.Finished(rec.Status) { // a copy of a webhook applied before a replay
		return
	}
	if err := s.order.Advance(log.WithContext(ctx), rec); err != nil {
		log.Warn().Err(err).Str("event_id", rec.ID).Msg("the next event of its lane not woken; its deadline or its parking schedule wakes it")
	}
}

// errOtherAccount ends the update of an event that is not the webhook's
// account's: to the webhook, it does not exist.
var errOtherAccount = errors.New("ingest: the event belongs to another account")

// errNotThisTarget ends the update of an event none of whose stages is
// answered by the webhook's target: to the webhook, it does not exist,
// and nothing is written to it (a provider could otherwise learn which
// ids exist, and fill any event's history with notes).
var errNotThisTarget = errors.New("ingest: no stage of the event is answered by this target")

// errWebhookElsewhere ends the update of an event a webhook would
// complete when the same signed message was applied to another event
// (callbacks.Index.HoldWebhook).
var errWebhookElsewhere = errors.New("ingest: the same signed webhook was applied to another event")

// webhookHold is how long an applied webhook-id is held: as long as a
// copy of it can pass the signature check, whose timestamp may be up to
// tolerance either side of now, and a minute for the clocks.
func webhookHold(tolerance time.Duration) time.Duration { return 2*tolerance + time.Minute }

// ErrMalformedCallback is ApplyCallback's error for a webhook that cannot
// be applied as sent (answered 400): the provider must fix it, not retry.
var ErrMalformedCallback = errors.New("malformed callback")

// replayOf reads the replay count a webhook echoes in field (the
// target's callback.replay_field): echoed is false when the field is
// unset or absent. A value that is not a count is an error, rather than
// a webhook let through as if it had echoed nothing.
func replayOf(doc map[string]any, field string) (n int, echoed bool, err error) {
	if field == "" {
		return 0, false, nil
	}
	v, ok := doc[field]
	if !ok || v == nil {
		return 0, false, nil
	}
	n, err = strconv.Atoi(event.Scalar(v))
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%w: its %q must be the replay count the call carried (Tenaz-Replay), a whole number, got %.40q", ErrMalformedCallback, field, event.Scalar(v))
	}
	return n, true, nil
}

// noted reports whether r's history already holds detail from actor: a
// copy of a webhook that was recorded as a no-op is not recorded again, so
// a replayed webhook costs no write and cannot crowd the history. Both
// are compared as the history keeps them, cut.
func noted(r state.Record, actor, detail string) bool {
	actor = state.Clip(actor, state.MaxName)
	for i := len(r.History) - 1; i >= 0; i-- {
		if e := r.History[i]; e.Action == state.Note && e.Actor == actor && state.Recorded(e.Detail, detail) {
			return true
		}
	}
	return false
}

// awaits reports whether rec's current stage completes by target's callback.
func (s *Service) awaits(rec state.Record, target string) bool {
	k, ok := s.cfg.Kind(rec.Kind)
	if !ok {
		return false
	}
	st, ok := k.StageFor(rec.Stage == state.StageFallback)
	return ok && st.Target == target && st.Completion == config.CompletionCallback
}

// calledBack reports whether any stage of rec's kind is answered by
// target's webhooks.
func (s *Service) calledBack(rec state.Record, target string) bool {
	k, ok := s.cfg.Kind(rec.Kind)
	if !ok {
		return false
	}
	for _, fallback := range []bool{false, true} {
		if st, ok := k.StageFor(fallback); ok && st.Target == target && st.Completion == config.CompletionCallback {
			return true
		}
	}
	return false
}

// appliedDetail is the history detail of an applied callback; applied
// finds it again, so a copy of the same webhook is known for a duplicate
// from the event's own history (the webhook-id's replay protection: one
// result per webhook-id, written in the same compare-and-set as the
// result, so no crash can separate them).
func appliedDetail(webhookID string) string { return "callback " + webhookID + " applied" }

// applied reports whether r's history holds webhookID's completion.
func applied(r state.Record, actor, webhookID string) bool {
	d := appliedDetail(webhookID)
	for i := len(r.History) - 1; i >= 0; i-- {
		if e := r.History[i]; e.Action == state.Complete && e.Actor == actor && state.Recorded(e.Detail, d) {
			return true
		}
	}
	return false
}

// conf is the config in force: a reload (pkg/live) changes a target's
// callback_secret and callback fields without a restart.
func (s *Service) conf() *config.Config {
	if s.o.Live != nil {
		return s.o.Live.Load()
	}
	return s.cfg
}
