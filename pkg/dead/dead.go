// Package dead is the dead-letter entry: what is kept in the DEAD stream
// for an event that failed for good (or a submission that could not be
// accepted), with its payload, the reason, and its history.
//
//	w := &dead.Writer{JS: js, Subj: subj, Bound: cfg.DeadLettersOf}
//	err := w.Publish(ctx, dead.Entry{Event: env, Record: &rec, Reason: "permanent", ...}, msgID)
package dead

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// Reasons an entry is in DEAD.
const (
	ReasonPermanent = "permanent"          // the target rejected it
	ReasonExhausted = "attempts_exhausted" // transient failures used up the attempts
	ReasonCrash     = "max_deliveries"     // workers died on it every time
	ReasonRejected  = "rejected_at_intake" // the submission itself was invalid
	// ReasonReview marks an event moved to manual_review (a callback or
	// poll deadline passed): it is kept in DEAD like a dead letter, so the
	// deadletter service and the screen have one durable feed for both.
	ReasonReview = "manual_review"
	// ReasonTooLarge marks an event whose record NATS refused for its size
	// (pkg/size): every retry would fail the same way.
	ReasonTooLarge = "too_large"
	// ReasonUndecodable marks an event whose stored record does not
	// decode (store.ErrUndecodable): its record was made again from its
	// message so that an operator sees it and can replay it.
	ReasonUndecodable = "undecodable_record"
)

// InvalidToken stands in for an account or kind that cannot be a subject token.
const InvalidToken = names.InvalidToken

// Tokens are account and kind as the tokens of their subjects (DEAD's,
// the waiting room's, the dead advisories'): InvalidToken for either when
// it cannot be one.
func Tokens(account, kind string) (acct, knd string) {
	if names.ValidateKind(kind) != nil {
		kind = InvalidToken
	}
	return AccountToken(account), kind
}

// AccountToken is account as a subject token (Tokens).
func AccountToken(account string) string {
	if names.ValidateAccount(account) != nil {
		return InvalidToken
	}
	return account
}

// Entry is one dead letter.
type Entry struct {
	ID      string          `json:"id,omitempty"`
	Account string          `json:"account"`
	Kind    string          `json:"kind"`
	Reason  string          `json:"reason"`
	Class   string          `json:"class,omitempty"`
	Error   string          `json:"error"`
	Status  int             `json:"http_status,omitempty"`
	At      time.Time       `json:"at"`
	Event   *event.Envelope `json:"event,omitempty"`
	Record  *state.Record   `json:"record,omitempty"`
	// Raw is a rejected submission's body, subject and headers (its
	// idempotency key, entity, ordering key, not-before, CloudEvent
	// attributes), kept as received.
	Raw        []byte              `json:"raw,omitempty"`
	RawSubject string              `json:"raw_subject,omitempty"`
	RawHeader  map[string][]string `json:"raw_header,omitempty"`
	// RawBytes is the size of the body as received when Raw holds only its
	// first part: all of it would not fit in a DEAD message.
	RawBytes int `json:"raw_bytes,omitempty"`
}

// Writer keeps entries in DEAD, each account's under its Bound, and
// those DEAD has no room for in the waiting room until there is (Keep,
// Move).
type Writer struct {
	JS   jetstream.JetStream
	Subj names.Subjects
	// Bound, if set, is how many entries an account may keep (0: no
	// bound of its own): config.DeadLettersOf of the config in force,
	// asked at each write so that a reload applies.
	Bound func(account string) int64
	// Full, if set, is told of each entry refused for room (the account
	// at its bound, or DEAD full): tenaz_dead_full_total.
	Full func(account string)
	// RefusalBound, if set, is how many entries an account may keep (in
	// DEAD and waiting for room together) before its refused submissions
	// are no longer kept (KeepRefusal): the config's
	// deadletter.max_refusals_per_account.
	RefusalBound func(account string) int64
	// Waiting, if set, is told after each pass of Move how many entries
	// each account still has waiting for room (accounts with none left
	// out): tenaz_dead_waiting_entries.
	Waiting func(counts map[string]int)

	locks   sync.Map                         // account → *sync.Mutex: its count and write, one at a time
	stream  atomic.Pointer[jetstream.Stream] // DEAD, once looked up
	waiting atomic.Pointer[jetstream.Stream] // TENAZ_DEAD_WAITING, once looked up
	passes  atomic.Uint64                    // Move's passes: where the next one starts
}

