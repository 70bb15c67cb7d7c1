package deadletter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// A replay job replays every dead event matching a filter, newest first,
// at a bounded rate. It lives in the tenaz_ops bucket (key job.<id>) with
// its cursor, its counts and the page in flight (the entries of the page
// it has not counted yet), so a restart, or another replica once the lease
// lapses, carries on where it stopped. The page is saved before its first
// replay, and its counts as it goes: a replica taking the job over after
// a crash finds each entry its predecessor replayed since its last save
// still pending, sees the job's mark in the event's history (jobMark),
// and counts it without replaying it again, even if it failed back into
// DEAD meanwhile. The runner (jobRun) renews its lease while a page
// runs, however slow its rate: a lease that lapsed under a live runner
// would have a second replica run the same page beside it, at twice the
// rate. It watches the job, so a cancel stops it at once. A replica runs
// up to jobsAtOnce jobs at once, so a slow job does not hold the others
// up.

// Tuning of replay jobs.
const (
	jobPage     = 100         // events per page (and per progress write)
	jobWorkers  = 16          // replays in flight per job
	jobsAtOnce  = 4           // jobs one replica runs at once
	jobPoll     = time.Second // how often idle runners look for work
	maxJobError = 20
)

type job struct {
	ops.JobReply
	// Cursor is the next page: matching items below this DEAD sequence.
	Cursor string `json:"cursor"`
	// Pending is the page in flight: its entries not counted yet.
	Pending    []pendingEntry `json:"pending,omitempty"`
	Owner      string         `json:"owner,omitempty"`
	LeaseUntil time.Time      `json:"lease_until,omitzero"`
}

// pendingEntry is a DEAD entry of the page in flight.
type pendingEntry struct {
	Seq     uint64 `json:"seq"`
	ID      string `json:"id,omitempty"` // "" for an entry without an event
	Account string `json:"account,omitempty"`
}

func jobKey(id string) string { return "job." + id }

// jobIDPrefix and jobIDHex make a job's id: job_ and 8 random bytes in hex.
const (
	jobIDPrefix = "job_"
	jobIDHex    = 16
)

func newJobID() string {
	var b [jobIDHex / 2]byte
	_, _ = rand.Read(b[:])
	return jobIDPrefix + hex.EncodeToString(b[:])
}

