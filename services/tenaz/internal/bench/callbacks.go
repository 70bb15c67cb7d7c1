package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/streams"
)

// callbackSecret signs the bench's webhooks (Standard Webhooks form).
const callbackSecret = "whsec_dGVuYXotYmVuY2gtY2FsbGJhY2stc2VjcmV0LTMyYnl0ZXM="

// callbackAccount is the account of the callback run.
const callbackAccount = "cb"

// Callbacks measures webhooks applied per second: sz.Callbacks events of a
// kind with completion: callback are delivered to a provider that does not
// call back; once all are awaiting_callback, signed webhooks for them are
// POSTed to /v1/callbacks/<target> by sz.CallbackWorkers goroutines over
// keep-alive connections until every one is applied; then as many again
// to /v1/callbacks/<target>/<account>, the form that names the account
// (callbacks_account_*), which reads the record from its partition alone
// where the plain form asks every partition. The naive side is a
// minimal receiver on the same server doing what any such receiver must:
// verify the signature, read the record, compare-and-set it done.
func Callbacks(ctx context.Context, sz Sizes, r Report, concurrency int) error {
	prov, provURL, stopProv, err := startProvider()
	if err != nil {
		return err
	}
	defer stopProv()
	srv, tz, stop, err := startPhase(ctx, "tenaz-bench-callbacks-*", false, func(url string) (*config.Config, error) {
		return parseConfig(configYAML(url, `
accounts:
  "*": {concurrency: %d}
targets:
  bureau: {url: %q, timeout: 5s, callback_secret: %q}
kinds:
  credit.check: {target: bureau, completion: callback, callback_sla: 1h, attempts: 3, backoff: {initial: 1s}}
`, concurrency, provURL+"/evaluations", callbackSecret))
	})
	if err != nil {
		return err
	}
	defer stop(ctx)
	n, workers := sz.Callbacks, sz.CallbackWorkers
	all, err := tz.awaitingCallbacks(ctx, prov, 2*n)
	if err != nil {
		return err
	}
	ids, accountIDs := all[:n], all[n:]
	sample, err := tz.record(ctx, ids[0])
	if err != nil {
		return err
	}
	// The followers take the setup's revisions (accept, claim, await for
	// every event) before the first run, which they would otherwise
	// follow during it: that is the setup's cost, not the callbacks'.
	if err := tz.waitFollowed(ctx, 5*time.Minute); err != nil {
		return err
	}
	url := "http://" + tz.t.HTTPAddr() + "/v1/callbacks/bureau"
	// fire sends a webhook for each of ids to url and counts the CPU they
	// cost.
	fire := func(url string, ids []string) (fireResult, error) {
		c0 := cpuTime()
		res, err := fireCallbacks(ctx, url, ids, workers, func(status int, body []byte) error {
			var rep struct{ Outcome string }
			if status != http.StatusOK || json.Unmarshal(body, &rep) != nil || rep.Outcome != "applied" {
				return fmt.Errorf("answered %d %s", status, bytes.TrimSpace(body))
			}
			return nil
		})
		res.cpu = float64((cpuTime() - c0).Microseconds()) / float64(len(ids))
		return res, err
	}
	if f := os.Getenv("BENCH_PROFILE_CALLBACKS"); f != "" {
		pf, err := os.Create(f)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
	}
	res, err := fire(url, ids)
	if err != nil {
		return fmt.Errorf("callbacks: %w", err)
	}
	if os.Getenv("BENCH_PROFILE_CALLBACKS") != "" {
		pprof.StopCPUProfile()
	}
	if err := tz.checkStatus(ctx, ids, state.Done); err != nil {
		return err
	}
	// The followers take the first run's revisions before the second
	// starts, so that neither run pays for the other's.
	if err := tz.waitFollowed(ctx, 5*time.Minute); err != nil {
		return err
	}
	acct, err := fire(url+"/"+callbackAccount, accountIDs)
	if err != nil {
		return fmt.Errorf("callbacks, account form: %w", err)
	}
	if err := tz.checkStatus(ctx, accountIDs, state.Done); err != nil {
		return err
	}
	if err := tz.Stop(ctx); err != nil {
		return err
	}
	naive, err := naiveCallbacks(ctx, srv.ClientURL(), sample, n, workers)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.W, "# callbacks: %d webhooks from %d goroutines, the naive side's record %d bytes\n", n, workers, len(sample))
	r.Figure("callbacks_events", float64(n), "events")
	r.Figure("callbacks_per_s", res.perS, "callbacks/s")
	r.Figure("naive_callbacks_per_s", naive.perS, "callbacks/s")
	r.Figure("callbacks_ratio_vs_naive", res.perS/naive.perS, "ratio")
	r.Figure("callbacks_p99_ms", res.p99, "ms")
	r.Figure("naive_callbacks_p99_ms", naive.p99, "ms")
	r.Figure("callbacks_cpu_us_per_callback", res.cpu, "us")
	r.Figure("naive_callbacks_cpu_us_per_callback", naive.cpu, "us")
	r.Figure("callbacks_account_per_s", acct.perS, "callbacks/s")
	r.Figure("callbacks_account_ratio_vs_naive", acct.perS/naive.perS, "ratio")
	r.Figure("callbacks_account_p99_ms", acct.p99, "ms")
	r.Figure("callbacks_account_cpu_us_per_callback", acct.cpu, "us")
	return nil
}

