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
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter"
)

// The archiver reads a revision of a change feed once it is Settle old,
// and the state bucket keeps only a record's last revision: an event that
// passes through several states within it is read once, and archived in
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
	// The second event's revisions all come within the settle of its
	// first, however a fetch cuts them.
	created := time.Now()
	id := create("settle-second")
	for _, a := range []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Succeed}} {
		if _, _, _, err := e.St.Transition(c, "acme", id, a); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(created); took >= 5*time.Second {
		t.Fatalf("the create, claim and done took %s, not within the settle: the case was not made", took)
	}
	// Once its last step is archived, it must be its only message. (How
	// many revisions the feed delivered is no measure: one fetched young
	// is held unread until it settles.)
	natstest.Eventually(t, 30*time.Second, func() bool {
		last, err := archive.GetLastMsgForSubject(c, audit.Subject(e.cfg.Prefix, "acme", "", id))
		return err == nil && strings.Contains(string(last.Data), `"`+string(state.Succeed)+`"`)
	}, "the second event archived as done")
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
