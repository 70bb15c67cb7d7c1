package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tenaz/tenaz/pkg/tenaz"
)

// ErrInvalidTransition is wrapped by Apply when the action is not legal
// from the record's current state.
var ErrInvalidTransition = errors.New("invalid transition")

// Stages of delivery.
const (
	StagePrimary  = "primary"
	StageFallback = "fallback"
)

// MaxHistory bounds the timeline kept in a record; beyond it the oldest
// entries after the first are dropped and Truncated counts them.
const MaxHistory = 200

// ErrorInfo is the last failure of an event.
type ErrorInfo struct {
	Class      string `json:"class"` // transient, permanent, timeout, crash, …
	Message    string `json:"message"`
	HTTPStatus int    `json:"http_status,omitempty"`
}

// Entry is one line of an event's audit timeline.
type Entry struct {
	At         time.Time   `json:"at"`
	Action     ActionName  `json:"action"`
	From       tenaz.State `json:"from,omitempty"`
	To         tenaz.State `json:"to"`
	Attempt    int         `json:"attempt,omitempty"`
	Stage      string      `json:"stage,omitempty"`
	Actor      string      `json:"actor,omitempty"`
	Detail     string      `json:"detail,omitempty"`
	HTTPStatus int         `json:"http_status,omitempty"`
}

// Record is the state of one event, kept in the tenaz_state bucket under
// its id. Its History is the audit trail: every transition and every
// recorded no-op, in order.
type Record struct {
	ID             string      `json:"id"`
	IdempotencyKey string      `json:"idempotency_key"`
	Account        string      `json:"account"`
	Kind           string      `json:"kind"`
	EntityID       string      `json:"entity_id,omitempty"`
	OrderingKey    string      `json:"ordering_key,omitempty"`
	Status         tenaz.State `json:"status"`
	Stage          string      `json:"stage"`
	Attempts       int         `json:"attempts"`
	LastError      *ErrorInfo  `json:"last_error,omitempty"`
	NextRunAt      *time.Time  `json:"next_run_at,omitempty"`
	// Deadline bounds the wait of awaiting_callback (callback SLA) and
	// polling (poll SLA); NextRunAt is the next step (the next poll, or the
	// deadline itself while a callback is awaited).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Polls counts the polls of the current polling stage.
	Polls     int             `json:"polls,omitempty"`
	Reference string          `json:"reference,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	// Payload is the event's payload as accepted (or as an operator's
	// replay replaced it). Kept with the record so that whoever must put
	// the event back on its way (the reconciler, a replay) has it even
	// when every message of the event is gone.
	Payload   json.RawMessage `json:"payload,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	// RunSeq is the EVENTS stream sequence of the message that owns the
	// current run; a redelivery of that message may take the run over.
	RunSeq uint64 `json:"run_seq,omitempty"`
	// After is the event this one waits for in its ordered lane (same
	// account and ordering key, accepted just before it); Next is the one
	// waiting for this. Both empty for unordered events.
	After     string  `json:"after,omitempty"`
	Next      string  `json:"next,omitempty"`
	History   []Entry `json:"history"`
	Truncated int     `json:"history_truncated,omitempty"`
}

// ActionName names an input to the state machine.
type ActionName string

