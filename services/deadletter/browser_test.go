package deadletter_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/state"
)

// chromium finds the browser; the tests fail (never skip) without one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("TENAZ_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the screen's browser tests need Chromium: install the Debian package chromium (sudo apt-get install -y chromium) or set TENAZ_CHROMIUM to a Chrome binary")
	return ""
}

// browser is one headless Chromium tab with helpers that fail the test.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
	shot int
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1360, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel3)
	dir := t.ArtifactDir()
	if d := os.Getenv("TENAZ_ARTIFACTS"); d != "" {
		dir = filepath.Join(d, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &browser{t: t, ctx: ctx, base: base, dir: dir}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.screenshot("failed")
		b.t.Fatalf("%s: %v", what, err)
	}
}

// wait polls a JavaScript predicate until it holds. A form posted without
// htmx (clicked before the page's script ran) navigates: a poll that the
// navigation cuts short is started again on the new page.
func (b *browser) wait(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		navigated := strings.Contains(err.Error(), "navigated or closed") || strings.Contains(err.Error(), "Cannot find context")
		if navigated && time.Now().Before(deadline) && b.ctx.Err() == nil {
			continue
		}
		b.screenshot("failed")
		b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the page as the next numbered PNG of the test's artefacts.
func (b *browser) screenshot(name string) string {
	b.shot++
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.shot, name))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
	}
	return p
}

const rows = `document.querySelectorAll('table.list tbody tr[data-seq]').length`

