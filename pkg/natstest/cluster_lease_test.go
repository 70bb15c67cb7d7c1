//go:build !race

// Not built with the race detector, for the server's race that
// cluster_cas_test.go describes: `make test` runs it without, after the
// rest.

package natstest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/streams"
)

// Replicas racing for an account's lease on a replicated bucket: one
// takes it and every other is told no, without an error, whether the
// lease is new or was given back. A replicated stream answers a lost
// compare-and-set with its own code (10164), which a lease taken by
// update, or given back, must read as a lost race too; read as an
// error, the dispatcher logged a failed start and retried it later.
func TestClusterLeaseRace(t *testing.T) {
	t.Parallel()
	c, ctx := replicated(t)
	var gs []*owner.Group
	for i := range 4 {
		_, js := c.Conn(t)
		g, err := owner.Join(ctx, js, owner.Options{Instance: fmt.Sprintf("d%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Leave(context.Background()) })
		gs = append(gs, g)
	}
	race := func(account string, round int) *owner.Group {
		t.Helper()
		var wg sync.WaitGroup
		oks, errs := make([]bool, len(gs)), make([]error, len(gs))
		for i, g := range gs {
			wg.Go(func() { oks[i], _, errs[i] = g.Acquire(ctx, account) })
		}
		wg.Wait()
		var won *owner.Group
		for i, g := range gs {
			if errs[i] != nil {
				t.Fatalf("%s, round %d: %s lost the race for the lease with an error: %v", account, round, g.Self(), errs[i])
			}
			if oks[i] {
				if won != nil {
					t.Fatalf("%s, round %d: both %s and %s took the lease", account, round, won.Self(), g.Self())
				}
				won = g
			}
		}
		if won == nil {
			t.Fatalf("%s, round %d: nobody took the lease", account, round)
		}
		return won
	}
	for n := range 20 {
		account := fmt.Sprintf("acct-%02d", n)
		for round := range 3 {
			if err := race(account, round).Release(ctx, account); err != nil {
				t.Fatalf("%s, round %d: release: %v", account, round, err)
			}
		}
	}
}

// Submissions racing to open an ordered lane that was released (its key
// purged: a purge marker is its last entry) on a replicated bucket: each
// is appended, none fails. kv.Create writes at the marker's revision
// there and returns a lost race as the stream's code (10164), which
// jetstream.ErrKeyExists does not match; read as an error, the
// submission failed with "lane: append".
func TestClusterLaneAppendAfterRelease(t *testing.T) {
	t.Parallel()
	c, ctx := replicated(t)
	var ls []*lane.Lanes
	for range 4 {
		_, js := c.Conn(t)
		l, err := lane.Open(ctx, js, "")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	for round := range 20 {
		var wg sync.WaitGroup
		errs := make([]error, len(ls))
		for i, l := range ls {
			wg.Go(func() { _, errs[i] = l.Append(ctx, "acme", "order-1", fmt.Sprintf("ev-%d-%d", round, i)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: submission %d to a released lane: %v", round, i, err)
			}
		}
		tail, err := ls[0].Tail(ctx, "acme", "order-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls[0].Release(ctx, "acme", "order-1", tail); err != nil {
			t.Fatalf("round %d: release: %v", round, err)
		}
	}
}

// replicated is a 3-node cluster with tenaz's streams and buckets at R3,
// and a bound on the whole test.
func replicated(t *testing.T) (*natstest.Cluster, context.Context) {
	t.Helper()
	c := natstest.StartCluster(t, 3)
	_, js := c.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if _, err := streams.Apply(ctx, js, streams.Options{Replicas: 3}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	return c, ctx
}
