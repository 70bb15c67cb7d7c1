//go:build !race

// Not built with the race detector: nats-server (2.15.2, and 2.15.3 the
// same) reads a clustered stream's expectedPerSubjectSequence without its
// lock after applying a message (jetstream_cluster.go) while a
// compare-and-set's commit writes it under the lock
// (jetstream_batching.go); the detector reports that in the embedded
// servers under this test's 32 concurrent writes at one revision. It is
// the server's race, not tenaz's: `make test` runs this file without the
// detector, after the rest.

package natstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// Compare-and-set conflicts on a replicated bucket come back with the
// clustered error code (10164) as well as 10071; the store recognises
// both, before and after the bucket's leader changes.
func TestClusterCompareAndSet(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t, 3)
	_, js := c.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a bound on the whole; each wait below has its own
	defer cancel()
	if _, err := streams.Apply(ctx, js, streams.Options{Replicas: 3}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(round string) {
		rec := state.Record{ID: event.ID("acme", round), Account: "acme", Kind: "order.create", Status: state.Pending, CreatedAt: time.Now(), UpdatedAt: time.Now()}
		rev, err := st.Create(ctx, rec)
		if err != nil {
			t.Fatalf("%s: create: %v", round, err)
		}
		if _, err := st.Create(ctx, rec); !errors.Is(err, store.ErrExists) {
			t.Fatalf("%s: create twice: want ErrExists, got %v", round, err)
		}
		written, err := st.Write(ctx, rec, rev)
		if err != nil {
			t.Fatalf("%s: write at the current revision: %v", round, err)
		}
		if _, err := st.Write(ctx, rec, rev); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("%s: write at a stale revision: want ErrConflict, got %v", round, err)
		}
		p, err := st.WriteAsync(rec, rev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("%s: async write at a stale revision: want ErrConflict, got %v", round, err)
		}
		// The raw error is the clustered code on a replicated bucket.
		_, err = js.Publish(ctx, "$KV."+st.Bucket(rec.Account, rec.ID)+"."+rec.ID, []byte("x"), jetstream.WithExpectLastSequencePerSubject(rev))
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || !store.IsWrongSequence(err) {
			t.Fatalf("%s: want a wrong-sequence API error, got %v", round, err)
		}
		t.Logf("%s: compare-and-set conflict code %d", round, apiErr.ErrorCode)

		// Many writes in flight at once at the same revision: one wins,
		// every other is a conflict, whatever code the leader answers
		// (10164 when it judges against writes still being proposed). The
		// revision is the last write's own: a read may be served by a
		// replica that has not applied it yet.
		cur, rev := rec, written
		var pend []store.Pending
		for range 32 {
			p, err := st.WriteAsync(cur, rev)
			if err != nil {
				t.Fatal(err)
			}
			pend = append(pend, p)
		}
		won := 0
		var wonRev uint64
		for _, p := range pend {
			r, err := p.Wait(ctx)
			switch {
			case err == nil:
				won++
				wonRev = r
			case !errors.Is(err, store.ErrConflict):
				t.Fatalf("%s: a concurrent write at the same revision: want ErrConflict, got %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: want exactly one of 32 concurrent writes at one revision to win, got %d", round, won)
		}
		// The same, raw, to see the codes, at the winner's revision: a
		// read may be served by a replica that has not applied it yet.
		rev = wonRev
		codes := map[jetstream.ErrorCode]int{}
		var acks []jetstream.PubAckFuture
		for range 32 {
			f, err := js.PublishAsync("$KV."+st.Bucket(rec.Account, rec.ID)+"."+rec.ID, []byte("x"), jetstream.WithExpectLastSequencePerSubject(rev))
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, f)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
				codes[0]++
			case err := <-f.Err():
				if !store.IsWrongSequence(err) {
					t.Fatalf("%s: want a wrong-sequence error, got %v", round, err)
				}
				errors.As(err, &apiErr)
				codes[apiErr.ErrorCode]++
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		if codes[0] != 1 {
			t.Fatalf("%s: want exactly one of 32 raw concurrent writes to win, got %v", round, codes)
		}
		t.Logf("%s: codes of 32 concurrent writes at one revision (0 = won): %v", round, codes)
	}
	check("before")
	// The bucket of the record the second round writes.
	after := st.Bucket("acme", event.ID("acme", "after"))
	bucket := "KV_" + after
	leader := c.StreamLeader(bucket)
	if leader < 0 {
		t.Fatal("want a leader of the state bucket")
	}
	c.Servers[leader].Stop()
	natstest.Eventually(t, 30*time.Second, func() bool { return c.StreamLeader(bucket) >= 0 }, "a new leader of %s", bucket)
	// A request sent while the leadership moves may get no answer at
	// all, and a lookup without a deadline of its own can outlive the
	// test's: wait until the bucket takes writes again, each try bounded.
	natstest.Eventually(t, time.Minute, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		kv, err := js.KeyValue(pctx, after)
		if err != nil {
			return false
		}
		_, err = kv.Put(pctx, "probe", []byte("x"))
		return err == nil
	}, "the state bucket to take writes after the failover")
	check("after")
}
