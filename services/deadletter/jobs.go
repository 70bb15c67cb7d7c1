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

	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// A replay job replays every dead event matching a filter, newest first,
// at a bounded rate. It lives in the tenaz_ops bucket (key job.<id>) with
// its cursor and counts, written after every page, so a restart (or
// another replica, once the lease lapses) carries on where it stopped.
// An event replayed just before a crash and met again is not dead any
// more: the compare-and-set refuses it and it counts as skipped, so
// nothing runs twice; the counts can miss at most the page in flight.

// Tuning of replay jobs.
const (
	jobLease    = 30 * time.Second // a runner's claim on a job, renewed every page
	jobPage     = 100              // events per page (and per progress write)
	jobWorkers  = 16               // replays in flight per job
	jobPoll     = time.Second      // how often idle runners look for work
	maxJobError = 20
)

type job struct {
	ops.JobReply
	// Cursor is the next page: matching items below this DEAD sequence.
	Cursor     string    `json:"cursor"`
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
}

func jobKey(id string) string { return "job." + id }

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
	f.Cursor, f.Limit = "", 0
	if err := checkListRequest(f); err != nil {
		return ops.JobReply{}, err
	}
	first, err := s.x.List(state.Dead, ops.ListRequest{Account: f.Account, Kind: f.Kind, Class: f.Class, Reason: f.Reason, Since: f.Since, Until: f.Until, Limit: 1})
	if err != nil {
		return ops.JobReply{}, fail(http.StatusBadRequest, "bad_filter", "%v", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	now := s.now().UTC()
	j := job{
		JobReply: ops.JobReply{JobID: "job_" + hex.EncodeToString(b[:]), Total: first.Total, State: ops.JobRunning,
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
	if id == "" || strings.ContainsAny(id, ".*> ") {
		return ops.JobReply{}, fail(http.StatusBadRequest, "invalid_job", "invalid job id %q", id)
	}
	e, err := s.kvOps.Get(ctx, jobKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ops.JobReply{}, fail(http.StatusNotFound, "not_found", "job %s not found", id)
	}
	if err != nil {
		return ops.JobReply{}, err
	}
	var j job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return ops.JobReply{}, err
	}
	return j.JobReply, nil
}

// runJobs is the runner: it takes any running job whose lease is free and
// works it to the end, one job at a time.
func (s *Service) runJobs() {
	defer s.bg.Done()
	ctx := s.runCtx
	t := time.NewTicker(jobPoll)
	defer t.Stop()
	for {
		for s.claimAndRun(ctx) {
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.jobKick:
		}
	}
}

// claimAndRun runs one claimable job; false when there was none.
func (s *Service) claimAndRun(ctx context.Context) bool {
	kl, err := s.kvOps.ListKeysFiltered(ctx, "job.*")
	if err != nil {
		return false
	}
	var keys []string
	for k := range kl.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
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
		j.Owner, j.LeaseUntil = s.o.Instance, now.Add(jobLease)
		val, _ := json.Marshal(j)
		rev, err := s.kvOps.Update(ctx, k, val, e.Revision())
		if err != nil {
			continue // another replica took it
		}
		s.runJob(ctx, j, rev)
		return ctx.Err() == nil
	}
	return false
}

// runJob replays the job's events page by page until none is left, the
// service stops, or another replica takes the job over.
func (s *Service) runJob(ctx context.Context, j job, rev uint64) {
	log := s.log.With().Str("job", j.JobID).Logger()
	rl := ratelimiter.NewSmoothWithMaxRate[any](time.Duration(float64(time.Second) / j.RatePerSecond))
	save := func(release bool) bool {
		j.UpdatedAt = s.now().UTC()
		j.LeaseUntil = s.now().Add(jobLease)
		if release {
			j.Owner, j.LeaseUntil = "", time.Time{}
		}
		val, _ := json.Marshal(j)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		nrev, err := s.kvOps.Update(sctx, jobKey(j.JobID), val, rev)
		if err != nil {
			log.Warn().Err(err).Msg("replay job taken over or not saved; leaving it")
			return false
		}
		rev = nrev
		return true
	}
	f := j.Filter
	for {
		if ctx.Err() != nil {
			save(true)
			return
		}
		f.Cursor, f.Limit = j.Cursor, jobPage
		page, err := s.x.List(state.Dead, f)
		if err != nil {
			j.State, j.Error = ops.JobFailed, err.Error()
			save(true)
			return
		}
		if len(page.Items) == 0 {
			j.State = ops.JobDone
			if save(true) {
				log.Info().Int("done", j.Done).Int("skipped", j.Skipped).Int("failed", j.Failed).Msg("replay job finished")
			}
			return
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, jobWorkers)
		for _, it := range page.Items {
			if err := rl.AcquirePermit(ctx); err != nil {
				break
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				var err error
				if it.ID == "" {
					err = fail(http.StatusConflict, "not_parked", "entry %d has no event to replay", it.Seq)
				} else {
					err = s.replay(ctx, it.ID, nil, j.Stage, j.Actor, j.Reason)
				}
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					j.Done++
					return
				}
				status, code, msg := statusOf(err)
				if code == "not_parked" || code == "not_found" {
					j.Skipped++
					return
				}
				if ctx.Err() != nil {
					return // stopping: the page is done again after the restart
				}
				j.Failed++
				j.LastErrors = append(j.LastErrors, ops.ItemError{ID: it.ID, Code: status, Message: msg})
				if len(j.LastErrors) > maxJobError {
					j.LastErrors = j.LastErrors[len(j.LastErrors)-maxJobError:]
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			save(true) // the cursor stays: this page is looked at again
			return
		}
		j.Cursor = strconv.FormatUint(page.Items[len(page.Items)-1].Seq, 10)
		if !save(false) {
			return
		}
	}
}
