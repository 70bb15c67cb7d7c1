package dispatcher_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// The limits of an account hold with three dispatcher replicas, each its
// own process on one NATS: rate 10/s gives at most 11 calls/s over 20 s,
// concurrency 2 never shows more than 2 calls in flight at the target,
// and a breaker of 5 failures lets at most 5 failed calls through, plus
// the calls in flight when it opened (at most the concurrency). Run again
// with the replica that owns the rated account killed (SIGKILL) mid-run:
// the limits hold, its accounts are served again within handoverBound,
// and every event still ends.
func TestLimitsHoldAcrossReplicaProcesses(t *testing.T) {
	t.Parallel()
	for _, kill := range []bool{false, true} {
		t.Run(map[bool]string{false: "steady", true: "owner-killed"}[kill], func(t *testing.T) {
			t.Parallel()
			limitsAcrossReplicas(t, kill)
		})
	}
}

// handoverBound is how soon a killed replica's accounts are served by
// another: its heartbeat is missed for owner's Expiry (3 s at the default
// 1 s beat), then for the longest call's timeout (5 s here: the calls it
// began may still run, owner.Options.Linger) while the consumer's pin
// lapses (priority_timeout, 3 s), and the new owner pulls; the rest is
// margin for a loaded machine.
const handoverBound = 15 * time.Second

const replicasYAML = `
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
  rated: {concurrency: 4, rate: 10/s, breaker: {failures: 100}}
  narrow: {concurrency: 2, breaker: {failures: 100}}
  broken: {concurrency: 2, breaker: {failures: 5, cooldown: 10m}}
targets:
  erp: {url: "${TARGET}/{{.Account}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 20, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`

func limitsAcrossReplicas(t *testing.T, kill bool) {
	m := newMeter(map[string]time.Duration{"narrow": 300 * time.Millisecond})
	m.fail["broken"] = true
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	// The harness's own provider stands unused: the replicas call the meter.
	h := setup(t, replicasYAML, provider.Faults{})

	procs := startReplicas(t, h, 3, target.URL)

	rated := h.Submit("rated", "order.create", keys("rated", 300), orderPayload)
	narrow := h.Submit("narrow", "order.create", keys("narrow", 40), orderPayload)
	broken := h.Submit("broken", "order.create", keys("broken", 20), orderPayload)

	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(m.callsOf("rated")) > 0 }, "want the rated account's first call")
	start := m.callsOf("rated")[0]
	window := 20 * time.Second
	var killedAt time.Time
	if kill {
		<-time.After(6 * time.Second) // mid-run: the point of the kill, not a wait for an outcome
		victim := ownerOf(t, h, procs, "rated")
		killedAt = time.Now()
		victim.Kill(t)
		natstest.Eventually(t, handoverBound, func() bool {
			h := h.leaseHolder("rated")
			return h != "" && !holds(victim, h)
		}, "want the rated account owned by a live replica within %s of the kill", handoverBound)
	}
	natstest.Eventually(t, window+10*time.Second, func() bool { return time.Since(start) > window },
		"the measuring window of the rated account")

	calls := m.callsOf("rated")
	in := 0
	for _, at := range calls {
		if !at.Before(start) && at.Before(start.Add(window)) {
			in++
		}
	}
	if max := int(11 * window.Seconds()); in > max {
		t.Errorf("rated (10/s): want at most %d calls in %s at the target, got %d", max, window, in)
	}
	if least := 100; in < least {
		t.Errorf("rated (10/s): want the account served, at least %d calls in %s, got %d", least, window, in)
	}
	if kill {
		var gap time.Duration
		var last time.Time
		for _, at := range calls {
			if !last.IsZero() && at.After(killedAt.Add(-time.Second)) && at.Sub(last) > gap {
				gap = at.Sub(last)
			}
			last = at
		}
		if gap > handoverBound {
			t.Errorf("rated: want its calls resumed within %s of the owner's death, the longest pause was %s", handoverBound, gap)
		}
	}
	if got := m.maxInFlight("narrow"); got > 2 {
		t.Errorf("narrow (concurrency 2): want at most 2 calls in flight at the target, saw %d", got)
	}
	if got := m.maxInFlight("narrow"); got < 1 {
		t.Errorf("narrow: want it served, saw no call")
	}
	if got := len(m.callsOf("broken")); got > 5+2 {
		t.Errorf("broken (breaker after 5 failures, concurrency 2): want at most 7 failed calls, got %d", got)
	}
	if got := len(m.callsOf("broken")); got < 5 {
		t.Errorf("broken: want the breaker to have opened after 5 failures, only %d calls were made", got)
	}

	// Nothing lost: every event of the served accounts ends done, the
	// broken account's wait (retrying behind the open breaker).
	h.waitAll(append(narrow, rated...), state.Done, 90*time.Second)
	for _, id := range broken {
		if st := h.Record(id).Status; st != state.Retrying && st != state.Pending && st != state.Running {
			t.Errorf("broken event %s: want it waiting behind the open breaker, got %s", id, st)
		}
	}
}

