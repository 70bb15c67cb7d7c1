package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalidTransition is wrapped by Apply when the action is not legal
// from the record's current state.
var ErrInvalidTransition = errors.New("invalid transition")

// Stages of delivery.
const (
	StagePrimary  = "primary"
	StageFallback = "fallback"
)

// Bounds on what a record keeps, so that its JSON is never more than its
// payload plus size.Overhead (pkg/size builds the largest record): a
// record over what NATS carries could not be written at all.
const (
	// MaxHistory and MaxHistoryBytes bound the timeline (its entries, and
	// their JSON); beyond either, entries after the first are dropped
	// (notes and repolls first) and Truncated counts them.
	MaxHistory      = 200
	MaxHistoryBytes = 64 << 10
	// MaxResult bounds the result kept (a target's answer, a poll's, a
	// callback's, an operator's); a larger one, or one nested deeper than
	// MaxDepth, is dropped with a note.
	MaxResult = 4096
	// MaxReference bounds the provider's job id kept; a longer one is
	// dropped with a note.
	MaxReference = 1024
	// MaxDetail bounds a history entry's detail and the last error's
	// message; MaxName an actor and an error class. Longer ones are cut.
	MaxDetail = 2048
	MaxName   = 256
)

// ErrorInfo is the last failure of an event.
type ErrorInfo struct {
	Class      string `json:"class"` // transient, permanent, timeout, crash, …
	Message    string `json:"message"`
	HTTPStatus int    `json:"http_status,omitempty"`
}

// Entry is one line of an event's audit timeline.
type Entry struct {
	At         time.Time  `json:"at"`
	Action     ActionName `json:"action"`
	From       State      `json:"from,omitempty"`
	To         State      `json:"to"`
	Attempt    int        `json:"attempt,omitempty"`
	Stage      string     `json:"stage,omitempty"`
	Actor      string     `json:"actor,omitempty"`
	Detail     string     `json:"detail,omitempty"`
	HTTPStatus int        `json:"http_status,omitempty"`
	// Count is how many steps the entry stands for when a run of them
	// shares it (consecutive repolls, the same note again); 0 is one.
	Count int `json:"count,omitempty"`
}

// Record is the state of one event, kept in the tenaz_state bucket under
// its id. Its History is the audit trail: every transition and every
// recorded no-op, in order.
type Record struct {
	ID             string     `json:"id"`
	IdempotencyKey string     `json:"idempotency_key"`
	Account        string     `json:"account"`
	Kind           string     `json:"kind"`
	EntityID       string     `json:"entity_id,omitempty"`
	OrderingKey    string     `json:"ordering_key,omitempty"`
	Status         State      `json:"status"`
	Stage          string     `json:"stage"`
	Attempts       int        `json:"attempts"`
	LastError      *ErrorInfo `json:"last_error,omitempty"`
	NextRunAt      *time.Time `json:"next_run_at,omitempty"`
	// Deadline bounds the wait of awaiting_callback (callback SLA) and
	// polling (poll SLA); NextRunAt is the next step (the next poll, or the
	// deadline itself while a callback is awaited).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Replays counts operators' replays of the event. A target's request
	// carries it (Tenaz-Replay, {{.Replay}}), so a webhook that echoes it
	// is told apart from one answering a call made before a replay.
	Replays int `json:"replays,omitempty"`
	// Polls counts the polls of the current polling stage.
	Polls     int             `json:"polls,omitempty"`
	Reference string          `json:"reference,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	// Payload is the event's payload as accepted (or as an operator's
	// replay replaced it). Kept with the record so that whoever must put
	// the event back on its way (the reconciler, a replay) has it even
	// when every message of the event is gone.
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadSHA256 is the hex SHA-256 of Payload as the record was
	// created; a replay's edit leaves it. A submission reusing the
	// event's idempotency key is compared with it ("" in records written
	// before it was kept).
	PayloadSHA256 string    `json:"payload_sha256,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// RunSeq is the EVENTS stream sequence of the message that owns the
	// current run; a redelivery of that message may take the run over.
	RunSeq uint64 `json:"run_seq,omitempty"`
	// After is the event this one waits for in its ordered lane (same
	// account and ordering key, accepted just before it); Next is the one
	// waiting for this. Both empty for unordered events.
	After string `json:"after,omitempty"`
	Next  string `json:"next,omitempty"`
	// Traceparent is the event's trace context (event.Envelope's), which
	// callbacks join.
	Traceparent string  `json:"traceparent,omitempty"`
	History     []Entry `json:"history"`
	Truncated   int     `json:"history_truncated,omitempty"`
}

// ActionName names an input to the state machine.
type ActionName string

