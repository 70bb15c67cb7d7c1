package dead

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/store"
)

// Waiting is where an entry waits that DEAD has no room for (its account
// at its bound, or DEAD full): TENAZ_DEAD_WAITING, one subject per
// account. A writer that parks an entry there has settled what it stands
// for, so nothing upstream waits with it: a refused submission parked
// here no longer holds INTAKE's trim floor, below which every account's
// later submissions would stay stored until an operator freed room.
// Move takes the entries into DEAD, each account's oldest first, once
// its account has room.
type Waiting struct {
	JS   jetstream.JetStream
	Subj names.Subjects
	// Dead writes the entries Move takes: its bounds decide the room.
	Dead *Writer

	stream atomic.Pointer[jetstream.Stream] // TENAZ_DEAD_WAITING, once looked up
}

// headerMsgID carries a parked entry's DEAD message id, which dedups its
// move into DEAD should a mover die between the write and the delete.
const headerMsgID = "Tenaz-Dead-Msg-Id"

// moveBatch bounds the entries Move takes of one account per call, so
// that one account's long wait does not keep the others' waiting.
const moveBatch = 64

// Park keeps e, which DEAD refused for room, until Move takes it into
// DEAD under msgID. A re-park of the same msgID (a redelivery of what e
// stands for, after a crash between the park and its settle) is
// deduplicated within the stream's window.
func (w *Waiting) Park(ctx context.Context, e Entry, msgID string) error {
	acct := e.Account
	if names.ValidateAccount(acct) != nil {
		acct = InvalidToken
	}
	b, err := encode(e, size.Room(w.JS.Conn(), names.StreamDead)-headerRoom)
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
// were parked, until its account has no room (or moveBatch of them): one
// request when nothing waits. It returns how many it moved. Movers in
// several processes may run at once: an entry written twice is
// deduplicated by DEAD (its message id), and deleted once.
func (w *Waiting) Move(ctx context.Context) (int, error) {
	st, err := w.waitingStream(ctx)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(w.Subj.DeadWaitingAll()))
	if err != nil {
		return 0, fmt.Errorf("dead: waiting entries: %w", err)
	}
	moved := 0
	for _, subj := range slices.Sorted(maps.Keys(info.State.Subjects)) {
		n, err := w.moveAccount(ctx, st, subj)
		moved += n
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// moveAccount moves the entries waiting on subj, oldest first, until one
// is refused for room.
func (w *Waiting) moveAccount(ctx context.Context, st jetstream.Stream, subj string) (int, error) {
	moved := 0
	for seq := uint64(1); moved < moveBatch; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return moved, nil
		}
		if err != nil {
			return moved, fmt.Errorf("dead: read a waiting entry: %w", err)
		}
		var e Entry
		if err := json.Unmarshal(raw.Data, &e); err != nil {
			return moved, fmt.Errorf("dead: waiting entry %d: %w", raw.Sequence, err)
		}
		if err := w.Dead.Publish(ctx, e, raw.Header.Get(headerMsgID)); err != nil {
			if store.IsFull(err) {
				return moved, nil // still no room: it waits, and the account's later ones behind it
			}
			return moved, err
		}
		if err := st.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return moved, fmt.Errorf("dead: remove a moved entry: %w", err)
		}
		moved++
		seq = raw.Sequence + 1
	}
	return moved, nil
}

// WaitingOf is how many of account's entries wait for room in DEAD.
func (w *Waiting) WaitingOf(ctx context.Context, account string) (int, error) {
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

func (w *Waiting) waitingStream(ctx context.Context) (jetstream.Stream, error) {
	if st := w.stream.Load(); st != nil {
		return *st, nil
	}
	st, err := w.JS.Stream(ctx, w.Subj.Stream(names.StreamDeadWaiting))
	if err != nil {
		return nil, fmt.Errorf("dead: %s: %w", w.Subj.Stream(names.StreamDeadWaiting), err)
	}
	w.stream.Store(&st)
	return st, nil
}
