package ingest_test

import (
	"cmp"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/ingest"
)

// An ingest dies holding a lane's first submission (taken from INTAKE, not
// yet accepted); the next ingest gets the lane's later submissions at
// once, while the first comes back only after the consumer's AckWait
// (30s). Appended then, it would join the lane at its tail, out of
// submission order, so an ordered submission first accepts the older
// submissions of its account still waiting in INTAKE (docs/chaos.md,
// bug 3).
//
// The read of the older ones may be answered by a replica behind its
// stream's leader (a direct get), without them: the second time round,
// the first two reads are (StaleRead). Taken for "none older", the first
// submission joined the lane behind the second.
func TestOrderedSubmissionHeldByADeadIngestKeepsItsPlace(t *testing.T) {
	t.Parallel()
	for _, stale := range []int32{0, 2} {
		t.Run(fmt.Sprintf("stale reads %d", stale), func(t *testing.T) {
			t.Parallel()
			heldByADeadIngest(t, stale)
		})
	}
}

func heldByADeadIngest(t *testing.T, stale int32) {
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := setup(t, baseYAML, withMetrics(set))
	servicetest.Stop(t, h.ing)
	lane := []string{"Tenaz-Ordering-Key", "lane-1"}
	h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-1"}`), append([]string{"Idempotency-Key", "first"}, lane...)...)
	// The dead ingest: it took the first submission and never settled it.
	cons, err := h.JS.Consumer(h.Ctx(), names.StreamIntake, "ingest")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(servicetest.WaitFor))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}

	var reads atomic.Int32
	h.startIngest(&ingest.Hooks{StaleRead: func(string) bool { return reads.Add(1) <= stale }})
	h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-2"}`), append([]string{"Idempotency-Key", "second"}, lane...)...)
	first, second := event.ID("acme", "first"), event.ID("acme", "second")
	// The second is created before its predecessor is pointed at it
	// (link): wait for both writes, whichever order they came in.
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		_, ok2 := h.Lookup(second)
		r1, ok1 := h.Lookup(first)
		return ok2 && ok1 && r1.Next != ""
	}, "want the second submission accepted and a successor linked to the first")
	r2, _ := h.Lookup(second)
	r1, ok := h.Lookup(first)
	if !ok || r2.After != first || r1.Next != second {
		t.Fatalf("want the first submission accepted first and the second behind it; got first exists %v (next %q), second after %q", ok, r1.Next, r2.After)
	}
	// Both are counted accepted: the first by the accept of the second,
	// as its own delivery, later, finds its record and counts nothing.
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return servicetest.Metric(t, reg, metrics.NameAccepted, "account", "acme", "kind", "order.create") == 2
	}, "%s: want both submissions counted", metrics.NameAccepted)
}

// The accept of a lane's first event dies after its record is written and
// before its EVENTS publish, and a later event of the lane is linked to it
// meanwhile (by another ingest replica; here by hand). The redelivery
// finds a record that is no longer the one ingest made, so its message
// must not be claimed without a read: claimed from the envelope, the
// record would lose its link to the next event, which then waits for the
// lane's safety net instead of being woken.
func TestRetriedAcceptKeepsTheLanesLink(t *testing.T) {
	t.Parallel()
	id := event.ID("acme", "lane-link-1")
	next := event.ID("acme", "lane-link-2")
	crashed, linked := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	h := setup(t, baseYAML, withHooks(&ingest.Hooks{AfterCreate: func(got string) error {
		if got == id && calls.Add(1) == 1 {
			close(crashed)
			<-linked
			return errCrash
		}
		return nil
	}}))
	ack := h.publishIntake(intakeOrderCreate, []byte(`{"order_id":"o-1"}`), "Idempotency-Key", "lane-link-1", "Tenaz-Ordering-Key", "lane-link")
	select {
	case <-crashed:
	case <-h.Ctx().Done():
		t.Fatal("the accept never reached its create")
	}
	if _, _, err := h.St.Update(h.Ctx(), "acme", id, func(r state.Record) (state.Record, error) {
		r.Next = next
		return r, nil
	}); err != nil {
		t.Fatal(err)
	}
	close(linked)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(ack.Sequence) },
		"INTAKE message not settled after the redelivery")
	h.startDispatcher("d1")
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		r, ok := h.Lookup(id)
		return ok && r.Status == state.Done
	}, "the lane's first event should be done")
	if r, _ := h.Lookup(id); r.Next != next {
		t.Fatalf("the done record's link to the next event: want %s, got %q", next, r.Next)
	}
}

