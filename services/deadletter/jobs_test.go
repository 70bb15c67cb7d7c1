package deadletter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/accounts"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter"
)

// Replaying everything matching a filter: 10,000 dead events of one
// account are replayed by a durable job while 300 of another account are
// left alone. Half-way the replica running the job stops and another one
// takes it over from its saved cursor. The job reports progress as it
// goes, ends done with every event counted, every event reaches done, and
// the provider applies each effect exactly once.
func TestBulkReplayOf10000WithProgressAndNoDuplicates(t *testing.T) {
	t.Parallel()
	const n = 10000
	e := setup(t, "")
	e.startDispatcher(nil)
	e.seed(n, "acme", "order.create", dead.ReasonExhausted, "transient", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.seed(300, "globex", "order.create", dead.ReasonExhausted, "transient", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, n)
	e.waitListed(state.Dead, url.Values{"account": {"globex"}}, 300)

	var rep ops.ReplayReply
	err := e.callWith(operatorKeys["hana"], ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme", Kind: "order.create"}, Reason: "erp fixed", RatePerSecond: 5000}, &rep)
	if err != nil || rep.JobID == "" {
		t.Fatalf("want a job, got %+v %v", rep, err)
	}
	var seen []int
	var job ops.JobReply
	handedOver := false
	natstest.Eventually(t, 5*time.Minute, func() bool {
		if err := e.call(ops.DeadJob, ops.JobRequest{JobID: rep.JobID}, &job); err != nil {
			return false
		}
		if len(seen) == 0 || seen[len(seen)-1] != job.Done {
			seen = append(seen, job.Done)
		}
		if !handedOver && job.Done >= n/3 {
			handedOver = true
			stopCtx := servicetest.Context(t, 2*time.Minute)
			if err := e.dl.Stop(stopCtx); err != nil {
				t.Errorf("stopping the first replica: %v", err)
			}
			e.startDeadletter("replica-2")
		}
		return job.State != ops.JobRunning
	}, "the replay job to end (last progress %+v)", job)
	took := job.UpdatedAt.Sub(job.CreatedAt)
	t.Logf("replay job: %d replayed, %d skipped in %v (%.0f replays/s); progress seen: %d distinct values", job.Done, job.Skipped, took, float64(job.Done)/took.Seconds(), len(seen))
	if job.State != ops.JobDone || job.Total != n || job.Failed != 0 || job.Done+job.Skipped < n || job.Done > n || job.Actor != "operator:hana" {
		t.Fatalf("job: want done with %d replayed or skipped, none failed, got %+v", n, job)
	}
	if !handedOver {
		t.Fatal("the job ended before the hand-over to the second replica")
	}
	if len(seen) < 3 {
		t.Fatalf("want progress reported along the way, saw only %v", seen)
	}
	natstest.Eventually(t, 5*time.Minute, func() bool { return e.p.Applied() >= n }, "every replayed event to be delivered (applied %v)", natstest.Lazy(func() any { return e.p.Applied() }))
	if d := e.p.DuplicateEffects(); len(d) > 0 {
		t.Fatalf("effects applied more than once: %d keys, e.g. %v", len(d), d)
	}
	if a := e.p.Applied(); a != n {
		t.Fatalf("want exactly %d effects, got %d", n, a)
	}
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 0)
	if got := e.listed(state.Dead, url.Values{"account": {"globex"}}); got != 300 {
		t.Fatalf("the other account's dead events must stay: want 300, got %d", got)
	}
}

// A replay job outlives the replica running it: two deadletter replicas,
// each its own process, and the one that took a job of 300 dead events
// (at 20 a second, pages of 100) is killed with SIGKILL in the middle of
// its second page. Only then does a dispatcher start: every fifth event
// is refused again by the target and goes back to DEAD before the
// takeover. The other takes the job over once the dead replica's
// lease lapses. The job ends done with each event counted once as
// replayed: those the dead replica replayed after its last save are
// counted without a second replay, even the ones back in DEAD already.
// The provider applies each accepted effect once, and another account's
// dead events stay.
func TestReplayJobSurvivesItsReplicaKilled(t *testing.T) {
	t.Parallel()
	const n = 300
	e := setup(t, "")
	if err := e.dl.Stop(servicetest.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	bin := natstest.Binary(t, "./cmd/tenaz-deadletter")
	yaml := e.yaml + "\nhttp: {addr: \"127.0.0.1:0\"}\n"
	procs := []*natstest.Proc{
		natstest.StartProc(t, "dl-1", bin, yaml, "NATS_URL="+e.Srv.ClientURL(), "LOG_FORMAT=json"),
		natstest.StartProc(t, "dl-2", bin, yaml, "NATS_URL="+e.Srv.ClientURL(), "LOG_FORMAT=json"),
	}
	refused := func(i int) bool { return i%5 == 0 }
	ids := e.seed(n, "acme", "order.create", dead.ReasonExhausted, "transient", func(i int) string { return fmt.Sprintf(`{"n":%d,"reject":%t}`, i, refused(i)) })
	e.seed(50, "globex", "order.create", dead.ReasonExhausted, "transient", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, n)
	enqueued := e.EventMsgs() // each replay adds one, which no dispatcher takes yet

	var rep ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme"}, Reason: "erp fixed", RatePerSecond: 20}, &rep); err != nil || rep.JobID == "" {
		t.Fatalf("want a job, got %+v %v", rep, err)
	}
	// The replica's name, names.Instance(), starts with its host and pid.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	runs := func(p *natstest.Proc, j storedJob) bool {
		return strings.HasPrefix(j.Owner, fmt.Sprintf("%s-%d-", host, p.Pid()))
	}
	// Mid-page: replays the job's last save does not count; the page has
	// seconds left to run.
	var saved storedJob
	replayed := func() int { return int(e.EventMsgs() - enqueued) }
	natstest.Eventually(t, time.Minute, func() bool {
		saved = e.storedJob(rep.JobID)
		return saved.Done >= 100 && replayed() >= saved.Done+20
	}, "the first page replayed and the second begun (last %+v)", &saved)
	victim := procs[0]
	if !runs(victim, saved) {
		victim = procs[1]
	}
	if !runs(victim, saved) {
		t.Fatalf("want the job held by one of the replicas, held by %q", saved.Owner)
	}
	victim.Kill(t)
	killed, atKill, replayedAtKill := time.Now(), e.storedJob(rep.JobID), replayed()
	if atKill.State != ops.JobRunning {
		t.Fatalf("the job ended before its replica was killed (%+v): this machine was too slow for the test's timing", atKill.JobReply)
	}
	e.startDispatcher(nil)

	// deadletter.Options.JobLease's default, and the survivor's poll.
	const lease = 30 * time.Second
	var took time.Duration
	var job ops.JobReply
	natstest.Eventually(t, lease+30*time.Second, func() bool {
		if j := e.storedJob(rep.JobID); took == 0 && j.Owner != "" && !runs(victim, j) {
			took = time.Since(killed)
		}
		return e.call(ops.DeadJob, ops.JobRequest{JobID: rep.JobID}, &job) == nil && job.State != ops.JobRunning
	}, "the job to end after its replica was killed (last %+v)", &job)
	t.Logf("killed %s with %d replayed as saved, %d of its page pending, %d replays made; taken over after %v", victim.Name, atKill.Done, len(atKill.Pending), replayedAtKill, took)
	if took == 0 || took > lease+5*time.Second {
		t.Errorf("want the job taken over by the other replica within its lease (%v) and a poll, took %v", lease, took)
	}
	if job.State != ops.JobDone || job.Done != n || job.Skipped != 0 || job.Failed != 0 {
		t.Fatalf("job: want done with each of %d events replayed, got %+v", n, job)
	}
	accepted := 0
	for i, id := range ids {
		rec, _ := e.Lookup(id)
		replays := 0
		for _, h := range rec.History {
			if h.Action == state.Replay {
				replays++
			}
		}
		if replays != 1 {
			t.Fatalf("%s (%d): want it replayed once, got %d replays", id, i, replays)
		}
		if !refused(i) {
			accepted++
		}
	}
	natstest.Eventually(t, time.Minute, func() bool { return e.p.Applied() >= accepted }, "every accepted replay delivered (applied %v of %d)", natstest.Lazy(func() any { return e.p.Applied() }), accepted)
	if d := e.p.DuplicateEffects(); len(d) > 0 || e.p.Applied() != accepted {
		t.Fatalf("want each of %d effects applied once, got %d applied, duplicated: %v", accepted, e.p.Applied(), d)
	}
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, n-accepted) // each refused back once
	if got := e.listed(state.Dead, url.Values{"account": {"globex"}}); got != 50 {
		t.Fatalf("the other account's dead events must stay: want 50, got %d", got)
	}
}

