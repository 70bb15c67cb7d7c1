package streams_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/streams"
)

func setup(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Every data file is strict JSON whose keys all decode into the config
// struct (a typo would otherwise be silently ignored).
func TestDataFilesDecodeStrictly(t *testing.T) {
	t.Parallel()
	ents, err := fs.ReadDir(streams.FS(), ".")
	if err != nil || len(ents) < 8 {
		t.Fatalf("want at least 8 data files, got %d (%v)", len(ents), err)
	}
	for _, e := range ents {
		b, _ := fs.ReadFile(streams.FS(), e.Name())
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		var v any
		switch {
		case strings.HasPrefix(e.Name(), "stream-"):
			v = &jetstream.StreamConfig{}
		case strings.HasPrefix(e.Name(), "kv-"):
			v = &jetstream.KeyValueConfig{}
		case strings.HasPrefix(e.Name(), "consumer-"):
			v = &jetstream.ConsumerConfig{}
		default:
			t.Fatalf("%s: unknown kind of data file", e.Name())
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s: unknown or mistyped key: %v", e.Name(), err)
		}
	}
}

// Apply creates every stream and bucket, and applying twice changes nothing.
func TestApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	o := streams.Options{Prefix: "acme"}
	for i := 0; i < 2; i++ {
		if _, err := streams.Apply(ctx, js, o); err != nil {
			t.Fatalf("apply #%d: %v", i+1, err)
		}
	}
	for _, name := range []string{"ACME_INTAKE", "ACME_EVENTS", "ACME_DEAD"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s missing: %v", name, err)
		}
		for _, subj := range s.CachedInfo().Config.Subjects {
			if !strings.HasPrefix(subj, "acme.") {
				t.Fatalf("stream %s subject %q does not carry the prefix", name, subj)
			}
		}
	}
	for _, b := range []string{"acme_state", "acme_breakers", "acme_effects"} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Fatalf("bucket %s missing: %v", b, err)
		}
	}
	// Records that expire one by one (finished events, recorded effects)
	// need per-message TTLs on the bucket's stream.
	for _, b := range []string{"acme_state", "acme_effects"} {
		s, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatalf("stream of bucket %s: %v", b, err)
		}
		if !s.CachedInfo().Config.AllowMsgTTL {
			t.Fatalf("bucket %s: want per-key TTLs allowed (limit_marker_ttl), got a stream without them", b)
		}
	}
	// The dispatchers read each account's messages by direct get.
	for p := range streams.DefaultPartitions {
		s, err := js.Stream(ctx, streams.EventsStream("acme", p))
		if err != nil {
			t.Fatal(err)
		}
		if !s.CachedInfo().Config.AllowDirect {
			t.Fatalf("%s: want direct gets allowed", streams.EventsStream("acme", p))
		}
	}
}

