package dispatcher_test

import (
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// A replica cut off from NATS, whose calls to the provider go on, is not
// called beside. r1 and r2 deliver six accounts' events to a bureau that
// takes 4.5 s a call, with `concurrency: 4` and each account's
// concurrency 2. r1's connection to NATS is cut while it has calls in
// flight: it stops beginning calls, but those in flight run to their end.
// r2 takes r1 for dead after the owners' expiry, but takes neither its
// slots of the bureau nor its accounts until its calls can no longer run
// (the longest timeout, 6 s, later). The bureau never has more than 4
// calls in flight, nor an account more than 2, and every event ends done.
// Before, r2 freed r1's slots and took its accounts after the expiry
// alone, and the bureau had up to 8 calls in flight.
func TestCutOffReplicaIsNotCalledBeside(t *testing.T) {
	t.Parallel()
	latency := map[string]time.Duration{}
	for i := range 64 {
		latency[fmt.Sprintf("bureau/acct-%d", i)] = 4500 * time.Millisecond
	}
	m := newMeter(latency)
	target := httptest.NewServer(m)
	t.Cleanup(target.Close)
	h := setup(t, `
streams: {ack_wait: 8s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
accounts:
  "*": {concurrency: 2, breaker: {failures: 100}}
targets:
  bureau: {url: "${TARGET}/bureau/{{.Account}}", timeout: 6s, concurrency: 4}
kinds:
  order.create: {target: bureau, entity: order_id, attempts: 20, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`, provider.Faults{})
	link := newCutter(t, h.Srv.ClientURL())
	r1 := natstest.StartProc(t, "r1", replicaBinary(t), h.yaml,
		"NATS_URL="+link.url(), "TARGET="+target.URL, "LOG_LEVEL=warn", "LOG_FORMAT=json")
	startReplica(t, h, "r2", target.URL)
	natstest.Eventually(t, 20*time.Second, func() bool { return h.liveReplicas() == 2 }, "want both replicas heartbeating")
	accounts := threeEach(t, h, r1)

	var ids []string
	for _, a := range accounts {
		ids = append(ids, h.Submit(a, "order.create", keys(a, 3), orderPayload)...)
	}
	// Cut r1 off once it has calls in flight.
	r1Calling := func() bool {
		for _, a := range accounts {
			if holds(r1, h.leaseHolder(a)) && m.inFlightOf("bureau/"+a) > 0 {
				return true
			}
		}
		return false
	}
	natstest.Eventually(t, 30*time.Second, r1Calling, "want r1 calling the bureau")
	link.cut()
	h.waitAll(ids, state.Done, 2*time.Minute)
	r1.Kill(t)

	t.Logf("bureau: at most %d calls in flight", m.maxInFlight("bureau"))
	if got := m.maxInFlight("bureau"); got > 4 {
		t.Errorf("bureau (concurrency 4): saw %d calls in flight, with r1's beside r2's", got)
	}
	for _, a := range accounts {
		if got := m.maxInFlight("bureau/" + a); got > 2 {
			t.Errorf("%s (concurrency 2): saw %d calls in flight, with r1's beside r2's", a, got)
		}
	}
}

// threeEach picks six accounts, three assigned to r1 and three to the
// other live replica.
func threeEach(t *testing.T, h *harness, r1 *natstest.Proc) []string {
	t.Helper()
	var live []string
	for m := range h.beats() {
		live = append(live, m)
	}
	var ofR1, ofOther []string
	for i := 0; i < 64 && (len(ofR1) < 3 || len(ofOther) < 3); i++ {
		a := fmt.Sprintf("acct-%d", i)
		if holds(r1, owner.Assign(live, a)) {
			ofR1 = append(ofR1, a)
		} else {
			ofOther = append(ofOther, a)
		}
	}
	if len(ofR1) < 3 || len(ofOther) < 3 {
		t.Fatalf("want three accounts for each of %v, got %v and %v", live, ofR1, ofOther)
	}
	return append(ofR1[:3], ofOther[:3]...)
}

// cutter is a TCP link between a replica and nats-server that can be cut:
// its connections close, and new ones are refused, while the replica goes
// on (and its calls to the provider with it).
type cutter struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	conns []net.Conn
	down  bool
}

// newCutter links to the nats-server at natsURL (nats://host:port).
func newCutter(t *testing.T, natsURL string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := natsURL[len("nats://"):]
	c := &cutter{ln: ln, upstream: host}
	t.Cleanup(func() { c.cut(); ln.Close() })
	go c.serve()
	return c
}

func (c *cutter) url() string { return "nats://" + c.ln.Addr().String() }

func (c *cutter) serve() {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", c.upstream)
		c.mu.Lock()
		if err != nil || c.down {
			c.mu.Unlock()
			in.Close()
			if out != nil {
				out.Close()
			}
			continue
		}
		c.conns = append(c.conns, in, out)
		c.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// cut closes the link's connections and refuses new ones.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = true
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = slices.Delete(c.conns, 0, len(c.conns))
}