// The actions. Each row of Table says from where it is legal.
const (
	Accept          ActionName = "accept"         // new event, runs now
	Delay           ActionName = "delay"          // new event, runs at not_before
	Due             ActionName = "due"            // a delayed event's time has come
	Claim           ActionName = "claim"          // a dispatcher takes the next attempt
	Reclaim         ActionName = "reclaim"        // the message of a lost run came back
	Succeed         ActionName = "succeed"        // target accepted (sync): done
	AwaitCallback   ActionName = "await_callback" // target accepted, webhook will tell
	Poll            ActionName = "poll"           // target accepted, poller will ask
	Retry           ActionName = "retry"          // transient failure, attempts left
	Fail            ActionName = "fail"           // permanent failure or attempts exhausted
	Fallback        ActionName = "fallback"       // move to the fallback stage
	Complete        ActionName = "complete"       // callback or poll brought the result
	Escalate        ActionName = "escalate"       // a deadline passed: a person decides
	Replay          ActionName = "replay"         // operator: start a fresh attempt cycle
	Resolve         ActionName = "resolve"        // operator: mark done
	Discard         ActionName = "discard"        // operator: drop a parked event
	Cancel          ActionName = "cancel"         // caller: cancel before it runs
	Note            ActionName = "note"           // record something that changes nothing
	DeliveriesMaxed ActionName = "max_deliveries" // the server gave up on the message
	Repoll          ActionName = "repoll"         // a poll brought no result yet: ask again later
	Recover         ActionName = "recover"        // reconciler: a run was lost, put it back on its path
)

// EffectKind is something the caller must do after a transition commits.
type EffectKind string

// Effects a transition can ask for.
const (
	EffectDeliver        EffectKind = "deliver"         // call the target now
	EffectScheduleRetry  EffectKind = "schedule_retry"  // re-enter EVENTS at NextRunAt
	EffectScheduleDue    EffectKind = "schedule_due"    // re-enter EVENTS at not_before
	EffectSetDeadline    EffectKind = "set_deadline"    // callback / poll deadline
	EffectSchedulePoll   EffectKind = "schedule_poll"   // poller asks at NextRunAt
	EffectEnqueue        EffectKind = "enqueue"         // publish to EVENTS now
	EffectDeadLetter     EffectKind = "dead_letter"     // copy to DEAD, advisory
	EffectReview         EffectKind = "review"          // review advisory
	EffectCancelSchedule EffectKind = "cancel_schedule" // purge the event's schedule
)

// Rule is one row of the transition table.
type Rule struct {
	From    []tenaz.State // legal sources; nil for creating actions
	To      tenaz.State   // destination; "" = unchanged (Note)
	Effects []EffectKind
}

var active = []tenaz.State{tenaz.StateScheduled, tenaz.StatePending, tenaz.StateRunning, tenaz.StateRetrying, tenaz.StateAwaitingCallback, tenaz.StatePolling}

