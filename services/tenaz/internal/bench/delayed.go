package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/streams"
)

// delayedAccount is the account of the delayed runs.
const delayedAccount = "delayed"

// Delayed measures what holding delayed events costs and how punctually
// they fire. tenaz runs in its own process against a nats-server in
// another (as in Accounts), with the fake provider as the target:
//
//   - held: sz.Delayed events submitted through intake with not_before a
//     day ahead; once every one is scheduled, the tenaz process's resident
//     memory and the server's store bytes per event;
//   - burst: then sz.Burst events due at the same whole second ~20 s
//     ahead (on top of the held ones); for each, the time its delivery
//     reached the provider minus the due time.
func Delayed(ctx context.Context, sz Sizes, r Report, concurrency int) error {
	dir, srv, cleanup, err := startNATSChild("delayed", 30*time.Second) // its store is thrown away: no need to wait for a clean stop
	if err != nil {
		return err
	}
	defer cleanup()
	storeDir := filepath.Join(dir, "nats")
	prov, provURL, stopProv, err := startProvider()
	if err != nil {
		return err
	}
	defer stopProv()
	tz, err := startTenazChild(dir, configYAML(srv.ready, `
accounts:
  "*": {concurrency: %d}
targets:
  prov: {url: %q, timeout: 5s}
kinds:
  order.create: {target: prov, attempts: 3, backoff: {initial: 1s}}
`, concurrency, provURL+"/api/{{.Kind}}"))
	if err != nil {
		return err
	}
	defer func() { _, _ = tz.stop(2 * time.Minute) }()
	var pubErrs atomic.Int64
	nc, err := nats.Connect(srv.ready)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { pubErrs.Add(1) }))
	if err != nil {
		return err
	}
	d := &delayedRun{js: js, pubErrs: &pubErrs}
	if d.recs, err = openRecords(ctx, js); err != nil {
		return err
	}
	disk0, err := diskBytes(storeDir)
	if err != nil {
		return err
	}
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		return err
	}
	stored0 := ai.Store

	// Held: n events a day ahead, spread over an hour of due times.
	n := sz.Delayed
	day := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	start := time.Now()
	if err := d.submit(ctx, "h", n, func(i int) time.Time { return day.Add(time.Duration(i%3600) * time.Second) }); err != nil {
		return err
	}
	published := time.Since(start)
	if err := d.waitScheduled(ctx, uint64(n), 45*time.Minute, start); err != nil {
		return err
	}
	accepted := time.Since(start)
	if err := d.checkSample(ctx, "h", n, state.Scheduled); err != nil {
		return err
	}
	rss, peak, srvRSS := tz.rssMB(), tz.peakRSSMB(), srv.rssMB()
	disk, err := diskBytes(storeDir)
	if err != nil {
		return err
	}
	for try := 0; ; try++ { // a busy server may not answer in time
		if ai, err = js.AccountInfo(ctx); err == nil || try == 5 {
			break
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(r.W, "# delayed: %d events published to intake in %.1fs, all scheduled after %.1fs\n", n, published.Seconds(), accepted.Seconds())
	r.Figure("delayed_1m_events", float64(n), "events")
	r.Figure("delayed_1m_accept_s", accepted.Seconds(), "s")
	r.Figure("delayed_1m_accept_events_per_s", float64(n)/accepted.Seconds(), "events/s")
	r.Figure("delayed_1m_service_rss_mb", rss, "MB")
	r.Figure("delayed_1m_service_peak_rss_mb", peak, "MB")
	r.Figure("delayed_1m_server_rss_mb", srvRSS, "MB")
	r.Figure("delayed_1m_disk_bytes_per_event", float64(disk-disk0)/float64(n), "bytes")
	r.Figure("delayed_1m_stored_bytes_per_event", float64(ai.Store-stored0)/float64(n), "bytes")

	// Burst: b events due at the same whole second, on top of the held ones.
	b := sz.Burst
	due := time.Now().Add(20 * time.Second).UTC().Truncate(time.Second)
	if err := d.submit(ctx, "b", b, func(int) time.Time { return due }); err != nil {
		return err
	}
	if err := d.waitScheduled(ctx, uint64(n+b), 5*time.Minute, time.Now()); err != nil {
		return err
	}
	slack := time.Until(due)
	fmt.Fprintf(r.W, "# delayed burst: %d events due at %s, all scheduled %.1fs before\n", b, due.Format(time.TimeOnly), slack.Seconds())
	if slack <= 0 {
		return fmt.Errorf("delayed burst: the %d events were scheduled %s after their due time; the lateness would measure ingest", b, -slack)
	}
	fired := d.watchFired(ctx, b, due)
	if os.Getenv("BENCH_CHILD_PROFILE") != "" { // profile the burst: from 1 s before due to the last delivery
		time.Sleep(time.Until(due.Add(-time.Second)))
		tz.toggleProfile()
		srv.toggleProfile()
	}
	wctx, cancel := context.WithDeadline(ctx, due.Add(3*time.Minute))
	defer cancel()
	err = prov.WaitCalls(wctx, b)
	tz.toggleProfile()
	srv.toggleProfile()
	if err != nil {
		return fmt.Errorf("delayed burst: %d of %d delivered within 3m of due: %w", prov.CallCount(), b, err)
	}
	first := map[string]time.Time{}
	for _, c := range prov.Calls() {
		if t, ok := first[c.EventID]; !ok || c.At.Before(t) {
			first[c.EventID] = c.At
		}
	}
	if len(first) != b {
		return fmt.Errorf("delayed burst: %d calls for %d distinct events, want %d", prov.CallCount(), len(first), b)
	}
	late := make([]float64, 0, b)
	for _, at := range first {
		late = append(late, float64(at.Sub(due).Microseconds())/1000)
	}
	sort.Float64s(late)
	if late[0] < 0 {
		fmt.Fprintf(r.W, "# delayed burst: WARNING the earliest delivery was %.0f ms BEFORE its due time\n", -late[0])
	}
	fmt.Fprintf(r.W, "# delayed burst: first delivery %.0f ms after due, last %.0f ms after\n", late[0], late[len(late)-1])
	var firedMS float64
	select {
	case f := <-fired:
		firedMS = float64(f.Sub(due).Microseconds()) / 1000
	case <-time.After(10 * time.Second):
		firedMS = math.NaN()
	}
	r.Figure("delayed_burst_events", float64(b), "events")
	r.Figure("delayed_burst_max_lateness_ms", late[len(late)-1], "ms")
	r.Figure("delayed_burst_p99_lateness_ms", pct(late, 0.99), "ms")
	r.Figure("delayed_burst_p50_lateness_ms", pct(late, 0.50), "ms")
	r.Figure("delayed_burst_fired_ms", firedMS, "ms")

	// The same burst through raw JetStream on the same server, for the
	// ratio: what this machine allows any dispatcher built on it.
	nlate, err := naiveBurst(ctx, srv.ready, b, concurrency)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.W, "# naive burst: first delivery %.0f ms after due, last %.0f ms after\n", nlate[0], nlate[len(nlate)-1])
	r.Figure("naive_burst_max_lateness_ms", nlate[len(nlate)-1], "ms")
	r.Figure("naive_burst_p50_lateness_ms", pct(nlate, 0.50), "ms")
	r.Figure("delayed_burst_max_lateness_ratio", late[len(late)-1]/nlate[len(nlate)-1], "x")
	return nil
}

