package deadletter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/state"
)

// The operators' actions on the screen, in a real headless Chromium: pause
// an account from the accounts page (a confirmation first), see it paused
// with who and why and in the operator actions, resume it; then retry a
// retrying event now from its detail page and see it delivered.
func TestOperatorActionsInChromium(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	e.startDispatcher(nil)
	e.waitDone(submit(t, e, "acme", "order.create", "a-0", `{"n":0}`)) // acme is owned: it has a row
	retrying := e.live("acme", "order.slow", state.Retrying)

	b := newBrowser(t, e.http.URL)
	row := `document.querySelector('tr[data-account="acme"] td.dispatch')`
	b.do("open the accounts", chromedp.Navigate(e.http.URL+"/ui/accounts"), chromedp.WaitVisible(chromedp.CSS(`[data-pause="acme"]`)))
	b.do("pause acme", chromedp.SendKeys(chromedp.CSS(`tr[data-account="acme"] input[name=reason]`), "erp migration"),
		chromedp.SendKeys(chromedp.CSS(`tr[data-account="acme"] input[name=for]`), "2h"),
		chromedp.Click(chromedp.CSS(`[data-pause="acme"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if s := b.eval(`document.querySelector('#summary').textContent`); !strings.Contains(s, "Pause account acme") || !strings.Contains(s, "until") {
		t.Fatalf("confirmation: want it to say acme is paused until a time, got %q", s)
	}
	if p, _ := e.recordedPause("acme"); p {
		t.Fatal("acme paused before the confirmation")
	}
	b.screenshot("confirm-pause")
	b.do("confirm the pause", chromedp.Click(chromedp.CSS(`#confirm`)))
	b.wait("acme paused on the page", `location.pathname === '/ui/accounts' && !!document.querySelector('#flash') && document.querySelector('#flash').textContent.includes('Account acme paused until') && `+
		row+`.textContent.includes('paused') && `+row+`.textContent.includes('operator:alice') && `+row+`.textContent.includes('erp migration') && `+
		`document.querySelector('#operator-actions tbody').textContent.includes('pause')`)
	b.screenshot("paused")
	if p, until := e.recordedPause("acme"); !p || time.Until(until) < 110*time.Minute {
		t.Fatalf("acme: want it paused for 2h, got %v until %v", p, until)
	}
	b.do("resume acme", chromedp.SendKeys(chromedp.CSS(`tr[data-account="acme"] input[name=reason]`), "migration done"),
		chromedp.Click(chromedp.CSS(`[data-resume="acme"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	b.do("confirm the resume", chromedp.Click(chromedp.CSS(`#confirm`)))
	b.wait("acme running again", `!!document.querySelector('#flash') && document.querySelector('#flash').textContent.includes('Account acme resumed') && `+row+`.textContent.includes('running')`)
	b.screenshot("resumed")
	if p, _ := e.recordedPause("acme"); p {
		t.Fatal("acme: want it running after the resume")
	}

	// Retry now, from the event's detail.
	b.do("open the retrying event", chromedp.Navigate(e.http.URL+"/ui/events/"+retrying), chromedp.WaitVisible(chromedp.CSS(`#retry-form`)))
	if s := b.eval(`document.querySelector('#status').textContent`); s != "retrying" {
		t.Fatalf("detail: want the event retrying, got %q", s)
	}
	b.screenshot("retrying-detail")
	b.do("retry now", chromedp.SendKeys(chromedp.CSS(`#retry-form input[name=reason]`), "erp is back"),
		chromedp.Click(chromedp.CSS(`#retry-now`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if s := b.eval(`document.querySelector('#summary').textContent`); !strings.Contains(s, "Retry "+retrying+" now") {
		t.Fatalf("confirmation: want it to name the event, got %q", s)
	}
	b.do("confirm the retry", chromedp.Click(chromedp.CSS(`#confirm`)))
	b.wait("the flash", `!!document.querySelector('#flash') && document.querySelector('#flash').textContent.includes('is due now')`)
	natstest.Eventually(t, 30*time.Second, func() bool { return e.Record(retrying).Status == state.Done }, "the retried event to be delivered")
	b.do("reload the detail", chromedp.Navigate(e.http.URL+"/ui/events/"+retrying), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	if tl := b.eval(`document.querySelector('#timeline').textContent`); !strings.Contains(tl, string(state.RetryNow)) || !strings.Contains(tl, "operator:alice") || !strings.Contains(tl, "erp is back") {
		t.Fatalf("timeline: want the retry_now by operator:alice with the reason, got %q", tl)
	}
	b.screenshot("retried")
}