// Table is every legal transition. It is the only place that knows.
var Table = map[ActionName]Rule{
	Accept:        {From: nil, To: tenaz.StatePending, Effects: []EffectKind{EffectEnqueue}},
	Delay:         {From: nil, To: tenaz.StateScheduled, Effects: []EffectKind{EffectScheduleDue}},
	Due:           {From: []tenaz.State{tenaz.StateScheduled}, To: tenaz.StatePending, Effects: []EffectKind{EffectDeliver}},
	Claim:         {From: []tenaz.State{tenaz.StatePending, tenaz.StateRetrying}, To: tenaz.StateRunning, Effects: []EffectKind{EffectDeliver}},
	Reclaim:       {From: []tenaz.State{tenaz.StateRunning}, To: tenaz.StateRunning, Effects: []EffectKind{EffectDeliver}},
	Succeed:       {From: []tenaz.State{tenaz.StateRunning}, To: tenaz.StateDone},
	AwaitCallback: {From: []tenaz.State{tenaz.StateRunning}, To: tenaz.StateAwaitingCallback, Effects: []EffectKind{EffectSetDeadline}},
	Poll:          {From: []tenaz.State{tenaz.StateRunning}, To: tenaz.StatePolling, Effects: []EffectKind{EffectSchedulePoll}},
	Retry:         {From: []tenaz.State{tenaz.StateRunning}, To: tenaz.StateRetrying, Effects: []EffectKind{EffectScheduleRetry}},
	Fail:          {From: []tenaz.State{tenaz.StateRunning}, To: tenaz.StateDead, Effects: []EffectKind{EffectDeadLetter}},
	Fallback:      {From: []tenaz.State{tenaz.StateRunning, tenaz.StateAwaitingCallback, tenaz.StatePolling}, To: tenaz.StatePending, Effects: []EffectKind{EffectEnqueue}},
	// Complete is legal from running too: a fast provider's callback can
	// arrive before the dispatcher has stored its await_callback; the run's
	// own late outcome is then recorded as a no-op.
	Complete:        {From: []tenaz.State{tenaz.StateRunning, tenaz.StateAwaitingCallback, tenaz.StatePolling}, To: tenaz.StateDone, Effects: []EffectKind{EffectCancelSchedule}},
	Escalate:        {From: []tenaz.State{tenaz.StateAwaitingCallback, tenaz.StatePolling}, To: tenaz.StateManualReview, Effects: []EffectKind{EffectReview}},
	Replay:          {From: []tenaz.State{tenaz.StateDead, tenaz.StateManualReview}, To: tenaz.StatePending, Effects: []EffectKind{EffectEnqueue}},
	Resolve:         {From: []tenaz.State{tenaz.StateDead, tenaz.StateManualReview}, To: tenaz.StateDone},
	Discard:         {From: []tenaz.State{tenaz.StateDead, tenaz.StateManualReview}, To: tenaz.StateCancelled},
	Cancel:          {From: []tenaz.State{tenaz.StateScheduled, tenaz.StatePending, tenaz.StateRetrying}, To: tenaz.StateCancelled, Effects: []EffectKind{EffectCancelSchedule}},
	Note:            {From: tenaz.States, To: ""},
	DeliveriesMaxed: {From: active, To: tenaz.StateDead, Effects: []EffectKind{EffectDeadLetter}},
	Repoll:          {From: []tenaz.State{tenaz.StatePolling}, To: tenaz.StatePolling, Effects: []EffectKind{EffectSchedulePoll}},
	Recover:         {From: []tenaz.State{tenaz.StateRunning}, To: tenaz.StateRetrying, Effects: []EffectKind{EffectEnqueue}},
}

// Action is one input to Apply.
type Action struct {
	Name      ActionName
	Seq       uint64     // Claim/Reclaim: EVENTS sequence of the message
	Actor     string     // who: "dispatcher/<host>", "operator:alice", …
	Detail    string     // why, in words
	Error     *ErrorInfo // Retry/Fail: what went wrong
	NextRunAt *time.Time // Retry, Delay, AwaitCallback, Poll, Repoll, Recover: when the next step is due
	Deadline  *time.Time // AwaitCallback, Poll: the callback or poll SLA
	Reference string     // AwaitCallback/Poll: provider's job id
	Result    json.RawMessage
	Stage     string          // Fallback / Replay: which stage to (re)start; "" keeps
	Payload   json.RawMessage // Replay: an operator's corrected payload; nil keeps
}

// New creates the record of a freshly accepted event (action Accept or Delay).
func New(base Record, a Action, now time.Time) (Record, []EffectKind, error) {
	rule, ok := Table[a.Name]
	if !ok || rule.From != nil {
		return Record{}, nil, fmt.Errorf("%w: %s does not create an event", ErrInvalidTransition, a.Name)
	}
	r := base
	r.Status = rule.To
	r.Stage = StagePrimary
	r.CreatedAt, r.UpdatedAt = now.UTC(), now.UTC()
	r.NextRunAt = a.NextRunAt
	r.History = []Entry{{At: now.UTC(), Action: a.Name, To: rule.To, Stage: r.Stage, Actor: a.Actor, Detail: a.Detail}}
	return r, rule.Effects, nil
}

