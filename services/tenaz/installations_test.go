package tenaz_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// Two installations share one NATS account, told apart by their prefix:
// each has streams and buckets of its own (the default prefix's keep
// their names; acme's carry ACME_ and acme_), each delivers only its own
// events to its own target, and neither finds the other's event by id,
// though both accounts and idempotency keys are the same.
func TestTwoInstallationsInOneNATSAccount(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t) // applies the default prefix's layout
	_, js := srv.Conn(t)
	type install struct {
		prefix string
		prov   *provider.Provider
		base   string
	}
	var ins []*install
	for _, prefix := range []string{names.DefaultPrefix, "acme"} {
		p, target := servicetest.Provider(t, provider.Faults{})
		tz := start(t, fmt.Sprintf(`
prefix: %s
nats: {url: %q}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
auth: {disabled: true}
targets:
  erp: {url: %q, timeout: 5s}
kinds:
  order.create: {target: erp, attempts: 3, backoff: {initial: 1s, jitter: 0}}
`, prefix, srv.ClientURL(), target.URL+"/api/{{.Kind}}"))
		ins = append(ins, &install{prefix: prefix, prov: p, base: "http://" + tz.HTTPAddr()})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nameList []string
	for n := range js.StreamNames(ctx).Name() {
		nameList = append(nameList, n)
	}
	for _, want := range []string{"INTAKE", "EVENTS", "DEAD", "KV_tenaz_state", "KV_tenaz_owners",
		"ACME_INTAKE", "ACME_EVENTS", "ACME_EVENTS_1", "ACME_DEAD", "ACME_ADVISORIES", "ACME_DIGEST", "KV_acme_state", "KV_acme_state_3", "KV_acme_owners", "KV_acme_quotas"} {
		if !slices.Contains(nameList, want) {
			t.Errorf("want stream %s, have %v", want, nameList)
		}
	}

	ids := make([]string, len(ins))
	for i, in := range ins {
		code, v := post(t, in.base, "same-key", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-1"}}`)
		if code != 202 {
			t.Fatalf("%s: submit: %d", in.prefix, code)
		}
		ids[i] = v.ID
		waitStatus(t, in.base, v.ID, "done")
	}
	// The same account and key make the same id in each, yet two events:
	// had they shared a store, the second submit would have been a
	// duplicate and its target never called.
	if ids[0] != ids[1] {
		t.Fatalf("want the same id from the same account and key, got %s and %s", ids[0], ids[1])
	}
	for _, in := range ins {
		if n := len(in.prov.Calls()); n != 1 {
			t.Errorf("%s: want its one event at its own target, it got %d calls", in.prefix, n)
		}
	}
	code, v := post(t, ins[1].base, "only-acme", `{"account":"acme","kind":"order.create","payload":{"order_id":"o-2"}}`)
	if code != 202 {
		t.Fatalf("acme: submit: %d", code)
	}
	waitStatus(t, ins[1].base, v.ID, "done")
	if got := get(t, ins[0].base+"/v1/events/"+v.ID); got.Status != "" {
		t.Errorf("acme's event %s found by the default installation: %+v", v.ID, got)
	}
	if n := len(ins[0].prov.Calls()); n != 1 {
		t.Errorf("the default installation's target called for acme's event: %d calls", n)
	}
}