// A replica stopped (SIGSTOP) for longer than the owners' expiry is taken
// for dead, and its accounts go to another replica; on waking (SIGCONT)
// it makes none of the calls that were waiting in it for a slot or a
// permit, beside its successor's: narrow (concurrency 2, 300 ms calls)
// never has more than 2 calls in flight at the target, and no more than
// the 2 calls in flight at the stall end in an outcome that came after
// the successor's (late outcome ignored). If the stalled replica owned
// rated (10/s) too, no second of it holds more than 11 calls. Every event
// ends done.
func TestStalledOwnerMakesNoCallBesideItsSuccessor(t *testing.T) {
	t.Parallel()
	m := newMeter(map[string]time.Duration{"narrow": 300 * time.Millisecond})
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, replicasYAML, provider.Faults{})
	procs := startReplicas(t, h, 2, target.URL)
	narrow := h.Submit("narrow", "order.create", keys("narrow", 60), orderPayload)
	rated := h.Submit("rated", "order.create", keys("rated", 150), orderPayload)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(m.callsOf("narrow")) >= 4 && len(m.callsOf("rated")) >= 10 },
		"want both accounts served")
	victim := ownerOf(t, h, procs, "narrow")
	ratedToo := holds(victim, h.leaseHolder("rated"))
	victim.Signal(t, syscall.SIGSTOP)
	natstest.Eventually(t, handoverBound, func() bool {
		h := h.leaseHolder("narrow")
		return h != "" && !holds(victim, h)
	}, "want narrow taken over while its owner is stopped")
	victim.Signal(t, syscall.SIGCONT)
	h.waitAll(append(narrow, rated...), state.Done, 2*time.Minute)

	if got := m.maxInFlight("narrow"); got > 2 {
		t.Errorf("narrow (concurrency 2): want at most 2 calls in flight at the target, saw %d", got)
	}
	late := 0
	for _, id := range narrow {
		for _, e := range h.Record(id).History {
			if e.Action == state.Note && strings.HasPrefix(e.Detail, "late outcome ignored") {
				late++
			}
		}
	}
	if late > 2 {
		t.Errorf("narrow: want at most the 2 calls in flight at the stall to end late, got %d late outcomes", late)
	}
	if ratedToo {
		calls := m.callsOf("rated")
		for i := range calls {
			n := 0
			for j := i; j < len(calls) && calls[j].Sub(calls[i]) < time.Second; j++ {
				n++
			}
			if n > 11 {
				t.Fatalf("rated (10/s): want at most 11 calls in any second, got %d from %s", n, calls[i].Format("15:04:05.000"))
			}
		}
	}
	t.Logf("stalled the owner of narrow (and of rated: %v); %d late outcomes of narrow", ratedToo, late)
}

