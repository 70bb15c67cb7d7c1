package deadletter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// The operators' actions on live accounts, events and breakers: pause and
// resume an account's dispatch, retry an event now, cancel an event's
// callback or poll wait, open a breaker until a time. Each needs a reason
// and records who (the credential's principal, actorOf): an action on an
// event in the event's history, an action on an account or a breaker in
// the audit, kept in tenaz_ops (audit.<account>.<time>, no expiry) and in
// the audit archive (archive.go), and published on
// <prefix>.advisory.action.<account>.

// actionTimeout bounds what an action does after its first write, which
// it finishes even if its caller goes away.
const actionTimeout = 30 * time.Second

func needReason(reason string) (string, error) {
	r := strings.TrimSpace(reason)
	if r == "" {
		return "", fail(http.StatusBadRequest, "reason_required", "say why: the reason is recorded with the action")
	}
	return r, checkReason(r)
}

// checkReason refuses a reason over ops.MaxReason bytes, before anything
// is done: otherwise an action could take effect and then fail to write
// its audit entry.
func checkReason(reason string) error {
	if n := len(reason); n > ops.MaxReason {
		return fail(http.StatusBadRequest, "reason_too_long", "the reason is %d bytes; at most %d", n, ops.MaxReason)
	}
	return nil
}

// checkReasonIn checks the reason a request body carries, if any: every
// operator request names it "reason".
func checkReasonIn(body []byte) error {
	var r struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil // the request's own decoding says what is wrong
	}
	return checkReason(r.Reason)
}

func validAccount(account string) error {
	if err := names.ValidateAccount(account); err != nil {
		return fail(http.StatusBadRequest, "invalid_account", "%v", err)
	}
	return nil
}

// untilOf reads the end of a pause or of an opened breaker: until, or now
// plus the duration dur; zero for neither (unless required).
func untilOf(until *time.Time, dur string, now time.Time, required bool) (time.Time, error) {
	switch {
	case until != nil && dur != "":
		return time.Time{}, fail(http.StatusBadRequest, "invalid_until", "give until or for, not both")
	case until != nil:
		if !until.After(now) {
			return time.Time{}, fail(http.StatusBadRequest, "invalid_until", "until %s is not in the future", until.UTC().Format(time.RFC3339))
		}
		if until.After(now.Add(maxHold)) {
			return time.Time{}, fail(http.StatusBadRequest, "invalid_until", "until %s is more than a year ahead%s", until.UTC().Format(time.RFC3339), untilResumed(required))
		}
		return until.UTC(), nil
	case dur != "":
		d, err := time.ParseDuration(dur)
		if err != nil || d <= 0 {
			return time.Time{}, fail(http.StatusBadRequest, "invalid_until", "for: want a positive duration such as 30m or 2h, got %q", dur)
		}
		if d > maxHold {
			return time.Time{}, fail(http.StatusBadRequest, "invalid_until", "for %s is more than a year%s", dur, untilResumed(required))
		}
		return now.Add(d).UTC(), nil
	case required:
		return time.Time{}, fail(http.StatusBadRequest, "invalid_until", "give until (RFC 3339) or for (a duration such as 30m)")
	}
	return time.Time{}, nil
}

// maxHold is the longest a pause or an opened breaker may be set to last:
// longer is a slip of the unit (1000000h) more likely than a plan.
const maxHold = 366 * 24 * time.Hour

// untilResumed is the advice for an end too far ahead: a pause may be
// left to its resume instead; an opened breaker (end required) may not.
func untilResumed(required bool) string {
	if required {
		return ""
	}
	return "; to pause until resumed, give neither until nor for"
}

// reasonAndEnd reads an action's reason (needReason) and the end of its
// pause or opened breaker (untilOf).
func reasonAndEnd(reason string, until *time.Time, dur string, now time.Time, required bool) (why string, end time.Time, err error) {
	if why, err = needReason(reason); err != nil {
		return "", time.Time{}, err
	}
	end, err = untilOf(until, dur, now, required)
	return why, end, err
}

