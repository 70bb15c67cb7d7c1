package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
)

// ev is one planned event and what became of its submission.
type ev struct {
	account, kind, key, id string
	payload                []byte
	viaNATS                bool
	lane                   string        // ordered lane (kindLane), else ""
	delay                  time.Duration // > 0: submitted with not_before = now + delay
	cancel                 bool          // DELETE it once accepted
	reject                 bool          // the payload makes the provider answer 422

	// Results, written by the one goroutine that submits it (and read
	// after the load is over).
	accepted      bool
	acceptedAt    time.Time
	notBefore     time.Time
	tries         int
	cancelled     bool // DELETE answered 200
	cancelledAt   time.Time
	cancelRefused bool   // DELETE answered 409: it had started
	problem       string // an answer that must never come
}

// job is what one submitter sends in order: one event, or the events of
// one ordered lane, one after the other (each once accepted).
type job []*ev

// plan makes the run's events: every completion mode, spread over the
// accounts. The mix, by job: 30 % order.create (2 % of them rejected by
// the provider: dead), 6 % delayed order.create (half cancelled), 7 %
// lanes of four (about a fifth of the events: half of the lanes
// order.update only, half with credit.ordered first and third, whose
// webhook or deadline, not a dispatcher, moves the lane on), 25 %
// credit.evaluate, 14 % credit.check, 18 % report.fetch. 40 % go over
// NATS, the rest over HTTP.
func plan(n int, accounts []string, rng *rand.Rand) []job {
	var jobs []job
	count, lanes := 0, 0
	next := func(account, kind string) *ev {
		key := fmt.Sprintf("%s-%06d", account, count)
		count++
		return &ev{account: account, kind: kind, key: key, id: event.ID(account, key), viaNATS: rng.Float64() < 0.4}
	}
	for count < n {
		account := accounts[rng.IntN(len(accounts))]
		r := rng.Float64()
		var j job
		switch {
		case r < 0.30:
			e := next(account, kindOrder)
			e.reject = rng.Float64() < 0.02
			j = job{e}
		case r < 0.36:
			e := next(account, kindOrder)
			e.delay = time.Duration(5+rng.IntN(16)) * time.Second
			e.cancel = rng.Float64() < 0.5
			j = job{e}
		case r < 0.43:
			lanes++
			lane := fmt.Sprintf("lane-%d", lanes)
			callbacks := rng.Float64() < 0.5
			for i := range 4 {
				kind := kindLane
				if callbacks && i%2 == 0 {
					kind = kindLaneCallback
				}
				e := next(account, kind)
				e.lane = lane
				j = append(j, e)
			}
		case r < 0.68:
			j = job{next(account, kindEvaluate)}
		case r < 0.82:
			j = job{next(account, kindCheck)}
		default:
			j = job{next(account, kindReport)}
		}
		for _, e := range j {
			p := map[string]any{"order_id": e.key, "n": count}
			if e.lane != "" {
				p["lane"] = e.lane
			}
			if e.reject {
				p["reject"] = true
			}
			if (e.kind == kindEvaluate || e.kind == kindCheck || e.kind == kindReport) && rng.Float64() < 0.1 {
				p["decision"] = "rejected"
			}
			e.payload, _ = json.Marshal(p)
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// loader submits the planned events, over HTTP to ingest and over NATS to
// INTAKE, each until it is accepted: a 202 or 200 with the event's id, or
// a JetStream acknowledgement of the intake message. Ingest and
// nats-server are killed meanwhile, so a submission is retried, with the
// same idempotency key, until one of those answers (or the give-up time).
type loader struct {
	ingest string
	js     jetstream.JetStream
	subj   names.Subjects
	client *http.Client

	httpTries, natsTries, retries atomic.Int64
	submitted                     atomic.Int64

	mu          sync.Mutex
	credit      []string // accepted credit events (for forged webhooks)
	firstAccept time.Time
	lastAccept  time.Time
}

func newLoader(ingest string, js jetstream.JetStream) *loader {
	return &loader{ingest: ingest, js: js, subj: names.NewSubjects(names.DefaultPrefix),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}}
}

// run releases the jobs evenly over d with workers submitters; each job is
// submitted until accepted or giveUp ends. It returns when every job is
// settled.
func (l *loader) run(ctx, giveUp context.Context, jobs []job, d time.Duration, workers int) {
	total := 0
	for _, j := range jobs {
		total += len(j)
	}
	ch := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range ch {
				for _, e := range j {
					l.submit(giveUp, e)
					if !e.accepted {
						break // a lane stops at its first refusal: order is what it tests
					}
				}
			}
		})
	}
	start := time.Now()
	done := 0
	for _, j := range jobs {
		at := start.Add(time.Duration(float64(d) * float64(done) / float64(total)))
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(at)):
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case ch <- j:
		case <-ctx.Done():
		}
		done += len(j)
	}
	close(ch)
	wg.Wait()
}