// A runner that died between a replay's transition and its EVENTS
// message (a SIGKILL can land there) left the event pending with nothing
// to deliver it. The replica that takes the job over finds the job's mark
// in its history, counts it as replayed, and publishes its message: it is
// delivered without waiting for the reconciler (none runs here).
func TestReplayJobTakenOverPublishesWhatItsPredecessorLeft(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	ids := e.seed(3, "acme", "order.create", dead.ReasonExhausted, "transient", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 3)
	var list ops.ListReply
	if st := e.get("/v1/dead?account=acme", &list); st != http.StatusOK || len(list.Items) != 3 {
		t.Fatalf("want acme's 3 dead events listed, got %d %+v", st, list)
	}
	if err := e.dl.Stop(servicetest.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The dead runner's half-made replay of the first event: the record
	// says replayed, with the job's mark; no EVENTS message, entry kept.
	const jobID = "job_00000000000000aa"
	rec, rev, err := e.St.Get(e.Ctx(), "acme", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := state.Apply(rec, state.Action{Name: state.Replay, Actor: "operator:alice", Detail: "erp fixed (" + jobID + ")"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.St.Write(e.Ctx(), next, rev); err != nil {
		t.Fatal(err)
	}
	var pending []map[string]any
	lowest := list.Items[0].Seq
	for _, it := range list.Items {
		pending = append(pending, map[string]any{"seq": it.Seq, "id": it.ID, "account": it.Account})
		lowest = min(lowest, it.Seq)
	}
	j, _ := json.Marshal(map[string]any{"job_id": jobID, "total": 3, "state": ops.JobRunning, "filter": map[string]string{"account": "acme"},
		"actor": "operator:alice", "reason": "erp fixed", "rate_per_second": 100, "created_at": time.Now().UTC(), "updated_at": time.Now().UTC(),
		"cursor": fmt.Sprint(lowest), "pending": pending, "owner": "dead-replica", "lease_until": time.Now().Add(-time.Second).UTC()})
	kv, err := e.JS.KeyValue(e.Ctx(), accounts.BucketOps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(e.Ctx(), "job."+jobID, j); err != nil {
		t.Fatal(err)
	}

	e.startDispatcher(nil)
	e.startDeadletterWith(deadletter.Options{Instance: "successor"})
	var job ops.JobReply
	natstest.Eventually(t, time.Minute, func() bool {
		return e.call(ops.DeadJob, ops.JobRequest{JobID: jobID}, &job) == nil && job.State != ops.JobRunning
	}, "the job to end (last %+v)", &job)
	if job.State != ops.JobDone || job.Done != 3 || job.Skipped != 0 {
		t.Fatalf("job: want done with 3 replayed, got %+v", job)
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return e.p.Applied() >= 3 }, "all 3 delivered (applied %v)", natstest.Lazy(func() any { return e.p.Applied() }))
	if d := e.p.DuplicateEffects(); len(d) > 0 || e.p.Applied() != 3 {
		t.Fatalf("want each of 3 effects applied once, got %d, duplicated: %v", e.p.Applied(), d)
	}
	// The dead runner left the first event's item too: the list must not
	// show an event that was delivered as dead.
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 0)
}

// storedJob is a replay job as stored, with its page in flight and owner.
type storedJob struct {
	ops.JobReply
	Pending []json.RawMessage `json:"pending"`
	Owner   string            `json:"owner"`
}

// storedJob reads job id from the bucket (zero when it cannot).
func (e *env) storedJob(id string) (j storedJob) {
	kv, err := e.JS.KeyValue(e.Ctx(), accounts.BucketOps)
	if err != nil {
		return j
	}
	if en, err := kv.Get(e.Ctx(), "job."+id); err == nil {
		_ = json.Unmarshal(en.Value(), &j)
	}
	return j
}

// A job slower than its lease keeps it: two replicas whose leases last a
// second each, a job of 8 events at 2 a second (4 s, one page). The
// replica running it renews its lease as it goes, so the other never
// takes the page over beside it: each event is replayed once (its replay
// fails back into DEAD, where a second runner would find it again), the
// target is called once per event, and the job counts all 8. Renewed only
// with each page's progress, as it was, the lease lapsed after a second.
func TestSlowReplayJobKeepsItsLease(t *testing.T) {
	t.Parallel()
	const n = 8
	e := setup(t, "")
	if err := e.dl.Stop(servicetest.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lease-a", "lease-b"} {
		e.startDeadletterWith(deadletter.Options{Instance: name, JobLease: time.Second})
	}
	e.startDispatcher(nil)
	ids := e.seed(n, "acme", "order.create", dead.ReasonPermanent, "permanent", func(i int) string { return fmt.Sprintf(`{"n":%d,"reject":true}`, i) })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, n)

	var rep ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme"}, Reason: "slow", RatePerSecond: 2}, &rep); err != nil || rep.JobID == "" {
		t.Fatalf("want a job, got %+v %v", rep, err)
	}
	var job ops.JobReply
	natstest.Eventually(t, time.Minute, func() bool {
		return e.call(ops.DeadJob, ops.JobRequest{JobID: rep.JobID}, &job) == nil && job.State != ops.JobRunning
	}, "the job to end (last %+v)", &job)
	if job.State != ops.JobDone || job.Done != n || job.Skipped != 0 || job.Failed != 0 {
		t.Errorf("job: want done with %d replayed, got %+v", n, job)
	}
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, n) // each failed back
	for _, id := range ids {
		replays := 0
		if rec, ok := e.Lookup(id); ok {
			for _, h := range rec.History {
				if h.Action == state.Replay {
					replays++
				}
			}
		}
		if calls := len(e.p.CallsFor(id)); replays != 1 || calls != 1 {
			t.Errorf("%s: want 1 replay and 1 call, got %d and %d", id, replays, calls)
		}
	}
}