// awaitingCallbacks submits n events of credit.check and waits until each
// was delivered and its record moved to awaiting_callback (the dispatch
// message is acked only after that is stored). It returns their ids.
func (b *Instance) awaitingCallbacks(ctx context.Context, prov *provider.Provider, n int) ([]string, error) {
	for i := range n {
		m := nats.NewMsg("tenaz.intake." + callbackAccount + ".credit.check")
		m.Data = fmt.Appendf(nil, `{"applicant":"a-%d","amount":2500}`, i)
		m.Header.Set(names.HeaderIdempotencyKey, "c-"+strconv.Itoa(i))
		for {
			_, err := b.js.PublishMsgAsync(m)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return nil, err
			}
			<-b.js.PublishAsyncComplete()
		}
	}
	<-b.js.PublishAsyncComplete()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := prov.WaitCalls(wctx, n); err != nil {
		return nil, fmt.Errorf("callbacks: %d of %d delivered: %w", prov.CallCount(), n, err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	// Its owner trims the account below its lowest unsettled message
	// (within streams.trim_after of the last settle): none left means
	// every call's outcome was stored.
	n0, _ := streams.Partitions(ctx, b.js, "")
	subj := names.NewSubjects("").WithPartitions(n0)
	for {
		st, err := b.js.Stream(ctx, subj.EventsStream(callbackAccount))
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(ctx, jetstream.WithSubjectFilter(subj.EventsOf(callbackAccount))); err == nil && len(info.State.Subjects) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("callbacks: dispatch not drained within 5m (last read: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	seen := map[string]bool{}
	ids := make([]string, 0, n)
	for _, c := range prov.Calls() {
		if !seen[c.EventID] {
			seen[c.EventID] = true
			ids = append(ids, c.EventID)
		}
	}
	if len(ids) != n {
		return nil, fmt.Errorf("callbacks: %d distinct events delivered, want %d", len(ids), n)
	}
	return ids, b.checkStatus(ctx, ids, state.AwaitingCallback)
}

// record is the stored value of the event's record.
func (b *Instance) record(ctx context.Context, id string) ([]byte, error) {
	recs, err := openRecords(ctx, b.js)
	if err != nil {
		return nil, err
	}
	e, err := recs.of(callbackAccount, id).Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// checkStatus checks that every event's record is in state want.
func (b *Instance) checkStatus(ctx context.Context, ids []string, want state.State) error {
	recs, err := openRecords(ctx, b.js)
	if err != nil {
		return err
	}
	for _, id := range ids {
		status, err := statusOf(ctx, recs.of(callbackAccount, id), id)
		if err != nil {
			return fmt.Errorf("callbacks: record %s: %w", id, err)
		}
		if status != want {
			return fmt.Errorf("callbacks: event %s is %s, want %s", id, status, want)
		}
	}
	return nil
}

// statusOf is the status of the record id in kv.
func statusOf(ctx context.Context, kv jetstream.KeyValue, id string) (state.State, error) {
	e, err := kv.Get(ctx, id)
	if err != nil {
		return "", err
	}
	var rec struct {
		Status state.State `json:"status"`
	}
	err = json.Unmarshal(e.Value(), &rec)
	return rec.Status, err
}

type fireResult struct {
	perS, p99, cpu float64
}

var webhookClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}, Timeout: 30 * time.Second}

// fireCallbacks POSTs one signed webhook per id from workers goroutines
// (webhook-id msg_<i>, signed with callbackSecret at the time of sending)
// and checks every answer with check. It returns callbacks/s from the
// first send to the last answer, and the p99 of one request.
func fireCallbacks(ctx context.Context, url string, ids []string, workers int, check func(status int, body []byte) error) (fireResult, error) {
	var next atomic.Int64
	lat := make([]float64, len(ids))
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				b := fmt.Appendf(nil, `{"event_id":%q,"status":"approved"}`, ids[i])
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
				req.Header = webhook.Headers(callbackSecret, "msg_"+strconv.Itoa(i), t0, b)
				req.Header.Set("Content-Type", "application/json")
				resp, err := webhookClient.Do(req)
				if err == nil {
					var rb []byte
					rb, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil {
						err = check(resp.StatusCode, rb)
					}
				}
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("webhook %d (%s): %w", i, ids[i], err) })
					next.Store(int64(len(ids))) // stop the others
					return
				}
				lat[i] = float64(time.Since(t0).Microseconds()) / 1000
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return fireResult{}, firstErr
	}
	sort.Float64s(lat)
	return fireResult{perS: float64(len(ids)) / el.Seconds(), p99: pct(lat, 0.99)}, nil
}

