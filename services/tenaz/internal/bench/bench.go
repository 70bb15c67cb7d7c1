// Package bench measures tenaz end to end against a naive JetStream loop
// doing the same kind of work on the same server in the same run, and
// prints one figure per line as "name value unit".
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/tenaz"
	"github.com/tenaz/tenaz/streams"
)

// Sizes of one run.
type Sizes struct {
	Events      int           // events per throughput run (default sync)
	EventsFsync int           // events per throughput run (fsync always)
	LatencyFor  time.Duration // duration of the steady-rate run
	Rate        int           // events/s of the steady-rate run
	Workers     int           // naive loop's workers
	Rounds      int           // throughput rounds per mode (medians reported)
	Accounts    int           // accounts of the many-accounts run
	Backlog     int           // the broken account's backlog in the noisy-neighbour run
	NoisyFor    time.Duration // each steady-rate run of the noisy-neighbour run
	Delayed     int           // delayed events held (delayed_1m_*)
	Burst       int           // delayed events due at the same second (delayed_burst_*)
	Callbacks   int           // webhooks applied (callbacks_*)
	// CallbackWorkers is how many goroutines send the webhooks.
	CallbackWorkers int
	// CapacityFor is each run of the capacity phase; its provider's
	// capacity halves halfway.
	CapacityFor time.Duration
	// CapacityWarmup is the start of a capacity run left out of its
	// goodput (the limit learning from its start: capacity_learn_s).
	CapacityWarmup time.Duration
	// CapacityBacklog is the events waiting at the start of a capacity run:
	// more than it can serve.
	CapacityBacklog int
}

// Full and Quick sizes.
var (
	Full = Sizes{Events: 30000, EventsFsync: 3000, LatencyFor: 20 * time.Second, Rate: 500, Workers: 8, Rounds: 3, Accounts: 10000, Backlog: 10000, NoisyFor: 15 * time.Second,
		Delayed: 1000000, Burst: 10000, Callbacks: 20000, CallbackWorkers: 16,
		CapacityFor: time.Minute, CapacityWarmup: 10 * time.Second, CapacityBacklog: 14000}
	Quick = Sizes{Events: 5000, EventsFsync: 1000, LatencyFor: 6 * time.Second, Rate: 500, Workers: 8, Rounds: 3, Accounts: 2000, Backlog: 10000, NoisyFor: 5 * time.Second,
		Delayed: 50000, Burst: 10000, Callbacks: 5000, CallbackWorkers: 16,
		CapacityFor: 40 * time.Second, CapacityWarmup: 10 * time.Second, CapacityBacklog: 9000}
)

// Report prints figures, one per line, and keeps them for the markdown
// report.
type Report struct {
	W       io.Writer
	Figures *[]Fig
}

// Fig is one figure.
type Fig struct {
	Name, Unit string
	Value      float64
}

// Figure prints one line.
func (r Report) Figure(name string, v float64, unit string) {
	fmt.Fprintf(r.W, "%s %s %s\n", name, formatFig(v), unit)
	if r.Figures != nil {
		*r.Figures = append(*r.Figures, Fig{Name: name, Unit: unit, Value: v})
	}
	for _, g := range Goals {
		if g.Name == name && !g.Met(v) {
			fmt.Fprintf(r.W, "# %s misses its goal: %s %s\n", name, g.Op, strconv.FormatFloat(g.Value, 'f', -1, 64))
		}
	}
}

// noop is the local target: 200 {} for everything.
type noop struct {
	srv   *http.Server
	url   string
	calls atomic.Int64
}

