package tenaz_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/keeper"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/webhook"
)

// cost is what one event costs a stream: the messages it stored and the
// messages it removed (acked off a work queue, purged, or a KV revision
// replaced under history 1).
type cost struct{ Stored, Removed float64 }

// writesPath is one way an event goes through tenaz, and what one event
// of it costs each stream (by role, see countWrites). These are the numbers
// of docs/performance.md, "Durable writes per event": change one there,
// change it here.
type writesPath struct {
	name   string
	kind   string          // the mapping of kind order.create
	faults provider.Faults // the provider's
	delay  bool            // submitted with a Tenaz-Not-Before
	// callback: each event is completed by a signed webhook.
	callback bool
	want     map[string]cost
	// tolerance per role, for amortised writes (a count shared by many
	// events); 0 for everything else, which must be exact.
	tolerance map[string]float64
	// cancels is how many schedules one event purges (of its removed
	// EVENTS messages).
	cancels float64
}

var writesPaths = []writesPath{
	{
		name: "sync", kind: `{target: erp}`,
		want: map[string]cost{"intake": {1, 1}, "events": {1, 1}, "state": {3, 2}},
	},
	{
		name: "sync_retried_once", kind: `{target: erp, attempts: 3, backoff: {initial: 1s, max: 1s, jitter: 0}}`,
		faults: provider.Faults{FailFirst: 1},
		want: map[string]cost{"intake": {1, 1}, "events": {3, 3}, "state": {5, 4},
			// The account+target's count of consecutive failures: one
			// write per failure, one reset by the first success after.
			"breakers": {1, 1}},
		tolerance: map[string]float64{"breakers": 0.05},
	},
	{
		name: "delayed", kind: `{target: erp}`, delay: true,
		want: map[string]cost{"intake": {1, 1}, "events": {2, 2}, "state": {3, 2}},
	},
	{
		name: "callback", kind: `{target: bureau, completion: callback, callback_sla: 1m}`, callback: true,
		// callbacks: the reference. The webhooks name their event by id,
		// which they sign: nothing to hold against a copy sent to another
		// account's URL (one matched by reference adds its hold).
		want:    map[string]cost{"intake": {1, 1}, "events": {2, 2}, "state": {4, 3}, "callbacks": {1, 0}},
		cancels: 1,
	},
	{
		name: "poll", kind: `{target: reports, completion: poll, poll_sla: 1m}`,
		want: map[string]cost{"intake": {1, 1}, "events": {3, 3}, "state": {4, 3}},
	},
}

// writesEvents is how many events of each path are counted: enough that
// the amortised writes average out.
const writesEvents = 100

// Every durable write and delete one event makes, per path, counted on a
// real tenaz run with fsync always: each stream's stored and removed
// messages over a batch of events, less the keeper's messages (which are
// per second, not per event), equal docs/performance.md's table
// ("Durable writes per event"). The followers (search index, audit
// archive) are counted apart, and any other stream that moves fails the
// test. INTAKE's trim purges are shared by many events: at most one per
// trim interval.
func TestDurableWritesPerEvent(t *testing.T) {
	t.Parallel()
	for _, p := range writesPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			r := countWrites(t, p)
			for _, role := range slices.Sorted(maps.Keys(r.hot)) {
				if c := r.hot[role]; c != (cost{}) || p.want[role] != (cost{}) {
					t.Logf("%-9s %s", role, c)
				}
			}
			for _, role := range slices.Sorted(maps.Keys(r.followers)) {
				t.Logf("%-9s %s (follower)", role, r.followers[role])
			}
			t.Logf("over %s: purges per event: %.3f trims of INTAKE, %.3f of EVENTS, %.3f schedules, %.3f of keeper messages; keeper messages per event %.3f",
				r.window.Round(time.Millisecond), r.trims, r.eventTrims, r.cancels, r.keeperPurges, r.keeper)
			for _, role := range slices.Sorted(maps.Keys(p.want)) {
				w, g, tol := p.want[role], r.hot[role], p.tolerance[role]+1e-9
				if math.Abs(g.Stored-w.Stored) > tol || math.Abs(g.Removed-w.Removed) > tol {
					t.Errorf("%s per %s event: want %s, got %s", role, p.name, w, g)
				}
			}
			for role, g := range r.hot {
				if _, ok := p.want[role]; !ok && g != (cost{}) {
					t.Errorf("%s per %s event: want nothing, got %s", role, p.name, g)
				}
			}
			// INTAKE is trimmed, not a work queue: its acks delete
			// nothing, so keeper messages there would keep nothing.
			if r.keeperIntake != 0 {
				t.Errorf("keeper messages on INTAKE: want none, got %d", r.keeperIntake)
			}
			if r.cancels != p.cancels {
				t.Errorf("schedule purges per %s event: want %v, got %.2f", p.name, p.cancels, r.cancels)
			}
			if most := float64(r.window/trimEvery+2) / writesEvents; r.trims > most {
				t.Errorf("INTAKE trims per %s event: want at most one per %s (%.3f), got %.3f", p.name, trimEvery, most, r.trims)
			}
			// EVENTS is trimmed by the account's reader and by the
			// poller, each at most once per its interval (and once more
			// when an idle reader is retired).
			if most := 2 * float64(r.window/eventsTrimEvery+2) / writesEvents; r.eventTrims > most {
				t.Errorf("EVENTS trims per %s event: want at most two per %s (%.3f), got %.3f", p.name, eventsTrimEvery, most, r.eventTrims)
			}
			if r.keeper != 0 {
				t.Errorf("keeper messages in a new store: want none, got %.3f per event", r.keeper)
			}
			// The archive writes at most one entry per state revision.
			if a := r.followers["audit"]; a.Stored > p.want["state"].Stored {
				t.Errorf("audit archive per %s event: want at most %v entries, got %s", p.name, p.want["state"].Stored, a)
			}
		})
	}
}

