package deadletter

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// jobRun is one replica's run of a replay job, from taking it to leaving
// it. Its steps: next lists a page and saves it as pending; page replays
// what is pending, and settle replays and counts one entry; save writes
// the progress and the lease; renew keeps the lease while a page runs;
// watch ends the run at once when the job stops being this replica's (an
// operator cancelled it, or another replica took it over).
type jobRun struct {
	s   *Service
	log zerolog.Logger
	rl  ratelimiter.RateLimiter[any]
	// inherited: the pending page was another runner's, which may have
	// replayed some of it before it died.
	inherited bool

	mu  sync.Mutex // j and rev: the page's entries, the renewals and the saves write them
	j   job
	rev uint64
}

// runJob runs job j, taken at revision rev, until no page is left, the
// service stops, or the job is no longer this replica's.
func (s *Service) runJob(ctx context.Context, j job, rev uint64) {
	r := &jobRun{s: s, log: s.log.With().Str("job", j.JobID).Logger(), inherited: len(j.Pending) > 0, j: j, rev: rev,
		rl: ratelimiter.NewSmoothWithMaxRate[any](time.Duration(float64(time.Second) / j.RatePerSecond))}
	// ours ends with ctx, or when the job stops being this replica's.
	ours, lost := context.WithCancel(ctx)
	defer lost()
	go r.watch(ours, lost)
	for {
		if ctx.Err() != nil {
			r.save(true)
			return
		}
		if len(r.j.Pending) == 0 && !r.next() {
			return
		}
		held := r.page(ctx, ours)
		r.inherited = false
		switch {
		case ctx.Err() != nil:
			r.save(true) // what is left pending is run after the restart
			return
		case !held || ours.Err() != nil:
			return // cancelled or taken over: the job is not ours to write
		case !r.save(false):
			return
		}
	}
}

// next lists the job's next page and saves it as pending, with the
// cursor past it, before any of it is replayed. It reports whether there
// is a page to run: none left (the job is done), a failed list, or a
// failed save end the run.
func (r *jobRun) next() bool {
	f := r.j.Filter
	f.Cursor, f.Limit = r.j.Cursor, jobPage
	page, err := r.s.x.List(state.Dead, f)
	switch {
	case err != nil:
		r.j.State, r.j.Error = ops.JobFailed, err.Error()
		r.save(true)
		return false
	case len(page.Items) == 0:
		r.j.State = ops.JobDone
		if r.save(true) {
			r.log.Info().Int("done", r.j.Done).Int("skipped", r.j.Skipped).Int("failed", r.j.Failed).Msg("replay job finished")
		}
		return false
	}
	for _, it := range page.Items {
		r.j.Pending = append(r.j.Pending, pendingEntry{Seq: it.Seq, ID: it.ID, Account: it.Account})
	}
	r.j.Cursor = strconv.FormatUint(page.Items[len(page.Items)-1].Seq, 10)
	return r.save(false)
}

// page replays the pending entries at the job's rate, jobWorkers at a
// time, and reports whether the lease held. It stops taking entries when
// ours ends; a replay in flight finishes.
func (r *jobRun) page(ctx, ours context.Context) bool {
	pageCtx, stopPage := context.WithCancel(ours)
	renewed := r.renew(pageCtx, stopPage)
	var wg sync.WaitGroup
	sem := make(chan struct{}, jobWorkers)
	r.mu.Lock()
	pending := slices.Clone(r.j.Pending)
	r.mu.Unlock()
	for _, e := range pending {
		if err := r.rl.AcquirePermit(pageCtx); err != nil {
			break // stopping, cancelled or taken over
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.settle(ctx, e)
		}()
	}
	wg.Wait()
	stopPage()
	return <-renewed
}