// A replica stalled (SIGSTOP) past the owners' expiry, with no other to
// take its accounts, makes none of the calls that waited in it for a
// slot (as above), and takes them up again itself once current. Each
// event counts only the call made for it: the claims of the calls not
// made were given back, so a stall costs no event one of its attempts.
func TestStallCostsNoAttempt(t *testing.T) {
	t.Parallel()
	m := newMeter(map[string]time.Duration{"narrow": 300 * time.Millisecond})
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, replicasYAML, provider.Faults{})
	replica := startReplicas(t, h, 1, target.URL)[0]
	narrow := h.Submit("narrow", "order.create", keys("narrow", 40), orderPayload)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return len(m.callsOf("narrow")) >= 4 }, "want narrow served")
	// Stopped with none claimed beyond the calls in flight, the stall
	// would have nothing to catch.
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return h.running(narrow) > m.inFlightOf("narrow")
	}, "want a claimed call of narrow waiting for a slot")
	replica.Signal(t, syscall.SIGSTOP)
	natstest.Eventually(t, 10*time.Second, func() bool { return h.sinceBeat(t, replica) > ownersExpiry },
		"want the replica's last heartbeat older than the owners' expiry")
	replica.Signal(t, syscall.SIGCONT)
	recs := h.waitAll(narrow, state.Done, 2*time.Minute)

	if n := len(m.callsOf("narrow")); n != len(narrow) {
		t.Fatalf("want each of the %d events called once, got %d calls", len(narrow), n)
	}
	yielded := 0
	for id, r := range recs {
		if r.Attempts != 1 {
			t.Errorf("event %s: called once, want 1 attempt, got %d (%s)", id, r.Attempts, servicetest.Actions(r))
		}
		for _, e := range r.History {
			if e.Action == state.Yield {
				yielded++
			}
		}
	}
	if yielded == 0 {
		t.Fatal("want the stall to catch calls waiting for a slot, given back on waking; none was")
	}
	t.Logf("%d claims of calls not made given back", yielded)
}

// running is how many of ids are claimed (running), read one by one.
func (h *harness) running(ids []string) int {
	n := 0
	for _, id := range ids {
		if r, _, err := h.St.Get(context.Background(), "", id); err == nil && r.Status == state.Running {
			n++
		}
	}
	return n
}

// ownersExpiry is how long a replica may go unheard before the others
// take its accounts (owner.Options.Expiry at the default heartbeat).
const ownersExpiry = 3 * time.Second

// sinceBeat is how long ago p's last heartbeat was sent, by the time it
// wrote in the owners bucket (0 when none is found).
func (h *harness) sinceBeat(t *testing.T, p *natstest.Proc) time.Duration {
	t.Helper()
	for m, v := range h.beats() {
		if holds(p, m) {
			at, err := time.Parse(time.RFC3339Nano, string(v))
			if err != nil {
				t.Fatalf("heartbeat of %s: %v", m, err)
			}
			return time.Since(at)
		}
	}
	return 0
}

// meter is a target that counts, per account (the URL's path), when each
// call came and how many were in flight at once. A path of two segments,
// <target>/<account>, counts under each: the whole path and the target.
type meter struct {
	latency map[string]time.Duration
	fail    map[string]bool
	// capacity is how many calls a key takes at once: a call over it is
	// refused at once, 429.
	capacity map[string]int

	mu       sync.Mutex
	calls    map[string][]time.Time
	refused  map[string][]time.Time
	inFlight map[string]int
	peak     map[string]int
}

func newMeter(latency map[string]time.Duration) *meter {
	return &meter{latency: latency, fail: map[string]bool{}, capacity: map[string]int{},
		calls: map[string][]time.Time{}, refused: map[string][]time.Time{}, inFlight: map[string]int{}, peak: map[string]int{}}
}

