package ingest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// An account at deadletter.max_per_account cannot keep another account's
// refusals out of DEAD, with three tenaz-ingest processes sharing the
// work and one of them killed mid-run: the calm account's refusals are
// all kept while the noisy one's wait; the noisy one never holds more
// than its bound and one entry per process; and once an operator frees
// room, every refusal is kept, each once.
func TestAccountAtItsDeadBoundDoesNotKeepOutAnothersRefusals(t *testing.T) {
	t.Parallel()
	const bound, noisy, calm, procs = 40, 200, 20, 3
	h := setup(t, baseYAML, withTimeout(3*time.Minute))
	servicetest.Stop(t, h.ing)
	p := &publisher{h: h}
	refuse := func(account string, i int) {
		m := nats.NewMsg("tenaz.intake." + account + ".no.such.kind")
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		m.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%04d", account, i))
		p.publish(m)
	}
	for i := range noisy {
		refuse("noisy", i)
	}
	for i := range calm {
		refuse("calm", i)
	}
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
	var first interface{ Kill() error }
	for i := range procs {
		_, proc := startIngestProc(t, h.Srv.ClientURL(), yaml, fmt.Sprint("i", i+1))
		if i == 0 {
			first = proc
		}
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return h.DeadKept("calm") == calm && noisyKept() >= bound },
		"want calm's %d refusals kept while noisy's wait at its bound (%d)", calm, bound)
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}

	// The operator discards noisy's entries whenever it is at its bound.
	natstest.Eventually(t, 2*time.Minute, func() bool {
		if noisyKept() >= bound {
			h.DiscardDead("noisy")
		}
		return h.intakeSettled(last)
	}, "want every refusal settled once noisy's entries are discarded")
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