// ErrAccountFull refuses an entry of an account at its bound
// (accounts.<account>.dead_letters, deadletter.max_per_account). It wraps store.ErrFull: its writers
// wait for room as for a full DEAD, and every other account's entries
// are still kept.
var ErrAccountFull = fmt.Errorf("%w: the account's entries in DEAD are at its bound (dead_letters)", store.ErrFull)

// Publish stores e in DEAD under <p>.dead.<account>.<kind>; msgID dedups
// re-sends (a crash between this and the state write). The payload is
// stored once: in Event, and in Record only when there is no Event. Error
// is cut to state.MaxDetail, and Raw to what fits in a DEAD message (a
// submission's body can be as large as the server's max_payload, and Raw
// grows by a third as base64). An entry NATS still refuses for its size
// is an error wrapping size.ErrTooLarge; one of an account at its bound
// is ErrAccountFull.
//
// A Writer counts and writes one account's entries one at a time, so
// the bound holds within a process; writers in other processes (each
// replica of each service) racing for an account's last room can take it
// past its bound by one entry each.
func (w *Writer) Publish(ctx context.Context, e Entry, msgID string) error {
	acct, kind := Tokens(e.Account, e.Kind)
	err := w.write(ctx, acct, kind, e, msgID)
	if w.Full != nil && store.IsFull(err) {
		w.Full(acct)
	}
	return err
}

// write checks the account's room and writes, one at a time per account.
func (w *Writer) write(ctx context.Context, acct, kind string, e Entry, msgID string) error {
	if bound := w.bound(acct); bound > 0 {
		mu, _ := w.locks.LoadOrStore(acct, new(sync.Mutex))
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
		if err := w.room(ctx, acct, bound); err != nil {
			return err
		}
	}
	return w.publish(ctx, acct, kind, e, msgID)
}

func (w *Writer) bound(acct string) int64 {
	if w.Bound == nil {
		return 0
	}
	return w.Bound(acct)
}

// room checks that acct holds fewer entries than bound: the server
// counts them from its subject index, one request.
func (w *Writer) room(ctx context.Context, acct string, bound int64) error {
	st, err := w.lookup(ctx, &w.stream, names.StreamDead)
	if err != nil {
		return fmt.Errorf("dead: counting %s's entries: %w", acct, err)
	}
	n, err := Kept(ctx, st, w.Subj, acct)
	if err != nil {
		return fmt.Errorf("dead: counting %s's entries: %w", acct, err)
	}
	if int64(n) >= bound {
		return fmt.Errorf("dead: %w: %s keeps %d of %d", ErrAccountFull, acct, n, bound)
	}
	return nil
}

// Kept is how many entries account keeps in st, the DEAD stream: the
// server counts them from its subject index.
func Kept(ctx context.Context, st jetstream.Stream, s names.Subjects, account string) (int, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.DeadOf(account)))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n, nil
}

func (w *Writer) publish(ctx context.Context, acct, kind string, e Entry, msgID string) error {
	js := w.JS
	subj, _ := w.Subj.Dead(acct, kind)
	e = stored(e)
	m := nats.NewMsg(subj)
	if e.ID != "" {
		m.Header.Set(names.HeaderEventID, e.ID)
	}
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	b, err := encode(e, size.Room(js.Conn(), names.StreamDead)-headerRoom)
	if err != nil {
		return err
	}
	m.Data = b
	if _, err := js.PublishMsg(ctx, m); err != nil {
		if size.IsTooLarge(err) {
			return fmt.Errorf("dead: publish: %w: %w", size.ErrTooLarge, err)
		}
		return fmt.Errorf("dead: publish: %w", err)
	}
	return nil
}

