package lane_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tenaz/tenaz/pkg/lane"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/streams"
)

func open(t *testing.T) *lane.Lanes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := natstest.Start(t).Conn(t)
	if _, err := streams.Apply(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	l, err := lane.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// An accept retried after later events joined the lane (ingest died
// between joining and creating the record, or two replicas took the same
// submission) gets the predecessor it got the first time and leaves the
// lane as it is: joining again would put it after its own successor, and
// each would wait for the other for ever.
func TestRetriedAppendAfterLaterOnesKeepsItsPlace(t *testing.T) {
	t.Parallel()
	l := open(t)
	ctx := context.Background()
	for i, want := range []string{"", "x", "y"} {
		id := []string{"x", "y", "z"}[i]
		if got, err := l.Append(ctx, "acme", "order-7", id); err != nil || got != want {
			t.Fatalf("Append(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	if got, err := l.Append(ctx, "acme", "order-7", "x"); err != nil || got != "" {
		t.Fatalf("Append(x) again = %q, %v; want its first predecessor \"\"", got, err)
	}
	if got, err := l.Append(ctx, "acme", "order-7", "y"); err != nil || got != "x" {
		t.Fatalf("Append(y) again = %q, %v; want x", got, err)
	}
	if tail, err := l.Tail(ctx, "acme", "order-7"); err != nil || tail != "z" {
		t.Fatalf("Tail = %q, %v; want z, unchanged by the retries", tail, err)
	}
	if got, err := l.Append(ctx, "acme", "order-7", "w"); err != nil || got != "z" {
		t.Fatalf("Append(w) = %q, %v; want z", got, err)
	}
}

// Whatever the order of appends and retries (a retry within lane.Recent
// appends of its first), each event gets one predecessor, and the lane,
// read back from its tail, holds every event once, in the order they
// first joined.
func TestAppendRetriesKeepOneChain(t *testing.T) {
	t.Parallel()
	l := open(t)
	ctx := context.Background()
	n := 0
	rapid.Check(t, func(t *rapid.T) {
		n++
		key := fmt.Sprintf("k-%d", n)
		var order []string          // ids in the order they first joined
		pred := map[string]string{} // each id's predecessor, as first answered
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			id := fmt.Sprintf("e-%d", step)
			if len(order) > 0 && rapid.Bool().Draw(t, "retry") {
				back := rapid.IntRange(1, min(len(order), lane.Recent)).Draw(t, "back")
				id = order[len(order)-back]
			}
			got, err := l.Append(ctx, "acme", key, id)
			if err != nil {
				t.Fatalf("Append(%s): %v", id, err)
			}
			if first, ok := pred[id]; ok {
				if got != first {
					t.Fatalf("Append(%s) retried = %q; first it was %q", id, got, first)
				}
				continue
			}
			pred[id] = got
			order = append(order, id)
		}
		tail, err := l.Tail(ctx, "acme", key)
		if err != nil {
			t.Fatal(err)
		}
		var chain []string
		for id := tail; id != ""; id = pred[id] {
			if len(chain) > len(order) {
				t.Fatalf("the lane loops: %v", chain)
			}
			chain = append([]string{id}, chain...)
		}
		if fmt.Sprint(chain) != fmt.Sprint(order) {
			t.Fatalf("the lane from its tail is %v; the events joined %v", chain, order)
		}
	})
}
