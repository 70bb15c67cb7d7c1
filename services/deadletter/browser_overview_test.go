package deadletter_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
)

// past stores n events of account accepted over the last span, each
// written step by step as the dispatcher writes it: accepted, claimed
// after a wait of 100 ms to 1.9 s (i%10), done; every retryEvery-th
// (0: none) retried once before it is done. It returns how many retries
// it wrote.
func (e *env) past(account, kind string, n int, span time.Duration, retryEvery int) (retries int) {
	e.t.Helper()
	c := servicetest.Context(e.t, 2*time.Minute)
	end := time.Now().UTC().Add(-5 * time.Second)
	for i := range n {
		t0 := end.Add(-span + time.Duration(i)*span/time.Duration(n))
		env, err := event.New(event.Fields{Account: account, Kind: kind, IdempotencyKey: fmt.Sprintf("past-%s-%d-%d", account, i, t0.UnixNano())}, []byte(`{"n":1}`), "", "", t0)
		if err != nil {
			e.t.Fatal(err)
		}
		rec := queue.Initial(env)
		rev, err := e.St.Create(c, rec)
		if err != nil {
			e.t.Fatal(err)
		}
		at := t0.Add(100*time.Millisecond + time.Duration(i%10)*200*time.Millisecond)
		steps := []state.Action{{Name: state.Claim, Seq: 1}}
		if retryEvery > 0 && i%retryEvery == 0 {
			next := at.Add(time.Second)
			steps = append(steps, state.Action{Name: state.Retry, NextRunAt: &next, Error: &state.ErrorInfo{Class: "transient", Message: "503 from erp", HTTPStatus: 503}},
				state.Action{Name: state.Claim, Seq: 2})
			retries++
		}
		steps = append(steps, state.Action{Name: state.Succeed})
		for _, a := range steps {
			a.Actor = "dispatcher/test"
			if rec, _, err = state.Apply(rec, a, at); err != nil {
				e.t.Fatal(err)
			}
			if rev, err = e.St.Write(c, rec, rev); err != nil {
				e.t.Fatal(err)
			}
			at = at.Add(500 * time.Millisecond)
		}
	}
	return retries
}

