package deadletter_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// accountRow is the accounts page's row of account, cells as text.
func accountRow(t *testing.T, page, account string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-account="` + regexp.QuoteMeta(account) + `">(.*?)</tr>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the accounts page has no row for %s", account)
	}
	return strings.Join(strings.Fields(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], " ")), " ")
}

// The accounts page shows each account's owner (the replica holding its
// lease in tenaz_owners), the live replicas, the configured limits and
// the breakers; when the owner stops, the page shows the replica that
// took the account over, and the stopped one is gone.
func TestAccountsPageShowsOwnersLimitsAndBreakers(t *testing.T) {
	t.Parallel()
	e := setup(t, `accounts:
  "*": {concurrency: 6}
  acme: {concurrency: 2, rate: 10/s}
  learner: {concurrency: auto, concurrency_min: 1, concurrency_max: 16}
`)
	// A target with a provider-wide limit (setup's YAML has its targets
	// already), added before anything but the page reads the targets.
	e.cfg.Targets["shared"] = config.Target{URL: e.cfg.Targets["erp"].URL, Timeout: e.cfg.Targets["erp"].Timeout,
		Rate: config.Rate{PerSecond: 20, Text: "20/s"}, Concurrency: 4}
	ds := map[string]*dispatcher.Service{}
	for _, name := range []string{"d1", "d2"} {
		nc, _ := e.Srv.Conn(t)
		d, err := dispatcher.New(dispatcher.Options{Conn: nc, Config: e.cfg, Instance: name})
		if err != nil {
			t.Fatal(err)
		}
		servicetest.Run(t, context.Background(), d)
		ds[name] = d
	}
	// An account is owned while it has messages: each gets one that
	// waits, its breaker open, so that it stays owned.
	e.openBreaker("acme", "erp")
	e.openBreaker("globex", "erp")
	for _, a := range []string{"acme", "globex"} {
		subj, err := e.Subj.Event(a, "order.create")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.JS.Publish(servicetest.Context(t, 2*time.Minute), subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	holder := func(account string) string {
		for name, d := range ds {
			if d.Owner(account) == name {
				return name
			}
		}
		return ""
	}
	natstest.Eventually(t, 20*time.Second, func() bool { return holder("acme") != "" && holder("globex") != "" },
		"a replica to own acme and globex")
	// What an owner of learner stored of its learned concurrency.
	kv, err := e.JS.KeyValue(servicetest.Context(t, 2*time.Minute), names.BucketOwners)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(servicetest.Context(t, 2*time.Minute), "l.learner", []byte("5")); err != nil {
		t.Fatal(err)
	}

	get := func() string {
		t.Helper()
		resp, err := http.Get(e.http.URL + "/ui/accounts")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /ui/accounts: want 200, got %d: %s", resp.StatusCode, b)
		}
		return string(b)
	}
	page := get()
	if strings.Contains(page, `id="owners-error"`) {
		t.Fatalf("the page could not read tenaz_owners: %s", page)
	}
	owner := holder("acme")
	if row := accountRow(t, page, "acme"); !strings.HasPrefix(row, "acme "+owner+" 2 10/s 5 failures") || !strings.Contains(row, "erp: open") {
		t.Fatalf("acme: want its owner %s, concurrency 2, rate 10/s and erp open, got %q", owner, row)
	}
	if row := accountRow(t, page, "learner"); !strings.Contains(row, "auto (1–16), learned 5") {
		t.Fatalf("learner: want its auto bounds and learned concurrency 5, got %q", row)
	}
	if row := accountRow(t, page, "globex"); !strings.HasPrefix(row, "globex (defaults) "+holder("globex")+" 6 unlimited") {
		t.Fatalf("globex: want its owner %s and the \"*\" limits, got %q", holder("globex"), row)
	}
	if !regexp.MustCompile(`(?s)<tr data-target="shared">.*?20/s.*?4</td>`).MatchString(page) || strings.Contains(page, `<tr data-target="erp"`) {
		t.Fatalf("want the provider-wide limit of shared (20/s, 4) listed, and no row for the unlimited erp")
	}
	for _, name := range []string{"d1", "d2"} {
		if !regexp.MustCompile(`(?s)<tr data-replica="` + name + `">.*?live`).MatchString(page) {
			t.Fatalf("replica %s: want it listed live", name)
		}
	}

	// The owner stops: it gives acme back and leaves; the other takes it.
	other := "d1"
	if owner == "d1" {
		other = "d2"
	}
	servicetest.Stop(t, ds[owner])
	natstest.Eventually(t, 20*time.Second, func() bool { return ds[other].Owner("acme") == other }, "%s to take acme over", other)
	page = get()
	if row := accountRow(t, page, "acme"); !strings.HasPrefix(row, "acme "+other+" ") {
		t.Fatalf("acme: want its new owner %s after %s stopped, got %q", other, owner, row)
	}
	if strings.Contains(page, `data-replica="`+owner+`"`) {
		t.Fatalf("the stopped replica %s left the group: want it no longer listed", owner)
	}
}
