package ops

import (
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// Endpoints of the operators' actions on accounts, events and breakers.
const (
	AccountsPause  = "accounts.pause"
	AccountsResume = "accounts.resume"
	PausesList     = "pauses.list"
	EventsRetry    = "events.retry"
	EventsCancel   = "events.cancel_wait"
	BreakersOpen   = "breakers.open"
	ActionsList    = "actions.list"
)

// Operator actions on accounts and breakers, and on DEAD entries that
// have no event, as the audit (Action.Action) names them. Actions on an
// event are in its history instead (state.RetryNow, state.CancelWait,
// state.Discard).
const (
	ActionPause        = "pause"
	ActionResume       = "resume"
	ActionOpenBreaker  = "open_breaker"
	ActionCloseBreaker = "close_breaker"
	// ActionDiscardEntry drops a refused submission's DEAD entry (Seq),
	// which has no event whose history could say so.
	ActionDiscardEntry = "discard_entry"
)

// PauseRequest pauses an account's dispatch: no call of the account is
// made until it is resumed (or Until, or For, has passed); its events
// wait. Calls already taken by a dispatcher (at most the account's
// concurrency) finish. Give at most one of Until and For.
type PauseRequest struct {
	Account string `json:"account"`
	// Until ends the pause by itself (RFC 3339, in the future).
	Until *time.Time `json:"until,omitempty"`
	// For ends the pause by itself after this long (a Go duration: "30m").
	For string `json:"for,omitempty"`
	// Reason is why (required), recorded in the audit.
	Reason string `json:"reason"`
}

// ResumeRequest ends an operator's pause of an account.
type ResumeRequest struct {
	Account string `json:"account"`
	// Reason is why (required), recorded in the audit.
	Reason string `json:"reason"`
}

// PausesRequest lists the accounts held: by an operator's pause or an
// open breaker (or just Account, held or not).
type PausesRequest struct {
	Account string `json:"account,omitempty"`
}

// AccountPause is an operator's pause in force.
type AccountPause struct {
	// Until is when it ends by itself; absent: until resumed.
	Until  *time.Time `json:"until,omitempty"`
	Actor  string     `json:"actor"`
	Reason string     `json:"reason"`
	At     time.Time  `json:"at"`
}

// AccountReply is an account's dispatch as it stands.
type AccountReply struct {
	Account string `json:"account"`
	// Paused is an operator's pause in force; absent when none is.
	Paused *AccountPause `json:"paused,omitempty"`
	// HeldUntil is when the account's consumer delivers again: the end of
	// the operator's pause or of its open breakers' cooldown, whichever is
	// later; absent while it runs, and while a pause without an end holds
	// it (UntilResumed).
	HeldUntil *time.Time `json:"held_until,omitempty"`
	// UntilResumed is true while an operator's pause without an end holds
	// the account: it runs again only once resumed (and its open
	// breakers, if any, have ended their cooldown). HeldUntil is then
	// absent.
	UntilResumed bool `json:"until_resumed,omitempty"`
}

// Held reports whether the account's dispatch is held, by an operator's
// pause or an open breaker.
func (a AccountReply) Held() bool { return a.HeldUntil != nil || a.UntilResumed }

// PausesReply lists accounts' dispatch state, sorted by account.
type PausesReply struct {
	Items []AccountReply `json:"items"`
}

// EventActionRequest names an event and says why (required), recorded in
// its history: events.retry moves a retrying or scheduled event's next
// attempt to now; events.cancel_wait cancels an event awaiting its
// callback or polling (a later answer is a recorded no-op).
type EventActionRequest struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// EventReply is an event after an operator's action.
type EventReply struct {
	ID      string      `json:"id"`
	Account string      `json:"account"`
	Kind    string      `json:"kind"`
	Status  state.State `json:"status"`
	// NextRunAt is when its next step is due (retry: now, to the second).
	NextRunAt *time.Time `json:"next_run_at,omitempty"`
}

// OpenBreakerRequest opens account+target's breaker for every replica
// until a time: no call of the account to the target is made before it,
// and after it one probe decides. Give exactly one of Until and For.
type OpenBreakerRequest struct {
	Account string     `json:"account"`
	Target  string     `json:"target"`
	Until   *time.Time `json:"until,omitempty"`
	For     string     `json:"for,omitempty"`
	// Reason is why (required), recorded in the breaker and the audit.
	Reason string `json:"reason"`
}

// ActionsRequest lists the audit of operator actions on accounts and
// breakers, newest first.
type ActionsRequest struct {
	Account string `json:"account,omitempty"`
	// Limit is 1..500, 0 means 50.
	Limit int `json:"limit,omitempty"`
}

// Action is one operator action on an account or a breaker, as the audit
// keeps it (in the bucket tenaz_ops, with no expiry) and as the advisory
// <prefix>.advisory.action.<account> carries it.
type Action struct {
	At time.Time `json:"at"`
	// Action is pause, resume, open_breaker, close_breaker or
	// discard_entry.
	Action  string `json:"action"`
	Account string `json:"account"`
	Target  string `json:"target,omitempty"`
	// Seq is the DEAD sequence of a discarded entry, Entry what it said
	// (its kind, class and error).
	Seq   uint64 `json:"seq,omitempty"`
	Entry string `json:"entry,omitempty"`
	// Until is when a pause or an opened breaker ends by itself.
	Until *time.Time `json:"until,omitempty"`
	// Actor is who ("operator:alice", from the credential), Reason why.
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
}

// ActionsReply is the newest actions first.
type ActionsReply struct {
	Items []Action `json:"items"`
}
