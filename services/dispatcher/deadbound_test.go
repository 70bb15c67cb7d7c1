package dispatcher_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// An account at its bound in DEAD (its dead_letters) goes on: its events
// that die beyond the bound are dead at once, their entries waiting for
// room in TENAZ_DEAD_WAITING, while another account's die and are kept at
// once, and its other events are delivered meanwhile. Once an operator
// frees room, ingest's mover keeps the waiting entries, each for its own
// reason (permanent), each event called once. Waiting running, as they
// did, they held the account's slots until room was freed, and its
// dispatch stopped once its tail held twice its concurrency of them.
func TestAccountAtItsDeadBoundGoesOn(t *testing.T) {
	t.Parallel()
	const bound, noisy, calm = 3, 8, 3
	h, ds := setupNoisyBound(t)

	noisyIDs := h.Submit("noisy", "order.create", keys("n", noisy), reject)
	h.waitAll(noisyIDs, state.Dead, servicetest.WaitFor)
	calmIDs := h.Submit("calm", "order.create", keys("c", calm), reject)
	h.waitAll(calmIDs, state.Dead, servicetest.WaitFor)
	if n := h.DeadKept("calm"); n != calm {
		t.Fatalf("want calm's %d dead events kept in DEAD, got %d", calm, n)
	}
	if kept, waiting := h.DeadKept("noisy"), h.DeadWaiting("noisy"); kept != bound || waiting != noisy-bound {
		t.Fatalf("want noisy's entries at its bound (%d) and %d waiting for room, got %d and %d", bound, noisy-bound, kept, waiting)
	}
	healthy := h.Submit("noisy", "order.create", keys("ok", 2), func(key string) string { return `{"order_id":"` + key + `"}` })
	h.waitAll(healthy, state.Done, servicetest.WaitFor)

	// The operator discards noisy's entries as they come, room for three
	// at a time.
	h.discardUntilDead("noisy", bound, noisyIDs, func() int { return h.DeadKept("noisy") })
	h.wantDiedOnceEach(ds, noisyIDs, noisy+calm)
}

// The bound holds with three dispatcher replicas, each its own process,
// and the owner of the bounded account killed (SIGKILL) once it is at its
// bound: the other account's events are dead and kept, the bounded
// account never holds more than its bound and one entry (its owner and
// ingest's mover each write its entries one at a time), and once room is
// freed every event is dead and kept. A run killed before its outcome was
// stored is claimed again by the new owner and calls the target once
// more, no more; if its entry was kept or waiting by then, its second
// death keeps a second one.
func TestDeadBoundHoldsAcrossReplicaProcesses(t *testing.T) {
	t.Parallel()
	const bound, noisy, calm = 3, 8, 3
	yaml := strings.Replace(replicasYAML, "accounts:\n", "accounts:\n  noisy: {concurrency: 4, dead_letters: 3, breaker: {failures: 100}}\n", 1)
	yaml = strings.Replace(yaml, "attempts: 20, backoff: {initial: 1s, multiplier: 1, jitter: 0}", "attempts: 3", 1)
	h := setup(t, yaml, provider.Faults{})
	procs := startReplicas(t, h, 3, h.target.URL)
	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	noisyKept := func() int {
		n := h.DeadKept("noisy")
		most = max(most, n)
		return n
	}

	noisyIDs := h.Submit("noisy", "order.create", keys("n", noisy), reject)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return noisyKept() == bound && h.prov.CallCount() == noisy },
		"want noisy at its bound with each of its events called")
	ownerOf(t, h, procs, "noisy").Kill(t)
	calmIDs := h.Submit("calm", "order.create", keys("c", calm), reject)
	h.WaitAll(calmIDs, state.Dead, 3*servicetest.WaitFor)
	if n := h.DeadKept("calm"); n != calm {
		t.Fatalf("want calm's %d dead events kept, got %d", calm, n)
	}
	h.discardUntilDead("noisy", bound, noisyIDs, noisyKept)
	if most > bound+1 {
		t.Fatalf("want noisy at most at its bound (%d) and one entry, got %d", bound, most)
	}
	again := 0
	for _, id := range noisyIDs {
		n := len(h.prov.CallsFor(id))
		if n < 1 || n > 2 {
			t.Errorf("%s: want one call, two if its run was killed before its outcome was stored; got %d", id, n)
		}
		if n == 2 {
			again++
		}
	}
	t.Logf("noisy held at most %d entries; %d of its runs killed were called again", most, again)
	info, err := ds.Info(h.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if n := int(info.State.LastSeq); n < noisy+calm || n > noisy+calm+again {
		t.Fatalf("want one DEAD entry written per dead event (%d), and one per run called again (%d), got %d", noisy+calm, again, n)
	}
}