// stored is e as a message keeps it: the payload once, in Event (and in
// Record only when there is no Event), and Error cut to state.MaxDetail.
func stored(e Entry) Entry {
	if e.Record != nil && e.Event != nil && len(e.Event.Payload) > 0 {
		r := *e.Record
		r.Payload = nil
		e.Record = &r
	}
	e.Error = state.Clip(e.Error, state.MaxDetail)
	return e
}

// headerRoom is kept for a DEAD message's headers (event id, message id).
const headerRoom = 1 << 10

// encode is e's JSON, with Raw cut to its first part if the whole would
// be over room bytes (room <= 0: not known, nothing is cut).
func encode(e Entry, room int64) ([]byte, error) {
	b, err := marshal(e)
	if err != nil {
		return nil, err
	}
	if room <= 0 || int64(len(b)) <= room || len(e.Raw) == 0 {
		return b, nil
	}
	raw := e.Raw
	e.Raw, e.RawBytes = nil, len(raw)
	rest, err := marshal(e)
	if err != nil {
		return nil, err
	}
	// base64 takes 4 bytes per 3, and `,"raw":""` goes around them.
	keep := min(max((room-int64(len(rest))-16)/4*3, 0), int64(len(raw)))
	e.Raw = raw[:keep]
	return marshal(e)
}

// marshal is e's JSON without HTML escaping, which would write each <, >
// and & of the payload as six bytes (see event.Envelope.Marshal).
func marshal(e Entry) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("dead: encode: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Advisory is the JSON of <p>.advisory.dead.<account>.<kind>, published
// (core NATS) for each event that arrives in DEAD.
type Advisory struct {
	ID         string    `json:"id"`
	Account    string    `json:"account"`
	Kind       string    `json:"kind"`
	Reason     string    `json:"reason"`
	Class      string    `json:"class,omitempty"`
	Error      string    `json:"error,omitempty"`
	HTTPStatus int       `json:"http_status,omitempty"`
	Attempts   int       `json:"attempts"`
	At         time.Time `json:"at"`
}

// Advise publishes the dead advisory of r (best effort: advisories are
// for people watching; DEAD is the record).
func Advise(nc *nats.Conn, s names.Subjects, r state.Record) {
	a := Advisory{ID: r.ID, Account: r.Account, Kind: r.Kind, Attempts: r.Attempts, At: r.UpdatedAt}
	if r.LastError != nil {
		a.Class, a.Error, a.HTTPStatus = r.LastError.Class, r.LastError.Message, r.LastError.HTTPStatus
	}
	if len(r.History) > 0 {
		a.Reason, _, _ = strings.Cut(r.History[len(r.History)-1].Detail, ":")
	}
	b, _ := json.Marshal(a)
	_ = nc.Publish(s.AdvisoryDead(r.Account, r.Kind), b)
}

// AdviseReview publishes <p>.advisory.review.<account>.<kind> for an event
// that moved to manual_review; Reason is "manual_review" and Error says why.
func AdviseReview(nc *nats.Conn, s names.Subjects, r state.Record, why string) {
	a := Advisory{ID: r.ID, Account: r.Account, Kind: r.Kind, Attempts: r.Attempts, At: r.UpdatedAt, Reason: ReasonReview, Error: why}
	if r.LastError != nil {
		a.Class, a.HTTPStatus = r.LastError.Class, r.LastError.HTTPStatus
	}
	b, _ := json.Marshal(a)
	_ = nc.Publish(s.AdvisoryReview(r.Account, r.Kind), b)
}
