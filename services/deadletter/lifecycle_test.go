package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// deadStream is the DEAD stream's current state.
func (e *env) deadStream() (jetstream.Stream, jetstream.StreamState) {
	e.t.Helper()
	s, err := e.JS.Stream(context.Background(), names.StreamDead)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return s, info.State
}

// items lists the dead items matching req (up to 100).
func (e *env) items(req ops.ListRequest) []ops.Item {
	e.t.Helper()
	req.Limit = 100
	var rep ops.ListReply
	if err := e.call(ops.DeadList, req, &rep); err != nil {
		e.t.Fatal(err)
	}
	return rep.Items
}

// intakeLeft counts the submissions INTAKE holds for ingest and DEAD does
// not keep: not taken by ingest yet, or taken and waiting. (Settled ones
// after the first unsettled one stay in the stream until the trimmer
// passes it.)
func (e *env) intakeLeft() uint64 {
	e.t.Helper()
	// Kept: DEAD's entries name the INTAKE message they keep
	// (Nats-Msg-Id intake-<seq>).
	kept := map[string]bool{}
	dst, st := e.deadStream()
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		if m, err := dst.GetMsg(context.Background(), seq); err == nil {
			kept[m.Header.Get(jetstream.MsgIDHeader)] = true
		}
	}
	// Waiting: above the ack floor (unacked, or acked for the anchor that
	// holds the floor and waits with them, as a refusal DEAD has no room
	// for does) and not kept.
	ci := e.ConsumerInfo(names.StreamIntake, "ingest")
	left := ci.NumPending
	for seq := ci.AckFloor.Stream + 1; seq <= ci.Delivered.Stream; seq++ {
		if !kept[fmt.Sprintf("intake-%d", seq)] {
			left++
		}
	}
	return left
}

