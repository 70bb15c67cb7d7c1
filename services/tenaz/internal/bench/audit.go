package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/services/deadletter"
	"github.com/tenaz/tenaz/streams"
)

// The audit phase: the audit archive's cost per event. Events written to
// the state buckets as a delivered event's three revisions (accept,
// claim, succeed, each about an entity) at the rate the store takes them,
// once with no archiver and once with the deadletter service's followers
// (the archive and the index, on one feed) (its steady state: it reads the revisions as they come), on a
// fresh server each.

func auditEvents(sz Sizes) int {
	if sz == Quick {
		return 10_000
	}
	return 100_000
}

func auditBullet(sz Sizes) string {
	return fmt.Sprintf(`- **Audit archive** (`+"`audit_*`"+`): %d events, each written as the three
  revisions of a delivered event (accept, claim, succeed; about an entity,
  with a 60-byte payload) to the state buckets, pipelined, on a fresh server
  without the archiver, then on another with the deadletter service's
  followers reading the records' feed (the archive and the search index:
  one consumer per partition, as they run). `+"`audit_disk_bytes_per_event`"+`
  is TENAZ_AUDIT's message blocks on disk over the events (S2-compressed;
  the last, open block is not compressed yet); `+"`audit_raw_bytes_per_event`"+` the
  stream's bytes before compression; `+"`audit_msgs_per_event`"+` the archive's
  writes per event (at most one per revision; a revision replaced before
  the archiver read it costs none, its entries come with the next);
  `+"`audit_cpu_us_per_event`"+` the process's CPU (server, writer, followers) with the
  followers less without, over the events; `+"`audit_events_per_s`"+` the events
  archived per second, from the first write until the archiver has read
  and acknowledged every revision; `+"`audit_catchup_s`"+` how long after the last
  write that was. One phase alone: `+"`BENCH_PHASE=audit make bench`"+` (it
  rewrites these figures only).
`, auditEvents(sz))
}

// Audit runs the audit phase.
func Audit(ctx context.Context, sz Sizes, r Report) error {
	n := auditEvents(sz)
	off, err := auditRun(ctx, n, false)
	if err != nil {
		return fmt.Errorf("audit, archiver off: %w", err)
	}
	on, err := auditRun(ctx, n, true)
	if err != nil {
		return fmt.Errorf("audit, archiver on: %w", err)
	}
	f := float64(n)
	r.Figure("audit_disk_bytes_per_event", float64(on.disk)/f, "bytes")
	r.Figure("audit_raw_bytes_per_event", float64(on.raw)/f, "bytes")
	r.Figure("audit_msgs_per_event", float64(on.msgs)/f, "messages")
	r.Figure("audit_cpu_us_per_event", float64((on.cpu-off.cpu).Microseconds())/f, "µs")
	r.Figure("audit_events_per_s", f/on.took.Seconds(), "events/s")
	r.Figure("audit_catchup_s", (on.took - on.written).Seconds(), "s")
	return nil
}

type auditResult struct {
	written, took time.Duration
	cpu           time.Duration
	msgs, raw     uint64
	disk          int64
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func auditRun(ctx context.Context, n int, archiver bool) (auditResult, error) {
	var res auditResult
	srv, stopNATS, err := startNATS("tenaz-bench-audit-*", false)
	if err != nil {
		return res, err
	}
	defer stopNATS()
	cfg, err := parseConfig("auth: {disabled: true}\ntargets: {erp: {url: \"http://127.0.0.1:1\"}}\nkinds: {credit.evaluate: {target: erp}}\n")
	if err != nil {
		return res, err
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return res, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		return res, err
	}
	subj, st, err := store.Bind(ctx, js, cfg, false, time.Now)
	if err != nil {
		return res, err
	}
	if archiver {
		dnc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			return res, err
		}
		defer dnc.Close()
		dl, err := deadletter.New(deadletter.Options{Conn: dnc, Config: cfg, SkipStreams: true})
		if err != nil {
			return res, err
		}
		if err := dl.Start(ctx); err != nil {
			return res, err
		}
		defer func() { _ = dl.Stop(context.Background()) }()
	}
	recs := make([]state.Record, n)
	revs := make([]uint64, n)
	now := time.Now().UTC()
	for i := range recs {
		ev, err := event.New(event.Fields{Account: fmt.Sprintf("acct-%d", i%16), Kind: "credit.evaluate", EntityID: fmt.Sprintf("proposal-%d", i/2),
			IdempotencyKey: fmt.Sprintf("k-%d", i)}, []byte(`{"applicant":"A-1","amount":25000,"currency":"EUR","term":36}`), "", "", now)
		if err != nil {
			return res, err
		}
		recs[i] = queue.Initial(ev)
	}
	start, cpu0 := time.Now(), processCPU()
	write := func(next func(i int) (store.Pending, error)) error {
		const window = 4096
		pend := make([]store.Pending, 0, window)
		from := 0
		flush := func() error {
			for j, p := range pend {
				rev, err := p.Wait(ctx)
				if err != nil {
					return err
				}
				revs[from+j] = rev
			}
			from += len(pend)
			pend = pend[:0]
			return nil
		}
		for i := range recs {
			p, err := next(i)
			if err != nil {
				return err
			}
			if pend = append(pend, p); len(pend) == window {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return flush()
	}
	if err := write(func(i int) (store.Pending, error) { return st.CreateAsync(recs[i]) }); err != nil {
		return res, err
	}
	for _, a := range []state.Action{{Name: state.Claim, Seq: 1, Actor: "dispatcher/bench-1"}, {Name: state.Succeed, Actor: "dispatcher/bench-1", Detail: "target answered 200"}} {
		if err := write(func(i int) (store.Pending, error) {
			rec, _, err := state.Apply(recs[i], a, time.Now().UTC())
			if err != nil {
				return store.Pending{}, err
			}
			recs[i] = rec
			return st.WriteAsync(rec, revs[i])
		}); err != nil {
			return res, err
		}
	}
	res.written = time.Since(start)
	if archiver {
		deadline := time.Now().Add(10 * time.Minute)
		for {
			done := true
			for p := range subj.Parts() {
				c, err := js.Consumer(ctx, "KV_"+subj.StateBucketOf(p), search.FeedConsumer)
				if err != nil {
					return res, err
				}
				ci, err := c.Info(ctx)
				if err != nil {
					return res, err
				}
				done = done && ci.NumPending == 0 && ci.NumAckPending == 0
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				return res, errors.New("the archiver did not catch up in 10 minutes")
			}
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	res.took, res.cpu = time.Since(start), processCPU()-cpu0
	if !archiver {
		return res, nil
	}
	s, err := js.Stream(ctx, streams.StreamAudit)
	if err != nil {
		return res, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return res, err
	}
	res.msgs, res.raw = info.State.Msgs, info.State.Bytes
	err = filepath.WalkDir(srv.StoreDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(p, string(filepath.Separator)+streams.StreamAudit+string(filepath.Separator)) && strings.HasSuffix(p, ".blk") {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			res.disk += fi.Size()
		}
		return nil
	})
	return res, err
}
