package ingest_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// An account at deadletter.max_per_account cannot keep another account's
// refusals out of DEAD, with three tenaz-ingest processes sharing the
// work and one of them killed mid-run: the calm account's refusals are
// all kept while the noisy one's wait, and INTAKE is trimmed behind
// them; the noisy one never holds more than its bound and one entry per
// process; and once an operator frees room, every refusal is kept, each
// once.
func TestAccountAtItsDeadBoundDoesNotKeepOutAnothersRefusals(t *testing.T) {
	t.Parallel()
	const bound, noisy, calm, procs = 40, 200, 20, 3
	h := setup(t, baseYAML, withTimeout(3*time.Minute))
	servicetest.Stop(t, h.ing)
	p := &publisher{h: h}
	p.refusals("noisy", noisy)
	p.refusals("calm", calm)
	last := p.wait()

	ds, err := h.JS.Stream(h.Ctx(), names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	most := 0 // the most noisy ever held
	noisyKept := func() int {
		n := h.DeadKept("noisy")
		most = max(most, n)
		return n
	}

	yaml := fmt.Sprintf(`
http: {addr: "127.0.0.1:0", max_body_bytes: 4096}
log: {level: info, format: json}
auth: {disabled: true}
streams: {ack_wait: 1s}
deadletter: {max_per_account: %d}
targets:
  erp: {url: "%s/api/{{.Kind}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id}
`, bound, h.target.URL)
	var first *natstest.Proc
	for i := range procs {
		_, proc := startIngestProc(t, h.Srv.ClientURL(), yaml, fmt.Sprint("i", i+1))
		if i == 0 {
			first = proc
		}
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return h.DeadKept("calm") == calm && noisyKept() >= bound },
		"want calm's %d refusals kept while noisy's wait at its bound (%d)", calm, bound)
	// Noisy's waiting refusals hold nothing of INTAKE: it is trimmed past
	// every submission, noisy's included.
	natstest.Eventually(t, 30*time.Second, func() bool { return h.intakeTrimmed(last) && h.DeadWaiting("noisy") > 0 },
		"want INTAKE trimmed past its %d submissions while noisy's refusals wait for room", last)
	first.Kill(t)

	// The operator discards noisy's entries whenever it is at its bound.
	natstest.Eventually(t, 2*time.Minute, func() bool {
		if noisyKept() >= bound {
			h.DiscardDead("noisy")
		}
		return h.intakeSettled(last) && h.DeadWaiting("noisy") == 0
	}, "want every refusal kept once noisy's entries are discarded")
	if most > bound+procs {
		t.Fatalf("want noisy at most at its bound (%d) and one entry per process, got %d", bound, most)
	}
	info, err := ds.Info(h.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != noisy+calm {
		t.Fatalf("want each of the %d refusals kept once, got %d entries written", noisy+calm, info.State.LastSeq)
	}
	t.Logf("noisy held at most %d entries (bound %d, %d processes)", most, bound, procs)
}

// A refusal that its account's bound keeps out of DEAD waits in the
// waiting room, not in INTAKE: INTAKE is trimmed past it and past every
// account's later submissions, which it held below its floor (stored
// until an operator freed room, whatever the account). Once room is
// freed, the waiting refusals are kept in DEAD, each once.
func TestRefusalsWaitingForRoomDoNotHoldIntake(t *testing.T) {
	t.Parallel()
	const bound, noisy, calm = 2, 10, 20
	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := setup(t, baseYAML+fmt.Sprintf("deadletter: {max_per_account: %d}\n", bound), withMetrics(set))
	p := &publisher{h: h}
	for i := range noisy {
		m := nats.NewMsg("tenaz.intake.noisy.no.such.kind")
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		m.Header.Set("Idempotency-Key", fmt.Sprintf("n-%02d", i))
		p.publish(m)
	}
	p.orders("calm", calm)
	last := p.wait()

	natstest.Eventually(t, 30*time.Second, func() bool {
		return h.intakeTrimmed(last) && h.DeadKept("noisy") == bound && h.DeadWaiting("noisy") == noisy-bound
	}, "want INTAKE trimmed past its %d submissions, noisy keeping %d and %d waiting", last, bound, noisy-bound)
	if !h.ordersAccepted("calm", calm) {
		t.Fatal("want calm's submissions accepted")
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		return maps.Equal(byAccount(t, reg, metrics.NameDeadWaiting), map[string]float64{"noisy": noisy - bound})
	}, "want %s to show noisy's %d entries waiting, and no calm", metrics.NameDeadWaiting, noisy-bound)

	// The operator frees noisy's room, a bound's worth at a time.
	var order []string // noisy's refusals, as DEAD kept them
	natstest.Eventually(t, 60*time.Second, func() bool {
		if h.DeadKept("noisy") >= bound {
			order = append(order, h.deadRaws("noisy")...)
			h.DiscardDead("noisy")
		}
		return h.DeadWaiting("noisy") == 0 && h.DeadKept("noisy") == noisy-len(order)
	}, "want every waiting refusal kept once room is freed")
	order = append(order, h.deadRaws("noisy")...)
	natstest.Eventually(t, 10*time.Second, func() bool { return len(byAccount(t, reg, metrics.NameDeadWaiting)) == 0 },
		"want %s to show nothing waiting", metrics.NameDeadWaiting)
	want := make([]string, noisy)
	for i := range want {
		want[i] = fmt.Sprintf(`{"n":%d}`, i)
	}
	slices.Sort(want)
	if slices.Sort(order); !slices.Equal(order, want) {
		t.Fatalf("want each of noisy's refusals kept once: %v, got %v", want, order)
	}
}

