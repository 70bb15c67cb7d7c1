package deadletter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter"
)

// Between two reads of a change feed the archiver waits out its settle,
// and the state bucket keeps only a record's last revision: an event that
// passes through several states meanwhile is read once, and archived in
// one message that holds every step.
func TestArchiveSettleWritesAnEventChangedMeanwhileOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	c := servicetest.Context(t, 2*time.Minute)
	if err := e.dl.Stop(c); err != nil {
		t.Fatal(err)
	}
	nc, _ := e.Srv.Conn(t)
	dl, err := deadletter.New(deadletter.Options{Conn: nc, Config: e.cfg, Instance: "settle", Auth: e.auth, Settle: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, context.Background(), dl)
	archive, err := e.JS.Stream(c, "TENAZ_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	msgsOf := func(id string) uint64 {
		info, err := archive.Info(c, jetstream.WithSubjectFilter(audit.Subject(e.cfg.Prefix, "acme", "", id)))
		if err != nil {
			return 0
		}
		var n uint64
		for _, v := range info.State.Subjects {
			n += v
		}
		return n
	}
	create := func(key string) string {
		id := event.ID("acme", key)
		r, _, err := state.New(state.Record{ID: id, IdempotencyKey: key, Account: "acme", Kind: "credit.evaluate"}, state.Action{Name: state.Accept}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.St.Create(c, r); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := create("settle-first")
	natstest.Eventually(t, 30*time.Second, func() bool { return msgsOf(first) == 1 }, "the first event archived")
	// The archiver's fetch has ended: it settles now.
	id := create("settle-second")
	for _, a := range []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Succeed}} {
		if _, _, _, err := e.St.Transition(c, "acme", id, a); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return msgsOf(id) > 0 }, "the second event archived")
	delivered := uint64(0)
	for p := range e.Subj.Parts() {
		cons, err := e.JS.Consumer(c, "KV_"+e.Subj.StateBucketOf(p), search.FeedConsumer)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := cons.Info(c)
		if err != nil {
			t.Fatal(err)
		}
		delivered += ci.Delivered.Consumer
	}
	if delivered != 2 {
		t.Fatalf("revisions delivered to the archiver: %d, want 2 (the first event's, and the second's last only)", delivered)
	}
	if n := msgsOf(id); n != 1 {
		t.Fatalf("the second event's archive messages: %d, want 1 (its three revisions read as one)", n)
	}
	last, err := archive.GetLastMsgForSubject(c, audit.Subject(e.cfg.Prefix, "acme", "", id))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []state.ActionName{state.Accept, state.Claim, state.Succeed} {
		if !strings.Contains(string(last.Data), `"`+string(step)+`"`) {
			t.Fatalf("the archived message lacks %s: %s", step, last.Data)
		}
	}
}