// An account flooding ordered submissions holds up neither another
// account's submissions nor another account's lane, even with a flood
// larger than the ingest consumer's ack window (4,096). Past a few held
// submissions the flood's newest held one anchors the rest, acked as they
// come and read back from INTAKE behind it, so the window keeps moving;
// and the accounts of one ordered loop (one here, so all of them) take
// turns. Before, the flood's first 4,096 filled the window and calm's
// submissions, behind the flood in INTAKE, came only once the loop had
// accepted the flood's excess; quiet's lane waited for the whole flood.
// The flood's lane keeps INTAKE's order, and every submission is settled.
func TestOrderedFloodDoesNotHoldUpAnotherAccount(t *testing.T) {
	t.Parallel()
	const flood, calm = 5000, 20
	h := setup(t, baseYAML, withBatchers(1), withTimeout(3*time.Minute))
	servicetest.Stop(t, h.ing)
	p := &publisher{h: h}
	publish := func(account, key string, headers ...string) {
		m := nats.NewMsg("tenaz.intake." + account + ".order.create")
		m.Data = []byte(`{"order_id":"` + key + `"}`)
		m.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(headers); i += 2 {
			m.Header.Set(headers[i], headers[i+1])
		}
		p.publish(m)
	}
	for i := range flood {
		publish("flood", fmt.Sprintf("f-%04d", i), "Tenaz-Ordering-Key", "lane")
	}
	for i := range calm {
		publish("calm", fmt.Sprintf("c-%02d", i))
		publish("quiet", fmt.Sprintf("q-%02d", i), "Tenaz-Ordering-Key", "lane")
	}
	last := p.wait()

	h.startIngest(nil)
	accepted := func(account, format string, n int) int {
		got := 0
		for i := range n {
			if _, ok := h.Lookup(event.ID(account, fmt.Sprintf(format, i))); ok {
				got++
			}
		}
		return got
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		return accepted("calm", "c-%02d", calm) == calm && accepted("quiet", "q-%02d", calm) == calm
	}, "want calm's and quiet's %d submissions accepted", calm)
	if n := accepted("flood", "f-%04d", flood); n > flood/10 {
		t.Fatalf("want calm's and quiet's submissions accepted while the flood waits, got %d of the flood's %d accepted first", n, flood)
	}
	natstest.Eventually(t, 3*time.Minute, func() bool { return accepted("flood", "f-%04d", flood) == flood },
		"want the flood accepted")
	for i := 1; i < flood; i++ {
		r, _ := h.Lookup(event.ID("flood", fmt.Sprintf("f-%04d", i)))
		if want := event.ID("flood", fmt.Sprintf("f-%04d", i-1)); r.After != want {
			t.Fatalf("f-%04d: want it behind f-%04d in the lane, got after %q", i, i-1, r.After)
		}
	}
	for i := 1; i < calm; i++ {
		r, _ := h.Lookup(event.ID("quiet", fmt.Sprintf("q-%02d", i)))
		if want := event.ID("quiet", fmt.Sprintf("q-%02d", i-1)); r.After != want {
			t.Fatalf("q-%02d: want it behind q-%02d in the lane, got after %q", i, i-1, r.After)
		}
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(last) },
		"want every INTAKE message settled")
}