// The actions. Each row of Table says from where it is legal.
const (
	Accept          ActionName = "accept"         // new event, runs now
	Reject          ActionName = "reject"         // new event refused at intake after its submitter may have got 202
	Delay           ActionName = "delay"          // new event, runs at not_before
	Due             ActionName = "due"            // a delayed event's time has come
	Claim           ActionName = "claim"          // a dispatcher takes the next attempt
	Reclaim         ActionName = "reclaim"        // the message of a lost run came back
	Succeed         ActionName = "succeed"        // target accepted (sync): done
	AwaitCallback   ActionName = "await_callback" // target accepted, webhook will tell
	Poll            ActionName = "poll"           // target accepted, poller will ask
	Retry           ActionName = "retry"          // transient failure, attempts left
	Yield           ActionName = "yield"          // the claimed attempt was not made (its breaker opened): given back
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
	RetryNow        ActionName = "retry_now"      // operator: a retrying or scheduled event's next attempt is due now
	CancelWait      ActionName = "cancel_wait"    // operator: stop waiting for a callback or a poll; the event is cancelled
)

// EffectKind is something a transition asks of its caller once the new
// record is stored.
type EffectKind string

// EffectEnqueue asks the caller to publish the event to EVENTS once the
// new record is stored: the message's claim reads the record, so it must
// find the record already saying pending (or retrying).
//
// It is the only effect: every other message of a step is the caller's
// own, in the order that step needs. What a waiting record relies on (a
// retry's schedule, a callback deadline, a poll timer) is published
// before the record is stored, so that no stored record waits for a
// message that is not durable. docs/state-machine.md lists each action's
// messages and their order.
const EffectEnqueue EffectKind = "enqueue"

// Rule is one row of the transition table.
type Rule struct {
	From    []State // legal sources; nil for creating actions
	To      State   // destination; "" = unchanged (Note, RetryNow)
	Effects []EffectKind
}

var active = []State{Scheduled, Pending, Running, Retrying, AwaitingCallback, Polling}

// Table is every legal transition. It is the only place that knows.
var Table = map[ActionName]Rule{
	Accept:        {From: nil, To: Pending, Effects: []EffectKind{EffectEnqueue}},
	Delay:         {From: nil, To: Scheduled},
	Reject:        {From: nil, To: Dead},
	Due:           {From: []State{Scheduled}, To: Pending},
	Claim:         {From: []State{Pending, Retrying}, To: Running},
	Reclaim:       {From: []State{Running}, To: Running},
	Succeed:       {From: []State{Running}, To: Done},
	AwaitCallback: {From: []State{Running}, To: AwaitingCallback},
	Poll:          {From: []State{Running}, To: Polling},
	Retry:         {From: []State{Running}, To: Retrying},
	Yield:         {From: []State{Running}, To: Retrying},
	// Fail is legal before a run too: an event whose record has grown
	// too large to claim (pkg/size) fails without a call.
	Fail:     {From: []State{Pending, Retrying, Running}, To: Dead},
	Fallback: {From: []State{Running, AwaitingCallback, Polling}, To: Pending, Effects: []EffectKind{EffectEnqueue}},
	// Complete is legal from running too: a fast provider's callback can
	// arrive before the dispatcher has stored its await_callback; the run's
	// own late outcome is then recorded as a no-op. And from retrying: the
	// provider took an attempt whose answer tenaz gave up on (a timeout),
	// and its callback carries the result the retry would wait for.
	Complete:        {From: []State{Running, AwaitingCallback, Polling, Retrying}, To: Done},
	Escalate:        {From: []State{AwaitingCallback, Polling}, To: ManualReview},
	Replay:          {From: []State{Dead, ManualReview}, To: Pending, Effects: []EffectKind{EffectEnqueue}},
	Resolve:         {From: []State{Dead, ManualReview}, To: Done},
	Discard:         {From: []State{Dead, ManualReview}, To: Cancelled},
	Cancel:          {From: []State{Scheduled, Pending, Retrying}, To: Cancelled},
	Note:            {From: States, To: ""},
	DeliveriesMaxed: {From: active, To: Dead},
	Repoll:          {From: []State{Polling}, To: Polling},
	Recover:         {From: []State{Running}, To: Retrying, Effects: []EffectKind{EffectEnqueue}},
	// RetryNow keeps the state ("" To) and moves next_run_at to now.
	RetryNow: {From: []State{Retrying, Scheduled}, To: ""},
	// CancelWait is the operator's cancel of a wait already begun (the
	// target has the work); Cancel stays the caller's, before a run.
	CancelWait: {From: []State{AwaitingCallback, Polling}, To: Cancelled},
}

