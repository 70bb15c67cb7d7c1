package deadletter_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// overviewPage reads the overview of account as alice.
func (e *env) overviewPage(account string) string {
	e.t.Helper()
	resp, err := http.Get(e.http.URL + "/ui/overview?account=" + account)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("overview: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

var doneTotal = regexp.MustCompile(`data-series="done" data-last="[^"]*" data-total="([0-9.]+)"`)

// More records changed between two refreshes than one reads (5,000 a
// partition): the newest are read, the counts scaled to the whole, and
// the page says it is a sample; the refresh costs what 5,000 cost. The
// records are all of one partition (records are placed by event id).
func TestOverviewSamplesABusyFeed(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	if p := e.overviewPage("acme"); !doneTotal.MatchString(p) || doneTotal.FindStringSubmatch(p)[1] != "0" {
		t.Fatalf("before any event: want 0 done, got %v", doneTotal.FindStringSubmatch(p))
	}
	const n = 6000
	now := time.Now().UTC()
	var ps []store.Pending
	bucket := ""
	for i, made := 0, 0; made < n; i++ {
		t0 := now.Add(-time.Duration(made) * time.Millisecond)
		env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: fmt.Sprint("busy-", i)}, []byte(`{"n":1}`), "", "", t0)
		if err != nil {
			t.Fatal(err)
		}
		if bucket == "" {
			bucket = e.St.Bucket(env.Account, env.ID)
		}
		if e.St.Bucket(env.Account, env.ID) != bucket {
			continue
		}
		made++
		rec := queue.Initial(env)
		for _, a := range []state.Action{{Name: state.Claim, Seq: 1}, {Name: state.Succeed}} {
			if rec, _, err = state.Apply(rec, a, t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		p, err := e.St.CreateAsync(rec)
		if err != nil {
			t.Fatal(err)
		}
		if ps = append(ps, p); len(ps) == 500 || made == n {
			for _, p := range ps {
				if _, err := p.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			ps = ps[:0]
		}
	}
	var page string
	natstest.Eventually(t, 30*time.Second, func() bool { // a read every 2 s at most
		page = e.overviewPage("acme")
		m := doneTotal.FindStringSubmatch(page)
		return m != nil && m[1] != "0"
	}, "the overview to read the changes")
	m := doneTotal.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no throughput chart on the page: %s", page)
	}
	if got, _ := strconv.ParseFloat(m[1], 64); got != n {
		t.Fatalf("done after a sampled read: want %d (5,000 read, scaled), got %v", n, got)
	}
	if !regexp.MustCompile(`sampled: more changes came in than a refresh reads`).MatchString(page) {
		t.Fatal("the page must say the figures are a sample")
	}
}

// An account's overview says how many entries it keeps in DEAD against
// its bound, and when it is at it: its failures then wait for an
// operator.
func TestOverviewShowsAnAccountAtItsBoundInDead(t *testing.T) {
	t.Parallel()
	e := setup(t, "accounts:\n  acme: {dead_letters: 1}")
	startIngest(t, e)
	e.startDispatcher(nil)
	if page := e.overviewPage("acme"); !strings.Contains(page, `<dd id="dead-letters">0 kept of 1</dd>`) {
		t.Fatalf("before: want 0 kept of 1, got %s", deadLettersOf(page))
	}
	id := submit(t, e, "acme", "order.create", "o-1", `{"order_id":"o-1","reject":true}`)
	natstest.Eventually(t, 30*time.Second, func() bool {
		r, _, err := e.St.Get(context.Background(), "", id)
		return err == nil && r.Status == state.Dead
	}, "the rejected event to be dead")
	if got := deadLettersOf(e.overviewPage("acme")); !strings.Contains(got, "1 kept of 1") || !strings.Contains(got, "full: its failures wait") {
		t.Fatalf("at its bound: want 1 kept of 1, full, got %s", got)
	}
	// A NATS submission refused at intake waits for room, and says so.
	if _, err := e.JS.Publish(context.Background(), "tenaz.intake.acme.no.such.kind", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(deadLettersOf(e.overviewPage("acme")), "1 waiting for room")
	}, "want the overview to show acme's refusal waiting for room")
	// So does a dying event's entry, and an operator acting on the event
	// is told why it cannot yet.
	waiting := submit(t, e, "acme", "order.create", "o-2", `{"order_id":"o-2","reject":true}`)
	natstest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(deadLettersOf(e.overviewPage("acme")), "2 waiting for room")
	}, "want the overview to show acme's dying event waiting for room too")
	// The dispatcher keeps the entry before it writes the event dead: till
	// then the event is running, and an operator is told just that.
	natstest.Eventually(t, 30*time.Second, func() bool {
		r, _, err := e.St.Get(context.Background(), "", waiting)
		return err == nil && r.Status == state.Dead
	}, "the waiting event to be dead")
	err := e.call(ops.DeadReplay, ops.ReplayRequest{IDs: []string{waiting}, Reason: "retry"}, nil)
	if err == nil || !strings.Contains(err.Error(), "waiting_for_room") {
		t.Fatalf("replaying an event whose entry waits: want it refused, saying why, got %v", err)
	}
	if got := deadLettersOf(e.overviewPage("globex")); !strings.Contains(got, "0 kept, no bound of its own") {
		t.Fatalf("another account: want none kept and no bound, got %s", got)
	}
}

