package tenaz_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/webhook"
	"github.com/tenaz/tenaz/services/ingest"
	"github.com/tenaz/tenaz/services/tenaz/internal/cli"
	"github.com/tenaz/tenaz/streams"
)

// legacyStore is a nats-server holding a store from before partitions:
// EVENTS and tenaz_state alone, and no partition count in EVENTS'
// metadata. EVENTS is a work queue, as it was then, unless trimmed (a
// one-partition store made since); a migration adds trimmed partitions
// beside it.
func legacyStore(t *testing.T, trimmed bool) (*natstest.Server, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx := servicetest.Context(t, 30*time.Second)
	for p := 1; p < streams.DefaultPartitions; p++ {
		if err := js.DeleteStream(ctx, streams.EventsStream("", p)); err != nil {
			t.Fatal(err)
		}
		if err := js.DeleteKeyValue(ctx, streams.StateBucket("", p)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, names.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if !trimmed {
		wq := st.CachedInfo().Config
		wq.Retention = jetstream.WorkQueuePolicy
		if err := js.DeleteStream(ctx, wq.Name); err != nil {
			t.Fatal(err)
		}
		if st, err = js.CreateStream(ctx, wq); err != nil {
			t.Fatal(err)
		}
	}
	// A store that has run a while: EVENTS' sequences (the runs' fencing
	// tokens, RunSeq) far above those of a new partition.
	for range 20 {
		for range 1000 { // below the client's bound on publishes in flight
			if _, err := js.PublishAsync("tenaz.keep.events", nil); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishing keeper messages: timed out")
		}
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject("tenaz.keep.events")); err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	delete(c.Metadata, streams.MetaPartitions)
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n, err := streams.Partitions(ctx, js, ""); err != nil || n != 1 {
		t.Fatalf("a store from before partitions: want 1 partition, got %d, %v", n, err)
	}
	return srv, js
}

// accountsOver returns one account in each of n partitions.
func accountsOver(n int) []string {
	out := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		a := fmt.Sprintf("shop%d", i)
		if p := streams.PartitionOf(a, n); out[p] == "" {
			out[p] = a
			found++
		}
	}
	return out
}

func migrateReport(t *testing.T, o *operator, args ...string) cli.MigrationReport {
	t.Helper()
	var rep cli.MigrationReport
	o.must(cli.ExitOK, append([]string{"streams", "migrate", "--json"}, args...)...).decode(t, &rep)
	return rep
}

const migrateSecret = "whsec_dGVuYXotdGVzdC1jYWxsYmFjay1zZWNyZXQ="

func migrateConfig(natsURL, ok, flaky, bad, bureauA, bureauB string) string {
	return fmt.Sprintf(`
nats: {url: %q}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
streams: {ack_wait: 2s}
poller: {grace: 1s, reconcile_every: 1h}
auth: {disabled: true}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  erp: {url: "%s/api/{{.Kind}}", timeout: 5s}
  flaky: {url: "%s/api/{{.Kind}}", timeout: 5s}
  bad: {url: "%s/api/{{.Kind}}", timeout: 5s}
  bureau_a: {url: "%s/proposals", timeout: 3s, callback_secret: %q}
  bureau_b:
    url: "%s/evaluations"
    timeout: 3s
    poll: {url: "%s/evaluations/{{.Reference}}", interval: 2s, done_when: {field: status, in: [approved, rejected]}}
kinds:
  order.create: {target: erp, attempts: 3, backoff: {initial: 1s, jitter: 0}}
  order.retry: {target: flaky, attempts: 3, backoff: {initial: 15s, max: 15s, jitter: 0}}
  order.bad: {target: bad, attempts: 1}
  credit.callback: {target: bureau_a, completion: callback, attempts: 3, callback_sla: 15s, on_callback_timeout: manual_review}
  credit.poll: {target: bureau_b, completion: poll, attempts: 3, poll_sla: 1m}
`, natsURL, ok, flaky, bad, bureauA, migrateSecret, bureauB, bureauB)
}

// A store from before partitions, with events in every state (pending in
// EVENTS, delayed, retrying, awaiting a callback, polling, done, dead) in
// accounts of every partition of 4, is moved by `tenaz streams migrate
// --partitions 4` while the services are stopped (refused while they run),
// and tenaz started again on it brings every event to its end: each
// delivered once, the retry, the delay, the polls and the callback
// deadline firing in the new partitions. A second migrate moves nothing.
// Its EVENTS a work queue or trimmed: a trimmed one's settled messages not
// trimmed yet are copied too, come again and are dropped as stale.
func TestStreamsMigrateOnePartitionStore(t *testing.T) {
	t.Parallel()
	for _, trimmed := range []bool{false, true} {
		t.Run(map[bool]string{false: "work queue", true: "trimmed"}[trimmed], func(t *testing.T) {
			t.Parallel()
			migrateOnePartitionStore(t, trimmed)
		})
	}
}

func migrateOnePartitionStore(t *testing.T, trimmed bool) {
	srv, js := legacyStore(t, trimmed)
	ok, okSrv := servicetest.Provider(t, provider.Faults{}, provider.WithIdempotent())
	flaky, flakySrv := servicetest.Provider(t, provider.Faults{FailFirst: 1}, provider.WithIdempotent())
	_, badSrv := servicetest.Provider(t, provider.Faults{Status: http.StatusUnprocessableEntity})
	bureauA, aSrv := servicetest.Provider(t, provider.Faults{}, provider.WithIdempotent())
	bureauB, bSrv := servicetest.Provider(t, provider.Faults{PollAfter: 5}, provider.WithIdempotent())
	yaml := migrateConfig(srv.ClientURL(), okSrv.URL, flakySrv.URL, badSrv.URL, aSrv.URL, bSrv.URL)
	op := newOperator(t, srv.ClientURL())
	accounts := accountsOver(4)

	type ev struct {
		id, account, kind string
		want              string // the status it ends in
		prov              *provider.Provider
	}
	var evs []ev
	submit := func(base, account, kind, key, extra, want string, prov *provider.Provider) ev {
		code, v := post(t, base, account+"-"+key, fmt.Sprintf(`{"account":%q,"kind":%q,"payload":{"order_id":%q}%s}`, account, kind, key, extra))
		if code != http.StatusAccepted {
			t.Fatalf("submit %s %s: want 202, got %d %+v", account, kind, code, v)
		}
		e := ev{id: v.ID, account: account, kind: kind, want: want, prov: prov}
		evs = append(evs, e)
		return e
	}

	// Every state but pending, with tenaz running on one partition.
	tz := start(t, yaml)
	base := "http://" + tz.HTTPAddr()
	due := time.Now().Add(20 * time.Second).UTC().Truncate(time.Second)
	var answered []ev
	for _, a := range accounts {
		waitStatus(t, base, submit(base, a, "order.create", "done", "", "done", ok).id, "done")
		waitStatus(t, base, submit(base, a, "order.bad", "dead", "", "dead", nil).id, "dead")
		waitStatus(t, base, submit(base, a, "order.retry", "retry", "", "done", flaky).id, "retrying")
		cb := submit(base, a, "credit.callback", "answered", "", "done", bureauA)
		answered = append(answered, cb)
		waitStatus(t, base, cb.id, "awaiting_callback")
		waitStatus(t, base, submit(base, a, "credit.callback", "late", "", "manual_review", bureauA).id, "awaiting_callback")
		waitStatus(t, base, submit(base, a, "credit.poll", "poll", "", "done", bureauB).id, "polling")
		waitStatus(t, base, submit(base, a, "order.create", "delayed", fmt.Sprintf(`,"not_before":%q`, due.Format(time.RFC3339)), "done", ok).id, "scheduled")
	}
	r := op.run("streams", "migrate", "--partitions", "4")
	if r.code != cli.ExitConflict || !strings.Contains(r.stderr, "stop every tenaz service") || !strings.Contains(r.stderr, "tenaz-dispatcher") {
		t.Fatalf("migrate while tenaz runs: want exit %d naming what to stop, got\n%s", cli.ExitConflict, r)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tz.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	// Pending in EVENTS: accepted by ingest alone, no dispatcher.
	cfg := servicetest.Config(t, yaml, nil)
	nc, _ := srv.Conn(t)
	ing, err := ingest.New(ingest.Options{Conn: nc, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, servicetest.Context(t, time.Minute), ing)
	mux := http.NewServeMux()
	ing.Routes(mux)
	api := httptest.NewServer(mux)
	defer api.Close()
	events, err := js.Stream(servicetest.Context(t, time.Minute), names.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	// An account's messages in EVENTS: with no dispatcher running, those
	// settled and not trimmed yet stay.
	msgs := func(a string) uint64 {
		info, err := events.Info(servicetest.Context(t, 5*time.Second), jetstream.WithSubjectFilter("tenaz.events."+a+".>"))
		if err != nil {
			return 0
		}
		var n uint64
		for _, k := range info.State.Subjects {
			n += k
		}
		return n
	}
	before := map[string]uint64{}
	for _, a := range accounts {
		before[a] = msgs(a)
		submit(api.URL, a, "order.create", "pending", "", "done", ok)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		for _, a := range accounts {
			if msgs(a) != before[a]+1 {
				return false
			}
		}
		return true
	}, "the pending events' messages to wait in EVENTS")
	servicetest.Stop(t, ing)
	// A consumer per account, as a version before left them: the
	// migration deletes every one.
	for _, a := range accounts {
		if _, err := events.CreateOrUpdateConsumer(servicetest.Context(t, time.Minute), jetstream.ConsumerConfig{
			Durable: names.ConsumerName(a), FilterSubject: "tenaz.events." + a + ".>", AckPolicy: jetstream.AckExplicitPolicy, MemoryStorage: true,
		}); err != nil {
			t.Fatal(err)
		}
	}

	// The dry run says what would move, and that nothing reads the store
	// any more once the stopped services' pull requests have expired.
	var dry cli.MigrationReport
	natstest.Eventually(t, 15*time.Second, func() bool {
		dry = migrateReport(t, op, "--partitions", "4", "--dry-run")
		return dry.Busy == ""
	}, "the stopped services' consumers to be idle: %s", &dry.Busy)
	// Messages move with their accounts, records to their event id's
	// partition (a migrated store places records by event).
	records := map[int]int{}
	for _, e := range evs {
		if q := streams.PartitionOf(e.id, 4); q != 0 {
			records[q]++
		}
	}
	for _, mv := range dry.Moves {
		if mv.From != 0 || mv.Records != records[mv.To] || mv.Messages+mv.Schedules < 5 {
			t.Errorf("dry run: want %v records and at least 5 messages or schedules from partition 0 to each other, got %+v", records, dry.Moves)
		}
	}
	if len(dry.Moves) != 3 {
		t.Fatalf("dry run: want moves to partitions 1, 2 and 3, got %+v", dry.Moves)
	}
	if n, _ := streams.Partitions(servicetest.Context(t, 5*time.Second), js, ""); n != 1 {
		t.Fatalf("a dry run changes nothing: want 1 partition, got %d", n)
	}

	rep := migrateReport(t, op, "--partitions", "4")
	if rep.From != 1 || rep.To != 4 || len(rep.Moves) != 3 {
		t.Fatalf("migrate: want 1 to 4 with moves to 3 partitions, got %+v", rep)
	}
	for _, mv := range rep.Moves {
		if mv.Records != records[mv.To] {
			t.Errorf("migrate: want %d records moved to partition %d, got %+v", records[mv.To], mv.To, mv)
		}
	}
	ctx := servicetest.Context(t, 2*time.Minute)
	if n, err := streams.Partitions(ctx, js, ""); n != 4 || err != nil {
		t.Fatalf("after migrate: want the store's count 4, got %d, %v", n, err)
	}
	var deleted []string
	for _, a := range accounts {
		deleted = append(deleted, names.StreamEvents+"/"+names.ConsumerName(a))
		if _, err := events.Consumer(ctx, names.ConsumerName(a)); err == nil {
			t.Errorf("account %s's consumer left by a version before: want it deleted", a)
		}
	}
	slices.Sort(rep.Consumers)
	if slices.Sort(deleted); !slices.Equal(rep.Consumers, deleted) {
		t.Errorf("migrate: want the consumers left by a version before reported deleted, %v; got %v", deleted, rep.Consumers)
	}
	for _, a := range accounts[1:] {
		info, err := events.Info(ctx, jetstream.WithSubjectFilter("tenaz.events."+a+".>"))
		if err != nil || len(info.State.Subjects) != 0 {
			t.Errorf("EVENTS after migrate: want nothing left of account %s, got %v, %v", a, info.State.Subjects, err)
		}
	}
	if again := migrateReport(t, op, "--partitions", "4"); len(again.Moves) != 0 || again.From != 4 {
		t.Fatalf("a second migrate: want nothing moved, got %+v", again)
	}

	// tenaz again, on the store's 4 partitions.
	tz = start(t, yaml)
	base = "http://" + tz.HTTPAddr()
	for _, cb := range answered {
		waitStatus(t, base, cb.id, "awaiting_callback")
		body := fmt.Sprintf(`{"event_id":%q,"status":"approved"}`, cb.id)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/callbacks/bureau_a", strings.NewReader(body))
		for k, v := range webhook.Headers(migrateSecret, "msg_"+cb.id, time.Now(), []byte(body)) {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("callback of %s: want 2xx, got %d", cb.id, resp.StatusCode)
		}
	}
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		natstest.Eventually(t, 40*time.Second, func() bool { return get(t, base+"/v1/events/"+e.id).Status == e.want },
			"%s %s (%s) to be %s: %s", e.account, e.kind, e.id, e.want, natstest.Lazy(func() any { return get(t, base+"/v1/events/"+e.id).Status }))
		rec, _, err := st.Get(ctx, e.account, e.id)
		if err != nil {
			t.Errorf("%s in its event's partition %d: %v", e.id, streams.PartitionOf(e.id, 4), err)
		}
		if e.prov != nil {
			if n := e.prov.Effects(e.id); n != 1 {
				t.Errorf("%s %s (%s): want its effect applied once, got %d (history %s)", e.account, e.kind, e.id, n, servicetest.Actions(rec))
			}
		}
		if e.kind == "order.create" && strings.Contains(servicetest.Actions(rec), "due") {
			if calls := ok.CallsFor(e.id); len(calls) == 0 || calls[0].At.Before(due) {
				t.Errorf("delayed %s: want delivered after %s, got calls %+v", e.id, due, calls)
			}
		}
	}
	// Every event delivered without a consumer per account: none made
	// again on any partition.
	for p := range 4 {
		s, err := js.Stream(ctx, streams.EventsStream("", p))
		if err != nil {
			t.Fatal(err)
		}
		l := s.ConsumerNames(ctx)
		for name := range l.Name() {
			if _, ok := names.AccountOfConsumer(name); ok {
				t.Errorf("%s after tenaz ran: want no consumer per account, got %s", streams.EventsStream("", p), name)
			}
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A migrate killed part-way leaves the store marked: tenaz refuses to
// start on it, naming the command that finishes it, and that command run
// again moves the rest, each of 10,000 events' messages ending in its
// account's partition and its record in its event's, exactly once.
func TestStreamsMigrateKilledResumes(t *testing.T) {
	t.Parallel()
	srv, js := legacyStore(t, false)
	ctx := servicetest.Context(t, 6*time.Minute) // the resumed migrate alone took 158 s under -race beside a loaded machine
	one := names.NewSubjects("")
	st, err := store.Open(ctx, js, store.Options{Layout: streams.Layout{Partitions: 1}})
	if err != nil {
		t.Fatal(err)
	}
	q := queue.New(js, one)
	const n = 10000
	accounts := make([]string, 40)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("acct%d", i)
	}
	ids := map[string]string{} // id -> account
	var pend []jetstream.PubAckFuture
	for i := range n {
		a, key := accounts[i%len(accounts)], fmt.Sprintf("k%d", i)
		env := event.Envelope{ID: event.ID(a, key), Account: a, Kind: "order.create",
			IdempotencyKey: key, Payload: []byte(`{"order_id":"x"}`), CreatedAt: time.Now().UTC()}
		p, err := st.WriteAsync(queue.Initial(env), 0)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, err := q.EnqueueAsync(env, rev, env.ID)
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, f)
		ids[env.ID] = env.Account
		if len(pend) == 1000 || i == n-1 { // below the client's bound on publishes in flight
			for _, f := range pend {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					t.Fatal(err)
				}
			}
			pend = pend[:0]
		}
	}

	cmd := tenazCmd(t, "", []string{"NATS_URL=" + srv.ClientURL(), "XDG_CONFIG_HOME=" + t.TempDir()}, "streams", "migrate", "--partitions", "4")
	out := &servicetest.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	moved := func() uint64 {
		var sum uint64
		for p := 1; p < 4; p++ {
			if s, err := js.Stream(ctx, streams.EventsStream("", p)); err == nil {
				sum += s.CachedInfo().State.Msgs
			}
		}
		return sum
	}
	natstest.Eventually(t, 60*time.Second, func() bool { return moved() >= 1000 }, "the migrate to have copied 1000 messages: %s", out)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	copiedBefore := moved()
	if copiedBefore >= 7000 {
		t.Fatalf("killed too late to test a resume: %d messages already moved", moved())
	}

	err = refused(t, servicetest.Config(t, fmt.Sprintf("nats: {url: %q}\nhttp: {addr: \"127.0.0.1:0\"}\nauth: {disabled: true}\n", srv.ClientURL()), nil))
	if err == nil || !strings.Contains(err.Error(), "tenaz streams migrate --partitions 4") {
		t.Fatalf("tenaz on a half-moved store: want refused naming `tenaz streams migrate --partitions 4`, got %v", err)
	}

	if r := newOperator(t, srv.ClientURL()).run("streams", "status"); r.code != cli.ExitOK || !strings.Contains(r.stdout, "tenaz streams migrate --partitions 4") || !strings.Contains(r.stdout, "EVENTS_3") {
		t.Fatalf("streams status of a half-moved store: want both layouts' streams and the command that finishes the move, got\n%s", r)
	}

	start := time.Now()
	again := newOperator(t, srv.ClientURL()).must(cli.ExitOK, "streams", "migrate", "--partitions", "4")
	t.Logf("resumed migrate of %d events: %.1fs after the killed run had copied %d messages\n%s", n, time.Since(start).Seconds(), copiedBefore, again.stderr)
	if !strings.Contains(again.stderr, "resuming migration") || !strings.Contains(again.stdout, "moved from 1 to 4 partition(s)") {
		t.Fatalf("migrate again: want the migration resumed and finished, got\n%s", again)
	}

	// Each event: one message, in its account's partition, and one record, in its event's.
	four := one.WithPartitions(4)
	seen := map[string]int{}
	for p := range 4 {
		s, err := js.Stream(ctx, four.EventsStreamOf(p))
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); ; {
			m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(four.EventsIn(p)))
			if err != nil {
				break
			}
			seq = m.Sequence + 1
			id := m.Header.Get(names.HeaderEventID)
			if a, ok := ids[id]; !ok || four.PartitionOf(a) != p {
				t.Fatalf("message of %s (account %q) in partition %d", id, a, p)
			}
			if m.Header.Get(queue.HeaderRev) != "" && p != 0 {
				t.Fatalf("moved message of %s keeps the revision %s of its record's old place", id, m.Header.Get(queue.HeaderRev))
			}
			seen[id]++
		}
		kv, err := js.KeyValue(ctx, four.StateBucketOf(p))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for id := range keys.Keys() {
			if streams.PartitionOf(id, 4) != p {
				t.Fatalf("record %s (account %q) in partition %d, not its event's", id, ids[id], p)
			}
			seen[id] += 1000
		}
	}
	for id := range ids {
		if seen[id] != 1001 {
			t.Fatalf("event %s: want one message and one record, got %d messages and %d records", id, seen[id]%1000, seen[id]/1000)
		}
	}
	if len(seen) != n {
		t.Fatalf("want %d events, found %d", n, len(seen))
	}
}