// trimEvery is ingest's INTAKE trim interval (services/ingest/trim.go),
// eventsTrimEvery the dispatcher's and the poller's for EVENTS
// (services/dispatcher/trim.go, services/poller/trim.go).
const (
	trimEvery       = 250 * time.Millisecond
	eventsTrimEvery = 500 * time.Millisecond
)

func (o cost) String() string { return fmt.Sprintf("stored %.2f, removed %.2f", o.Stored, o.Removed) }

// writesConfig is a standalone tenaz with fsync always whose kind
// order.create is mapped as kind; the targets are all the provider at
// targetURL. The account is trimmed 100ms after its messages (1s by
// default, or every 64 messages): sooner, so that each count waits less
// for EVENTS trimmed; the purges per event are what a busy account costs.
func writesConfig(dir, targetURL, kind string) string {
	return fmt.Sprintf(`
nats:
  embedded: {store_dir: %q, sync: always, listen: "127.0.0.1:-1"}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
auth: {disabled: true}
streams: {trim_after: 100ms}
poller: {reconcile_every: 1h}
accounts:
  "*": {concurrency: 64, breaker: {failures: 100000}}
targets:
  erp: {url: %q, timeout: 5s}
  bureau: {url: %q, timeout: 5s, callback_secret: %q}
  reports:
    url: %q
    timeout: 5s
    poll: {url: %q, interval: 1s, done_when: {field: status, in: [approved]}}
kinds:
  order.create: %s
`, dir, targetURL+"/orders", targetURL+"/proposals", writesSecret,
		targetURL+"/evaluations", targetURL+"/evaluations/{{.Reference}}", kind)
}

const writesSecret = "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="

// writesResult is what countWrites counted, per event.
type writesResult struct {
	hot, followers map[string]cost // by role, or by stream name for any other stream
	// Purge requests: INTAKE trims to the ack floor, EVENTS trims (an
	// account's dispatch subjects, a partition's timers), schedule
	// cancellations, the keeper's purges of its own messages.
	trims, eventTrims, cancels, keeperPurges float64
	keeper                                   float64       // keeper messages
	keeperIntake                             int64         // of those, INTAKE's
	window                                   time.Duration // from the first count to the last
}