// An ingest process is killed (SIGKILL) while it drains a flood's anchor:
// the submissions the anchor stood for were acked as they came and only
// part of them is accepted. The anchor, never acked, comes back to the
// next ingest after the consumer's AckWait (30s), which reads what INTAKE
// holds of the account after it: every submission is accepted, once, in
// its lane's order, and nothing is trimmed before (the anchor held the
// floor).
func TestFloodsAnchorSurvivesItsIngestKilled(t *testing.T) {
	t.Parallel()
	const flood = 3000
	h := setup(t, baseYAML, withTimeout(3*time.Minute))
	servicetest.Stop(t, h.ing)
	p := &publisher{h: h}
	for i := range flood {
		m := nats.NewMsg(intakeOrderCreate)
		m.Data = []byte(fmt.Sprintf(`{"order_id":"f-%04d"}`, i))
		m.Header.Set("Idempotency-Key", fmt.Sprintf("f-%04d", i))
		m.Header.Set("Tenaz-Ordering-Key", "lane")
		p.publish(m)
	}
	last := p.wait()
	yaml := fmt.Sprintf(`
http: {addr: "127.0.0.1:0", max_body_bytes: 4096}
log: {level: info, format: json}
auth: {disabled: true}
targets:
  erp: {url: "%s/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id}
`, h.target.URL)
	id := func(i int) string { return event.ID("acme", fmt.Sprintf("f-%04d", i)) }
	accepted := func(i int) bool { _, ok := h.Lookup(id(i)); return ok }

	_, first := startIngestProc(t, h.Srv.ClientURL(), yaml, "i1")
	// A lane is accepted in order: f-0300 accepted means the 300 before it are.
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return accepted(300) }, "want i1 draining the flood")
	first.Kill(t)
	if accepted(flood - 1) {
		t.Fatal("want i1 killed before it accepted the whole flood")
	}
	startIngestProc(t, h.Srv.ClientURL(), yaml, "i2")
	natstest.Eventually(t, 90*time.Second, func() bool { return accepted(flood - 1) }, "want the flood's last submission accepted")
	for i := range flood {
		r, ok := h.Lookup(id(i))
		if !ok {
			t.Fatalf("f-%04d: want it accepted", i)
		}
		if i > 0 && r.After != id(i-1) {
			t.Fatalf("f-%04d: want it behind f-%04d in the lane, got after %q", i, i-1, r.After)
		}
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.intakeSettled(last) },
		"want every INTAKE message settled")
}

// publisher publishes to INTAKE asynchronously, waiting for the PubAcks
// every thousand messages (the client stalls past 4,000 outstanding).
type publisher struct {
	h    *harness
	acks []jetstream.PubAckFuture
	last uint64 // the last stored message's INTAKE sequence
}

func (p *publisher) publish(m *nats.Msg) {
	p.h.t.Helper()
	f, err := p.h.JS.PublishMsgAsync(m)
	if err != nil {
		p.h.t.Fatal(err)
	}
	if p.acks = append(p.acks, f); len(p.acks) == 1000 {
		p.wait()
	}
}

// orders publishes n submissions of order.create for account, with the
// idempotency keys c-00, c-01, …
func (p *publisher) orders(account string, n int) {
	for i := range n {
		m := nats.NewMsg("tenaz.intake." + account + ".order.create")
		m.Data = []byte(fmt.Sprintf(`{"order_id":"c-%02d"}`, i))
		m.Header.Set("Idempotency-Key", fmt.Sprintf("c-%02d", i))
		p.publish(m)
	}
}

// ordersAccepted reports whether the n submissions publisher.orders
// published for account are each an event.
func (h *harness) ordersAccepted(account string, n int) bool {
	for i := range n {
		if _, ok := h.Lookup(event.ID(account, fmt.Sprintf("c-%02d", i))); !ok {
			return false
		}
	}
	return true
}

// wait waits for every publish to be stored and returns the last one's
// INTAKE sequence.
func (p *publisher) wait() uint64 {
	p.h.t.Helper()
	for _, f := range p.acks {
		select {
		case a := <-f.Ok():
			p.last = max(p.last, a.Sequence)
		case err := <-f.Err():
			p.h.t.Fatal(err)
		case <-time.After(servicetest.WaitFor):
			p.h.t.Fatal("no PubAck")
		}
	}
	p.acks = p.acks[:0]
	return p.last
}