// delayedRun submits delayed events and follows them.
type delayedRun struct {
	js      jetstream.JetStream
	recs    *records
	pubErrs *atomic.Int64
}

var delayedPayload = []byte(`{"order_id":"o-1","total":1990,"currency":"EUR"}`)

// submit publishes n intake submissions (idempotency keys tag-0…) with
// Tenaz-Not-Before at(i), the way an upstream publisher would (async,
// waiting for the stream's acks).
func (d *delayedRun) submit(ctx context.Context, tag string, n int, at func(int) time.Time) error {
	subject := "tenaz.intake." + delayedAccount + ".order.create"
	for i := range n {
		m := nats.NewMsg(subject)
		m.Data = delayedPayload
		m.Header.Set(names.HeaderIdempotencyKey, tag+"-"+strconv.Itoa(i))
		m.Header.Set(names.HeaderNotBefore, at(i).Format(time.RFC3339))
		for {
			_, err := d.js.PublishMsgAsync(m)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return fmt.Errorf("delayed: publish: %w", err)
			}
			select { // the window is full: let the acks catch up
			case <-d.js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-d.js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return errors.New("delayed: intake publishes not acknowledged within 5m")
	}
	if e := d.pubErrs.Load(); e > 0 {
		return fmt.Errorf("delayed: %d intake publishes failed", e)
	}
	return nil
}

// watchFired reports when the server has stored the b messages it fires
// at due (EVENTS' last sequence advanced by b: acks and purges do not
// advance it; only a keeper message a second could), so that the
// burst's lateness splits into the server's firing and tenaz's dispatch.
func (d *delayedRun) watchFired(ctx context.Context, b int, due time.Time) <-chan time.Time {
	out := make(chan time.Time, 1)
	st, err := d.js.Stream(ctx, streams.EventsStream("", partitionOf(ctx, d.js, delayedAccount)))
	if err != nil {
		close(out)
		return out
	}
	seq0 := st.CachedInfo().State.LastSeq
	go func() {
		defer close(out)
		time.Sleep(time.Until(due.Add(-100 * time.Millisecond)))
		for end := due.Add(time.Minute); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
			info, err := st.Info(ctx)
			if err == nil && info.State.LastSeq-seq0 >= uint64(b) {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}

// waitScheduled waits until ingest has taken every intake message and the
// state bucket holds want records (each written scheduled by ingest
// before it acks; checkSample reads some back).
func (d *delayedRun) waitScheduled(ctx context.Context, want uint64, timeout time.Duration, since time.Time) error {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		// A busy server may not answer in time: ask again until the deadline.
		var pending uint64
		have, err := d.recs.values(ctx)
		if err == nil {
			var ci jetstream.Consumer
			if ci, err = d.js.Consumer(ctx, names.StreamIntake, "ingest"); err == nil {
				info := ci.CachedInfo()
				pending = info.NumPending + uint64(info.NumAckPending)
			}
		}
		if err == nil && have >= want && pending == 0 {
			return nil
		}
		if time.Since(lastLog) >= 15*time.Second || os.Getenv("BENCH_DEBUG") != "" {
			lastLog = time.Now()
			fmt.Fprintf(os.Stderr, "# delayed: %d of %d records after %s (intake pending %d, err %v)\n", have, want, time.Since(since).Truncate(time.Second), pending, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("delayed: %d of %d records within %s (last error: %v)", have, want, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkSample reads back up to 200 of the tag's records spread over the
// run and checks their status.
func (d *delayedRun) checkSample(ctx context.Context, tag string, n int, want state.State) error {
	step := max(n/200, 1)
	for i := 0; i < n; i += step {
		id := event.ID(delayedAccount, tag+"-"+strconv.Itoa(i))
		status, err := statusOf(ctx, d.recs.of(delayedAccount, id), id)
		if err != nil {
			return fmt.Errorf("delayed: record %s (%s-%d): %w", id, tag, i, err)
		}
		if status != want {
			return fmt.Errorf("delayed: record %s is %s, want %s", id, status, want)
		}
	}
	return nil
}

// diskBytes is the disk space allocated to the files under dir (as du).
func diskBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // a block removed meanwhile
				return nil
			}
			return err
		}
		if e.IsDir() {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// peakRSSMB is the child's peak resident memory (VmHWM).
func (c *child) peakRSSMB() float64 { return c.procStatusMB("VmHWM:") }

func (c *child) procStatusMB(field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return math.NaN()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return math.NaN()
}
