package deadletter_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/services/deadletter"
)

// The digest fires from the server's cron schedule (every second here),
// with two deadletter replicas running: each tick is sent once, every
// DEAD arrival is counted in exactly one digest, the counts per account,
// kind and reason are right, and the webhook gets each digest's text.
func TestDigestCountsEachArrivalOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var hooks []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Text string }
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("webhook: want JSON {\"text\"}, got %s", b)
		}
		mu.Lock()
		hooks = append(hooks, body.Text)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	e := setup(t, `deadletter: {digest: {schedule: "* * * * * *", webhook: "`+hook.URL+`"}}`)
	e.startDeadletter("replica-2")

	var digests []ops.Digest
	sub, err := e.NC.Subscribe("tenaz.advisory.digest", func(m *nats.Msg) {
		var d ops.Digest
		if err := json.Unmarshal(m.Data, &d); err != nil {
			t.Errorf("digest advisory: %v", err)
		}
		mu.Lock()
		digests = append(digests, d)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	payload := func(int) string { return `{"n":1}` }
	e.seed(5, "acme", "order.create", dead.ReasonPermanent, "permanent", payload)
	e.seed(3, "globex", "invoice.send", dead.ReasonExhausted, "transient", payload)
	e.seed(2, "globex", "credit.evaluate", dead.ReasonReview, "timeout", payload)
	total := func() (n int, ds []ops.Digest) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range digests {
			n += d.Total
		}
		return n, append([]ops.Digest(nil), digests...)
	}
	natstest.Eventually(t, time.Minute, func() bool { n, _ := total(); return n >= 10 }, "digests to count the 10 arrivals")
	// A few more ticks: nothing is counted twice.
	_, before := total()
	natstest.Eventually(t, 30*time.Second, func() bool { _, ds := total(); return len(ds) >= len(before)+3 }, "three more digests")
	n, ds := total()
	if n != 10 {
		t.Fatalf("want the 10 arrivals counted once across digests, got %d in %+v", n, ds)
	}
	acct, kind, reason := map[string]int{}, map[string]int{}, map[string]int{}
	rows := map[string]int{}
	tos := map[time.Time]bool{}
	for _, d := range ds {
		if tos[d.To] {
			t.Fatalf("two digests for the tick at %v: each tick must be sent once across replicas", d.To)
		}
		tos[d.To] = true
		for k, v := range d.ByAccount {
			acct[k] += v
		}
		for k, v := range d.ByKind {
			kind[k] += v
		}
		for k, v := range d.ByReason {
			reason[k] += v
		}
		for _, r := range d.Rows {
			rows[r.Account+"/"+r.Kind+"/"+r.Reason] += r.Count
		}
	}
	want := func(name string, got map[string]int, w map[string]int) {
		t.Helper()
		for k, v := range w {
			if got[k] != v {
				t.Fatalf("%s: want %v, got %v", name, w, got)
			}
		}
		if len(got) != len(w) {
			t.Fatalf("%s: want %v, got %v", name, w, got)
		}
	}
	want("by account", acct, map[string]int{"acme": 5, "globex": 5})
	want("by kind", kind, map[string]int{"order.create": 5, "invoice.send": 3, "credit.evaluate": 2})
	want("by reason", reason, map[string]int{"permanent": 5, "attempts_exhausted": 3, "manual_review": 2})
	want("rows", rows, map[string]int{"acme/order.create/permanent": 5, "globex/invoice.send/attempts_exhausted": 3, "globex/credit.evaluate/manual_review": 2})
	last := ds[len(ds)-1]
	if last.OpenDead != 8 || last.OpenReview != 2 {
		t.Fatalf("open counts: want 8 dead and 2 in review, got %d and %d", last.OpenDead, last.OpenReview)
	}
	// Every digest seen was posted to the webhook. The replica started by
	// setup ticks before this test subscribes, so the webhook may also hold
	// earlier, empty digests the subscription never saw: those say
	// "Nothing died"; anything else posted must be a digest seen here.
	posted := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		m := map[string]int{}
		for _, h := range hooks {
			m[h]++
		}
		return m
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		p := posted()
		for _, d := range ds {
			if p[deadletter.DigestText(d, "UTC")] == 0 {
				return false
			}
		}
		return true
	}, "a webhook post for every digest seen")
	texts := map[string]bool{}
	for _, d := range ds {
		texts[deadletter.DigestText(d, "UTC")] = true
	}
	for h, c := range posted() {
		if !texts[h] && !strings.Contains(h, "Nothing died") {
			t.Fatalf("webhook text matches no digest: %q", h)
		}
		if c > 1 && !strings.Contains(h, "Nothing died") {
			t.Fatalf("a digest with arrivals was posted %d times: %q", c, h)
		}
	}
}

func TestDigestText(t *testing.T) {
	t.Parallel()
	d := ops.Digest{
		From: time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC), To: time.Date(2026, 3, 2, 5, 0, 0, 0, time.UTC), Total: 7,
		ByReason: map[string]int{"permanent": 5, "manual_review": 2},
		Rows: []ops.DigestRow{{Account: "acme", Kind: "order.create", Reason: "permanent", Count: 5},
			{Account: "globex", Kind: "credit.evaluate", Reason: "manual_review", Count: 2}},
		OpenDead: 40, OpenReview: 3,
	}
	got := deadletter.DigestText(d, "Europe/Madrid")
	for _, w := range []string{"2026-03-01 06:00 → 2026-03-02 06:00 (Europe/Madrid)", "7 arrived: 5 dead, 2 to manual review.",
		"• acme / order.create — permanent: 5", "• globex / credit.evaluate — manual_review: 2", "Still open: 40 dead, 3 in manual review."} {
		if !strings.Contains(got, w) {
			t.Errorf("want %q in\n%s", w, got)
		}
	}
	if empty := deadletter.DigestText(ops.Digest{To: d.To}, "UTC"); !strings.Contains(empty, "Nothing died") {
		t.Errorf("an empty period says so, got %q", empty)
	}
}

// The digest's webhook follows no redirect, as a target's call does not:
// a 307 would send the digest (account names and counts) on to whatever
// host it names.
func TestDigestWebhookFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var redirected, elsewhere int
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		elsewhere++
		mu.Unlock()
	}))
	t.Cleanup(other.Close)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		redirected++
		mu.Unlock()
		http.Redirect(w, r, other.URL+"/collect", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(hook.Close)
	setup(t, `deadletter: {digest: {schedule: "* * * * * *", webhook: "`+hook.URL+`"}}`)
	natstest.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return redirected >= 2 }, "two digests posted to the webhook")
	mu.Lock()
	defer mu.Unlock()
	if elsewhere != 0 {
		t.Fatalf("the digest followed the webhook's redirect to another host %d times", elsewhere)
	}
}