// The screen in a real headless Chromium: filter the dead letters by
// account and kind, open one, replay it (confirming), see it leave the
// list while the dispatcher delivers it; then resolve a manual review.
// Screenshots of each step are saved as the test's artefacts
// (go test -artifacts -outputdir DIR, or TENAZ_ARTIFACTS=DIR).
func TestScreenInChromium(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.startDispatcher(nil)
	payload := func(i int) string { return fmt.Sprintf(`{"order_id":"o-%d","amount":%d,"currency":"EUR"}`, i, 100+i) }
	acme := e.seed(3, "acme", "order.create", dead.ReasonPermanent, "permanent", payload)
	e.seed(2, "globex", "order.create", dead.ReasonExhausted, "transient", payload)
	e.seed(2, "acme", "invoice.send", dead.ReasonExhausted, "timeout", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	review := e.seed(1, "globex", "credit.evaluate", dead.ReasonReview, "timeout", func(int) string { return `{"applicant":"A-17"}` })
	e.waitListed(state.Dead, url.Values{}, 7)
	e.waitListed(state.ManualReview, url.Values{}, 1)

	b := newBrowser(t, e.http.URL)
	b.do("open the screen", chromedp.Navigate(e.http.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#filters")))
	b.wait("seven dead letters", rows+` === 7`)
	if got := b.eval(`document.querySelector('a.tab.active').textContent.replace(/\s+/g,' ').trim()`); got != "Dead 7" {
		t.Fatalf("the active tab: want %q, got %q", "Dead 7", got)
	}
	b.screenshot("dead-list")

	// Filter by account and kind.
	b.do("filter", chromedp.SendKeys(chromedp.CSS(`#filters input[name=account]`), "acme"),
		chromedp.SendKeys(chromedp.CSS(`#filters input[name=kind]`), "order.create"),
		chromedp.Click(chromedp.CSS(`#apply`)))
	b.wait("the filtered list", rows+` === 3 && location.search.includes('account=acme')`)
	for _, id := range acme {
		if !strings.Contains(b.eval(`document.querySelector('table.list tbody').textContent`), id) {
			t.Fatalf("the filtered list must show %s", id)
		}
	}
	b.screenshot("filtered")

	// Open a detail.
	b.do("open a detail", chromedp.Click(chromedp.CSS(`table.list tbody tr:first-child a.open`)), chromedp.WaitVisible(chromedp.CSS(`#payload`)))
	id := b.eval(`document.querySelector('#replay-form input[name=id]').value`)
	if !strings.Contains(b.eval(`document.querySelector('#payload').textContent`), `"currency": "EUR"`) ||
		!strings.Contains(b.eval(`document.querySelector('#timeline').textContent`), "422") {
		t.Fatal("the detail must show the payload and the timeline with the target's 422")
	}
	b.screenshot("detail")

	// Replay it: the confirmation first, then back to the list without it.
	b.do("replay", chromedp.SendKeys(chromedp.CSS(`#replay-form input[name=reason]`), "erp fixed"),
		chromedp.Click(chromedp.CSS(`#replay`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if s := b.eval(`document.querySelector('#summary').textContent`); !strings.Contains(s, "Replay 1 event") {
		t.Fatalf("confirmation: want it to say what happens, got %q", s)
	}
	b.screenshot("confirm-replay")
	b.do("confirm", chromedp.Click(chromedp.CSS(`#confirm`)))
	b.wait("the filtered list again, with the flash and without the event", `!!document.querySelector('#flash') && document.querySelector('#flash').textContent.includes('Replayed 1') && !document.body.textContent.includes('`+id+`') && location.search.includes('kind=order.create') && `+rows+` === 2`)
	b.screenshot("replayed")
	natstest.Eventually(t, 30*time.Second, func() bool { return e.Record(id).Status == state.Done }, "the replayed event to be delivered")
	if r := e.Record(id); !strings.Contains(fmt.Sprint(r.History), "operator:alice") {
		t.Fatalf("the history must name operator:alice, got %+v", r.History)
	}
	// Its page counts the replay, which its calls carry from then on.
	b.do("the replayed event's page", chromedp.Navigate(e.http.URL+"/ui/events/"+id), chromedp.WaitVisible(chromedp.CSS("#status")))
	b.wait("one replay shown", `!!document.querySelector('#replays') && document.querySelector('#replays').textContent.includes('Tenaz-Replay: 1')`)

	// Who owns which account: the dispatcher that delivered the replay
	// is the one live replica, and it owns acme.
	b.do("accounts tab", chromedp.Click(chromedp.CSS(`a.tab[data-tab="/ui/accounts"]`)))
	b.wait("the dispatcher live, owning acme", `location.pathname === '/ui/accounts' && document.querySelectorAll('#replicas tbody tr[data-replica]').length === 1 && `+
		`document.querySelector('#replicas tbody tr[data-replica]').textContent.includes('live') && !!document.querySelector('tr[data-account="acme"] td.owner') && `+
		`document.querySelector('tr[data-account="acme"] td.owner').textContent.trim() === document.querySelector('#replicas tbody tr[data-replica]').dataset.replica`)
	b.screenshot("accounts")

	// Replay everything matching a filter: a job, with its progress page.
	b.do("filter globex", chromedp.Navigate(e.http.URL+"/ui/dead?account=globex"), chromedp.WaitVisible(chromedp.CSS("#filters")))
	b.wait("globex's two", rows+` === 2`)
	b.do("replay all matching", chromedp.SendKeys(chromedp.CSS(`#selection input[name=reason]`), "erp back"),
		chromedp.Click(chromedp.CSS(`#replay-matching`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if s := b.eval(`document.querySelector('#summary').textContent`); !strings.Contains(s, "matching the filter (2 now)") {
		t.Fatalf("confirmation of a bulk replay: want the count, got %q", s)
	}
	b.do("confirm the job", chromedp.Click(chromedp.CSS(`#confirm`)))
	b.wait("the job to finish", `!!document.querySelector('#job-state') && document.querySelector('#job-state').textContent === 'done'`)
	if p := b.eval(`document.querySelector('#job-progress').textContent`); !strings.HasPrefix(p, "2 replayed") {
		t.Fatalf("job progress: want 2 replayed, got %q", p)
	}
	b.screenshot("job-done")

	// Resolve a manual review.
	b.do("review tab", chromedp.Click(chromedp.CSS(`a.tab[data-tab="/ui/review"]`)))
	b.wait("one review", rows+` === 1 && location.pathname === '/ui/review'`)
	b.screenshot("review-list")
	b.do("open the review", chromedp.Click(chromedp.CSS(`table.list tbody a.open`)), chromedp.WaitVisible(chromedp.CSS(`#resolve-form`)))
	b.do("resolve", chromedp.SetValue(chromedp.CSS(`#resolve-form input[name=result]`), `{"decision":"approved"}`),
		chromedp.SendKeys(chromedp.CSS(`#resolve-form input[name=reason]`), "bureau confirmed by phone"),
		chromedp.Click(chromedp.CSS(`#resolve`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	b.screenshot("confirm-resolve")
	b.do("confirm the resolution", chromedp.Click(chromedp.CSS(`#confirm`)))
	b.wait("the review list empty", `!!document.querySelector('#flash') && document.querySelectorAll('td.empty').length === 1`)
	b.screenshot("resolved")
	if r := e.Record(review[0]); r.Status != state.Done || string(r.Result) != `{"decision":"approved"}` {
		t.Fatalf("the review must be done with the result, got %s %s", r.Status, r.Result)
	}
	b.do("breakers tab", chromedp.Navigate(e.http.URL+"/ui/breakers"), chromedp.WaitVisible(chromedp.CSS("#breakers")))
	t.Logf("screenshots in %s", b.dir)
}