// naiveCallbacks is the reference receiver: a plain HTTP handler that
// verifies the Standard Webhooks signature, reads the record named by
// event_id from a plain KV bucket and writes it back done by
// compare-and-set on the revision it read. The n records (copies of a
// real tenaz record awaiting its callback) are written first, untimed.
func naiveCallbacks(ctx context.Context, natsURL string, rec []byte, n, workers int) (fireResult, error) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return fireResult{}, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	_ = js.DeleteKeyValue(ctx, "naive_callbacks")
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "naive_callbacks"})
	if err != nil {
		return fireResult{}, err
	}
	defer func() { _ = js.DeleteKeyValue(context.WithoutCancel(ctx), "naive_callbacks") }()
	ids := make([]string, n)
	for i := range n {
		ids[i] = "ev" + strconv.Itoa(i)
		if _, err := kv.Put(ctx, ids[i], rec); err != nil {
			return fireResult{}, err
		}
	}
	hs, url, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := webhook.Verify(callbackSecret, r.Header, body, 5*time.Minute, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var doc struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e, err := kv.Get(r.Context(), doc.EventID)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		done := bytes.Replace(e.Value(), []byte(`"awaiting_callback"`), []byte(`"done"`), 1)
		if _, err := kv.Update(r.Context(), doc.EventID, done, e.Revision()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"outcome":"applied"}`))
	}))
	if err != nil {
		return fireResult{}, err
	}
	defer hs.Close()
	c0 := cpuTime()
	res, err := fireCallbacks(ctx, url+"/", ids, workers, func(status int, body []byte) error {
		if status != http.StatusOK {
			return fmt.Errorf("answered %d %s", status, bytes.TrimSpace(body))
		}
		return nil
	})
	if err != nil {
		return fireResult{}, fmt.Errorf("naive callbacks: %w", err)
	}
	res.cpu = float64((cpuTime() - c0).Microseconds()) / float64(n)
	return res, nil
}