// byAccount is the metric name on reg, a counter or a gauge, by its
// account label.
func byAccount(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// One account's flood of refused submissions cannot fill the server's
// storage for every account: once it keeps
// deadletter.max_refusals_per_account entries, in DEAD and waiting for
// room together, its refusals are counted (tenaz_dead_not_kept_total)
// and not kept. Nothing accepted stands for them. Another account's
// refusals are all kept meanwhile, and INTAKE is trimmed behind them
// all. So with DEAD unbounded (the default), where noisy's refusals all
// go to DEAD, and with noisy at its own bound in DEAD, where they wait
// for room. Before, neither had a bound: a producer allowed only its own
// account's intake subjects could publish unknown kinds until JetStream
// was full, and then every account's submissions were refused with
// store_full.
func TestAFloodOfRefusalsIsKeptWithinItsBound(t *testing.T) {
	t.Parallel()
	const refusals, noisy, calm, loops = 5, 20, 2, 2
	for _, tc := range []struct {
		name      string
		deadBound int // noisy's bound in DEAD; 0: none
	}{{"DEAD unbounded", 0}, {"the account at its bound in DEAD", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			set, err := metrics.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			h := setup(t, baseYAML+fmt.Sprintf("deadletter: {max_per_account: %d, max_refusals_per_account: %d}\n", tc.deadBound, refusals), withMetrics(set), withBatchers(loops))
			p := &publisher{h: h}
			p.refusals("noisy", noisy)
			p.refusals("calm", calm)
			last := p.wait()
			natstest.Eventually(t, 30*time.Second, func() bool { return h.intakeTrimmed(last) }, "want INTAKE trimmed past its %d submissions", last)
			kept, parked := h.DeadKept("noisy"), h.DeadWaiting("noisy")
			// ingest's intake loops count before they write: each may keep
			// one past the bound.
			if kept+parked < refusals || kept+parked > refusals+loops || h.DeadKept("calm") != calm {
				t.Fatalf("want noisy keeping %d to %d, calm keeping its %d; got noisy %d in DEAD and %d waiting, calm %d",
					refusals, refusals+loops, calm, kept, parked, h.DeadKept("calm"))
			}
			if tc.deadBound > 0 && kept != tc.deadBound {
				t.Fatalf("want noisy keeping %d in DEAD, its bound, the rest waiting; got %d and %d waiting", tc.deadBound, kept, parked)
			}
			natstest.Eventually(t, 10*time.Second, func() bool {
				return maps.Equal(byAccount(t, reg, metrics.NameDeadNotKept), map[string]float64{"noisy": float64(noisy - kept - parked)})
			}, "want %s to count the rest of noisy's refusals, %d, and no calm's", metrics.NameDeadNotKept, noisy-kept-parked)
		})
	}
}

// refusals publishes n submissions of account that ingest refuses (an
// unknown kind), each with its own key, its number in the body.
func (p *publisher) refusals(account string, n int) {
	for i := range n {
		m := nats.NewMsg("tenaz.intake." + account + ".no.such.kind")
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		m.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%04d", account, i))
		p.publish(m)
	}
}

// A submission whose subject names its account but no valid kind is
// that account's refusal, kept within its account's bound. Filed under a
// stand-in account, it shared one bound with every account: noisy's
// flood of them left calm's refusal not kept.
func TestAnInvalidKindIsItsAccountsRefusal(t *testing.T) {
	t.Parallel()
	const refusals, noisy, loops = 3, 10, 2
	h := setup(t, baseYAML+fmt.Sprintf("deadletter: {max_refusals_per_account: %d}\n", refusals), withBatchers(loops))
	p := &publisher{h: h}
	invalid := func(account string, n int) {
		for i := range n {
			m := nats.NewMsg("tenaz.intake." + account + ".bad%kind")
			m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
			m.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%04d", account, i))
			p.publish(m)
		}
	}
	invalid("noisy", noisy)
	invalid("calm", 1)
	last := p.wait()
	natstest.Eventually(t, 30*time.Second, func() bool { return h.intakeTrimmed(last) }, "want INTAKE trimmed past its %d submissions", last)
	if n := h.DeadKept("noisy") + h.DeadWaiting("noisy"); n < refusals || n > refusals+loops || h.DeadKept("calm") != 1 {
		t.Fatalf("want noisy keeping %d to %d and calm its one; got noisy %d, calm %d", refusals, refusals+loops, n, h.DeadKept("calm"))
	}
}