// Apply moves r by action a at time now and returns the new record and the
// effects the caller must carry out once the new record is stored.
func Apply(r Record, a Action, now time.Time) (Record, []EffectKind, error) {
	rule, ok := Table[a.Name]
	if !ok || rule.From == nil {
		return r, nil, fmt.Errorf("%w: unknown or creating action %q on %s", ErrInvalidTransition, a.Name, r.ID)
	}
	if !slices.Contains(rule.From, r.Status) {
		return r, nil, fmt.Errorf("%w: %s from %s (event %s)", ErrInvalidTransition, a.Name, r.Status, r.ID)
	}
	n := r
	n.History = slices.Clone(r.History)
	from := r.Status
	to := rule.To
	if to == "" {
		to = from
	}
	now = now.UTC()
	switch a.Name {
	case Claim, Reclaim:
		n.Attempts++
		n.RunSeq = a.Seq
		n.NextRunAt = nil
	case Retry:
		n.LastError = a.Error
		n.NextRunAt = a.NextRunAt
	case Fail, DeliveriesMaxed:
		n.LastError = a.Error
		n.NextRunAt, n.Deadline = nil, nil
	case AwaitCallback, Poll:
		n.Reference = a.Reference
		n.NextRunAt = a.NextRunAt
		n.Deadline = a.Deadline
		n.Polls = 0
	case Repoll:
		n.Polls++
		n.NextRunAt = a.NextRunAt
	case Recover:
		n.NextRunAt = a.NextRunAt
		n.RunSeq = 0
	case Fallback:
		n.Stage = StageFallback
		n.Attempts = 0
		n.NextRunAt, n.Deadline = nil, nil
		n.RunSeq = 0
		n.Reference = ""
		n.Polls = 0
	case Replay:
		n.Attempts = 0
		n.NextRunAt, n.Deadline = nil, nil
		n.RunSeq = 0
		n.Reference = ""
		n.Polls = 0
		if a.Payload != nil {
			n.Payload = a.Payload
		}
		if a.Stage != "" {
			n.Stage = a.Stage
		}
	case Complete, Succeed, Resolve:
		n.NextRunAt, n.Deadline = nil, nil
		if a.Result != nil {
			n.Result = a.Result
		}
		if a.Reference != "" {
			n.Reference = a.Reference
		}
	case Escalate, Discard, Cancel, Due:
		n.NextRunAt, n.Deadline = nil, nil
	}
	n.Status = to
	n.UpdatedAt = now
	e := Entry{At: now, Action: a.Name, To: to, Attempt: n.Attempts, Stage: n.Stage, Actor: a.Actor, Detail: a.Detail}
	if from != to || a.Name == Reclaim {
		e.From = from
	}
	if a.Error != nil {
		e.HTTPStatus = a.Error.HTTPStatus
		if e.Detail == "" {
			e.Detail = a.Error.Message
		}
	}
	if a.Name == Repoll && len(n.History) > 0 && n.History[len(n.History)-1].Action == Repoll {
		// One line for a run of polls: the last answer and the count,
		// so a 2-hour poll SLA does not push the timeline out.
		n.History[len(n.History)-1] = e
		return n, rule.Effects, nil
	}
	n.History = append(n.History, e)
	if len(n.History) > MaxHistory {
		drop := len(n.History) - MaxHistory
		n.History = append(n.History[:1], n.History[1+drop:]...)
		n.Truncated += drop
	}
	return n, rule.Effects, nil
}

// Step counts the record's history entries ever written (kept plus
// truncated): it grows with every transition, across replays, so it makes
// message ids unique per step of the event (a replayed event's first
// retry must not be taken for a duplicate of its earlier first retry).
// Consecutive repolls share one history line: pair it with Polls.
func (r Record) Step() int { return len(r.History) + r.Truncated }

// Finished reports whether an ordered lane may move past an event in
// state s: it is done, dead, in manual review or cancelled.
func Finished(s tenaz.State) bool { return s.Terminal() || s.Parked() }

// Can reports whether action a is legal from state s.
func Can(s tenaz.State, a ActionName) bool {
	rule, ok := Table[a]
	return ok && slices.Contains(rule.From, s)
}