// countWrites runs writesEvents events of path p through a fresh tenaz
// (after one warm-up event, which starts the account's reader and makes
// its keys) and counts what each stream stored and removed meanwhile.
func countWrites(t *testing.T, p writesPath) writesResult {
	_, target := servicetest.Provider(t, p.faults, provider.WithIdempotent())
	tz := start(t, writesConfig(t.TempDir(), target.URL, p.kind))
	e := servicetest.Attach(t, tz.NATSURL(), servicetest.Options{Timeout: 2 * time.Minute})
	const account = "acme"
	roles := map[string]string{
		e.Subj.Stream(names.StreamIntake):        "intake",
		e.Subj.EventsStream(account):             "events",
		"KV_" + e.Subj.Bucket("tenaz_callbacks"): "callbacks",
		"KV_" + e.Subj.Bucket("tenaz_breakers"):  "breakers",
		e.Subj.Stream("TENAZ_AUDIT"):             "audit",
		"KV_" + e.Subj.Bucket("tenaz_search"):    "search",
		// Heartbeats, per second and per replica, not per event.
		"KV_" + e.Subj.Bucket("tenaz_owners"): "",
	}
	for p := range e.Subj.Parts() { // records are spread over every partition's
		roles["KV_"+e.Subj.StateBucketOf(p)] = "state"
	}
	isFollower := map[string]bool{"audit": true, "search": true}
	tp := wiretap(t, e)

	submit := func(prefix string, n int) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		var headers []string
		if p.delay {
			due := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)
			headers = []string{names.HeaderNotBefore, due}
		}
		return e.Submit(account, "order.create", keys, func(k string) string { return fmt.Sprintf(`{"order_id":%q}`, k) }, headers...)
	}
	done := func(ids []string) {
		if p.callback {
			// Once the events await it, as a provider calls back once it
			// has done the work (one that calls back before its 2xx is
			// stored costs a late-outcome note instead of await_callback:
			// TestWebhookBeforeTheRunsOutcomeLeavesNoDeadline, dispatcher).
			e.WaitAll(ids, state.AwaitingCallback, time.Minute)
			for _, id := range ids {
				callBack(t, e, "http://"+tz.HTTPAddr()+"/v1/callbacks/bureau", id)
			}
		}
		e.WaitAll(ids, state.Done, time.Minute)
	}
	done(submit("warm", 1))
	settled(t, e)
	before := snapshot(t, e, tp)
	done(submit("ev", writesEvents))
	settled(t, e)
	after := snapshot(t, e, tp)

	per := func(n int64) float64 { return float64(n) / writesEvents }
	r := writesResult{hot: map[string]cost{}, followers: map[string]cost{}, window: after.at.Sub(before.at),
		trims:        per(after.tap.trims - before.tap.trims),
		eventTrims:   per(after.tap.eventTrims - before.tap.eventTrims),
		cancels:      per(after.tap.cancels - before.tap.cancels),
		keeperPurges: per(after.tap.keeperPurges - before.tap.keeperPurges),
		keeperIntake: after.tap.kept[keeperIntake(e)] - before.tap.kept[keeperIntake(e)]}
	for name, a := range after.streams {
		b := before.streams[name]
		r.keeper += per(a.kept - b.kept)
		stored := a.lastSeq - b.lastSeq - a.kept + b.kept
		removed := stored - (a.msgs - a.keepMsgs) + (b.msgs - b.keepMsgs)
		role, known := roles[name]
		switch {
		case !known:
			role = name // nothing of these events should go there
		case role == "":
			continue
		}
		costs := r.hot
		if isFollower[role] {
			costs = r.followers
		}
		c := costs[role]
		costs[role] = cost{c.Stored + per(stored), c.Removed + per(removed)}
	}
	return r
}

// callBack posts the signed webhook that completes the event id and
// fails the test unless it is applied.
func callBack(t *testing.T, e *servicetest.Env, url, id string) {
	t.Helper()
	body := fmt.Sprintf(`{"event_id":%q,"status":"approved"}`, id)
	var h []string
	for k, v := range webhook.Headers(writesSecret, "msg_"+id, time.Now(), []byte(body)) {
		h = append(h, k, v[0])
	}
	resp := servicetest.Send(t, e.Ctx(), http.DefaultClient, http.MethodPost, url, "", body, h...)
	if resp.Status != http.StatusOK || !strings.Contains(string(resp.Body), `"applied"`) {
		t.Fatalf("webhook for %s: want 200 applied, got %d %s", id, resp.Status, resp.Body)
	}
}

// keeperIntake is the keeper's subject in INTAKE.
func keeperIntake(e *servicetest.Env) string { return e.Subj.Prefix + ".keep.intake" }

// tap counts, from the client side, the writes that are not any one
// event's: the keeper's messages (by subject) and the purge requests.
type tap struct {
	mu     sync.Mutex
	counts tapCounts
	latest string            // the keeper subject last published to
	stream map[string]string // keeper subject -> its stream
	last   string            // the keeper subject published to last in a round
	keep   map[string]bool
}

type tapCounts struct {
	kept                                     map[string]int64 // keeper messages by subject
	trims, eventTrims, cancels, keeperPurges int64
}