// serve serves h on a new loopback port, with a header deadline as every
// tenaz listener has; url is http://<its address>.
func serve(h http.Handler) (srv *http.Server, url string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

// startProvider serves the fake provider (pkg/provider, no faults); stop
// closes both.
func startProvider() (prov *provider.Provider, url string, stop func(), err error) {
	prov = provider.New(provider.Faults{})
	hs, url, err := serve(prov)
	if err != nil {
		prov.Close()
		return nil, "", nil, err
	}
	return prov, url, func() {
		_ = hs.Close()
		prov.Close()
	}, nil
}

func startNoop() (*noop, error) {
	n := &noop{}
	var err error
	n.srv, n.url, err = serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"ok"}`))
	}))
	if err != nil {
		return nil, err
	}
	return n, nil
}

// startNATS starts a NATS server on a store in a new temporary folder
// named after pattern (fsync on every write when syncAlways); stop shuts
// it down and removes the folder.
func startNATS(pattern string, syncAlways bool) (srv *server.Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, nil, err
	}
	srv, err = natsd.Start(natsd.Options{StoreDir: dir, Listen: "127.0.0.1:-1", SyncAlways: syncAlways})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() {
		natsd.Shutdown(srv)
		_ = os.RemoveAll(dir)
	}, nil
}

// startPhase starts a NATS server (startNATS) and tenaz on it with the
// config cfg makes for its URL; stop stops tenaz, then the server.
func startPhase(ctx context.Context, pattern string, syncAlways bool, cfg func(natsURL string) (*config.Config, error)) (srv *server.Server, tz *Instance, stop func(context.Context), err error) {
	srv, stopNATS, err := startNATS(pattern, syncAlways)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := cfg(srv.ClientURL())
	if err == nil {
		tz, err = StartInstance(ctx, c)
	}
	if err != nil {
		stopNATS()
		return nil, nil, nil, err
	}
	return srv, tz, func(ctx context.Context) {
		_ = tz.Stop(ctx)
		stopNATS()
	}, nil
}

// configYAML is a bench config on the NATS server at natsURL: the lines
// every phase shares (an ephemeral HTTP port, errors-only logs, no auth),
// then body formatted with args.
func configYAML(natsURL, body string, args ...any) string {
	return fmt.Sprintf("nats: {url: %q}\nhttp: {addr: \"127.0.0.1:0\"}\nlog: {level: error}\nauth: {disabled: true}\n", natsURL) +
		fmt.Sprintf(body, args...)
}

// parseConfig parses a bench config; the environment is not read.
func parseConfig(y string) (*config.Config, error) {
	return config.Parse([]byte(y), func(string) (string, bool) { return "", false })
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}}

// Naive runs the reference loop: async publish of n messages, a pull
// consumer, workers doing KV create(running) → HTTP POST → KV
// update(done) with the revision → ack. Returns events/s.
func Naive(ctx context.Context, url, target string, n, workers int) (float64, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	_ = js.DeleteStream(ctx, "NAIVE")
	_ = js.DeleteKeyValue(ctx, "naive_state")
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NAIVE", Subjects: []string{"naive.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		return 0, err
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "naive_state"})
	if err != nil {
		return 0, err
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000})
	if err != nil {
		return 0, err
	}
	payload := []byte(`{"order_id":"o","total":1990}`)
	var done atomic.Int64
	start := time.Now()
	go func() {
		for i := range n {
			_, _ = js.PublishAsync("naive.acct.order", payload, jetstream.WithMsgID("n-"+strconv.Itoa(i)))
		}
	}()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	iter, err := cons.Messages(jetstream.PullMaxMessages(workers * 4))
	if err != nil {
		return 0, err
	}
	wg := naiveWorkers(cctx, iter, kv, workers, func(ctx context.Context, _ string, _ jetstream.Msg) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, bytesReader(payload))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := httpClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}, func() {
		if done.Add(1) == int64(n) {
			cancel()
		}
	})
	<-cctx.Done()
	el := time.Since(start)
	iter.Stop()
	wg.Wait()
	if done.Load() < int64(n) {
		return 0, fmt.Errorf("naive: only %d of %d done", done.Load(), n)
	}
	return float64(n) / el.Seconds(), nil
}

// naiveWorkers runs the naive loop's workers on iter until ctx ends: for
// each message, KV create "running" under a key from its sequence → call
// (the HTTP POST) → KV update "done" with the revision → ack → acked.
func naiveWorkers(ctx context.Context, iter jetstream.MessagesContext, kv jetstream.KeyValue, workers int,
	call func(ctx context.Context, key string, m jetstream.Msg), acked func()) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				m, err := iter.Next()
				if err != nil {
					return
				}
				md, _ := m.Metadata()
				key := "e" + strconv.FormatUint(md.Sequence.Stream, 10)
				rev, err := kv.Create(ctx, key, []byte(`{"status":"running"}`))
				if err != nil {
					_ = m.Nak()
					continue
				}
				call(ctx, key, m)
				if _, err := kv.Update(ctx, key, []byte(`{"status":"done"}`), rev); err != nil {
					_ = m.Nak()
					continue
				}
				_ = m.Ack()
				if acked != nil {
					acked()
				}
			}
		}()
	}
	return &wg
}

type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) Read(p []byte) (int, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}

func bytesReader(b []byte) io.Reader { return &byteReader{b: b} }

// Instance is a running tenaz against an existing server.
type Instance struct {
	t      *tenaz.System
	nc     *nats.Conn
	js     jetstream.JetStream
	prefix string          // its config's prefix: its subjects and stream names
	behind []time.Duration // per Throughput: how long after the last delivery the followers caught up
}

// BenchConfig is the tenaz config of the bench: one account, one kind, the
// no-op target.
func BenchConfig(natsURL, target string, concurrency int) (*config.Config, error) {
	return parseConfig(configYAML(natsURL, `
accounts:
  "*": {concurrency: %d}
targets:
  noop: {url: %q, timeout: 5s}
kinds:
  order.create: {target: noop, attempts: 3, backoff: {initial: 1s}}
`, concurrency, target+"/api/{{.Kind}}"))
}

// StartInstance starts all of tenaz (no embedded server: it uses url).
func StartInstance(ctx context.Context, cfg *config.Config) (*Instance, error) {
	t, err := tenaz.New(tenaz.Options{Config: cfg})
	if err != nil {
		return nil, err
	}
	if err := t.Start(ctx); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.NATS.URL)
	if err != nil {
		_ = t.Stop(ctx)
		return nil, err
	}
	js, _ := jetstream.New(nc)
	return &Instance{t: t, nc: nc, js: js, prefix: cfg.Prefix}, nil
}

// Stop stops tenaz.
func (b *Instance) Stop(ctx context.Context) error {
	b.nc.Close()
	return b.t.Stop(ctx)
}

// waitDrained waits until the ingest consumer has nothing pending or
// unacked and the in-process dispatcher has stored outcomes outcomes in
// all (metrics.Default: an outcome is counted once stored and its message
// settled, as the naive loop counts its acks).
func (b *Instance) waitDrained(ctx context.Context, outcomes uint64, timeout time.Duration) error {
	consumers := [][2]string{{streams.StreamName(b.prefix, streams.StreamIntake), "ingest"}}
	if err := b.waitIdle(ctx, consumers, timeout, "not accepted"); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		have := metrics.Default.Snapshot().Outcomes
		if have >= outcomes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not drained within %s (%d outcomes left)", timeout, outcomes-have)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitFollowed waits until the change-feed followers (the search index
// and the audit archive, on one feed per partition) have taken every
// revision: the events' CPU then includes theirs, and the next round
// does not pay for this one's.
func (b *Instance) waitFollowed(ctx context.Context, timeout time.Duration) error {
	subj := names.NewSubjects(b.prefix)
	n, _ := streams.Partitions(ctx, b.js, b.prefix)
	var feeds [][2]string
	for p := range n {
		feeds = append(feeds, [2]string{"KV_" + subj.StateBucketOf(p), search.FeedConsumer})
	}
	return b.waitIdle(ctx, feeds, timeout, "the followers behind")
}

// waitIdle waits until every consumer ({stream, durable}) has nothing
// pending or unacked; one not there yet counts as busy (the services make
// theirs at their start). Past timeout it fails as what.
func (b *Instance) waitIdle(ctx context.Context, consumers [][2]string, timeout time.Duration, what string) error {
	deadline := time.Now().Add(timeout)
	for {
		left := uint64(0)
		for _, c := range consumers {
			ci, err := b.js.Consumer(ctx, c[0], c[1])
			if err != nil {
				left++
				continue
			}
			info := ci.CachedInfo()
			left += info.NumPending + uint64(info.NumAckPending)
		}
		if left == 0 {
			return nil
		}
		if os.Getenv("BENCH_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "%s %s: left=%d\n", time.Now().Format("15:04:05.000"), what, left)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s within %s (%d left)", what, timeout, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Throughput publishes n submissions of the account bench to intake
// (async) and waits until every one is done. Returns events/s.
func (b *Instance) Throughput(ctx context.Context, tag string, n int) (float64, error) {
	return b.ThroughputOver(ctx, tag, n, []string{"bench"})
}

// ThroughputOver is Throughput with the submissions spread over accounts
// in turn.
func (b *Instance) ThroughputOver(ctx context.Context, tag string, n int, accounts []string) (float64, error) {
	payload := []byte(`{"order_id":"o","total":1990}`)
	outcomes := metrics.Default.Snapshot().Outcomes + uint64(n)
	start := time.Now()
	for i := range n {
		m := nats.NewMsg(cmp.Or(b.prefix, "tenaz") + ".intake." + accounts[i%len(accounts)] + ".order.create")
		m.Data = payload
		m.Header.Set("Nats-Msg-Id", tag+"-"+strconv.Itoa(i))
		if _, err := b.js.PublishMsgAsync(m); err != nil {
			return 0, err
		}
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("publish did not complete")
	}
	if err := b.waitDrained(ctx, outcomes, 10*time.Minute); err != nil {
		return 0, err
	}
	took, drained := time.Since(start), time.Now()
	if err := b.waitFollowed(ctx, 10*time.Minute); err != nil {
		return 0, err
	}
	b.behind = append(b.behind, time.Since(drained))
	return float64(n) / took.Seconds(), nil
}

// Latency submits at a steady rate for d and returns the p50 and p99 of
// submit → done (seen by a watcher of the state bucket), in ms.
func (b *Instance) Latency(ctx context.Context, tag string, rate int, d time.Duration) (p50, p99 float64, err error) {
	return b.LatencyOf(ctx, "bench", tag, rate, d)
}

// LatencyOf is Latency for the given account.
func (b *Instance) LatencyOf(ctx context.Context, account, tag string, rate int, d time.Duration) (p50, p99 float64, err error) {
	recs, err := openRecords(ctx, b.js)
	if err != nil {
		return 0, 0, err
	}
	updates, stop, err := recs.watch(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	sent := sync.Map{} // key → time
	var lats []float64
	n := int(float64(rate) * d.Seconds())
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := 0
		for e := range updates {
			var r struct {
				Status         string `json:"status"`
				IdempotencyKey string `json:"idempotency_key"`
			}
			if json.Unmarshal(e.Value(), &r) != nil || r.Status != "done" {
				continue
			}
			if t0, ok := sent.Load(r.IdempotencyKey); ok {
				lats = append(lats, float64(time.Since(t0.(time.Time)).Microseconds())/1000)
				seen++
				if seen == n {
					return
				}
			}
		}
	}()
	payload := []byte(`{"order_id":"o","total":1990}`)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		key := tag + "-" + strconv.Itoa(i)
		m := nats.NewMsg("tenaz.intake." + account + ".order.create")
		m.Data = payload
		m.Header.Set("Nats-Msg-Id", key)
		sent.Store(key, time.Now())
		if _, err := b.js.PublishMsgAsync(m); err != nil {
			return 0, 0, err
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return 0, 0, fmt.Errorf("latency run: not all done")
	}
	sort.Float64s(lats)
	return pct(lats, 0.50), pct(lats, 0.99), nil
}

func pct(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// Run runs the whole suite and prints figures.
// cpuTime is the CPU time (user + system) this process has used: the
// server, tenaz, the load and the target all run in it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostSample is the host's CPU time from /proc/stat, in ticks, summed
// over every core: busy and in all. ok is false where /proc/stat is not
// readable (not Linux).
type hostSample struct {
	busy, total uint64
	ok          bool
}

func hostCPU() hostSample {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostSample{}
	}
	return parseProcStat(string(b))
}

// parseProcStat reads the first line of /proc/stat: "cpu" then user,
// nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice.
func parseProcStat(stat string) hostSample {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return hostSample{}
	}
	var h hostSample
	for i, v := range f[1:min(len(f), 9)] { // guest time is counted in user time already
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return hostSample{}
		}
		h.total += n
		if i != 3 && i != 4 { // idle, iowait; steal is a core we wanted and did not get
			h.busy += n
		}
	}
	h.ok = true
	return h
}

// busyPct is the share of the host's CPU that was busy from h to later,
// in percent.
func (h hostSample) busyPct(later hostSample) (float64, bool) {
	if !h.ok || !later.ok || later.total <= h.total {
		return 0, false
	}
	return 100 * float64(later.busy-h.busy) / float64(later.total-h.total), true
}

// Phases selects the runs.
type Phases struct{ Default, Fsync, Noisy bool }

func Run(ctx context.Context, sz Sizes, r Report, concurrency int, ph Phases) error {
	target, err := startNoop()
	if err != nil {
		return err
	}
	defer target.srv.Close()
	for _, fsync := range []bool{false, true} {
		if (fsync && !ph.Fsync) || (!fsync && !ph.Default) {
			continue
		}
		if err := runMode(ctx, sz, r, concurrency, target.url, fsync); err != nil {
			return err
		}
	}
	if ph.Noisy {
		if err := Noisy(ctx, sz, r, target.url); err != nil {
			return err
		}
		return Flooded(ctx, sz, r, target.url)
	}
	return nil
}

// runMode measures one sync mode: rounds of naive then tenaz on the same
// server (medians of each; the machine is noisy, the ratio of medians is
// the figure), then latency at a steady rate.
func runMode(ctx context.Context, sz Sizes, r Report, concurrency int, targetURL string, fsync bool) error {
	srv, tz, stop, err := startPhase(ctx, "tenaz-bench-*", fsync, func(url string) (*config.Config, error) {
		return BenchConfig(url, targetURL, concurrency)
	})
	if err != nil {
		return err
	}
	defer stop(ctx)
	n := sz.Events
	if fsync {
		n = sz.EventsFsync
	}
	profile := os.Getenv("BENCH_PROFILE_E2E")
	if profile != "" && fsync {
		profile += ".fsync"
	}
	res, err := naiveRounds(ctx, sz, srv.ClientURL(), targetURL, n, func(round int) (float64, error) {
		if profile != "" && round == 0 {
			pf, _ := os.Create(profile)
			_ = pprof.StartCPUProfile(pf)
			defer pprof.StopCPUProfile()
		}
		return tz.Throughput(ctx, fmt.Sprintf("t%v-%d", fsync, round), n)
	})
	if err != nil {
		return err
	}
	suffix := ""
	if fsync {
		suffix = "_fsync_always"
	}
	res.report(r, suffix, true)
	r.Figure("e2e_followers_behind_ms"+suffix, medianMs(tz.behind), "ms")
	if fsync {
		return partitionRuns(ctx, sz, r, concurrency, targetURL)
	}
	p50, p99, err := tz.Latency(ctx, "lat", sz.Rate, sz.LatencyFor)
	if err != nil {
		return err
	}
	r.Figure(fmt.Sprintf("p50_ms_at_%d", sz.Rate), p50, "ms")
	r.Figure(fmt.Sprintf("p99_ms_at_%d", sz.Rate), p99, "ms")
	return nil
}

// rounds are the events/s and CPU µs per event of each round of the naive
// loop and of tenaz.
type rounds struct{ naive, e2e, naiveCPU, e2eCPU []float64 }

// naiveRounds runs sz.Rounds rounds, each of the naive loop (n events on
// the server at url) then of tenaz (e2e).
func naiveRounds(ctx context.Context, sz Sizes, url, targetURL string, n int, e2e func(round int) (float64, error)) (rounds, error) {
	var res rounds
	for round := range sz.Rounds {
		c0 := cpuTime()
		v, err := Naive(ctx, url, targetURL, n, sz.Workers)
		if err != nil {
			return res, err
		}
		res.naive = append(res.naive, v)
		res.naiveCPU = append(res.naiveCPU, float64((cpuTime()-c0).Microseconds())/float64(n))
		c0 = cpuTime()
		if v, err = e2e(round); err != nil {
			return res, err
		}
		res.e2e = append(res.e2e, v)
		res.e2eCPU = append(res.e2eCPU, float64((cpuTime()-c0).Microseconds())/float64(n))
	}
	return res, nil
}

// report prints the medians: e2e_events_per_s<suffix> and
// e2e_ratio_vs_naive<suffix>, and with all the naive side's events/s and
// both sides' CPU.
func (res rounds) report(r Report, suffix string, all bool) {
	r.Figure("e2e_events_per_s"+suffix, median(res.e2e), "events/s")
	if all {
		r.Figure("naive_events_per_s"+suffix, median(res.naive), "events/s")
	}
	r.Figure("e2e_ratio_vs_naive"+suffix, median(res.e2e)/median(res.naive), "ratio")
	if all {
		r.Figure("e2e_cpu_us_per_event"+suffix, median(res.e2eCPU), "us")
		r.Figure("naive_cpu_us_per_event"+suffix, median(res.naiveCPU), "us")
	}
}

// medianMs is the median of d in milliseconds.
func medianMs(d []time.Duration) float64 {
	v := make([]float64, len(d))
	for i := range d {
		v[i] = float64(d[i].Microseconds()) / 1000
	}
	return median(v)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// formatFig writes a figure with two decimals, or four under 0.1 (a
// fraction such as capacity_429_ratio would read 0.00 with two).
func formatFig(v float64) string {
	if v != 0 && math.Abs(v) < 0.1 {
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// partitionOf is account's partition in the store on js (0 when it cannot
// be read: the lookups that follow then fail with their own error).
func partitionOf(ctx context.Context, js jetstream.JetStream, account string) int {
	n, _ := streams.Partitions(ctx, js, "")
	return streams.PartitionOf(account, n)
}

// partitionAccounts is how many accounts share the load of a partition
// run: a partition's EVENTS holds whole accounts, so the load of one
// account would give every other partition's EVENTS nothing to write.
const partitionAccounts = 16

// partitionCounts are the streams.partitions compared.
var partitionCounts = []int{1, 4, 8}

// Partitions runs the partition comparison alone (it is part of the
// fsync phase too).
func Partitions(ctx context.Context, sz Sizes, r Report, concurrency int) error {
	target, err := startNoop()
	if err != nil {
		return err
	}
	defer target.srv.Close()
	return partitionRuns(ctx, sz, r, concurrency, target.url)
}

// partitionRuns measures, with fsync on every write, tenaz over
// partitionAccounts accounts on a store of each of partitionCounts
// partitions, against the naive loop on the same server in the same
// rounds: e2e_events_per_s_fsync_always_partitions_<n> and its ratio.
func partitionRuns(ctx context.Context, sz Sizes, r Report, concurrency int, targetURL string) error {
	accounts := make([]string, partitionAccounts)
	for i := range accounts {
		accounts[i] = "bench-" + strconv.Itoa(i)
	}
	for _, parts := range partitionCounts {
		if err := partitionRun(ctx, sz, r, concurrency, targetURL, accounts, parts); err != nil {
			return fmt.Errorf("partitions %d: %w", parts, err)
		}
	}
	return nil
}

func partitionRun(ctx context.Context, sz Sizes, r Report, concurrency int, targetURL string, accounts []string, parts int) error {
	srv, tz, stop, err := startPhase(ctx, "tenaz-bench-partitions-*", true, func(url string) (*config.Config, error) {
		cfg, err := BenchConfig(url, targetURL, concurrency)
		if err == nil {
			cfg.Streams.Partitions = parts
		}
		return cfg, err
	})
	if err != nil {
		return err
	}
	defer stop(ctx)
	res, err := naiveRounds(ctx, sz, srv.ClientURL(), targetURL, sz.EventsFsync, func(round int) (float64, error) {
		return tz.ThroughputOver(ctx, fmt.Sprintf("p%d-%d", parts, round), sz.EventsFsync, accounts)
	})
	if err != nil {
		return err
	}
	res.report(r, fmt.Sprintf("_fsync_always_partitions_%d", parts), false)
	return nil
}

// records reads the store's state records wherever its layout puts them
// (by event id in a new store: one account's are in every bucket).
type records struct {
	layout streams.Layout
	kvs    []jetstream.KeyValue
}

func openRecords(ctx context.Context, js jetstream.JetStream) (*records, error) {
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		return nil, err
	}
	return &records{layout: st.Layout(), kvs: st.KVs()}, nil
}

// of is the bucket of the record of account's event id.
func (r *records) of(account, id string) jetstream.KeyValue {
	return r.kvs[r.layout.RecordPartition(account, id)]
}

// values is how many records the buckets hold.
func (r *records) values(ctx context.Context) (uint64, error) {
	var n uint64
	for _, kv := range r.kvs {
		st, err := kv.Status(ctx)
		if err != nil {
			return 0, err
		}
		n += st.Values()
	}
	return n, nil
}

// watch sends every update of every bucket on one channel until stop.
func (r *records) watch(ctx context.Context) (<-chan jetstream.KeyValueEntry, func(), error) {
	out := make(chan jetstream.KeyValueEntry, 1024)
	var ws []jetstream.KeyWatcher
	stop := func() {
		for _, w := range ws {
			_ = w.Stop()
		}
	}
	for _, kv := range r.kvs {
		w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			stop()
			return nil, nil, err
		}
		ws = append(ws, w)
		go func() {
			for e := range w.Updates() { // closed by Stop
				if e != nil {
					out <- e
				}
			}
		}()
	}
	return out, stop, nil
}
