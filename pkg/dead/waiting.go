package dead

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/store"
)

// The waiting room is where an entry waits that DEAD has no room for (its
// account at its bound, or DEAD full): TENAZ_DEAD_WAITING, one subject
// per account. A writer whose entry Keep parks there has settled what it
// stands for, so nothing upstream waits with it: a refused submission
// parked there no longer holds INTAKE's trim floor (below which every
// account's later submissions would stay stored until an operator freed
// room), and a dying event is dead, its account's other events
// dispatched. Move takes the entries into DEAD, each account's oldest
// first, once its account has room.

// headerMsgID carries a parked entry's DEAD message id, which dedups its
// move into DEAD should a mover die between the write and the delete.
const headerMsgID = "Tenaz-Dead-Msg-Id"

// moveBatch bounds the entries Move takes of one account per call, so
// that one account's long wait does not keep the others' waiting.
const moveBatch = 64

// Keep stores e in DEAD, as Publish does, or, when DEAD has no room for it
// (its account at its bound, or DEAD full) or its account's older entries
// wait for room (behind), in the waiting room, from
// which Move takes it into DEAD under msgID once there is room: waiting
// is true then. Either way e is kept and what it stands for may be
// settled. Only when e can be stored in neither is the error returned,
// Publish's (store.IsFull): the caller then waits, as for any outage.
func (w *Writer) Keep(ctx context.Context, e Entry, msgID string) (waiting bool, err error) {
	return w.keep(ctx, e, msgID, false)
}

// ErrRefusalsAtBound is KeepRefusal's answer for a refused submission
// not kept: its account keeps RefusalBound entries already, in DEAD and
// waiting for room together. (A redelivery of one kept before, whose
// settle was lost, may be answered so too: it is kept, and its message
// is settled all the same.)
var ErrRefusalsAtBound = errors.New("dead: the account keeps as many entries as its refusals may take (deadletter.max_refusals_per_account)")

// KeepRefusal is Keep for a refused submission that nothing accepted
// stands for: when its account keeps RefusalBound entries already (of
// any kind, in DEAD and waiting for room together), it is not kept
// (ErrRefusalsAtBound), so that one account's flood of bad submissions
// cannot fill the server's storage for every account, whether or not
// DEAD and the account have bounds of their own. A dying event's entry
// (Keep) is always kept. The count is read before the write, not under a
// lock: writers racing for the last place may each keep one past the
// bound.
func (w *Writer) KeepRefusal(ctx context.Context, e Entry, msgID string) (waiting bool, err error) {
	return w.keep(ctx, e, msgID, true)
}

// keptInDead is how many entries account keeps in DEAD, for a refusal's
// bound: 0 without a bound, or when the count fails (taken for room:
// DEAD's own bounds still hold).
func (w *Writer) keptInDead(ctx context.Context, account string) int {
	if w.RefusalBound == nil || w.RefusalBound(account) <= 0 {
		return 0
	}
	st, err := w.lookup(ctx, &w.stream, names.StreamDead)
	if err != nil {
		return 0
	}
	kept, err := Kept(ctx, st, w.Subj, account)
	if err != nil {
		return 0
	}
	return kept
}

// refusalsAtBound reports whether account keeps RefusalBound entries or
// more, in DEAD and waiting for room together.
func (w *Writer) refusalsAtBound(account string, kept int) bool {
	if w.RefusalBound == nil {
		return false
	}
	bound := w.RefusalBound(account)
	return bound > 0 && int64(kept) >= bound
}

// keep is Keep, or KeepRefusal when refusal is set.
//
// While an account has entries waiting for room, a new one waits behind
// them, so that the room an operator frees goes to the oldest. Written
// straight into DEAD, a steady stream of the account's failures would
// take each freed room before the mover's next pass, and the entries
// that wait would wait for as long as it lasts.
func (w *Writer) keep(ctx context.Context, e Entry, msgID string, refusal bool) (waiting bool, err error) {
	acct := AccountToken(e.Account)
	inDead := 0
	if refusal {
		// DEAD is counted before the waiting room: an entry moved from
		// one into the other between the two reads is then counted in
		// neither, not in both, which would refuse a refusal short of
		// the bound. (Only a move that straddles both reads, its copy
		// in DEAD and its original not yet removed, counts twice.)
		inDead = w.keptInDead(ctx, acct)
	}
	behind, err := w.WaitingOf(ctx, acct)
	if err != nil {
		behind = 0 // unknown: DEAD says whether there is room
	}
	if refusal && w.refusalsAtBound(acct, inDead+behind) {
		return false, ErrRefusalsAtBound
	}
	if behind > 0 {
		if w.park(ctx, e, msgID) == nil {
			return true, nil
		}
	}
	err = w.Publish(ctx, e, msgID)
	if !store.IsFull(err) {
		return false, err
	}
	if perr := w.park(ctx, e, msgID); perr != nil {
		return false, fmt.Errorf("%w (and %w)", err, perr)
	}
	return true, nil
}

// park keeps e until Move takes it into DEAD under msgID. A re-park of
// the same msgID (a redelivery of what e stands for, after a crash
// between the park and its settle) is deduplicated within the stream's
// window.
func (w *Writer) park(ctx context.Context, e Entry, msgID string) error {
	acct := AccountToken(e.Account)
	b, err := encode(stored(e), size.Room(w.JS.Conn(), names.StreamDead)-headerRoom)
	if err != nil {
		return err
	}
	m := nats.NewMsg(w.Subj.DeadWaiting(acct))
	m.Data = b
	if msgID != "" {
		m.Header.Set(headerMsgID, msgID)
		m.Header.Set(jetstream.MsgIDHeader, "wait/"+msgID)
	}
	if _, err := w.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("dead: park %s's entry: %w", acct, err)
	}
	return nil
}