// Action is one input to Apply.
type Action struct {
	Name      ActionName
	Seq       uint64     // Claim/Reclaim: EVENTS sequence of the message
	Actor     string     // who: "dispatcher/<host>", "operator:alice", …
	Detail    string     // why, in words
	Error     *ErrorInfo // Retry/Fail: what went wrong
	NextRunAt *time.Time // Retry, Yield, Delay, AwaitCallback, Poll, Repoll, Recover, RetryNow: when the next step is due
	Deadline  *time.Time // AwaitCallback, Poll: the callback or poll SLA
	Reference string     // AwaitCallback/Poll: provider's job id
	Result    json.RawMessage
	Stage     string          // Fallback / Replay: which stage to (re)start; "" keeps
	Payload   json.RawMessage // Replay: an operator's corrected payload; nil keeps
}

// New creates the record of a freshly accepted event (action Accept or
// Delay), or of one refused after it was answered (Reject, with Error),
// and returns its effects as Apply does.
func New(base Record, a Action, now time.Time) (Record, []EffectKind, error) {
	rule, ok := Table[a.Name]
	if !ok || rule.From != nil {
		return Record{}, nil, fmt.Errorf("%w: %s does not create an event", ErrInvalidTransition, a.Name)
	}
	a = a.bounded()
	r := base
	r.Status = rule.To
	r.Stage = StagePrimary
	r.CreatedAt, r.UpdatedAt = now.UTC(), now.UTC()
	r.NextRunAt = a.NextRunAt
	if a.Error != nil {
		r.LastError = a.Error
	}
	r.History = []Entry{{At: now.UTC(), Action: a.Name, To: rule.To, Stage: r.Stage, Actor: a.Actor, Detail: a.Detail}}
	return r, rule.Effects, nil
}

// Apply moves r by action a at time now and returns the new record and its
// effects: EffectEnqueue, for the caller to carry out once the new record
// is stored, or none.
func Apply(r Record, a Action, now time.Time) (Record, []EffectKind, error) {
	rule, ok := Table[a.Name]
	if !ok || rule.From == nil {
		return r, nil, fmt.Errorf("%w: unknown or creating action %q on %s", ErrInvalidTransition, a.Name, r.ID)
	}
	if !slices.Contains(rule.From, r.Status) {
		return r, nil, fmt.Errorf("%w: %s from %s (event %s)", ErrInvalidTransition, a.Name, r.Status, r.ID)
	}
	a = a.bounded()
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
	case Yield:
		n.Attempts--
		n.RunSeq = 0
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
	case RetryNow:
		n.NextRunAt = a.NextRunAt
	case Fallback:
		n.Stage = StageFallback
		n.Attempts = 0
		n.NextRunAt, n.Deadline = nil, nil
		n.RunSeq = 0
		n.Reference = ""
		n.Polls = 0
	case Replay:
		n.Replays++
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
	case Escalate, Discard, Cancel, CancelWait, Due:
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
	if last := len(n.History) - 1; last > 0 && repeats(n.History[last], e) {
		// One line for a run of polls (the last answer) or of the same
		// note, with the count, so a 2-hour poll SLA or a webhook sent
		// again and again does not push the timeline out.
		e.Count = max(n.History[last].Count, 1) + 1
		n.History[last] = e
		return n, rule.Effects, nil
	}
	n.History = append(n.History, e)
	var dropped int
	n.History, dropped = evict(n.History)
	n.Truncated += dropped
	return n, rule.Effects, nil
}

// bounded is a with its texts cut to MaxDetail and MaxName, and a result
// over MaxResult or nested deeper than MaxDepth, or a reference over
// MaxReference, left out, with a note in the detail: a target, a
// provider or an operator can hand over anything.
func (a Action) bounded() Action {
	a.Actor = Clip(a.Actor, MaxName)
	if e := a.Error; e != nil && (len(e.Class) > MaxName || len(e.Message) > MaxDetail) {
		c := *e // the caller's stays as it was
		c.Class, c.Message = Clip(c.Class, MaxName), Clip(c.Message, MaxDetail)
		a.Error = &c
	}
	var notes []string
	if len(a.Result) > MaxResult {
		notes = append(notes, fmt.Sprintf("result of %d bytes not kept (at most %d)", len(a.Result), MaxResult))
		a.Result = nil
	} else if d := Depth(a.Result); d > MaxDepth {
		notes = append(notes, fmt.Sprintf("result nested %d levels deep not kept (at most %d)", d, MaxDepth))
		a.Result = nil
	}
	if len(a.Reference) > MaxReference {
		notes = append(notes, fmt.Sprintf("reference of %d bytes not kept (at most %d)", len(a.Reference), MaxReference))
		a.Reference = ""
	}
	if len(notes) > 0 {
		if a.Detail == "" && a.Error != nil {
			a.Detail = a.Error.Message
		}
		a.Detail = strings.Join(append([]string{a.Detail}, notes...), "; ")
		a.Detail = strings.TrimPrefix(a.Detail, "; ")
	}
	a.Detail = Clip(a.Detail, MaxDetail)
	return a
}