// A slow job does not hold up the next one on its replica: with one
// replica, a job at one replay every 1,000 s is running when another
// account's job at the full rate is created, and the second ends while
// the first still runs. Run one at a time, as they were, the second
// waited for the first to end, here for hours.
func TestSlowReplayJobDoesNotHoldUpAnother(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.seed(5, "acme", "order.create", dead.ReasonPermanent, "permanent", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.seed(3, "globex", "order.create", dead.ReasonPermanent, "permanent", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 5)
	e.waitListed(state.Dead, url.Values{"account": {"globex"}}, 3)
	var slow, fast ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme"}, Reason: "slow", RatePerSecond: 0.001}, &slow); err != nil {
		t.Fatal(err)
	}
	var job ops.JobReply
	natstest.Eventually(t, 30*time.Second, func() bool {
		return e.call(ops.DeadJob, ops.JobRequest{JobID: slow.JobID}, &job) == nil && job.Done == 1
	}, "the slow job to replay its first event (last %+v)", &job)
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "globex"}, Reason: "fast", RatePerSecond: 100}, &fast); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, func() bool {
		return e.call(ops.DeadJob, ops.JobRequest{JobID: fast.JobID}, &job) == nil && job.State == ops.JobDone
	}, "the fast job to end beside the slow one (last %+v)", &job)
	if job.Done != 3 {
		t.Errorf("fast job: want 3 replayed, got %+v", job)
	}
	if err := e.call(ops.DeadJob, ops.JobRequest{JobID: slow.JobID}, &job); err != nil || job.State != ops.JobRunning {
		t.Errorf("slow job: want it still running, got %+v %v", job, err)
	}
}

