package deadletter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// The screen's side of the operators' actions on live accounts, events and
// breakers (operator.go): the detail of an event on its way, what each
// confirmation says, and the action once confirmed.

// showLive is the detail of an event that is not dead or in review: its
// record (with its timeline and payload), for the actions on it.
func (s *Service) showLive(ctx context.Context, id string) (ops.ShowReply, error) {
	rec, _, err := s.st.Get(ctx, "", id)
	if errors.Is(err, store.ErrNotFound) {
		return ops.ShowReply{}, fail(http.StatusNotFound, "not_found", "event %s not found", id)
	}
	if err != nil {
		return ops.ShowReply{}, err
	}
	it := ops.Item{ID: rec.ID, Account: rec.Account, Kind: rec.Kind, Attempts: rec.Attempts, Stage: rec.Stage, Status: rec.Status}
	if e := rec.LastError; e != nil {
		it.Class, it.Error, it.HTTPStatus = e.Class, e.Message, e.HTTPStatus
	}
	rep := ops.ShowReply{Item: it, Record: &rec}
	if env, err := s.st.Envelope(rec); err == nil {
		rep.Event = &env
	}
	return rep, nil
}

// actionSummary says what a confirmed action will do; an action without a
// reason is refused before its confirmation.
func (u *ui) actionSummary(act string, f url.Values) (summary string, danger bool, err error) {
	if why0(f) == "" {
		return "", false, fail(http.StatusBadRequest, "reason_required", "say why: the reason is recorded with the action")
	}
	account, target, id := f.Get("account"), f.Get("target"), f.Get("id")
	now := u.s.now()
	switch act {
	case actPause:
		until, err := untilOf(nil, strings.TrimSpace(f.Get("for")), now, false)
		if err != nil {
			return "", false, err
		}
		summary = fmt.Sprintf("Pause account %s: no call of it is made until it is resumed", account)
		if !until.IsZero() {
			summary += " or until " + until.Format("2006-01-02 15:04:05Z")
		}
		return summary + "; its events wait, and calls already under way finish", true, nil
	case actResume:
		summary = fmt.Sprintf("Resume account %s: its waiting events are delivered", account)
		if held := u.s.brk.OpenUntil(account); held.After(now) {
			summary += fmt.Sprintf(" once its open breaker's cooldown ends (%s)", held.UTC().Format("2006-01-02 15:04:05Z"))
		}
		return summary, false, nil
	case actOpenBreaker:
		until, err := untilOf(nil, strings.TrimSpace(f.Get("for")), now, true)
		if err != nil {
			return "", false, err
		}
		return fmt.Sprintf("Open the breaker of %s → %s for every replica until %s: no call of %s to %s is made before then, and then one probe decides",
			account, target, until.Format("2006-01-02 15:04:05Z"), account, target), true, nil
	case actRetryNow:
		return fmt.Sprintf("Retry %s now: its next attempt is made at once", id), false, nil
	case actCancelWait:
		return fmt.Sprintf("Stop waiting for %s: it is cancelled, and a callback or poll answer that comes later is recorded and ignored", id), true, nil
	}
	return "", false, fail(http.StatusBadRequest, "invalid_action", "unknown action %q", act)
}

// act carries out a confirmed action and says what it did.
func (u *ui) act(ctx context.Context, act string, f url.Values) (string, error) {
	s := u.s
	why := strings.TrimSpace(f.Get("reason"))
	account, target, id := f.Get("account"), f.Get("target"), f.Get("id")
	switch act {
	case actPause:
		rep, err := s.pauseAccount(ctx, ops.PauseRequest{Account: account, For: strings.TrimSpace(f.Get("for")), Reason: why})
		if err != nil {
			return "", err
		}
		if p := rep.Paused; p != nil && p.Until != nil {
			return fmt.Sprintf("Account %s paused until %s.", account, p.Until.Format(time.RFC3339)), nil
		}
		return fmt.Sprintf("Account %s paused until resumed.", account), nil
	case actResume:
		rep, err := s.resumeAccount(ctx, ops.ResumeRequest{Account: account, Reason: why})
		if err != nil {
			return "", err
		}
		if rep.HeldUntil != nil {
			return fmt.Sprintf("Account %s resumed; its open breaker holds it until %s.", account, rep.HeldUntil.Format(time.RFC3339)), nil
		}
		return fmt.Sprintf("Account %s resumed.", account), nil
	case actOpenBreaker:
		it, err := s.openBreaker(ctx, ops.OpenBreakerRequest{Account: account, Target: target, For: strings.TrimSpace(f.Get("for")), Reason: why})
		if err != nil {
			return "", err
		}
		until := ""
		if it.OpenUntil != nil {
			until = " until " + it.OpenUntil.Format(time.RFC3339)
		}
		return fmt.Sprintf("Breaker %s → %s open%s.", account, target, until), nil
	case actRetryNow:
		if _, err := s.retryNow(ctx, ops.EventActionRequest{ID: id, Reason: why}); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s is due now.", id), nil
	case actCancelWait:
		rep, err := s.cancelWait(ctx, ops.EventActionRequest{ID: id, Reason: why})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s is %s: its wait is over.", id, rep.Status), nil
	}
	return "", fail(http.StatusBadRequest, "invalid_action", "unknown action %q", act)
}

// live reports whether an event's state has an action of the screen's
// event detail (retry now, cancel the wait).
func live(st state.State) bool {
	switch st {
	case state.Retrying, state.Scheduled, state.AwaitingCallback, state.Polling:
		return true
	}
	return false
}

// nextStep says what an event waits for and until when.
func nextStep(r state.Record) (string, *time.Time) {
	switch r.Status {
	case state.Scheduled:
		return "its first attempt, when it is due", r.NextRunAt
	case state.Pending:
		return "its attempt, at its account's next free call", nil
	case state.Running:
		at := r.UpdatedAt
		return fmt.Sprintf("the answer of attempt %d, under way since", r.Attempts), &at
	case state.Retrying:
		return fmt.Sprintf("attempt %d of its %s stage", r.Attempts+1, r.Stage), r.NextRunAt
	case state.AwaitingCallback:
		return "the provider's callback, until the deadline", r.Deadline
	case state.Polling:
		return fmt.Sprintf("poll %d of the provider", r.Polls+1), r.NextRunAt
	case state.Dead, state.ManualReview:
		return "an operator (below)", nil
	}
	return "", nil
}

// answers are the actions that record what a target or provider answered.
var answers = []state.ActionName{state.Succeed, state.AwaitCallback, state.Poll, state.Retry, state.Fail, state.Complete, state.Repoll}

// lastAnswer is the newest history entry of an answer (nil: none yet).
func lastAnswer(r state.Record) *state.Entry {
	for i := len(r.History) - 1; i >= 0; i-- {
		if slices.Contains(answers, r.History[i].Action) {
			e := r.History[i]
			return &e
		}
	}
	return nil
}