// An account flooding unordered submissions over NATS does not hold up
// another account's submissions behind it in INTAKE: once the flood fills
// the batch loops, its next submissions wait behind an anchor (acked as
// they come, read back from INTAKE by its ordered loop), and the intake
// consumer goes on to calm's. Before, the batch loops took INTAKE in its
// order, and calm's submissions waited for the whole flood. The store
// takes 2 ms for each of the flood's records here (as a loaded one
// might), so that what calm waits for is the flood's accepts, not how
// the host shares its CPU between them and the intake consumer. The
// flood holds calm up no more when it sets the reply header of HTTP
// submissions (see TestForgedReplyHeaderHoldsUpNoAccount), even naming
// one of ingest's own inboxes: a submission with that header was never
// acked for an anchor, and only a sealed one (headerReplySeal) counts.
func TestUnorderedFloodDoesNotHoldUpAnotherAccount(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{"", "_INBOX.tenaz-producer.sink", "_INBOX.tenaz-ingest.forged.1"} {
		t.Run("reply header "+cmp.Or(reply, "none"), func(t *testing.T) {
			t.Parallel()
			unorderedFlood(t, reply)
		})
	}
}

// unorderedFlood is TestUnorderedFloodDoesNotHoldUpAnotherAccount, the
// flood's submissions carrying reply as their reply header.
func unorderedFlood(t *testing.T, reply string) {
	const flood, calm = 3000, 20
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := setup(t, baseYAML, withMetrics(set))
	servicetest.Stop(t, h.ing)
	p := &publisher{h: h}
	publish := func(account, key, reply string) {
		m := nats.NewMsg("tenaz.intake." + account + ".order.create")
		m.Data = []byte(`{"order_id":"` + key + `"}`)
		m.Header.Set("Idempotency-Key", key)
		if reply != "" {
			m.Header.Set("Tenaz-Reply", reply)
		}
		p.publish(m)
	}
	for i := range flood {
		publish("flood", fmt.Sprintf("f-%05d", i), reply)
	}
	calmIDs := map[string]bool{}
	for i := range calm {
		publish("calm", fmt.Sprintf("c-%02d", i), "")
		calmIDs[event.ID("calm", fmt.Sprintf("c-%02d", i))] = true
	}
	last := p.wait()

	// The order records are created in, as the accept reports it.
	var mu sync.Mutex
	var created []string
	h.startIngest(&ingest.Hooks{AfterCreate: func(id string) error {
		if !calmIDs[id] {
			<-time.After(2 * time.Millisecond) // the slow store; not a wait for an outcome
		}
		mu.Lock()
		created = append(created, id)
		mu.Unlock()
		return nil
	}})
	natstest.Eventually(t, time.Minute, func() bool { return h.intakeSettled(last) },
		"want every INTAKE message settled")
	mu.Lock()
	defer mu.Unlock()
	floodFirst, calmLeft := 0, calm
	for _, id := range created {
		if calmIDs[id] {
			calmLeft--
		} else if calmLeft > 0 {
			floodFirst++
		}
	}
	t.Logf("calm's submissions accepted after %d of the flood's %d", floodFirst, flood)
	if calmLeft > 0 || len(created) != flood+calm {
		t.Fatalf("want all %d submissions created once, got %d created, %d of calm's missing", flood+calm, len(created), calmLeft)
	}
	if floodFirst > flood/2 {
		t.Fatalf("want calm's submissions accepted while most of the flood waits, got %d of the flood's %d accepted first", floodFirst, flood)
	}
	// The operators see who floods: flood's submissions acked for its
	// anchor are counted under its name, calm has none.
	anchored := byAccount(t, reg, metrics.NameAnchored)
	if anchored["flood"] == 0 || anchored["calm"] != 0 {
		t.Fatalf("%s: want flood's submissions counted and none of calm's, got %v", metrics.NameAnchored, anchored)
	}
	t.Logf("%s: %v", metrics.NameAnchored, anchored)
}