// settle replays one pending entry and counts it; it is no longer
// pending. An inherited entry the job replayed already counts as
// replayed, without a second replay.
func (r *jobRun) settle(ctx context.Context, e pendingEntry) {
	j := &r.j
	again := r.inherited && r.replayedBy(ctx, e)
	var err error
	switch {
	case again:
		r.s.finishReplay(ctx, e.Account, e.ID, e.Seq)
	case e.ID == "":
		err = fail(http.StatusConflict, "not_parked", "entry %d has no event to replay", e.Seq)
	default:
		err = r.replayListed(ctx, e)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		return // stopping: the entry stays pending
	}
	j.Pending = slices.DeleteFunc(j.Pending, func(p pendingEntry) bool { return p.Seq == e.Seq })
	if err == nil {
		j.Done++
		return
	}
	status, code, msg := statusOf(err)
	if code == "not_parked" || code == "not_found" {
		j.Skipped++
		return
	}
	j.Failed++
	j.LastErrors = append(j.LastErrors, ops.ItemError{ID: e.ID, Code: status, Message: msg})
	if len(j.LastErrors) > maxJobError {
		j.LastErrors = j.LastErrors[len(j.LastErrors)-maxJobError:]
	}
}

// replayListed replays the DEAD entry the job listed, and no other: an
// event replayed by hand since, which died again, has a newer entry that
// was not in the list when the job started, and is skipped (not_found).
func (r *jobRun) replayListed(ctx context.Context, e pendingEntry) error {
	it, _, ok := r.s.x.Get(e.ID)
	if !ok || it.Seq != e.Seq {
		return fail(http.StatusNotFound, "not_found", "the DEAD entry %d of event %s the job listed is gone", e.Seq, e.ID)
	}
	return r.s.replayItem(ctx, it, nil, r.j.Stage, r.j.Actor, strings.TrimSpace(r.j.Reason+" "+jobMark(r.j.JobID)))
}

// replayedBy reports whether the job replayed the entry's event already:
// its history has a replay with the job's mark.
func (r *jobRun) replayedBy(ctx context.Context, e pendingEntry) bool {
	if e.ID == "" {
		return false
	}
	rec, _, err := r.s.st.Get(ctx, e.Account, e.ID)
	if err != nil {
		return false
	}
	for _, h := range rec.History {
		if h.Action == state.Replay && strings.HasSuffix(h.Detail, jobMark(r.j.JobID)) {
			return true
		}
	}
	return false
}

// save writes the job, its lease renewed (or released), by
// compare-and-set; false when it is no longer this replica's (cancelled,
// taken over) or could not be saved.
func (r *jobRun) save(release bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.s.now()
	r.j.UpdatedAt, r.j.LeaseUntil = now.UTC(), now.Add(r.s.o.JobLease)
	if release {
		r.j.Owner, r.j.LeaseUntil = "", time.Time{}
	}
	val, _ := json.Marshal(r.j)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := r.s.kvOps.Update(ctx, jobKey(r.j.JobID), val, r.rev)
	if err != nil {
		r.log.Warn().Err(err).Msg("replay job taken over or not saved; leaving it")
		return false
	}
	r.rev = rev
	return true
}

// renew saves the job (its counts so far, its lease renewed) three times
// a lease until ctx ends, so that no other replica takes over a page
// that runs longer than a lease. If a save fails (the job was taken over
// after all) it stops the page. Its channel says, once ctx has ended,
// whether the lease held.
func (r *jobRun) renew(ctx context.Context, stopPage func()) <-chan bool {
	held := make(chan bool, 1)
	go func() {
		t := time.NewTicker(r.s.o.JobLease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				held <- true
				return
			case <-t.C:
			}
			if !r.save(false) {
				stopPage()
				held <- false
				return
			}
		}
	}()
	return held
}

// watch ends the run (lost) as soon as the stored job is no longer this
// replica's running job, so that a cancel stops it at once rather than
// at its next renewal. A replay in flight finishes. If the watch cannot
// start, the renewals still find out.
func (r *jobRun) watch(ours context.Context, lost context.CancelFunc) {
	w, err := r.s.kvOps.Watch(ours, jobKey(r.j.JobID), jetstream.UpdatesOnly())
	if err != nil {
		return
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ours.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			var j job
			if e != nil && (e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &j) != nil || j.State != ops.JobRunning || j.Owner != r.s.o.Instance) {
				r.log.Info().Str("state", string(j.State)).Str("owner", j.Owner).Msg("replay job no longer this replica's; leaving it")
				lost()
				return
			}
		}
	}
}
