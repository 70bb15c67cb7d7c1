package dispatcher_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// Events with one ordering key are delivered one at a time in submission
// order, across two dispatchers, even when every event fails its first
// call and is retried; different keys run in parallel.
func TestOrderedLaneKeepsOrderUnderRetries(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, `ordered_by: lane, attempts: 5, backoff: {initial: 1s, multiplier: 1, jitter: 0}`),
		provider.Faults{FailFirst: 1})
	h.dispatcher("d1", nil)
	h.dispatcher("d2", nil)

	const lanes, perLane = 3, 6
	var ks []string
	laneOf := map[string]string{}
	for i := range perLane {
		for l := range lanes {
			k := fmt.Sprintf("L%d-%02d", l, i)
			ks = append(ks, k)
			laneOf[k] = fmt.Sprintf("L%d", l)
		}
	}
	ids := h.Submit("acme", "order.create", ks, func(k string) string {
		return fmt.Sprintf(`{"order_id":%q,"lane":%q}`, k, laneOf[k])
	})
	h.waitAll(ids, state.Done, 60*time.Second)

	// Per lane: the successful calls come in submission order, and each
	// event's first call starts only after its predecessor succeeded.
	calls := h.prov.Calls()
	type span struct{ first, success time.Time }
	spans := map[string]*span{}
	keyOf := map[string]string{} // event id → the key it was submitted with
	for i, id := range ids {
		keyOf[id] = ks[i]
	}
	for _, c := range calls {
		k := keyOf[c.EventID]
		s := spans[k]
		if s == nil {
			s = &span{first: c.At}
			spans[k] = s
		}
		if c.Status == 200 {
			s.success = c.At
		}
	}
	for l := range lanes {
		var prev string
		for i := range perLane {
			k := fmt.Sprintf("L%d-%02d", l, i)
			s := spans[k]
			if s == nil || s.success.IsZero() {
				t.Fatalf("%s: want a successful call, got calls %+v", k, h.calls(k))
			}
			if prev != "" && s.first.Before(spans[prev].success) {
				t.Fatalf("lane L%d: %s was called at %s, before its predecessor %s succeeded at %s",
					l, k, s.first.Format(time.StampMicro), prev, spans[prev].success.Format(time.StampMicro))
			}
			prev = k
		}
	}
	// Different lanes overlapped: some event of one lane was called while
	// another lane's event was between its first call and its success.
	overlap := false
	for a, sa := range spans {
		for b, sb := range spans {
			if laneOf[a] != laneOf[b] && sb.first.After(sa.first) && sb.first.Before(sa.success) {
				overlap = true
			}
		}
	}
	if !overlap {
		t.Fatal("want different lanes to run in parallel, but no two lanes overlapped")
	}
	// The waiting is visible: events that arrived while their predecessor
	// was retrying say so in their history.
	waited := 0
	for _, id := range ids {
		for _, e := range h.Record(id).History {
			if strings.HasPrefix(e.Detail, "waiting for ev_") {
				waited++
				break
			}
		}
	}
	if waited == 0 {
		t.Fatal("want some events to record that they waited for their predecessor, got none")
	}
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
}

// A dead event releases its lane: the next one goes on.
func TestOrderedLaneMovesOnPastDead(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, `ordered_by: lane, attempts: 2, backoff: {initial: 1s, multiplier: 1, jitter: 0}`), provider.Faults{})
	h.dispatcher("d1", nil)
	ks := []string{"a-0", "a-1", "a-2"}
	ids := h.Submit("acme", "order.create", ks, func(k string) string {
		if k == "a-0" {
			return `{"order_id":"a-0","lane":"A","reject":true}`
		}
		return fmt.Sprintf(`{"order_id":%q,"lane":"A"}`, k)
	})
	h.waitAll(ids[:1], state.Dead, 20*time.Second)
	h.waitAll(ids[1:], state.Done, 20*time.Second)
	for _, k := range ks[1:] {
		if n := h.effects(k); n != 1 {
			t.Fatalf("%s: want one effect, got %d", k, n)
		}
	}
}

// Reads of its predecessor that fail (a nats-server restart, here the
// LaneRead hook) do not park an ordered event for the lane's safety
// net: its predecessor's finisher has woken it already and will not
// again. a-1's next two reads fail right after a-0 finished (the check
// and the re-check after parking, as a restart makes them); a-1 is done
// within seconds (old code: parked for 5 minutes, the crash suite's
// "lanes whose next event waited 5 minutes").
func TestFailedLaneReadDoesNotParkForTheSafetyNet(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, `ordered_by: lane, attempts: 2`), provider.Faults{})
	ids := h.Submit("acme", "order.create", []string{"a-0", "a-1"}, func(k string) string {
		return fmt.Sprintf(`{"order_id":%q,"lane":"A"}`, k)
	})
	// a-0's record says whether it finished: a hook after its store
	// (AfterStore) left a moment in which a-1 read it finished and went
	// on, no read of it failing.
	finished := func() bool {
		rec, _, err := h.St.Get(h.Ctx(), "", ids[0])
		return err == nil && state.Finished(rec.Status)
	}
	var failed atomic.Int32
	h.dispatcher("d1", &dispatcher.Hooks{
		LaneRead: func(id string) error {
			if id == ids[1] && finished() && failed.Add(1) <= 2 {
				return errors.New("nats: connection closed")
			}
			return nil
		},
	})
	h.waitAll(ids, state.Done, 15*time.Second)
	if failed.Load() < 2 {
		t.Fatalf("want a-1's reads of its predecessor to have failed twice after a-0 finished, got %d reads", failed.Load())
	}
}

// A message handed back (NAK) more often than a worker may die on it is
// no crash: its run never started. a-1's reads of its predecessor fail
// 12 times (the store did not answer, as through a server outage), each
// handing its message back for 2 s; then a-1 is delivered. Counted as
// deliveries its worker died on, it went to DEAD at the 11th, class
// crash, never having failed.
func TestAMessageHandedBackOftenIsNoCrash(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(8, `ordered_by: lane, attempts: 2`), provider.Faults{})
	ids := h.Submit("acme", "order.create", []string{"a-0", "a-1"}, func(k string) string {
		return fmt.Sprintf(`{"order_id":%q,"lane":"A"}`, k)
	})
	var failed atomic.Int32
	h.dispatcher("d1", &dispatcher.Hooks{
		LaneRead: func(id string) error {
			if id == ids[1] && failed.Add(1) <= 12 {
				return errors.New("nats: timeout")
			}
			return nil
		},
	})
	recs := h.waitAll(ids, state.Done, 60*time.Second)
	if failed.Load() <= 12 || recs[ids[1]].Attempts != 1 {
		t.Fatalf("want a-1 done in one attempt after 12 failed reads, got %d reads, %s", failed.Load(), servicetest.Actions(recs[ids[1]]))
	}
}