// validJobID reports whether id has the shape newJobID makes.
func validJobID(id string) bool {
	h, ok := strings.CutPrefix(id, jobIDPrefix)
	if !ok || len(h) != jobIDHex {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// jobMark ends the detail of each replay a job makes: its history names
// the job, and a replica that takes the job over knows the replays made
// before it.
func jobMark(id string) string { return "(" + id + ")" }

// createJob stores a new replay job for filter f and wakes the runner.
func (s *Service) createJob(ctx context.Context, f ops.ListRequest, stage, actor, why string, rate float64) (ops.JobReply, error) {
	switch stage {
	case "", state.StagePrimary, state.StageFallback:
	default:
		return ops.JobReply{}, fail(http.StatusBadRequest, "invalid_stage", "stage must be primary, fallback or empty, got %q", stage)
	}
	if rate == 0 {
		rate = s.cfg.Deadletter.ReplayRate
	}
	if !(rate > 0 && rate <= config.MaxReplayRate) {
		return ops.JobReply{}, fail(http.StatusBadRequest, "invalid_rate", "rate_per_second must be in (0, %g], got %g", config.MaxReplayRate, rate)
	}
	// The job pages through every match itself: a page's cursor or size
	// in its filter would be ignored, so it is refused, as the list
	// refuses a bad one.
	if f.Cursor != "" {
		return ops.JobReply{}, fail(http.StatusBadRequest, "invalid_cursor", "cursor: a replay job's filter takes none (the job goes through every match)")
	}
	if f.Limit != 0 {
		return ops.JobReply{}, fail(http.StatusBadRequest, "invalid_limit", "limit: a replay job's filter takes none (the job goes through every match)")
	}
	if err := s.checkFilter(f); err != nil {
		return ops.JobReply{}, err
	}
	if stage == state.StageFallback && f.Kind != "" {
		// What a single replay refuses, refused up front for the whole job.
		if k, ok := s.cfg.Kind(f.Kind); !ok || k.Fallback == nil {
			return ops.JobReply{}, fail(http.StatusBadRequest, "no_fallback", "kind %q has no fallback stage", f.Kind)
		}
	}
	first, err := s.x.List(state.Dead, ops.ListRequest{Account: f.Account, Kind: f.Kind, Class: f.Class, Reason: f.Reason, Since: f.Since, Until: f.Until, Limit: 1})
	if err != nil {
		return ops.JobReply{}, fail(http.StatusBadRequest, "bad_filter", "%v", err)
	}
	now := s.now().UTC()
	j := job{
		JobReply: ops.JobReply{JobID: newJobID(), Total: first.Total, State: ops.JobRunning,
			Filter: f, Stage: stage, Actor: actor, Reason: why, RatePerSecond: rate, CreatedAt: now, UpdatedAt: now},
		Cursor: strconv.FormatUint(s.x.MaxSeq()+1, 10),
	}
	val, _ := json.Marshal(j)
	if _, err := s.kvOps.Create(ctx, jobKey(j.JobID), val); err != nil {
		return ops.JobReply{}, err
	}
	s.log.Info().Str("job", j.JobID).Str("actor", actor).Int("total", j.Total).Float64("rate", rate).Msg("replay job created")
	select {
	case s.jobKick <- struct{}{}:
	default:
	}
	return j.JobReply, nil
}

// getJob reads a job's progress.
func (s *Service) getJob(ctx context.Context, id string) (ops.JobReply, error) {
	j, _, err := s.readJob(ctx, id)
	return j.JobReply, err
}

// readJob reads the job id and its revision: 400 for an id that is not
// a job's (newJobID), which a key could not hold either, 404 for none.
func (s *Service) readJob(ctx context.Context, id string) (job, uint64, error) {
	if !validJobID(id) {
		return job{}, 0, fail(http.StatusBadRequest, "invalid_job", "invalid job id %q: a job's id is job_ and 16 hex digits (job_3f9a0c2b7d1e4a58)", id)
	}
	e, err := s.kvOps.Get(ctx, jobKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return job{}, 0, fail(http.StatusNotFound, "not_found", "job %s not found", id)
	}
	if err != nil {
		return job{}, 0, err
	}
	var j job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return job{}, 0, err
	}
	return j, e.Revision(), nil
}

// cancelJob stops a running job: it is marked cancelled, with who and
// why, by compare-and-set. Its runner, which watches the job, stops
// taking entries at once and leaves the job without writing it again (a
// save of its would fail too); no runner takes a job that is not
// running. A replay in flight finishes.
func (s *Service) cancelJob(ctx context.Context, req ops.JobCancelRequest) (ops.JobReply, error) {
	why, err := needReason(req.Reason)
	if err != nil {
		return ops.JobReply{}, err
	}
	for {
		j, rev, err := s.readJob(ctx, req.JobID)
		if err != nil {
			return ops.JobReply{}, err
		}
		if j.State != ops.JobRunning {
			return j.JobReply, fail(http.StatusConflict, "not_running", "job %s is %s, not running", j.JobID, j.State)
		}
		j.State, j.CancelledBy, j.CancelReason = ops.JobCancelled, actorOf(ctx), why
		j.Owner, j.LeaseUntil, j.UpdatedAt = "", time.Time{}, s.now().UTC()
		val, _ := json.Marshal(j)
		_, err = s.kvOps.Update(ctx, jobKey(j.JobID), val, rev)
		if err == nil {
			s.log.Info().Str("job", j.JobID).Str("actor", j.CancelledBy).Int("done", j.Done).Msg("replay job cancelled")
			return j.JobReply, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return ops.JobReply{}, err
		}
		// The runner saved its progress meanwhile: read it again.
	}
}

// runJobs is the runner: it takes each running job whose lease is free,
// up to jobsAtOnce at a time, and works each to the end.
func (s *Service) runJobs() {
	defer s.bg.Done()
	ctx := s.runCtx
	t := time.NewTicker(jobPoll)
	defer t.Stop()
	running := map[string]bool{} // the jobs this replica runs
	var mu sync.Mutex
	for {
		s.claimJobs(ctx, &mu, running)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.jobKick:
		}
	}
}

// claimJobs starts each claimable job it has room for, each on its own.
func (s *Service) claimJobs(ctx context.Context, mu *sync.Mutex, running map[string]bool) {
	kl, err := s.kvOps.ListKeysFiltered(ctx, "job.*")
	if err != nil {
		return
	}
	var keys []string
	for k := range kl.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		mu.Lock()
		full, mine := len(running) >= jobsAtOnce, running[k]
		mu.Unlock()
		if full {
			return
		}
		if mine {
			continue
		}
		e, err := s.kvOps.Get(ctx, k)
		if err != nil {
			continue
		}
		var j job
		if json.Unmarshal(e.Value(), &j) != nil || j.State != ops.JobRunning {
			continue
		}
		now := s.now()
		if j.Owner != "" && j.Owner != s.o.Instance && now.Before(j.LeaseUntil) {
			continue
		}
		from := j.Owner
		j.Owner, j.LeaseUntil = s.o.Instance, now.Add(s.o.JobLease)
		val, _ := json.Marshal(j)
		rev, err := s.kvOps.Update(ctx, k, val, e.Revision())
		if err != nil {
			continue // another replica took it
		}
		// Which replica runs a job, and whose lapsed lease it took: an
		// operator asking why a job paused for a lease finds it here.
		l := s.log.Info().Str("job", j.JobID).Str("instance", s.o.Instance).Int("done", j.Done)
		if from != "" {
			l = l.Str("from", from)
		}
		l.Msg("replay job taken")
		mu.Lock()
		running[k] = true
		mu.Unlock()
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.runJob(ctx, j, rev)
			mu.Lock()
			delete(running, k)
			mu.Unlock()
			select {
			case s.jobKick <- struct{}{}: // room for a job that waits
			default:
			}
		}()
	}
}