// A schedule in EVENTS fires onto its target subject, where the account's
// messages are read: the mechanism delays and retries use.
func TestScheduleFiresIntoWorkQueue(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "EVENTS", accountConsumer("a"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Second)
	if _, err := js.Publish(ctx, "tenaz.sched.ev_x", []byte("hello"),
		jetstream.WithScheduleAt(at), jetstream.WithScheduleTarget("tenaz.events.a.k")); err != nil {
		t.Fatalf("publish schedule: %v", err)
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got jetstream.Msg
	for m := range msgs.Messages() {
		got = m
	}
	if got == nil {
		t.Fatal("scheduled message did not arrive within 5s")
	}
	if string(got.Data()) != "hello" || got.Subject() != "tenaz.events.a.k" {
		t.Fatalf("got %q on %s", got.Data(), got.Subject())
	}
	if time.Now().Before(at.Truncate(time.Second)) {
		t.Fatalf("fired before due time %s", at)
	}
	_ = got.Ack()
}

// A newer schedule on an event's schedule subject replaces the older one
// (rollup), and purging the subject cancels it: delays and retries rely on
// both.
func TestScheduleReplaceAndCancel(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	pub := func(body string, at time.Time, target string) {
		t.Helper()
		m := nats.NewMsg("tenaz.sched.ev_y")
		m.Data = []byte(body)
		m.Header.Set("Nats-Schedule", "@at "+at.UTC().Format(time.RFC3339))
		m.Header.Set("Nats-Schedule-Target", target)
		m.Header.Set("Nats-Rollup", "sub")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %s: %v", body, err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "EVENTS", accountConsumer("b"))
	if err != nil {
		t.Fatal(err)
	}
	pub("old", time.Now().Add(time.Hour), "tenaz.events.b.k")
	pub("new", time.Now().Add(time.Second), "tenaz.events.b.k")
	msgs, err := cons.Fetch(2, jetstream.FetchMaxWait(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range msgs.Messages() {
		got = append(got, string(m.Data()))
		_ = m.Ack()
	}
	if len(got) != 1 || got[0] != "new" {
		t.Fatalf("want only the replacing schedule to fire, got %q", got)
	}
	s, _ := js.Stream(ctx, "EVENTS")
	pub("cancelled", time.Now().Add(time.Second), "tenaz.events.b.k")
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("tenaz.sched.ev_y")); err != nil {
		t.Fatal(err)
	}
	msgs, err = cons.Fetch(1, jetstream.FetchMaxWait(2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		t.Fatalf("a purged schedule fired: %q", m.Data())
	}
}

// DEAD is bounded: by default its entries expire after 30 days; the
// options (deadletter.retention and max_bytes) replace the bounds on the
// server when applied again, and DEAD refuses new entries when full
// rather than dropping old ones.
func TestDeadLimitsApplied(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	dead := func() jetstream.StreamConfig {
		t.Helper()
		s, err := js.Stream(ctx, streams.StreamDead)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config
	}
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	if c := dead(); c.MaxAge != 30*24*time.Hour || c.MaxBytes > 0 || c.Discard != jetstream.DiscardNew {
		t.Fatalf("default DEAD: want max_age 720h, no max_bytes, discard new, got max_age %s, max_bytes %d, discard %v", c.MaxAge, c.MaxBytes, c.Discard)
	}
	if _, err := streams.Apply(ctx, js, streams.Options{DeadMaxAge: 7 * 24 * time.Hour, DeadMaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if c := dead(); c.MaxAge != 7*24*time.Hour || c.MaxBytes != 1<<20 {
		t.Fatalf("configured DEAD: want max_age 168h and max_bytes 1 MiB, got %s and %d", c.MaxAge, c.MaxBytes)
	}
	// A retention shorter than the duplicate window (2m) shortens the window.
	if _, err := streams.Apply(ctx, js, streams.Options{DeadMaxAge: 30 * time.Second}); err != nil {
		t.Fatalf("a 30s retention: want it applied, got %v", err)
	}
	if c := dead(); c.MaxAge != 30*time.Second || c.Duplicates != 30*time.Second || c.MaxBytes > 0 {
		t.Fatalf("30s retention: want max_age and duplicate window 30s, no max_bytes, got %s, %s, %d", c.MaxAge, c.Duplicates, c.MaxBytes)
	}
	for _, name := range []string{"INTAKE", "EVENTS"} {
		s, _ := js.Stream(ctx, name)
		if c := s.CachedInfo().Config; c.MaxAge != 0 || c.MaxBytes > 0 {
			t.Fatalf("%s: want DEAD's bounds on DEAD only, got max_age %s, max_bytes %d", name, c.MaxAge, c.MaxBytes)
		}
	}
}

// A new store gets DefaultPartitions (or the count asked for), each with
// its EVENTS stream, its state bucket and its poller consumer, and its
// records placed by event id, both recorded in EVENTS' metadata; applying
// again without a count keeps the store's, and a different count is
// refused with ErrPartitions, changing nothing.
func TestApplyPartitions(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	l, err := streams.Apply(ctx, js, streams.Options{})
	if err != nil || l != (streams.Layout{Partitions: streams.DefaultPartitions, RecordsByEvent: true}) {
		t.Fatalf("a new store: want %d partitions, records by event, got %+v (%v)", streams.DefaultPartitions, l, err)
	}
	if read, err := streams.StoreLayout(ctx, js, ""); err != nil || read != l {
		t.Fatalf("read back: want %+v, got %+v (%v)", l, read, err)
	}
	n := l.Partitions
	for p := range n {
		s, err := js.Stream(ctx, streams.EventsStream("", p))
		if err != nil {
			t.Fatalf("partition %d: stream %s: %v", p, streams.EventsStream("", p), err)
		}
		root := streams.Root("tenaz", p) + "."
		for _, subj := range s.CachedInfo().Config.Subjects {
			if !strings.HasPrefix(subj, root) || (p > 0 && strings.HasPrefix(subj, "tenaz.events.")) {
				t.Errorf("partition %d: subject %q not under %s", p, subj, root)
			}
		}
		if _, err := js.KeyValue(ctx, streams.StateBucket("", p)); err != nil {
			t.Errorf("partition %d: bucket %s: %v", p, streams.StateBucket("", p), err)
		}
		if _, err := s.Consumer(ctx, "poller"); err != nil {
			t.Errorf("partition %d: poller consumer: %v", p, err)
		}
	}
	if again, err := streams.Apply(ctx, js, streams.Options{}); err != nil || again != l {
		t.Fatalf("again, no count asked: want the store's %+v, got %+v (%v)", l, again, err)
	}
	if _, err := streams.Apply(ctx, js, streams.Options{Partitions: 2}); !errors.Is(err, streams.ErrPartitions) {
		t.Fatalf("another count: want ErrPartitions, got %v", err)
	}
	if got, _ := streams.Partitions(ctx, js, ""); got != streams.DefaultPartitions {
		t.Fatalf("after the refusal: want %d partitions, got %d", streams.DefaultPartitions, got)
	}
}

// A store from before partitions (EVENTS without the metadata) is a
// one-partition store with its records by account, and stays one: its
// streams are applied as they were.
func TestApplyKeepsAStoreFromBeforePartitions(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	ss, err := streams.Streams(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ss {
		if c.Name == "EVENTS" {
			c.Metadata = nil
			if _, err := js.CreateStream(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err := streams.Apply(ctx, js, streams.Options{})
	if err != nil || l != (streams.Layout{Partitions: 1}) {
		t.Fatalf("want the old store's one partition, records by account, got %+v (%v)", l, err)
	}
	if read, err := streams.StoreLayout(ctx, js, ""); err != nil || read != l {
		t.Fatalf("read back after Apply: want %+v kept, got %+v (%v)", l, read, err)
	}
	if _, err := js.Stream(ctx, streams.EventsStream("", 1)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("want no second partition made, got %v", err)
	}
	if _, err := streams.Apply(ctx, js, streams.Options{Partitions: 4}); !errors.Is(err, streams.ErrPartitions) {
		t.Fatalf("asking 4 of a 1-partition store: want ErrPartitions, got %v", err)
	}
}

// A store from before has a work-queue INTAKE, which the server cannot
// turn into a limits stream: Apply keeps it a work queue, and a new
// store's INTAKE is of limits retention (ingest trims it).
func TestApplyKeepsAWorkQueueIntake(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	ss, err := streams.Streams(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ss {
		if c.Name == streams.StreamIntake {
			if c.Retention != jetstream.LimitsPolicy {
				t.Fatalf("a new store's INTAKE: want limits retention, got %v", c.Retention)
			}
			c.Retention = jetstream.WorkQueuePolicy
			if _, err := js.CreateStream(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatalf("apply over a work-queue INTAKE: %v", err)
	}
	st, err := js.Stream(ctx, streams.StreamIntake)
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Retention; r != jetstream.WorkQueuePolicy {
		t.Fatalf("want the store's work-queue INTAKE kept, got %v", r)
	}
}

// Stream and bucket names carry the prefix; the default prefix's are the
// data files' own, so a store of it keeps its names.
func TestNamesCarryThePrefix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ prefix, base, stream, bucket string }{
		{"", "INTAKE", "INTAKE", ""},
		{"tenaz", "TENAZ_ADVISORIES", "TENAZ_ADVISORIES", ""},
		{"acme", "INTAKE", "ACME_INTAKE", ""},
		{"acme", "TENAZ_ADVISORIES", "ACME_ADVISORIES", ""},
		{"acme-eu", "EVENTS", "ACME_EU_EVENTS", ""},
		{"", "tenaz_state", "", "tenaz_state"},
		{"acme", "tenaz_owners", "", "acme_owners"},
		{"acme-eu", "tenaz_state", "", "acme_eu_state"},
	} {
		if c.stream != "" {
			if got := streams.StreamName(c.prefix, c.base); got != c.stream {
				t.Errorf("StreamName(%q, %q) = %q, want %q", c.prefix, c.base, got, c.stream)
			}
		}
		if c.bucket != "" {
			if got := streams.BucketName(c.prefix, c.base); got != c.bucket {
				t.Errorf("BucketName(%q, %q) = %q, want %q", c.prefix, c.base, got, c.bucket)
			}
		}
	}
	if got := streams.EventsStream("acme", 2); got != "ACME_EVENTS_2" {
		t.Errorf("EventsStream(acme, 2) = %q", got)
	}
	if got := streams.StateBucket("", 3); got != "tenaz_state_3" {
		t.Errorf("StateBucket(\"\", 3) = %q", got)
	}
}

// A store of several partitions made before records were placed by event
// (no tenaz_records in EVENTS' metadata) keeps its records by account:
// Apply neither moves nor relabels them (`tenaz streams migrate` does).
func TestApplyKeepsRecordsByAccount(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := context.Background()
	ss, err := streams.Streams(streams.Options{Partitions: 2, RecordsByAccount: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ss {
		if c.Name == "EVENTS" {
			if _, ok := c.Metadata[streams.MetaRecords]; ok {
				t.Fatalf("laid out by account: want no %s in the metadata, got %v", streams.MetaRecords, c.Metadata)
			}
			if _, err := js.CreateStream(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err := streams.Apply(ctx, js, streams.Options{})
	if err != nil || l != (streams.Layout{Partitions: 2}) {
		t.Fatalf("want the store's 2 partitions, records by account, got %+v (%v)", l, err)
	}
	if read, err := streams.StoreLayout(ctx, js, ""); err != nil || read != l {
		t.Fatalf("read back after Apply: want %+v kept, got %+v (%v)", l, read, err)
	}
	if a, id := "acme", "ev_0000000000000000000000000a"; l.RecordPartition(a, id) != streams.PartitionOf(a, 2) {
		t.Fatalf("by account: want the record in %s's partition %d, got %d", a, streams.PartitionOf(a, 2), l.RecordPartition(a, id))
	}
}

// A consumer file is decoded once; each caller gets its own copy, which
// it may change without changing the next caller's.
func TestConsumerConfigsAreCopies(t *testing.T) {
	a, err := streams.PollerConsumer(streams.Options{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := a.Durable
	a.Durable = "changed"
	a.FilterSubjects = append(a.FilterSubjects[:0], "changed")
	b, err := streams.PollerConsumer(streams.Options{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Durable != want || b.Durable == "changed" || len(b.FilterSubjects) > 0 && b.FilterSubjects[0] == "changed" {
		t.Fatalf("the second config: durable %q, filters %v", b.Durable, b.FilterSubjects)
	}
}

// accountConsumer reads one account's dispatch subjects, as a test's
// stand-in for its owner.
func accountConsumer(account string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{Durable: "t_" + account, FilterSubject: "tenaz.events." + account + ".>", AckPolicy: jetstream.AckExplicitPolicy}
}