func wiretap(t *testing.T, e *servicetest.Env) *tap {
	tp := &tap{stream: map[string]string{}, keep: map[string]bool{}, counts: tapCounts{kept: map[string]int64{}}}
	// A new store has no work queue, so no keeper message (pkg/keeper).
	for _, tg := range keeper.Targets(e.Ctx(), e.JS, e.Subj) {
		tp.stream[tg.Subject] = tg.Stream
		tp.last = tg.Subject // pkg/keeper's order: INTAKE, then each partition
	}
	for subj := range tp.stream {
		tp.keep[subj] = true
		if _, err := e.NC.Subscribe(subj, func(m *nats.Msg) {
			tp.mu.Lock()
			tp.counts.kept[m.Subject]++
			tp.latest = m.Subject
			tp.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.NC.Subscribe("$JS.API.STREAM.PURGE.*", func(m *nats.Msg) {
		var req struct {
			Filter string `json:"filter"`
			Seq    uint64 `json:"seq"`
		}
		_ = json.Unmarshal(m.Data, &req)
		tp.mu.Lock()
		defer tp.mu.Unlock()
		switch {
		case tp.keep[req.Filter]:
			tp.counts.keeperPurges++
		case req.Filter == "":
			tp.counts.trims++
		case strings.Contains(req.Filter, ".sched."):
			tp.counts.cancels++
		default: // an account's dispatch subjects, or a partition's timers
			tp.counts.eventTrims++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return tp
}

// betweenRounds waits for the end of a round of keeper messages (the
// round's last one, the last partition's), so that the next second has
// none.
func (tp *tap) betweenRounds(t *testing.T) {
	t.Helper()
	if tp.last == "" {
		return // no keeper message at all
	}
	tp.mu.Lock()
	start := maps.Clone(tp.counts.kept)
	tp.mu.Unlock()
	natstest.Eventually(t, 5*time.Second, func() bool {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return tp.counts.kept[tp.last] > start[tp.last] && tp.latest == tp.last
	}, "a full round of keeper messages")
}

// streamCount is one stream at one moment: its last sequence and message
// count, of those the keeper's (on its keeper subject), and how many
// keeper messages were published to it so far.
type streamCount struct{ lastSeq, msgs, keepMsgs, kept int64 }

type counted struct {
	at      time.Time
	streams map[string]streamCount
	tap     tapCounts
}

// snapshot counts every stream between two rounds of keeper messages.
func snapshot(t *testing.T, e *servicetest.Env, tp *tap) counted {
	t.Helper()
	tp.betweenRounds(t)
	c := counted{at: time.Now(), streams: map[string]streamCount{}}
	lister := e.JS.ListStreams(e.Ctx())
	for info := range lister.Info() {
		c.streams[info.Config.Name] = streamCount{lastSeq: int64(info.State.LastSeq), msgs: int64(info.State.Msgs)}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	c.tap = tp.counts
	c.tap.kept = maps.Clone(tp.counts.kept)
	for subj, name := range tp.stream {
		// One read, so that a keeper purge cannot fall between the
		// stream's counts and its keeper subject's.
		st, err := e.JS.Stream(e.Ctx(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(e.Ctx(), jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		c.streams[name] = streamCount{lastSeq: int64(info.State.LastSeq), msgs: int64(info.State.Msgs),
			keepMsgs: int64(info.State.Subjects[subj]), kept: tp.counts.kept[subj]}
	}
	return c
}

// settled waits until nothing of the events is left to settle: INTAKE
// trimmed, no message or schedule left in EVENTS (acks are sent without
// waiting), and the followers have read every revision.
func settled(t *testing.T, e *servicetest.Env) {
	t.Helper()
	intake := e.Subj.Stream(names.StreamIntake)
	left := func() string {
		if n := e.SubjectMsgs(intake, e.Subj.IntakeAll()); n > 0 {
			return fmt.Sprintf("%d in INTAKE", n)
		}
		for p := range e.Subj.Parts() {
			ev := e.Subj.EventsStreamOf(p)
			for _, f := range []string{e.Subj.EventsIn(p), e.Subj.SchedulesIn(p), e.Subj.TimersIn(p)} {
				if n := e.SubjectMsgs(ev, f); n > 0 {
					return fmt.Sprintf("%d on %s", n, f)
				}
			}
			// The followers' one feed (search index and audit archive).
			ci := e.ConsumerInfo("KV_"+e.Subj.StateBucketOf(p), "deadletter-feed")
			if ci.NumPending+uint64(ci.NumAckPending) > 0 {
				return fmt.Sprintf("the followers behind by %d", ci.NumPending+uint64(ci.NumAckPending))
			}
		}
		return ""
	}
	var why string
	natstest.Eventually(t, 30*time.Second, func() bool { why = left(); return why == "" }, "everything settled; left: %v", natstest.Lazy(func() any { return why }))
}
