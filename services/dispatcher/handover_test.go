package dispatcher_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// An account's rate holds across a graceful handover: a replica stopped
// with SIGTERM gives its accounts' leases back once their calls are done,
// and the replica that takes one over waits an interval after taking it
// before its first call (pacer.takenOver), since it cannot know when the
// previous owner's last call went. Before, its fresh pacer let that call
// go at once, right after the stopping replica's last: at 30/m, two calls
// of one account about 30 ms apart at the provider, for every account
// handed over. Ten accounts over two replicas, so
// that several are handed over.
func TestAccountRateHoldsAcrossAGracefulHandover(t *testing.T) {
	t.Parallel()
	const (
		interval = 2 * time.Second // 30/m
		accounts = 10
	)
	const yaml = `
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 4, rate: 30/m, breaker: {failures: 100}}
targets:
  erp: {url: "${TARGET}/{{.Account}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 20}
`
	m := newMeter(nil)
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, yaml, provider.Faults{})
	procs := startReplicas(t, h, 2, target.URL)
	names := make([]string, accounts)
	for i := range names {
		names[i] = fmt.Sprintf("paced-%d", i)
		h.Submit(names[i], "order.create", keys(names[i], 12), orderPayload)
	}
	calledTwice := func(accts []string) bool {
		for _, a := range accts {
			if len(m.callsOf(a)) < 2 {
				return false
			}
		}
		return true
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return calledTwice(names) }, "want every account called twice")

	// Stop the replica that owns more of the accounts.
	owned := map[int][]string{}
	for _, a := range names {
		for i, p := range procs {
			if holds(p, h.leaseHolder(a)) {
				owned[i] = append(owned[i], a)
			}
		}
	}
	stopped, other := 0, procs[1]
	if len(owned[1]) > len(owned[0]) {
		stopped, other = 1, procs[0]
	}
	moved := owned[stopped]
	// It finishes the runs it claimed first, at the accounts' rate (up
	// to 4 each: 8 s), then gives the leases back.
	procs[stopped].Signal(t, syscall.SIGTERM)
	natstest.Eventually(t, 4*4*interval, func() bool {
		for _, a := range moved {
			if !holds(other, h.leaseHolder(a)) {
				return false
			}
		}
		return true
	}, "want the stopped replica's %d accounts taken over by the other", len(moved))
	before := map[string]int{}
	for _, a := range moved {
		before[a] = len(m.callsOf(a))
	}
	natstest.Eventually(t, 3*interval+servicetest.WaitFor, func() bool {
		for _, a := range moved {
			if len(m.callsOf(a)) < before[a]+2 {
				return false
			}
		}
		return true
	}, "want each account taken over called twice by its new owner")

	// At the provider, a call's arrival may trail its go by a scheduling
	// delay; a tenth of the interval is far more than that.
	least := interval * 9 / 10
	for _, a := range moved {
		calls := m.callsOf(a)
		for i := 1; i < len(calls); i++ {
			if gap := calls[i].Sub(calls[i-1]); gap < least {
				t.Errorf("%s (30/m), handed over: calls %d and %d %s apart at the provider, want at least %s", a, i-1, i, gap.Round(time.Millisecond), least)
			}
		}
	}
	t.Logf("accounts handed over: %d of %d", len(moved), accounts)
}