// Discard, resolve and replay end an entry's stay in DEAD: its message,
// and with it the payload it keeps, is deleted from the stream, for an
// event and for a refused submission (listed by its sequence) alike.
func TestSettledEntriesLeaveDead(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	ids := e.seed(3, "acme", "order.create", dead.ReasonPermanent, "permanent", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	submit(t, e, "acme", "no.such.kind", "k1", `{"secret":"card 4111"}`)
	e.waitListed(state.Dead, url.Values{}, 4)
	seqs := map[string]uint64{}
	var refused uint64
	for _, it := range e.items(ops.ListRequest{}) {
		seqs[it.ID] = it.Seq // the refused submission under seq_<n>
		if it.Reason == dead.ReasonRejected {
			refused = it.Seq
		}
	}
	ds, st := e.deadStream()
	if st.Msgs != 4 {
		t.Fatalf("DEAD: want 4 entries before acting, got %d", st.Msgs)
	}
	act := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	var rep ops.ActionReply
	act("discard", e.call(ops.DeadDiscard, ops.DiscardRequest{IDs: ids[:1], Reason: "duplicate order"}, &rep))
	act("resolve", e.call(ops.ReviewResolve, ops.ResolveRequest{ID: ids[1], Outcome: ops.OutcomeDone, Reason: "done by hand"}, nil))
	act("replay", e.call(ops.DeadReplay, ops.ReplayRequest{IDs: ids[2:], Reason: "target fixed"}, nil))
	act("discard by seq", e.call(ops.DeadDiscard, ops.DiscardRequest{Seqs: []uint64{refused}, Reason: "test traffic"}, &rep))
	for key, seq := range seqs {
		if _, err := ds.GetMsg(context.Background(), seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("DEAD entry %d (%q): want it deleted once settled, got %v", seq, key, err)
		}
	}
	if _, st := e.deadStream(); st.Msgs != 0 {
		t.Fatalf("DEAD: want no entries left, got %d", st.Msgs)
	}
	e.waitListed(state.Dead, url.Values{}, 0)
	if r := e.Record(ids[2]); r.Status != state.Pending || string(r.Payload) != `{"n":2}` {
		t.Fatalf("the replayed event: want pending with its payload (from the record), got %s %s", r.Status, r.Payload)
	}
}

// A full DEAD (deadletter.max_bytes) loses nothing: a refused submission
// it cannot take waits in TENAZ_DEAD_WAITING, INTAKE trimmed past it,
// and is kept as soon as discarding entries frees room.
func TestFullDeadKeepsRefusalsUntilRoomIsFreed(t *testing.T) {
	t.Parallel()
	e := setup(t, "http: {max_body_bytes: 65536}\ndeadletter: {max_bytes: 262144}")
	startIngest(t, e)
	const n = 6
	body := `{"pad":"` + strings.Repeat("x", 50<<10) + `"}`
	for i := range n {
		submit(t, e, "acme", "no.such.kind", fmt.Sprintf("big-%d", i), body)
	}
	var first []ops.Item
	natstest.Eventually(t, time.Minute, func() bool {
		// Settled: every entry in DEAD is listed, every submission is in
		// exactly one of DEAD and the waiting room, and INTAKE holds none.
		first = e.items(ops.ListRequest{Reason: dead.ReasonRejected})
		_, st := e.deadStream()
		return len(first) > 0 && st.Msgs == uint64(len(first)) && len(first)+e.DeadWaiting("acme") == n && e.intakeLeft() == 0
	}, "a full DEAD: want what it could not take waiting for room")
	if len(first) == n {
		t.Fatalf("DEAD of 256 KiB: want it full before it took all %d entries of ~70 KiB, got them all", n)
	}
	seqs := make([]uint64, 0, len(first))
	for _, it := range first {
		seqs = append(seqs, it.Seq)
	}
	var rep ops.ActionReply
	if err := e.call(ops.DeadDiscard, ops.DiscardRequest{Seqs: seqs, Reason: "load test"}, &rep); err != nil || rep.Done != len(seqs) {
		t.Fatalf("discard %d: %+v %v", len(seqs), rep, err)
	}
	natstest.Eventually(t, time.Minute, func() bool {
		return e.DeadWaiting("acme") == 0 && len(e.items(ops.ListRequest{Reason: dead.ReasonRejected})) == n-len(first)
	}, "after the discard: want the %d waiting refusals kept in DEAD", n-len(first))
}

// deadletter.retention is DEAD's max_age. When an entry expires, a
// refused submission (which lives in its entry alone) leaves the lists
// with it; a dead event stays listed and is replayed from its record.
func TestDeadRetentionExpiresEntries(t *testing.T) {
	t.Parallel()
	e := setup(t, "deadletter: {retention: 2s}")
	startIngest(t, e)
	ids := e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1}` })
	submit(t, e, "acme", "no.such.kind", "k1", `{"x":1}`)
	e.waitListed(state.Dead, url.Values{}, 2)
	natstest.Eventually(t, 30*time.Second, func() bool { _, st := e.deadStream(); return st.Msgs == 0 }, "DEAD: want its entries expired after 2s")
	natstest.Eventually(t, 30*time.Second, func() bool {
		its := e.items(ops.ListRequest{})
		return len(its) == 1 && its[0].ID == ids[0]
	}, "the lists: want the dead event only (the refused submission expired with its entry)")
	var show ops.ShowReply
	if err := e.call(ops.DeadShow, ops.ShowRequest{ID: ids[0]}, &show); err != nil || show.Record == nil || show.Item.Reason != dead.ReasonPermanent {
		t.Fatalf("show an event whose entry expired: want its item and record, got %+v %v", show, err)
	}
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{IDs: ids, Reason: "after expiry"}, nil); err != nil {
		t.Fatalf("replay an event whose entry expired: %v", err)
	}
	if r := e.Record(ids[0]); r.Status != state.Pending || string(r.Payload) != `{"n":1}` {
		t.Fatalf("the replayed event: want pending with its payload, got %s %s", r.Status, r.Payload)
	}
}