// pauseAccount records an operator's pause of an account; the dispatchers
// watch the pauses. A pause already in force is replaced (new end, new reason).
func (s *Service) pauseAccount(ctx context.Context, req ops.PauseRequest) (ops.AccountReply, error) {
	actor := actorOf(ctx)
	if err := validAccount(req.Account); err != nil {
		return ops.AccountReply{}, err
	}
	now := s.now().UTC()
	why, until, err := reasonAndEnd(req.Reason, req.Until, req.For, now, false)
	if err != nil {
		return ops.AccountReply{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actionTimeout)
	defer cancel()
	if err := s.pauses.Set(ctx, accounts.Pause{Account: req.Account, Until: until, Actor: actor, Reason: why, At: now}); err != nil {
		return ops.AccountReply{}, err
	}
	a := ops.Action{At: now, Action: ops.ActionPause, Account: req.Account, Actor: actor, Reason: why}
	if !until.IsZero() {
		a.Until = &until
	}
	if err := s.audit(ctx, a); err != nil {
		return ops.AccountReply{}, err
	}
	s.log.Info().Str("account", req.Account).Str("actor", actor).Time("until", until).Msg("account paused by an operator")
	return s.accountState(ctx, req.Account)
}

// resumeAccount ends an operator's pause (the account's open breakers, if
// any, still hold it until their cooldown ends).
func (s *Service) resumeAccount(ctx context.Context, req ops.ResumeRequest) (ops.AccountReply, error) {
	actor := actorOf(ctx)
	if err := validAccount(req.Account); err != nil {
		return ops.AccountReply{}, err
	}
	why, err := needReason(req.Reason)
	if err != nil {
		return ops.AccountReply{}, err
	}
	p, ok, rev, err := s.pauses.Get(ctx, req.Account)
	if err != nil {
		return ops.AccountReply{}, err
	}
	now := s.now().UTC()
	if !ok || !p.Holds(now) {
		return ops.AccountReply{}, notPaused(req.Account)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actionTimeout)
	defer cancel()
	// Only the pause read is ended: one written since (another
	// operator's, which the audit shows as the latest action) stands.
	if err := s.pauses.Clear(ctx, req.Account, rev); errors.Is(err, accounts.ErrPauseChanged) {
		return ops.AccountReply{}, s.pauseChanged(ctx, req.Account)
	} else if err != nil {
		return ops.AccountReply{}, err
	}
	if err := s.audit(ctx, ops.Action{At: now, Action: ops.ActionResume, Account: req.Account, Actor: actor, Reason: why}); err != nil {
		return ops.AccountReply{}, err
	}
	s.log.Info().Str("account", req.Account).Str("actor", actor).Msg("account resumed by an operator")
	return s.accountState(ctx, req.Account)
}

func notPaused(account string) error {
	return fail(http.StatusConflict, "not_paused", "account %s is not paused by an operator", account)
}

// pauseChanged is the refusal of a resume whose pause changed before it
// was cleared: resumed by someone else (not_paused, as if it came
// later), or paused again, which the resume did not see.
func (s *Service) pauseChanged(ctx context.Context, account string) error {
	p, ok, _, err := s.pauses.Get(ctx, account)
	switch {
	case err != nil:
		return err
	case !ok || !p.Holds(s.now()):
		return notPaused(account)
	}
	return fail(http.StatusConflict, "pause_changed", "account %s was paused again by %s at %s while this resume ran; that pause stands: resume again to end it",
		account, p.Actor, p.At.UTC().Format(time.RFC3339))
}

// accountState is an account's pause and what holds its dispatch.
func (s *Service) accountState(ctx context.Context, account string) (ops.AccountReply, error) {
	p, ok, _, err := s.pauses.Get(ctx, account)
	if err != nil {
		return ops.AccountReply{}, err
	}
	return s.accountReply(account, p, ok), nil
}

func (s *Service) accountReply(account string, p accounts.Pause, ok bool) ops.AccountReply {
	now := s.now()
	rep := ops.AccountReply{Account: account}
	if ok && p.Holds(now) {
		rep.Paused = &ops.AccountPause{Actor: p.Actor, Reason: p.Reason, At: p.At}
		if !p.Until.IsZero() {
			u := p.Until
			rep.Paused.Until = &u
		}
	}
	switch held := accounts.Want(p, ok, s.brk.OpenUntil(account), now); {
	case rep.Paused != nil && rep.Paused.Until == nil:
		// Held until an operator resumes it: no time to show (the
		// dispatchers hold it until accounts.PauseForever).
		rep.UntilResumed = true
	case !held.IsZero():
		rep.HeldUntil = &held
	}
	return rep
}

// pausesList lists the accounts an operator's pause or an open breaker
// holds (or one account, held or not).
func (s *Service) pausesList(ctx context.Context, req ops.PausesRequest) (ops.PausesReply, error) {
	if req.Account != "" {
		if err := validAccount(req.Account); err != nil {
			return ops.PausesReply{}, err
		}
		rep, err := s.accountState(ctx, req.Account)
		return ops.PausesReply{Items: []ops.AccountReply{rep}}, err
	}
	ps, err := s.pauses.List(ctx)
	if err != nil {
		return ops.PausesReply{}, err
	}
	byAccount := map[string]accounts.Pause{}
	for _, p := range ps {
		byAccount[p.Account] = p
	}
	names := map[string]bool{}
	for a := range byAccount {
		names[a] = true
	}
	for _, c := range s.brk.List() {
		names[c.Account] = true
	}
	out := ops.PausesReply{Items: []ops.AccountReply{}}
	for a := range names {
		p, ok := byAccount[a]
		if r := s.accountReply(a, p, ok); r.Held() {
			out.Items = append(out.Items, r)
		}
	}
	slices.SortFunc(out.Items, func(x, y ops.AccountReply) int { return strings.Compare(x.Account, y.Account) })
	return out, nil
}

func eventReply(r state.Record) ops.EventReply {
	return ops.EventReply{ID: r.ID, Account: r.Account, Kind: r.Kind, Status: r.Status, NextRunAt: r.NextRunAt}
}

// liveEvent reads the record an event action applies to.
func (s *Service) liveEvent(ctx context.Context, req ops.EventActionRequest) (state.Record, string, error) {
	if err := names.ValidateEventID(req.ID); err != nil {
		return state.Record{}, "", fail(http.StatusBadRequest, "invalid_id", "%v", err)
	}
	why, err := needReason(req.Reason)
	if err != nil {
		return state.Record{}, "", err
	}
	rec, _, err := s.st.Get(ctx, "", req.ID)
	if errors.Is(err, store.ErrNotFound) {
		return state.Record{}, "", fail(http.StatusNotFound, "not_found", "event %s not found", req.ID)
	}
	return rec, why, err
}

// retryNow makes a retrying or scheduled event due now: the record says
// so first (the dispatcher's claim then finds it due), then its schedule
// is moved to now, replacing the one that waited. A crash in between
// leaves the former schedule, which runs it at its former time.
func (s *Service) retryNow(ctx context.Context, req ops.EventActionRequest) (ops.EventReply, error) {
	actor := actorOf(ctx)
	rec, why, err := s.liveEvent(ctx, req)
	if err != nil {
		return ops.EventReply{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actionTimeout)
	defer cancel()
	due := queue.DueTime(s.now())
	next, _, _, err := s.st.Transition(ctx, rec.Account, rec.ID, state.Action{Name: state.RetryNow, Actor: actor, Detail: why, NextRunAt: &due})
	if errors.Is(err, state.ErrInvalidTransition) {
		return ops.EventReply{}, fail(http.StatusConflict, "not_waiting", "event %s is %s: only a retrying or scheduled event can be retried now", rec.ID, next.Status)
	}
	if err != nil {
		return ops.EventReply{}, err
	}
	env, err := s.st.Envelope(next)
	if err == nil {
		err = s.q.ScheduleAt(ctx, env, due, "")
	}
	if err != nil {
		return ops.EventReply{}, fmt.Errorf("event %s is due now but its schedule could not be moved (it runs at its former time): %w", rec.ID, err)
	}
	s.log.Info().Str("event_id", rec.ID).Str("actor", actor).Msg("retried now by an operator")
	return eventReply(next), nil
}

// cancelWait cancels an event awaiting its callback or polling, then purges
// its deadline or next poll (a callback or poll answer that comes later
// finds it cancelled and is recorded as a no-op) and wakes the next event
// of its ordered lane.
func (s *Service) cancelWait(ctx context.Context, req ops.EventActionRequest) (ops.EventReply, error) {
	actor := actorOf(ctx)
	rec, why, err := s.liveEvent(ctx, req)
	if err != nil {
		return ops.EventReply{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actionTimeout)
	defer cancel()
	next, _, _, err := s.st.Transition(ctx, rec.Account, rec.ID, state.Action{Name: state.CancelWait, Actor: actor, Detail: why})
	if errors.Is(err, state.ErrInvalidTransition) {
		return ops.EventReply{}, fail(http.StatusConflict, "not_waiting", "event %s is %s: only an event awaiting its callback or polling can stop waiting", rec.ID, next.Status)
	}
	if err != nil {
		return ops.EventReply{}, err
	}
	if err := s.q.CancelSchedule(ctx, next.Account, next.ID); err != nil {
		s.log.Warn().Err(err).Str("event_id", next.ID).Msg("cancel wait: purging the timer failed; it finds the event cancelled when it fires")
	}
	if err := s.order.Advance(s.log.WithContext(ctx), next); err != nil {
		s.log.Warn().Err(err).Str("event_id", next.ID).Msg("cancel wait: the next event of its lane not woken; its parking schedule wakes it")
	}
	s.log.Info().Str("event_id", next.ID).Str("actor", actor).Msg("wait cancelled by an operator")
	return eventReply(next), nil
}

// openBreaker opens a configured target's breaker for an account until a
// time, for every replica, and pauses the account's dispatch meanwhile.
func (s *Service) openBreaker(ctx context.Context, req ops.OpenBreakerRequest) (ops.BreakerItem, error) {
	actor := actorOf(ctx)
	if names.ValidateAccount(req.Account) != nil || req.Target == "" {
		return ops.BreakerItem{}, fail(http.StatusBadRequest, "invalid_breaker", "give a valid account and target, got %q and %q", req.Account, req.Target)
	}
	if _, ok := s.live.Load().Target(req.Target); !ok {
		return ops.BreakerItem{}, fail(http.StatusNotFound, "unknown_target", "no target %q is configured", req.Target)
	}
	now := s.now().UTC()
	why, until, err := reasonAndEnd(req.Reason, req.Until, req.For, now, true)
	if err != nil {
		return ops.BreakerItem{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actionTimeout)
	defer cancel()
	if err := s.brk.Open(ctx, req.Account, req.Target, until, actor, why); err != nil {
		if errors.Is(err, breaker.ErrInvalidName) {
			return ops.BreakerItem{}, fail(http.StatusBadRequest, "invalid_breaker", "%v", err)
		}
		return ops.BreakerItem{}, err
	}
	if err := s.audit(ctx, ops.Action{At: now, Action: ops.ActionOpenBreaker, Account: req.Account, Target: req.Target, Until: &until, Actor: actor, Reason: why}); err != nil {
		return ops.BreakerItem{}, err
	}
	s.log.Info().Str("account", req.Account).Str("target", req.Target).Str("actor", actor).Time("until", until).Msg("breaker opened by an operator")
	return s.breakerNow(req.Account, req.Target), nil
}

// breakerNow is the listed state of one breaker.
func (s *Service) breakerNow(account, target string) ops.BreakerItem {
	for _, c := range s.brk.List() {
		if c.Account == account && c.Target == target {
			return breakerItem(c)
		}
	}
	return ops.BreakerItem{Account: account, Target: target, State: string(breaker.Closed)}
}

// auditKey is an action's key in tenaz_ops: its account, then its time
// (zero-padded, so keys sort by time).
func auditKey(account string, at time.Time) string {
	return fmt.Sprintf("audit.%s.%020d", account, at.UnixNano())
}

// audit keeps an action in tenaz_ops and publishes its advisory.
func (s *Service) audit(ctx context.Context, a ops.Action) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	at := a.At
	for range 8 {
		_, err = s.kvOps.Create(ctx, auditKey(a.Account, at), b)
		if !store.IsKeyTaken(err) {
			break
		}
		at = at.Add(time.Nanosecond) // two actions of one account at one instant
	}
	if err != nil {
		return fmt.Errorf("the %s of %s was done, but its audit entry could not be written: %w", a.Action, a.Account, err)
	}
	if err := s.archiveAction(ctx, auditKey(a.Account, at), at, b, a.Account); err != nil {
		return fmt.Errorf("the %s of %s was done and audited, but it could not be written to the audit archive: %w", a.Action, a.Account, err)
	}
	_ = s.o.Conn.Publish(s.cfg.Prefix+".advisory.action."+a.Account, b)
	return nil
}

// actions lists the audit, newest first.
func (s *Service) actions(ctx context.Context, req ops.ActionsRequest) (ops.ActionsReply, error) {
	filter := "audit.*.*"
	if req.Account != "" {
		if err := validAccount(req.Account); err != nil {
			return ops.ActionsReply{}, err
		}
		filter = "audit." + req.Account + ".*"
	}
	limit := cmp.Or(req.Limit, ops.DefaultLimit)
	if limit < 1 || limit > ops.MaxLimit {
		return ops.ActionsReply{}, fail(http.StatusBadRequest, "invalid_limit", "limit: want 1..%d, got %d", ops.MaxLimit, req.Limit)
	}
	lister, err := s.kvOps.ListKeysFiltered(ctx, filter)
	if err != nil {
		return ops.ActionsReply{}, fmt.Errorf("listing the audit: %w", err)
	}
	type key struct {
		name string
		at   int64
	}
	var keys []key
	for k := range lister.Keys() {
		n, err := strconv.ParseInt(k[strings.LastIndexByte(k, '.')+1:], 10, 64)
		if err == nil {
			keys = append(keys, key{k, n})
		}
	}
	slices.SortFunc(keys, func(x, y key) int { return cmp.Compare(y.at, x.at) })
	rep := ops.ActionsReply{Items: []ops.Action{}}
	for _, k := range keys[:min(limit, len(keys))] {
		e, err := s.kvOps.Get(ctx, k.name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return ops.ActionsReply{}, fmt.Errorf("reading the audit: %w", err)
		}
		var a ops.Action
		if json.Unmarshal(e.Value(), &a) == nil {
			rep.Items = append(rep.Items, a)
		}
	}
	return rep, nil
}

// operatorRoutes registers the actions' HTTP routes (see apiRoutes).
func (s *Service) operatorRoutes(mux readyMux) {
	mux.HandleFunc("POST /v1/accounts/{account}/pause", decoded(s, func(r *http.Request, req *ops.PauseRequest) { req.Account = r.PathValue("account") }, s.pauseAccount))
	mux.HandleFunc("POST /v1/accounts/{account}/resume", decoded(s, func(r *http.Request, req *ops.ResumeRequest) { req.Account = r.PathValue("account") }, s.resumeAccount))
	mux.HandleFunc("GET /v1/pauses", func(w http.ResponseWriter, r *http.Request) {
		q, ok := s.query(w, r, "account")
		if !ok {
			return
		}
		rep, err := s.pausesList(r.Context(), ops.PausesRequest{Account: q.Get("account")})
		s.answer(w, http.StatusOK, rep, err)
	})
	id := func(r *http.Request, req *ops.EventActionRequest) { req.ID = r.PathValue("id") }
	mux.HandleFunc("POST /v1/events/{id}/retry", decoded(s, id, s.retryNow))
	mux.HandleFunc("POST /v1/events/{id}/cancel-wait", decoded(s, id, s.cancelWait))
	mux.HandleFunc("POST /v1/breakers/{account}/{target}/open", decoded(s, func(r *http.Request, req *ops.OpenBreakerRequest) {
		req.Account, req.Target = r.PathValue("account"), r.PathValue("target")
	}, s.openBreaker))
	mux.HandleFunc("GET /v1/actions", func(w http.ResponseWriter, r *http.Request) {
		q, ok := s.query(w, r, "account", "limit")
		if !ok {
			return
		}
		req := ops.ActionsRequest{Account: q.Get("account")}
		if raw := q.Get("limit"); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 {
				s.answer(w, 0, nil, fail(http.StatusBadRequest, "invalid_limit", "limit: want 1..%d, got %q", ops.MaxLimit, raw))
				return
			}
			req.Limit = n
		}
		rep, err := s.actions(r.Context(), req)
		s.answer(w, http.StatusOK, rep, err)
	})
}