// A NATS producer that sets the reply header of HTTP submissions, naming
// an inbox it reads and never answers, holds up no other account. Ingest
// answers only its own inboxes (natsconn.InboxPrefix(ingest.Name), which
// no other NATS user may read), so the producer's refusals are kept in
// DEAD as they come. Before, each was offered to the "handler" for up to
// 2 s, one after another in each batch loop, and calm's submissions
// waited minutes behind 300 of them.
func TestForgedReplyHeaderHoldsUpNoAccount(t *testing.T) {
	t.Parallel()
	const refused, calm, sink = 300, 20, "_INBOX.tenaz-producer.sink"
	h := setup(t, baseYAML)
	servicetest.Stop(t, h.ing)
	nc, _ := h.Srv.Conn(t)
	var heard atomic.Int64
	if _, err := nc.Subscribe(sink, func(*nats.Msg) { heard.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := &publisher{h: h}
	for i := range refused {
		m := nats.NewMsg("tenaz.intake.noisy.no.such.kind")
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		m.Header.Set("Idempotency-Key", fmt.Sprintf("r-%05d", i))
		m.Header.Set("Tenaz-Reply", sink)
		p.publish(m)
	}
	p.orders("calm", calm)
	p.wait()
	h.startIngest(nil)
	natstest.Eventually(t, 30*time.Second, func() bool { return h.ordersAccepted("calm", calm) },
		"want calm's %d submissions accepted behind noisy's %d refusals", calm, refused)
	natstest.Eventually(t, 30*time.Second, func() bool { return len(h.deadRaws("noisy")) == refused },
		"want each of noisy's %d refusals kept in DEAD", refused)
	if n := heard.Load(); n != 0 {
		t.Fatalf("want nothing sent to the inbox a producer named, got %d messages", n)
	}
}

// A producer's refusals that a full DEAD cannot take do not stop the
// other accounts' intake, even once the waiting room cannot take them
// either (here: its stream bounded, as the server's storage would be).
// Those wait in INTAKE until DEAD has room; NAKed back with a delay, as
// they were, each held its slot of the ingest consumer's ack window
// (4,096) meanwhile, so 10,000 of them stopped calm's submissions behind
// them. Now the first waits in its account's ordered loop as an anchor,
// and the rest are acked for it. Once DEAD has room (here: its bound is
// lifted, as an operator's discard or a larger bound would), every
// refusal is kept, none lost, those that waited in the waiting room too.
// The account's bound on refusals kept (10,000 by default) is set above
// them: TestAFloodOfRefusalsIsKeptWithinItsBound is about that one.
func TestFullDeadRefusalsDoNotHoldUpAnotherAccount(t *testing.T) {
	t.Parallel()
	const refused, calm = 10000, 20
	h := setup(t, baseYAML+"deadletter: {max_bytes: 4194304, max_refusals_per_account: 20000}\n", withTimeout(4*time.Minute))
	servicetest.Stop(t, h.ing)
	p := &publisher{h: h}
	pad := strings.Repeat("x", 1000)
	for i := range refused {
		m := nats.NewMsg("tenaz.intake.noisy.no.such.kind")
		m.Data = []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad))
		m.Header.Set("Idempotency-Key", fmt.Sprintf("r-%05d", i))
		p.publish(m)
	}
	p.orders("calm", calm)
	last := p.wait()

	// The waiting room is bounded once ingest has applied the layout (as
	// each service does at start), before it takes the first submission.
	var bounded sync.Once
	h.startIngest(&ingest.Hooks{BeforeIntake: func(string) error {
		bounded.Do(func() {
			ws, err := h.JS.Stream(h.Ctx(), names.StreamDeadWaiting)
			if err != nil {
				t.Error(err)
				return
			}
			c := ws.CachedInfo().Config
			c.MaxBytes = 1 << 20
			if _, err := h.JS.UpdateStream(h.Ctx(), c); err != nil {
				t.Error(err)
			}
		})
		return nil
	}})
	natstest.Eventually(t, 30*time.Second, func() bool { return h.ordersAccepted("calm", calm) },
		"want calm's %d submissions accepted while DEAD is full", calm)
	deadInfo := func() *jetstream.StreamInfo {
		st, err := h.JS.Stream(h.Ctx(), names.StreamDead)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(h.Ctx())
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	info := deadInfo()
	if info.State.Msgs >= refused {
		t.Fatalf("want DEAD full before it took all %d refusals, got %d", refused, info.State.Msgs)
	}
	t.Logf("DEAD full at %d of the %d refusals; calm's accepted", info.State.Msgs, refused)
	natstest.Eventually(t, 30*time.Second, func() bool {
		// Full: no room for another entry (each about 1.2 KB).
		return h.StreamState(names.StreamDeadWaiting).Bytes > 1<<20-4096 && h.ConsumerInfo(names.StreamIntake, "ingest").NumAckPending > 0
	}, "want the waiting room full and the rest waiting in INTAKE")
	t.Logf("%d waiting for room, the rest in INTAKE", h.DeadWaiting("noisy"))

	cfg := info.Config
	cfg.MaxBytes = -1
	if _, err := h.JS.UpdateStream(h.Ctx(), cfg); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 2*time.Minute, func() bool { return h.intakeSettled(last) && h.DeadWaiting("noisy") == 0 },
		"want every INTAKE message settled and nothing waiting once DEAD has room")
	if n := deadInfo().State.Msgs; n != refused {
		t.Fatalf("want all %d refusals kept in DEAD, got %d", refused, n)
	}
}