// Recorded reports whether stored, an entry's detail as the history keeps
// it, is detail as an Action carried it: cut to MaxDetail, or followed by
// the notes of what was not kept (a result, a reference).
func Recorded(stored, detail string) bool {
	return stored == Clip(detail, MaxDetail) || strings.HasPrefix(stored, detail+"; ")
}

// Clip cuts s to at most n bytes of valid UTF-8, ending a cut one with
// "…".
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// repeats reports whether e may share prev's line: both repolls, or the
// same note again (nothing but the time differs).
func repeats(prev, e Entry) bool {
	if prev.Action != e.Action {
		return false
	}
	if e.Action == Repoll {
		return true
	}
	prev.At, prev.Count = e.At, e.Count
	return e.Action == Note && prev == e
}

// evict drops entries until h is within MaxHistory entries and
// MaxHistoryBytes of JSON, and returns how many it dropped. Notes and
// repolls go first, oldest first, so that they never push out a claim or
// an attempt's outcome; a new note that finds no room goes itself. Only
// if that is not enough (a timeline of many replays) do the oldest other
// entries go. The first entry (how the event began) always stays.
func evict(h []Entry) ([]Entry, int) {
	if len(h) <= MaxHistory {
		bound := 1
		for i := range h {
			bound += h[i].maxJSONLen() + 1
		}
		if bound <= MaxHistoryBytes {
			return h, 0 // within both limits whatever the escaping: no need to encode
		}
	}
	sizes := make([]int, len(h))
	var buf []byte
	total := 1 // "[" and "]", with a comma between entries
	for i := range h {
		buf = h[i].appendJSON(buf[:0])
		sizes[i] = len(buf)
		total += sizes[i] + 1
	}
	kept := len(h)
	over := func() bool { return kept > MaxHistory || total > MaxHistoryBytes }
	if !over() {
		return h, 0
	}
	drop := make([]bool, len(h))
	take := func(i int) {
		drop[i] = true
		kept--
		total -= sizes[i] + 1
	}
	newest := len(h) - 1
	for i := 1; i < newest && over(); i++ {
		if chatter(h[i].Action) {
			take(i)
		}
	}
	if over() && chatter(h[newest].Action) {
		take(newest)
	}
	for i := 1; i < newest && over(); i++ {
		if !drop[i] {
			take(i)
		}
	}
	out := h[:0]
	for i := range h {
		if !drop[i] {
			out = append(out, h[i])
		}
	}
	return out, len(h) - len(out)
}

// chatter reports whether entries of action a are the first to go when
// the timeline is full: they record no step of the event's own.
func chatter(a ActionName) bool { return a == Note || a == Repoll }

// Step counts the record's history entries ever written (kept plus
// truncated): it grows with every transition, across replays, so it makes
// message ids unique per step of the event (a replayed event's first
// retry must not be taken for a duplicate of its earlier first retry).
// Consecutive repolls share one history line (pair it with Polls), as do
// repeats of the same note (which publish nothing).
func (r Record) Step() int { return len(r.History) + r.Truncated }

// Finished reports whether an ordered lane may move past an event in
// state s: it is done, dead, in manual review or cancelled.
func Finished(s State) bool { return s.Terminal() || s.Parked() }

// FinishedAt is when r first finished (Finished: done, dead, in review or
// cancelled); ok is false if its history holds no such step.
func (r Record) FinishedAt() (at time.Time, ok bool) {
	for _, h := range r.History {
		if finishes(h) {
			return h.At, true
		}
	}
	return time.Time{}, false
}

// LastFinishedAt is when r last finished: after a replay, its second
// finish, not its first.
func (r Record) LastFinishedAt() (at time.Time, ok bool) {
	for i := len(r.History) - 1; i >= 0; i-- {
		if h := r.History[i]; finishes(h) && (i == 0 || !Finished(r.History[i-1].To)) {
			return h.At, true
		}
	}
	return time.Time{}, false
}

// finishes reports whether h entered a finished state (a note keeps the
// state it was written in).
func finishes(h Entry) bool { return h.Action != Note && Finished(h.To) }

// Can reports whether action a is legal from state s.
func Can(s State, a ActionName) bool {
	rule, ok := Table[a]
	return ok && slices.Contains(rule.From, s)
}
