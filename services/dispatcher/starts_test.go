package dispatcher_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/owner"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// A start that fails on a server call (as while the owners' bucket
// changes leader) is tried again, soon. The first three starts fail; the
// events are still delivered within seconds, each once.
func TestFailedStartTriedAgain(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, `attempts: 3`), provider.Faults{})
	var starts atomic.Int32
	h.dispatcher("d1", &dispatcher.Hooks{BeforeStart: func(account string) error {
		if starts.Add(1) <= 3 {
			return errors.New("a server call failed")
		}
		return nil
	}}, func(o *dispatcher.Options) { o.Relist = time.Hour })
	ids := h.Submit("acme", "order.create", keys("s", 5), orderPayload)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	if n := starts.Load(); n != 4 {
		t.Fatalf("starts of acme's reader: want 4 (3 failed, then 1), got %d", n)
	}
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
}

// A replica that hands an account over keeps trying to release its lease
// while the release fails: the lease of a live replica is never taken
// from it, so the new owner could not start until it is released, and
// nothing else would tell the old one to try again. Here the first three
// releases fail; the account still moves to d2, and its events are
// delivered there.
func TestFailedReleaseTriedAgain(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, `attempts: 3`), provider.Faults{})
	account := ""
	for i := 0; account == ""; i++ {
		if a := fmt.Sprintf("acct-%d", i); owner.Assign([]string{"d1", "d2"}, a) == "d2" {
			account = a
		}
	}
	var releases atomic.Int32
	h.dispatcher("d1", &dispatcher.Hooks{BeforeRelease: func(a string) error {
		if a == account && releases.Add(1) <= 3 {
			return errors.New("a server call failed")
		}
		return nil
	}})
	ids := h.Submit(account, "order.create", keys("first", 2), orderPayload)
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	h.dispatcher("d2", nil)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.leaseHolder(account) == "d2" },
		"%s's lease to move to d2 (releases tried by d1: %v)", account, natstest.Lazy(func() any { return releases.Load() }))
	if n := releases.Load(); n != 4 {
		t.Fatalf("d1's releases of %s's lease: want 4 (3 failed, then 1), got %d", account, n)
	}
	ids = h.Submit(account, "order.create", keys("second", 3), orderPayload)
	for _, r := range h.waitAll(ids, state.Done, servicetest.WaitFor) {
		if r.History[len(r.History)-1].Actor != "dispatcher/d2" {
			t.Fatalf("%s: want it done by d2, its owner now, got %s", r.ID, servicetest.Actions(r))
		}
	}
}

// A lease kept past its reader is given back once the account is another
// replica's. A reload that changes an account's concurrency restarts its
// reader once its calls returned, keeping the lease meanwhile; if a
// replica joins then, to which the account now belongs, the first one
// found no reader to hand over when the calls returned, and kept the
// lease, so the new owner waited for it as long as the first one lived.
func TestLeaseKeptForAReloadMovesToTheNewOwner(t *testing.T) {
	t.Parallel()
	const format = `
streams: {ack_wait: 1s}
auth: {disabled: true}
accounts:
  "*": {concurrency: %s, breaker: {failures: 100}}
targets:
  erp: {url: "${TARGET}/api/{{.Kind}}", timeout: 10s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 3}
`
	h := setup(t, fmt.Sprintf(format, "2"), provider.Faults{Latency: 3 * time.Second})
	account := ""
	for i := 0; account == ""; i++ {
		if a := fmt.Sprintf("acct-%d", i); owner.Assign([]string{"d1", "d2"}, a) == "d2" {
			account = a
		}
	}
	set := h.reloadable("d1", format, "2")
	ids := h.Submit(account, "order.create", keys("slow", 1), orderPayload)
	h.waitArrivals(1, servicetest.WaitFor)
	set("3")                // d1 restarts the reader once the call returned
	h.dispatcher("d2", nil) // meanwhile the account becomes d2's
	h.waitAll(ids, state.Done, servicetest.WaitFor)
	natstest.Eventually(t, servicetest.WaitFor, func() bool { return h.leaseHolder(account) == "d2" },
		"%s's lease to move to d2, held by %q", account, natstest.Lazy(func() any { return h.leaseHolder(account) }))
	ids = h.Submit(account, "order.create", keys("after", 2), orderPayload)
	for _, r := range h.waitAll(ids, state.Done, servicetest.WaitFor) {
		if r.History[len(r.History)-1].Actor != "dispatcher/d2" {
			t.Fatalf("%s: want it done by d2, its owner now, got %s", r.ID, servicetest.Actions(r))
		}
	}
}