// An anchor's drain reads its account's submissions back by direct get,
// which a replica behind its stream's leader may answer, with none of the
// newest. The submissions delegated to the anchor were acked for it: the
// drain reads again rather than take such an answer for "no more", or
// they would never become events. Here the first reads behind the flood's
// anchors come back empty, as from such a replica.
func TestAStaleReadBehindAnAnchorLosesNothing(t *testing.T) {
	t.Parallel()
	const flood = 1000
	h := setup(t, baseYAML, withBatchers(1), withTimeout(3*time.Minute))
	servicetest.Stop(t, h.ing)
	p := &publisher{h: h}
	for i := range flood {
		m := nats.NewMsg("tenaz.intake.flood.order.create")
		key := fmt.Sprintf("f-%04d", i)
		m.Data = []byte(`{"order_id":"` + key + `"}`)
		m.Header.Set("Idempotency-Key", key)
		m.Header.Set("Tenaz-Ordering-Key", "lane")
		p.publish(m)
	}
	last := p.wait()
	var stale atomic.Int32
	h.startIngest(&ingest.Hooks{StaleRead: func(account string) bool { return account == "flood" && stale.Add(1) <= 3 }})
	accepted := func() int {
		n := 0
		for i := range flood {
			if _, ok := h.Lookup(event.ID("flood", fmt.Sprintf("f-%04d", i))); ok {
				n++
			}
		}
		return n
	}
	natstest.Eventually(t, 2*time.Minute, func() bool { return h.intakeSettled(last) }, "want every INTAKE message settled")
	if n := accepted(); n != flood || stale.Load() < 3 {
		t.Fatalf("want the flood's %d submissions accepted after %d stale reads, got %d accepted (%d reads)", flood, 3, n, stale.Load())
	}
	for i := 1; i < flood; i++ {
		r, _ := h.Lookup(event.ID("flood", fmt.Sprintf("f-%04d", i)))
		if want := event.ID("flood", fmt.Sprintf("f-%04d", i-1)); r.After != want {
			t.Fatalf("f-%04d: want it behind f-%04d in the lane, got after %q", i, i-1, r.After)
		}
	}
}