// submit sends e until it is accepted, refused for good, or ctx ends.
func (l *loader) submit(ctx context.Context, e *ev) {
	if e.delay > 0 {
		e.notBefore = time.Now().Add(e.delay).Truncate(time.Second)
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		e.tries++
		var final bool
		if e.viaNATS {
			l.natsTries.Add(1)
			final = l.submitNATS(ctx, e)
		} else {
			l.httpTries.Add(1)
			final = l.submitHTTP(ctx, e)
		}
		if final {
			break
		}
		l.retries.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	if !e.accepted {
		return
	}
	l.submitted.Add(1)
	l.mu.Lock()
	if l.firstAccept.IsZero() {
		l.firstAccept = e.acceptedAt
	}
	l.lastAccept = e.acceptedAt
	if e.kind == kindEvaluate || e.kind == kindCheck || e.kind == kindLaneCallback {
		l.credit = append(l.credit, e.id)
	}
	l.mu.Unlock()
	if e.cancel {
		l.cancelEvent(ctx, e)
	}
}

func (l *loader) accept(e *ev) {
	e.accepted, e.acceptedAt = true, time.Now()
}

// submitHTTP: POST /v1/events. It reports whether the answer is final.
func (l *loader) submitHTTP(ctx context.Context, e *ev) bool {
	body := map[string]any{"account": e.account, "kind": e.kind, "payload": json.RawMessage(e.payload)}
	if !e.notBefore.IsZero() {
		body["not_before"] = e.notBefore.UTC().Format(time.RFC3339)
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.ingest+"/v1/events", bytes.NewReader(b))
	if err != nil {
		e.problem = err.Error()
		return true
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(names.HeaderIdempotencyKey, e.key)
	resp, err := l.client.Do(req)
	if err != nil {
		return false // ingest down or slow: send it again
	}
	ans, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted, http.StatusOK:
		var v struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(ans, &v); err != nil || v.ID != e.id {
			e.problem = fmt.Sprintf("HTTP %d with id %q, want %s", resp.StatusCode, v.ID, e.id)
			return true
		}
		l.accept(e)
		return true
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return false
	}
	e.problem = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(ans))
	return true
}

// submitNATS publishes to tenaz.intake.<account>.<kind> and waits for the
// stream's acknowledgement.
func (l *loader) submitNATS(ctx context.Context, e *ev) bool {
	subj, err := l.subj.Intake(e.account, e.kind)
	if err != nil {
		e.problem = err.Error()
		return true
	}
	m := nats.NewMsg(subj)
	m.Data = e.payload
	m.Header.Set(names.HeaderIdempotencyKey, e.key)
	if !e.notBefore.IsZero() {
		m.Header.Set(names.HeaderNotBefore, e.notBefore.UTC().Format(time.RFC3339))
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := l.js.PublishMsg(pctx, m); err != nil {
		return false
	}
	l.accept(e)
	return true
}

// cancelEvent: DELETE /v1/events/{id} a moment after acceptance (the
// event is scheduled for later): 200 cancelled, 409 it had started, 404
// ingest has not taken it from INTAKE yet (ask again).
func (l *loader) cancelEvent(ctx context.Context, e *ev) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(300+rand.IntN(1200)) * time.Millisecond):
	}
	for range 40 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, l.ingest+"/v1/events/"+e.id, nil)
		req.Header.Set("X-Tenaz-Actor", "chaos")
		resp, err := l.client.Do(req)
		if err == nil {
			ans, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				e.cancelled, e.cancelledAt = true, time.Now()
				return
			case http.StatusConflict:
				e.cancelRefused = true
				return
			case http.StatusNotFound, http.StatusServiceUnavailable, http.StatusBadGateway:
			default:
				e.problem = fmt.Sprintf("DELETE: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(ans))
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// creditEvents returns the accepted credit events so far.
func (l *loader) creditEvents() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.credit
}