// Dying events that neither DEAD nor its waiting room has room for
// (here the waiting room bounded, as the server's storage would be) wait,
// running, while another account's die and are kept at once. Once an
// operator frees room, the waiting ones are kept for their own reason
// (permanent), each called once: a wait counted in deliveries would have
// given them up as crashes (max_deliveries) after ten AckWaits.
func TestDyingEventsNothingHasRoomForWaitRunning(t *testing.T) {
	t.Parallel()
	const bound, noisy, calm = 3, 8, 3
	h, ds := setupNoisyBound(t)
	h.boundWaitingRoom()

	noisyIDs := h.Submit("noisy", "order.create", keys("n", noisy), reject)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.prov.CallCount() == noisy },
		"want each of noisy's %d events called", noisy)
	calmIDs := h.Submit("calm", "order.create", keys("c", calm), reject)
	h.waitAll(calmIDs, state.Dead, servicetest.WaitFor)
	if n := h.DeadKept("calm"); n != calm {
		t.Fatalf("want calm's %d dead events kept in DEAD, got %d", calm, n)
	}
	if n := h.DeadKept("noisy"); n != bound {
		t.Fatalf("want noisy's entries at its bound (%d), got %d", bound, n)
	}
	waiting := 0
	for _, id := range noisyIDs {
		if h.Record(id).Status == state.Running {
			waiting++
		}
	}
	if waiting != noisy-bound {
		t.Fatalf("want noisy's %d events beyond its bound waiting, running; got %d", noisy-bound, waiting)
	}

	// Ten AckWaits (1s here) pass: a message handed back while it waited
	// would reach the dispatcher's delivery limit and be given up.
	<-time.After(11 * time.Second)
	// The operator discards noisy's entries as they come, room for three
	// at a time.
	h.discardUntilDead("noisy", bound, noisyIDs, func() int { return h.DeadKept("noisy") })
	h.wantDiedOnceEach(ds, noisyIDs, noisy+calm)
}

// setupNoisyBound is one dispatcher, d1, with noisy's own bound of 3
// entries in DEAD, under everyone's (100), and DEAD.
func setupNoisyBound(t *testing.T) (*harness, jetstream.Stream) {
	t.Helper()
	yaml := strings.Replace(yamlFor(8, "attempts: 3"), "accounts:\n", "accounts:\n  noisy: {dead_letters: 3}\n", 1)
	h := setup(t, yaml+"deadletter: {max_per_account: 100}\n", provider.Faults{})
	h.dispatcher("d1", nil)
	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	return h, ds
}

// reject is the payload of key that the test provider answers 422.
func reject(key string) string { return `{"order_id":"` + key + `","reject":true}` }

// wantDiedOnceEach fails the test unless each of noisy's ids is dead
// after one call (accept, claim, fail), DEAD had written entries in all
// (one per dead event), and its last of noisy's is kept as permanent:
// for its own reason, not given up as a crash.
func (h *harness) wantDiedOnceEach(ds jetstream.Stream, ids []string, written int) {
	t := h.t
	t.Helper()
	recs := h.waitAll(ids, state.Dead, servicetest.WaitFor)
	for _, id := range ids {
		if calls := h.prov.CallsFor(id); len(calls) != 1 {
			t.Errorf("%s: want one call, got %d", id, len(calls))
		}
		wantHistory(t, recs[id], state.Accept, state.Claim, state.Fail)
	}
	info, err := ds.Info(h.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != uint64(written) {
		t.Fatalf("want one DEAD entry written per dead event (%d), got %d", written, info.State.LastSeq)
	}
	raw, err := ds.GetLastMsgForSubject(h.Ctx(), "tenaz.dead.noisy.order.create")
	if err != nil {
		t.Fatal(err)
	}
	var e dead.Entry
	if err := json.Unmarshal(raw.Data, &e); err != nil || e.Reason != dead.ReasonPermanent {
		t.Fatalf("want the entry of one that waited kept as %s, got %s (%v)", dead.ReasonPermanent, raw.Data, err)
	}
}

// boundWaitingRoom leaves TENAZ_DEAD_WAITING no room for an entry, as a
// full server would: the services applied the layout at start.
func (h *harness) boundWaitingRoom() {
	h.t.Helper()
	ws, err := h.JS.Stream(h.Ctx(), names.StreamDeadWaiting)
	if err != nil {
		h.t.Fatal(err)
	}
	c := ws.CachedInfo().Config
	c.MaxBytes = 64
	if _, err := h.JS.UpdateStream(h.Ctx(), c); err != nil {
		h.t.Fatal(err)
	}
}

// discardUntilDead discards account's entries whenever kept says it is
// at its bound, as an operator would, until every one of ids is dead and
// none of its entries waits for room.
func (h *harness) discardUntilDead(account string, bound int, ids []string, kept func() int) {
	h.t.Helper()
	natstest.Eventually(h.t, 3*servicetest.WaitFor, func() bool {
		if kept() >= bound {
			h.DiscardDead(account)
		}
		for _, id := range ids {
			if h.Record(id).Status != state.Dead {
				return false
			}
		}
		return h.DeadWaiting(account) == 0
	}, "want %s's events dead and their entries kept once there is room", account)
}