// num reads a number the page shows.
func (b *browser) num(expr string) float64 {
	b.t.Helper()
	v, err := strconv.ParseFloat(b.eval(expr), 64)
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// The overview in a real headless Chromium: the last half hour of acme
// and globex (events written as the dispatcher writes them, minutes
// apart) charted from the state buckets' change feed, the backlog by
// state, the breakers and limits of one account; then events delivered
// while the page is open show up on it without a reload.
func TestOverviewInChromium(t *testing.T) {
	t.Parallel()
	e := setup(t, "deadletter: {counts_every: 1s}\naccounts:\n  acme: {concurrency: 3, rate: 20/s, dead_letters: 50}")
	startIngest(t, e)
	e.startDispatcher(nil)
	acmeRetries := e.past("acme", "order.create", 300, 25*time.Minute, 5)
	e.past("globex", "order.create", 120, 25*time.Minute, 0)
	e.live("acme", "order.slow", state.Retrying)
	e.live("acme", "credit.callback", state.AwaitingCallback)

	b := newBrowser(t, e.http.URL)
	b.do("open the overview", chromedp.Navigate(e.http.URL+"/ui/overview"), chromedp.WaitVisible(chromedp.CSS("#overview")))
	done := `Number(document.querySelector('#chart-throughput polyline[data-series="done"]').dataset.total)`
	b.wait("every account's 420 done in the chart", done+` === 420`)
	b.wait("acme and globex listed, the busiest first", `document.querySelectorAll('#overview-accounts tbody tr[data-account]').length === 2 && `+
		`document.querySelector('#overview-accounts tbody tr[data-account]').dataset.account === 'acme'`)
	if got := b.eval(`document.querySelector('a.tab.active').textContent.trim()`); got != "Overview" {
		t.Fatalf("the active tab: want Overview, got %q", got)
	}

	// One account: its own figures, backlog, breakers and limits.
	b.do("choose acme", chromedp.SetValue(chromedp.CSS(`#account-select`), "acme"), chromedp.Click(chromedp.CSS(`#show`)))
	b.wait("acme's overview", `location.search === '?account=acme' && !!document.querySelector('#account-state')`)
	b.wait("acme's 300 done, its retries and attempts", done+` === 300 && `+
		`Number(document.querySelector('#chart-retries polyline[data-series="retries"]').dataset.total) === `+strconv.Itoa(acmeRetries+1)+` && `+
		`Number(document.querySelector('#chart-retries polyline[data-series="attempts"]').dataset.total) === `+strconv.Itoa(300+acmeRetries+2))
	b.wait("the backlog by state from the scan", `document.querySelector('#chart-backlog g[data-state="retrying"]').dataset.count === '1' && `+
		`document.querySelector('#chart-backlog g[data-state="awaiting_callback"]').dataset.count === '1'`)
	if p := b.eval(`document.querySelector('#fig-p95 b').textContent`); p != "1.9s" {
		t.Fatalf("acme's p95 wait: want 1.9s (waits of 0.1-1.9 s), got %q", p)
	}
	if r := b.num(`document.querySelector('#fig-retry-rate b').textContent.replace('%','')`); r < 5 || r > 35 {
		t.Fatalf("acme's retry rate: want about 1 retry in 6 attempts, got %v%%", r)
	}
	if s := b.eval(`document.querySelector('#account-state').textContent`); !strings.Contains(s, "running") || !strings.Contains(s, "20/s") || !strings.Contains(s, "all closed") {
		t.Fatalf("acme's dispatch, rate and breakers: got %q", s)
	}
	if s := b.eval(`document.querySelector('#dead-letters').textContent`); s != "0 kept of 50" {
		t.Fatalf("acme's dead letters: want its none kept against its bound, got %q", s)
	}
	if pts := b.eval(`document.querySelector('#chart-throughput polyline[data-series="done"]').getAttribute('points').split(' ').length + ''`); pts != "30" {
		t.Fatalf("the throughput chart: want a point a minute for 30 minutes, got %s", pts)
	}
	b.screenshot("overview-acme")
	// Live: what is delivered while the page is open shows up on it, with
	// no reload (the mark set in the page survives).
	b.eval(`(window.tenazMark = 'still here', '')`)
	before := b.eval(`document.querySelector('#overview').dataset.refreshed`)
	var ids []string
	for i := range 5 {
		ids = append(ids, submit(t, e, "acme", "order.create", fmt.Sprintf("live-%d", i), `{"n":1}`))
	}
	e.waitDone(ids...)
	b.wait("the five new events done on the page without a reload", done+` === 305 && window.tenazMark === 'still here' && `+
		`document.querySelector('#overview').dataset.refreshed !== '`+before+`'`)
	b.wait("acme served by the dispatcher that delivered them", `!document.querySelector('#owner').textContent.includes('no dispatcher')`)
	b.screenshot("overview-live")
	if dir := os.Getenv("TENAZ_DOCS_SCREENSHOTS"); dir != "" {
		// The screenshot in docs/operators.md, from this very page (PNG: quality 100).
		png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "overview.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An API key's holder, whose key is its account's, does not see the
// overview (of any account) or the events list: the screen is for
// operators, who see every account.
func TestOverviewAndEventsAreOperatorsOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	for _, path := range []string{"/ui/overview", "/ui/overview?account=acme", "/ui/events", "/ui/events?account=acme"} {
		req, _ := http.NewRequestWithContext(servicetest.Context(t, 2*time.Minute), http.MethodGet, e.http.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+acmeSubmitKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("GET %s with acme's API key: want 403, got %d", path, resp.StatusCode)
		}
	}
}
