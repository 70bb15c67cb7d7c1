package deadletter_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/state"
)

// From an event's detail page to its entity's timeline in Chromium: both
// events of proposal-7, the credit's primary attempt, its fallback and
// the fallback's success in order, and a link back to a kept event.
func TestEntityPageInChromium(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	e.p.SetFaults(provider.Faults{FailFirst: 1})
	startIngest(t, e)
	e.startDispatcher(nil)
	credit := submit(t, e, "acme", "credit.evaluate", "p7-credit", `{"applicant":"A-7"}`, names.HeaderEntityID, "proposal-7")
	again := submit(t, e, "acme", "credit.evaluate", "p7-again", `{"applicant":"A-7","retry":true}`, names.HeaderEntityID, "proposal-7")
	e.waitDone(credit, again)
	natstest.Eventually(t, 30*time.Second, func() bool {
		rep, st := e.timeline("acme", "proposal-7")
		n := 0
		for _, a := range rep.Items {
			if a.Action == string(state.Succeed) {
				n++
			}
		}
		return st == http.StatusOK && n == 2
	}, "both events of proposal-7 archived")

	b := newBrowser(t, e.http.URL)
	b.do("open the credit's detail", chromedp.Navigate(e.http.URL+"/ui/events/"+credit), chromedp.WaitVisible(chromedp.CSS("#entity")))
	b.do("open its entity", chromedp.Click(chromedp.CSS("#entity")), chromedp.WaitVisible(chromedp.CSS("#entity-timeline")))
	if got := b.eval(`document.querySelector('#entity-id').textContent`); got != "proposal-7" {
		t.Fatalf("entity page: want proposal-7, got %q", got)
	}
	b.wait("both events listed", `document.querySelectorAll('#entity-events tbody tr').length === 2`)
	events := b.eval(`document.querySelector('#entity-events').textContent`)
	if !strings.Contains(events, credit) || !strings.Contains(events, again) || strings.Count(events, "kept") != 2 {
		t.Fatalf("entity page events: want %s and %s, kept, got %q", credit, again, events)
	}
	steps := b.eval(`[...document.querySelectorAll('#entity-timeline tbody tr.step')].map(r => r.cells[1].textContent + ' ' + r.cells[2].textContent + ' ' + r.cells[4].textContent).join('\n')`)
	short := credit[:12] + "…"
	primary := strings.Index(steps, short+" claim 1 (primary)")
	fallback := strings.Index(steps, short+" fallback")
	secondary := strings.Index(steps, short+" claim 1 (fallback)")
	if primary < 0 || fallback < primary || secondary < fallback || !strings.Contains(steps[secondary:], short+" succeed") {
		t.Fatalf("entity timeline: want the credit's primary claim, fallback, fallback claim and success in order, got\n%s", steps)
	}
	b.screenshot("entity")
	b.do("back to an event", chromedp.Click(chromedp.CSS(`#entity-events a.open`)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if id := b.eval(`document.querySelector('h1').textContent`); !strings.Contains(id, credit) && !strings.Contains(id, again) {
		t.Fatalf("the event's link: want its detail, got %q", id)
	}
}