// A job's filter is checked as the list and a single replay check it,
// before the job is made: a page's cursor or size (the job pages itself)
// and the fallback stage of a kind that has none are refused, not
// ignored or failed event by event.
func TestReplayJobFilterIsChecked(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	for _, c := range []struct {
		name string
		req  ops.ReplayRequest
		code string
	}{
		{"cursor", ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme", Cursor: "garbage"}, Reason: "x"}, "invalid_cursor"},
		{"limit", ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme", Limit: -5}, Reason: "x"}, "invalid_limit"},
		{"no fallback", ops.ReplayRequest{Filter: &ops.ListRequest{Kind: "order.create"}, Stage: state.StageFallback, Reason: "x"}, "no_fallback"},
	} {
		var rep ops.ReplayReply
		err := e.call(ops.DeadReplay, c.req, &rep)
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Code != c.code || rep.JobID != "" {
			t.Errorf("%s: want 400 %s and no job, got %v %+v", c.name, c.code, err, rep)
		}
	}
}

// An operator stops a running job: the answer says it is cancelled, by
// whom and why; its runner, which watches the job, leaves it (saying so)
// within seconds, not at its next lease renewal (every 10 s of a 30 s
// lease), without writing over the cancel; no runner takes it up again,
// and what it replayed stays replayed. A second cancel is 409, a cancel
// without a reason 400, an unknown job 404.
func TestCancelReplayJob(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	if err := e.dl.Stop(servicetest.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	var logs servicetest.LogBuffer
	log := zerolog.New(&logs)
	e.startDeadletterWith(deadletter.Options{Instance: "runner", Logger: &log})
	e.seed(6, "acme", "order.create", dead.ReasonPermanent, "permanent", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 6)
	var rep ops.ReplayReply
	if err := e.call(ops.DeadReplay, ops.ReplayRequest{Filter: &ops.ListRequest{Account: "acme"}, Reason: "wrong filter", RatePerSecond: 0.2}, &rep); err != nil {
		t.Fatal(err)
	}
	var job ops.JobReply
	natstest.Eventually(t, 30*time.Second, func() bool {
		return e.call(ops.DeadJob, ops.JobRequest{JobID: rep.JobID}, &job) == nil && job.Done >= 1
	}, "the job to replay its first event (last %+v)", &job)

	var refused ops.JobReply
	err := e.call(ops.DeadJobCancel, ops.JobCancelRequest{JobID: rep.JobID}, &refused)
	var oe *ops.Error
	if !errors.As(err, &oe) || oe.Code != "reason_required" {
		t.Fatalf("a cancel without a reason: want 400 reason_required, got %v", err)
	}
	var cancelled ops.JobReply
	if err := e.call(ops.DeadJobCancel, ops.JobCancelRequest{JobID: rep.JobID, Reason: "wrong account"}, &cancelled); err != nil {
		t.Fatal(err)
	}
	if cancelled.State != ops.JobCancelled || cancelled.CancelledBy != "operator:alice" || cancelled.CancelReason != "wrong account" {
		t.Fatalf("want the job cancelled by operator:alice for \"wrong account\", got %+v", cancelled)
	}
	natstest.Eventually(t, 3*time.Second, func() bool { return strings.Contains(logs.String(), "leaving it") },
		"the runner to leave the cancelled job")
	if err := e.call(ops.DeadJob, ops.JobRequest{JobID: rep.JobID}, &job); err != nil || job.State != ops.JobCancelled || job.CancelledBy != "operator:alice" {
		t.Fatalf("once its runner left: want the job still cancelled, got %+v %v", job, err)
	}
	if left := e.listed(state.Dead, url.Values{"account": {"acme"}}); left < 6-job.Done-1 || left == 0 {
		t.Errorf("want the job stopped with most events still dead, got %d of 6 dead after %d replayed", left, job.Done)
	}
	err = e.call(ops.DeadJobCancel, ops.JobCancelRequest{JobID: rep.JobID, Reason: "again"}, &refused)
	if !errors.As(err, &oe) || oe.Status != http.StatusConflict || oe.Code != "not_running" {
		t.Errorf("a second cancel: want 409 not_running, got %v", err)
	}
	err = e.call(ops.DeadJobCancel, ops.JobCancelRequest{JobID: "job_0000000000000000", Reason: "x"}, &refused)
	if !errors.As(err, &oe) || oe.Status != http.StatusNotFound {
		t.Errorf("an unknown job: want 404, got %v", err)
	}
}

// A job replays the DEAD entries it listed, not an event's later death:
// its page lists X's entry; X is replayed by hand and dies again (a new
// entry); the job's turn at X skips it. (The job replayed whatever entry
// the event had by then, the newer death too.)
func TestReplayJobSkipsANewerDeath(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.startDispatcher(nil)
	ids := e.seed(1, "acme", "order.create", dead.ReasonPermanent, "permanent", func(int) string { return `{"n":1,"reject":true}` })
	x := ids[0]
	e.waitListed(state.Dead, url.Values{"account": {"acme"}}, 1)
	var list ops.ListReply
	if st := e.get("/v1/dead?account=acme", &list); st != http.StatusOK || len(list.Items) != 1 {
		t.Fatalf("want X listed, got %d %+v", st, list)
	}
	listed := list.Items[0].Seq

	// Replayed by hand, X dies again: a newer entry replaces the one listed.
	if st, body := e.post("/v1/dead/replay", ops.ReplayRequest{IDs: []string{x}, Reason: "by hand"}, nil); st != http.StatusOK {
		t.Fatalf("replay by hand: want 200, got %d %s", st, body)
	}
	natstest.Eventually(t, time.Minute, func() bool {
		var l ops.ListReply
		return e.get("/v1/dead?account=acme", &l) == http.StatusOK && len(l.Items) == 1 && l.Items[0].Seq > listed
	}, "X dead again in a newer entry than %d", listed)

	// A job whose page listed X's first entry (as a job started before
	// the replay by hand would have), free for the replica to take.
	const jobID = "job_00000000000000bb"
	j, _ := json.Marshal(map[string]any{"job_id": jobID, "total": 1, "state": ops.JobRunning, "filter": map[string]string{"account": "acme"},
		"actor": "operator:alice", "reason": "erp fixed", "rate_per_second": 100, "created_at": time.Now().UTC(), "updated_at": time.Now().UTC(),
		"cursor": fmt.Sprint(listed), "pending": []map[string]any{{"seq": listed, "id": x, "account": "acme"}}})
	kv, err := e.JS.KeyValue(e.Ctx(), accounts.BucketOps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(e.Ctx(), "job."+jobID, j); err != nil {
		t.Fatal(err)
	}
	var job ops.JobReply
	natstest.Eventually(t, time.Minute, func() bool {
		return e.call(ops.DeadJob, ops.JobRequest{JobID: jobID}, &job) == nil && job.State != ops.JobRunning
	}, "the job to end (last %+v)", &job)
	if job.State != ops.JobDone || job.Done != 0 || job.Skipped != 1 || job.Failed != 0 {
		t.Fatalf("job: want done with X skipped, got %+v", job)
	}
	rec, _ := e.Lookup(x)
	replays := 0
	for _, h := range rec.History {
		if h.Action == state.Replay {
			replays++
		}
	}
	if rec.Status != state.Dead || replays != 1 || len(e.p.CallsFor(x)) != 1 {
		t.Fatalf("X: want dead, replayed once (by hand) and called once, got %s, %d replays, %d calls", rec.Status, replays, len(e.p.CallsFor(x)))
	}
}

// A job id that is not a job's (job_ and 16 hex digits) is 400
// invalid_job on the API, the screen and NATS, an unknown one 404: one a
// KV key cannot hold (a+b) was answered 500 "invalid key".
func TestJobIDIsChecked(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	send := func(method, path, body string) servicetest.Response {
		return servicetest.Send(t, e.Ctx(), http.DefaultClient, method, e.http.URL+path, "", body)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/v1/dead/jobs/a+b", "", 400},
		{"GET", "/v1/dead/jobs/job_0123456789ABCDEF", "", 400},
		{"GET", "/v1/dead/jobs/job_0123456789abcdef0", "", 400},
		{"POST", "/v1/dead/jobs/a+b/cancel", `{"reason":"x"}`, 400},
		{"GET", "/ui/jobs/a+b", "", 400},
		{"GET", "/v1/dead/jobs/job_0123456789abcdef", "", 404},
		{"GET", "/ui/jobs/job_0123456789abcdef", "", 404},
	} {
		r := send(c.method, c.path, c.body)
		if r.Status != c.status || c.status == 400 && !strings.Contains(string(r.Body), "job_ and 16 hex digits") {
			t.Errorf("%s %s: want %d saying what a job id is, got %d %.200s", c.method, c.path, c.status, r.Status, r.Body)
		}
	}
	var oe *ops.Error
	if err := e.call(ops.DeadJob, ops.JobRequest{JobID: "a+b"}, nil); !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Code != "invalid_job" {
		t.Errorf("dead.job a+b: want 400 invalid_job, got %v", err)
	}
}