// Move takes waiting entries into DEAD, each account's in the order they
// were parked, until its account has no room (or moveBatch of them),
// each pass starting at the next account: one request when nothing
// waits, one per account at its bound. It returns
// how many it moved, and what failed: one account's failure does not keep
// the others' entries waiting. Movers in several processes may run at
// once: an entry written twice is deduplicated by DEAD (its message id),
// and deleted once.
func (w *Writer) Move(ctx context.Context) (int, error) {
	st, err := w.waitingStream(ctx)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(w.Subj.DeadWaitingAll()))
	if err != nil {
		return 0, fmt.Errorf("dead: waiting entries: %w", err)
	}
	moved, failed := 0, []error(nil)
	left := make(map[string]int, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		left[accountOf(subj)] = int(n)
	}
	subjects := slices.Sorted(maps.Keys(info.State.Subjects))
	if n := len(subjects); n > 1 {
		// Each pass starts at the next account: while DEAD itself is
		// full, the room freed between passes goes to the accounts in
		// turn, not always to the first in order.
		k := int(w.passes.Add(1) % uint64(n))
		subjects = slices.Concat(subjects[k:], subjects[:k])
	}
	for _, subj := range subjects {
		acct := accountOf(subj)
		n, err := w.moveAccount(ctx, st, subj)
		moved += n
		if left[acct] -= n; left[acct] <= 0 {
			delete(left, acct)
		}
		if errors.Is(err, errDeadFull) || ctx.Err() != nil {
			break // full for every account, or out of time: the next pass looks again
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", subj, err))
		}
	}
	if w.Waiting != nil {
		w.Waiting(left)
	}
	return moved, errors.Join(failed...)
}

// waitingEntry is the entry raw holds, waiting on acct's subject, and its
// DEAD message id. What is not an entry of acct (only a NATS user allowed
// to park could have written it) is kept as it is, as a malformed one of
// acct, as the dispatcher keeps an undecodable message: left waiting, it
// would fail acct's moves on every pass, and its later entries wait
// behind it.
func waitingEntry(raw *jetstream.RawStreamMsg, acct string) (Entry, string) {
	msgID := raw.Header.Get(headerMsgID)
	if msgID == "" {
		msgID = fmt.Sprintf("waiting-%d", raw.Sequence)
	}
	var e Entry
	err := json.Unmarshal(raw.Data, &e)
	if err == nil && AccountToken(e.Account) != acct {
		err = fmt.Errorf("it names account %q", e.Account)
	}
	if err == nil {
		return e, msgID
	}
	return Entry{Account: acct, Reason: ReasonRejected, Class: "malformed_entry",
		Error: fmt.Sprintf("an entry waiting for room in DEAD as %s's could not be read: %v", acct, err),
		At:    raw.Time.UTC(), Raw: raw.Data, RawSubject: raw.Subject, RawHeader: raw.Header}, msgID
}

// accountOf is the account of a waiting room's subject.
func accountOf(subj string) string { return subj[strings.LastIndexByte(subj, '.')+1:] }

// errDeadFull ends a pass of Move: DEAD itself is full, not only one
// account at its bound.
var errDeadFull = errors.New("dead: DEAD is full")

// moveAccount moves the entries waiting on subj, oldest first, until one
// is refused for room. An account at its bound costs one request: its
// room is counted before anything is read.
func (w *Writer) moveAccount(ctx context.Context, st jetstream.Stream, subj string) (int, error) {
	acct := accountOf(subj)
	if bound := w.bound(acct); bound > 0 {
		if err := w.room(ctx, acct, bound); store.IsFull(err) {
			if w.Full != nil {
				w.Full(acct)
			}
			return 0, nil
		}
	}
	moved := 0
	for seq := uint64(1); moved < moveBatch; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return moved, nil
		}
		if err != nil {
			return moved, fmt.Errorf("dead: read a waiting entry: %w", err)
		}
		e, msgID := waitingEntry(raw, acct)
		if err := w.Publish(ctx, e, msgID); err != nil {
			switch {
			case errors.Is(err, ErrAccountFull):
				return moved, nil // still no room: it waits, and the account's later ones behind it
			case store.IsFull(err):
				return moved, errDeadFull
			}
			return moved, err
		}
		if err := st.DeleteMsg(ctx, raw.Sequence); err != nil && !store.IsGone(err) {
			return moved, fmt.Errorf("dead: remove a moved entry: %w", err)
		}
		moved++
		seq = raw.Sequence + 1
	}
	return moved, nil
}

// WaitingOf is how many of account's entries wait for room in DEAD.
func (w *Writer) WaitingOf(ctx context.Context, account string) (int, error) {
	st, err := w.waitingStream(ctx)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(w.Subj.DeadWaiting(account)))
	if err != nil {
		return 0, fmt.Errorf("dead: %s's waiting entries: %w", account, err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n, nil
}

func (w *Writer) waitingStream(ctx context.Context) (jetstream.Stream, error) {
	return w.lookup(ctx, &w.waiting, names.StreamDeadWaiting)
}

// lookup is the stream the default prefix calls base, looked up once and
// kept in cache.
func (w *Writer) lookup(ctx context.Context, cache *atomic.Pointer[jetstream.Stream], base string) (jetstream.Stream, error) {
	if st := cache.Load(); st != nil {
		return *st, nil
	}
	st, err := w.JS.Stream(ctx, w.Subj.Stream(base))
	if err != nil {
		return nil, fmt.Errorf("dead: %s: %w", w.Subj.Stream(base), err)
	}
	cache.Store(&st)
	return st, nil
}
