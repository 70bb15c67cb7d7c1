package deadletter_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
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
	natstest.Eventually(t, 5*time.Minute, func() bool { return e.p.Applied() >= n }, "every replayed event to be delivered (applied %d)", e.p.Applied())
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