func (m *meter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	account := strings.Trim(r.URL.Path, "/")
	counted := []string{account}
	if target, _, ok := strings.Cut(account, "/"); ok {
		counted = append(counted, target)
	}
	m.mu.Lock()
	over := false
	for _, k := range counted {
		m.calls[k] = append(m.calls[k], time.Now())
		m.inFlight[k]++
		m.peak[k] = max(m.peak[k], m.inFlight[k])
		if c, ok := m.capacity[k]; ok && m.inFlight[k] > c {
			over = true
		}
	}
	if over {
		for _, k := range counted {
			m.refused[k] = append(m.refused[k], time.Now())
		}
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		for _, k := range counted {
			m.inFlight[k]--
		}
		m.mu.Unlock()
	}()
	if over {
		http.Error(w, "over capacity", http.StatusTooManyRequests)
		return
	}
	if d := m.latency[account]; d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
	}
	if m.fail[account] {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (m *meter) callsOf(account string) []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.calls[account]...)
}

func (m *meter) refusedOf(account string) []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.refused[account]...)
}

func (m *meter) inFlightOf(account string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inFlight[account]
}

func (m *meter) maxInFlight(account string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak[account]
}

// replicaBinary is the real tenaz-dispatcher, built once per test run.
func replicaBinary(t *testing.T) string { return natstest.Binary(t, "./cmd/tenaz-dispatcher") }

// startReplicas starts n replicas (r1, r2, …) and waits until every one
// heartbeats.
func startReplicas(t *testing.T, h *harness, n int, targetURL string) []*natstest.Proc {
	t.Helper()
	procs := make([]*natstest.Proc, n)
	for i := range procs {
		procs[i] = startReplica(t, h, fmt.Sprintf("r%d", i+1), targetURL)
	}
	natstest.Eventually(t, 20*time.Second, func() bool { return h.liveReplicas() == n },
		"want %d dispatcher replicas heartbeating, got %d", n, h.liveReplicas())
	return procs
}

// startReplica runs tenaz-dispatcher named name against h's server, with
// h's config.
func startReplica(t *testing.T, h *harness, name, targetURL string) *natstest.Proc {
	t.Helper()
	return natstest.StartProc(t, name, replicaBinary(t), h.yaml,
		"NATS_URL="+h.Srv.ClientURL(), "TARGET="+targetURL, "LOG_LEVEL=warn", "LOG_FORMAT=json")
}

// holds reports whether holder, a name in the owners bucket, is replica
// p's: names.Instance() of its pid, as one key token.
func holds(p *natstest.Proc, holder string) bool {
	host, _ := os.Hostname()
	b := []byte(fmt.Sprintf("%s-%d-", host, p.Pid()))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return strings.HasPrefix(holder, string(b))
}

// ownerOf is the replica among procs that holds account's lease.
func ownerOf(t *testing.T, h *harness, procs []*natstest.Proc, account string) *natstest.Proc {
	t.Helper()
	holder := h.leaseHolder(account)
	for _, p := range procs {
		if holds(p, holder) {
			return p
		}
	}
	t.Fatalf("want %s's lease held by one of the replicas, held by %q", account, holder)
	return nil
}

// liveReplicas counts the replicas heartbeating in the owners bucket.
func (h *harness) liveReplicas() int { return len(h.beats()) }

// beats is each replica's last heartbeat in the owners bucket, by
// replica: the time it wrote. Nil when the bucket cannot be read.
func (h *harness) beats() map[string][]byte {
	kv, err := h.JS.KeyValue(h.Ctx(), names.BucketOwners)
	if err != nil {
		return nil
	}
	ks, err := kv.ListKeys(h.Ctx())
	if err != nil {
		return nil
	}
	out := map[string][]byte{}
	for k := range ks.Keys() {
		if m, ok := strings.CutPrefix(k, "m."); ok {
			if e, err := kv.Get(h.Ctx(), k); err == nil {
				out[m] = e.Value()
			}
		}
	}
	return out
}

// leaseHolder is the replica holding account's lease ("" when none).
func (h *harness) leaseHolder(account string) string {
	kv, err := h.JS.KeyValue(h.Ctx(), names.BucketOwners)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(h.Ctx(), 2*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, "a."+account)
	if err != nil {
		return ""
	}
	return string(e.Value())
}
