package target_test

import (
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/target"
)

// The cache builds each account's view of a target once: an account's
// override of the URL is used for that account only, the accounts without
// one share a single Target (so the cache does not grow with the accounts
// served), and an unknown target is an error naming it.
func TestCacheKeepsOneTargetPerAccount(t *testing.T) {
	cfg, err := config.Parse([]byte(`
accounts: {acme: {targets: {erp: {url: "http://acme.example/{{.Kind}}"}}}}
targets: {erp: {url: "http://erp.example/{{.Kind}}"}}
kinds: {order.create: {target: erp}}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	c := target.NewCache(cfg, nil)
	url := func(account string) (*target.Target, string) {
		t.Helper()
		tg, err := c.Get(account, "erp")
		if err != nil {
			t.Fatal(err)
		}
		u, err := tg.URL(target.Request{Event: event.Envelope{Account: account, Kind: "order.create"}})
		if err != nil {
			t.Fatal(err)
		}
		return tg, u
	}
	acme, u := url("acme")
	if u != "http://acme.example/order.create" {
		t.Fatalf("acme's override: got %s", u)
	}
	globex, u := url("globex")
	if u != "http://erp.example/order.create" {
		t.Fatalf("globex gets the target's own URL, got %s", u)
	}
	if initech, _ := url("initech"); initech != globex {
		t.Fatal("two accounts without an override got a Target each")
	}
	if globex == acme {
		t.Fatal("an account with an override shares the others' Target")
	}
	if again, _ := url("acme"); again != acme {
		t.Fatal("a second Get built the target again")
	}
	if _, err := c.Get("acme", "ledger"); err == nil || !strings.Contains(err.Error(), `"ledger"`) {
		t.Fatalf("unknown target: want an error naming it, got %v", err)
	}
}