var deadLetters = regexp.MustCompile(`<dd id="dead-letters">.*?</dd>`)

// deadLettersOf is the dead-letters line of an overview page.
func deadLettersOf(page string) string { return deadLetters.FindString(page) }

// An event whose DEAD entry waits for room can be viewed, over HTTP, the
// screen and NATS, from its record: only actions on it wait for the entry
// (409 waiting_for_room). Viewing it was refused with that 409 too.
func TestShowAnEventWaitingForRoom(t *testing.T) {
	t.Parallel()
	e := setup(t, "deadletter: {max_per_account: 1}")
	startIngest(t, e)
	e.startDispatcher(nil)
	var ids []string
	for i := 1; i <= 2; i++ {
		id := submit(t, e, "acme", "order.create", fmt.Sprintf("o-%d", i), fmt.Sprintf(`{"order_id":"o-%d","reject":true}`, i))
		natstest.Eventually(t, 30*time.Second, func() bool {
			r, _, err := e.St.Get(context.Background(), "", id)
			return err == nil && r.Status == state.Dead
		}, "event %d dead", i)
		ids = append(ids, id)
	}
	waiting := ids[1]
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{IDs: []string{waiting}, Reason: "retry"}, nil); err == nil || !strings.Contains(err.Error(), "waiting_for_room") {
		t.Fatalf("replaying the event whose entry waits: want 409 waiting_for_room, got %v", err)
	}
	var sh ops.ShowReply
	if st := e.get("/v1/dead/"+waiting, &sh); st != http.StatusOK || sh.Item.ID != waiting || sh.Item.Status != state.Dead ||
		sh.Record == nil || sh.Event == nil || !strings.Contains(string(sh.Event.Payload), `"o-2"`) {
		t.Fatalf("GET /v1/dead/%s: want the dead event with its record and payload, got %d %+v", waiting, st, sh)
	}
	sh = ops.ShowReply{}
	if err := e.call(ops.DeadShow, ops.ShowRequest{ID: waiting}, &sh); err != nil || sh.Item.ID != waiting || sh.Record == nil {
		t.Fatalf("dead.show %s: want the event, got %+v %v", waiting, sh, err)
	}
	r := servicetest.Send(t, e.Ctx(), http.DefaultClient, http.MethodGet, e.http.URL+"/ui/events/"+waiting, "", "")
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), waiting) {
		t.Fatalf("GET /ui/events/%s: want its page, got %d %.300s", waiting, r.Status, r.Body)
	}
}

// An account whose definition in the accounts bucket cannot be read (a
// value sealed under another key, or no JSON at all) is left out, and
// its events wait: its overview says so and why, not "running".
func TestOverviewSaysALeftOutAccountsEventsWait(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	kv, err := e.JS.KeyValue(e.Ctx(), live.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(e.Ctx(), "zed", []byte("not a definition")); err != nil {
		t.Fatal(err)
	}
	dispatch := regexp.MustCompile(`<dd id="dispatch">.*?</dd>`)
	var shown string
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		shown = dispatch.FindString(e.overviewPage("zed"))
		return strings.Contains(shown, "is not in force, and its events wait") && !strings.Contains(shown, "running")
	}, "zed's overview to say its events wait (last seen %s)", natstest.Lazy(func() any { return shown }))
}