// A replica stopped while it hands accounts over lets their calls finish
// before it leaves: until they return it holds their leases, so the new
// owner makes no call beside them, and nothing of theirs is cut. Before,
// the stop waited only for the readers it still ran: it left the owners'
// group at once, the new owner took the accounts as a dead replica's and
// called again, and the stop's cancel cut the calls in flight. Here every
// account's one call is held at the provider while a second replica joins
// (the first hands it some of the accounts) and the first is stopped.
func TestStopWaitsForTheAccountsItHandsOver(t *testing.T) {
	t.Parallel()
	const yaml = `
stop_timeout: 60s
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 1, breaker: {failures: 100}}
targets:
  erp: {url: "${TARGET}/{{.Account}}", timeout: 30s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 5}
`
	accounts := make([]string, 16) // some move to the second replica (all but once in 65,536)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("hand-%02d", i)
	}
	g := newGate(accounts)
	target := httptest.NewServer(g)
	t.Cleanup(target.Close)
	t.Cleanup(g.openAll) // first: Close waits for the calls held
	h := setup(t, yaml, provider.Faults{})
	r1 := natstest.StartProc(t, "r1", replicaBinary(t), h.yaml,
		"NATS_URL="+h.Srv.ClientURL(), "TARGET="+target.URL, "LOG_LEVEL=debug", "LOG_FORMAT=json")
	natstest.Eventually(t, 20*time.Second, func() bool { return h.liveReplicas() == 1 }, "want r1 heartbeating")
	var ids []string
	for _, a := range accounts {
		ids = append(ids, h.Submit(a, "order.create", keys(a, 1), orderPayload)...)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return g.heldAll(accounts) }, "want every account's call held at the provider")

	startReplica(t, h, "r2", target.URL)
	natstest.Eventually(t, 20*time.Second, func() bool { return h.liveReplicas() == 2 }, "want r2 heartbeating")
	var live []string
	self := ""
	for m := range h.beats() {
		live = append(live, m)
		if holds(r1, m) {
			self = m
		}
	}
	var moved, kept []string
	for _, a := range accounts {
		if owner.Assign(live, a) == self {
			kept = append(kept, a)
		} else {
			moved = append(moved, a)
		}
	}
	if len(moved) == 0 {
		t.Fatalf("none of the %d accounts is r2's (%v): nothing to hand over", len(accounts), live)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return handingAll(r1.Log(), moved) }, "want r1 handing over %v", moved)

	r1.Signal(t, syscall.SIGTERM)
	for _, a := range kept {
		g.open(a) // r1's own readers drain
	}
	// The old stop cut the handed-over calls as soon as its readers had
	// drained; the new one says it waits for them.
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return bytes.Contains(r1.Log(), []byte("finish their calls first")) || g.cutTotal() > 0
	}, "want r1 to wait for the accounts it hands over")
	for _, a := range moved {
		g.open(a)
	}
	h.WaitAll(ids, state.Done, servicetest.WaitFor)
	for _, a := range accounts {
		if calls, cut := g.of(a); calls != 1 || cut != 0 {
			t.Errorf("%s (handed over: %v): want 1 call at the provider, none cut, got %d calls, %d cut", a, slices.Contains(moved, a), calls, cut)
		}
	}
	t.Logf("accounts handed over during the stop: %d of %d", len(moved), len(accounts))
}

// handingAll reports whether log has a dispatcher's "handing the account
// over" line for each of accounts.
func handingAll(log []byte, accounts []string) bool {
	for _, a := range accounts {
		found := false
		for _, line := range bytes.Split(log, []byte("\n")) {
			if bytes.Contains(line, []byte("handing the account over")) && bytes.Contains(line, []byte(`"account":"`+a+`"`)) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// gate is a target that holds each of its accounts' calls (the URL's
// path) until the test opens the account, and counts, per account, the calls
// that came and those cut (the caller went away before the answer).
type gate struct {
	mu     sync.Mutex
	doors  map[string]chan struct{}
	opened map[string]bool
	calls  map[string]int
	held   map[string]int
	cut    map[string]int
}

func newGate(accounts []string) *gate {
	g := &gate{doors: map[string]chan struct{}{}, opened: map[string]bool{}, calls: map[string]int{}, held: map[string]int{}, cut: map[string]int{}}
	for _, a := range accounts {
		g.doors[a] = make(chan struct{})
	}
	return g
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := strings.Trim(r.URL.Path, "/")
	// Read to its end, the body lets the server watch the connection:
	// the request's context then ends when the caller goes away.
	_, _ = io.Copy(io.Discard, r.Body)
	g.mu.Lock()
	g.calls[a]++
	g.held[a]++
	door := g.doors[a]
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.held[a]--
		g.mu.Unlock()
	}()
	select {
	case <-door:
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"ok":true}`))
	case <-r.Context().Done():
		g.mu.Lock()
		g.cut[a]++
		g.mu.Unlock()
	}
}

func (g *gate) open(account string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.openLocked(account)
}

func (g *gate) openLocked(account string) {
	if door := g.doors[account]; door != nil && !g.opened[account] {
		close(door)
	}
	g.opened[account] = true
}

// openAll opens every account.
func (g *gate) openAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for a := range g.doors {
		g.openLocked(a)
	}
}

func (g *gate) heldAll(accounts []string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range accounts {
		if g.held[a] == 0 {
			return false
		}
	}
	return true
}

func (g *gate) cutTotal() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.cut {
		n += c
	}
	return n
}

func (g *gate) of(account string) (calls, cut int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[account], g.cut[account]
}

// An account nobody held before has its first call made at once, however
// slow its rate: a new owner paces its first call only after the last
// moment another replica may have called for the account
// (owner.Group.Acquire's since). Before, every lease taken paced the
// first call an interval on: at 1/h, an account's first event waited an
// hour.
func TestNewAccountsFirstCallGoesAtOnce(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(yamlFor(4, "attempts: 3"), `{concurrency: 4,`, `{concurrency: 4, rate: 1/h,`, 1)
	h := setup(t, yaml, provider.Faults{})
	h.dispatcher("d1", nil)
	ids := h.Submit("acme", "order.create", keys("first", 1), orderPayload)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
}
