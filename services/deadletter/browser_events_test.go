package deadletter_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/state"
)

// running stores the record of an event of account whose first attempt
// is under way, as the dispatcher leaves it while it calls.
func (e *env) running(account, kind string) string {
	e.t.Helper()
	now := time.Now().UTC()
	env, err := event.New(event.Fields{Account: account, Kind: kind, IdempotencyKey: fmt.Sprintf("running-%d", now.UnixNano())}, []byte(`{"n":2}`), "", "", now)
	if err != nil {
		e.t.Fatal(err)
	}
	rec, _, err := state.Apply(queue.Initial(env), state.Action{Name: state.Claim, Seq: 1, Actor: "dispatcher/test"}, now)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.St.Create(context.Background(), rec); err != nil {
		e.t.Fatal(err)
	}
	return env.ID
}

const eventRows = `document.querySelectorAll('#events tbody tr[data-id]')`

// listed are the ids the events list shows.
func (b *browser) listed() []string {
	b.t.Helper()
	ids := b.eval(`Array.from(` + eventRows + `).map(r => r.dataset.id).join(' ')`)
	return strings.Fields(ids)
}

// filter opens the events list with q and waits until it lists want.
func (b *browser) filter(what string, q url.Values, want ...string) {
	b.t.Helper()
	b.do(what, chromedp.Navigate(b.base+"/ui/events?"+q.Encode()), chromedp.WaitVisible(chromedp.CSS("#event-filters")))
	deadline := time.Now().Add(30 * time.Second)
	slices.Sort(want)
	for {
		got := b.listed()
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			b.screenshot("failed")
			b.t.Fatalf("%s: want %v, the list shows %v", what, want, got)
		}
		// The index follows the records a moment behind: ask again.
		b.do(what+" again", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#event-filters")))
	}
}

// The events list and the detail of any event in a real headless
// Chromium: every event, whatever its state, found by account, state,
// entity, idempotency key, provider reference and creation time, paged
// by cursor; globex's events are not among acme's. The detail of a
// running, a retrying and a done event shows what it waits for and when,
// its last answer, its timeline and the actions of its state.
func TestEventsInChromium(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	startIngest(t, e)
	e.startDispatcher(nil)
	var acme []string
	for i := range 3 {
		acme = append(acme, submit(t, e, "acme", "order.create", fmt.Sprintf("o-%d", i), `{"order_id":"o-1","amount":1}`))
	}
	proposal := submit(t, e, "acme", "credit.evaluate", "p-42", `{"proposal":"proposal-42"}`, names.HeaderEntityID, "proposal-42")
	globex := []string{submit(t, e, "globex", "order.create", "g-0", `{"n":1}`), submit(t, e, "globex", "order.create", "g-1", `{"n":1}`)}
	e.waitDone(append(append([]string{proposal}, acme...), globex...)...)
	retrying := e.live("acme", "order.slow", state.Retrying)
	awaiting := e.live("acme", "credit.callback", state.AwaitingCallback)
	running := e.running("acme", "order.create")
	all := append(append([]string{proposal, retrying, awaiting, running}, acme...), globex...)
	acmeAll := append([]string{proposal, retrying, awaiting, running}, acme...)

	b := newBrowser(t, e.http.URL)
	b.filter("every event", url.Values{}, all...)
	if got := b.eval(`document.querySelector('a.tab.active').textContent.trim()`); got != "Events" {
		t.Fatalf("the active tab: want Events, got %q", got)
	}
	b.screenshot("events")
	// The form, as a person fills it in.
	b.do("filter by account in the form", chromedp.SendKeys(chromedp.CSS(`#event-filters input[name=account]`), "acme"), chromedp.Click(chromedp.CSS(`#find`)))
	b.wait("acme's events only", `location.search.includes('account=acme') && `+eventRows+`.length === `+fmt.Sprint(len(acmeAll)))
	for _, id := range globex {
		if slices.Contains(b.listed(), id) {
			t.Fatalf("acme's list shows globex's %s", id)
		}
	}
	b.filter("acme's retrying", url.Values{"account": {"acme"}, "state": {"retrying"}}, retrying)
	if s := b.eval(`document.querySelector('#event-filters select[name=state]').value`); s != "retrying" {
		t.Fatalf("the form: want state retrying kept, got %q", s)
	}
	b.filter("globex's done", url.Values{"account": {"globex"}, "state": {"done"}}, globex...)
	b.filter("by entity", url.Values{"entity": {"proposal-42"}}, proposal)
	b.filter("by idempotency key", url.Values{"account": {"acme"}, "idempotency_key": {"o-1"}}, acme[1])
	b.filter("by provider reference", url.Values{"provider_ref": {"ref_9"}}, awaiting)
	future := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
	b.filter("created from an hour ahead", url.Values{"since": {future}})
	if !strings.Contains(b.eval(`document.querySelector('#events td.empty').textContent`), "No event matches") {
		t.Fatal("an empty list must say that nothing matches")
	}
	b.filter("created until an hour ahead", url.Values{"account": {"globex"}, "until": {future}}, globex...)
	b.do("a bad time", chromedp.Navigate(e.http.URL+"/ui/events?since=yesterday"), chromedp.WaitVisible(chromedp.CSS("#error")))
	if s := b.eval(`document.querySelector('#error').textContent`); !strings.Contains(s, "since") {
		t.Fatalf("a bad time: want an error naming since, got %q", s)
	}

	// Page by cursor, two at a time: every acme event once.
	b.do("acme, two a page", chromedp.Navigate(e.http.URL+"/ui/events?account=acme&limit=2"), chromedp.WaitVisible(chromedp.CSS("#event-filters")))
	var paged []string
	for page := 1; ; page++ {
		ids := b.listed()
		if len(ids) > 2 {
			t.Fatalf("page %d: want at most 2, got %v", page, ids)
		}
		paged = append(paged, ids...)
		if b.eval(`document.querySelector('#next') ? 'more' : ''`) == "" {
			break
		}
		if page > 20 {
			t.Fatalf("still more pages after %d: %v", page, paged)
		}
		url := b.eval(`document.querySelector('#next').href`)
		b.do("the next page", chromedp.Click(chromedp.CSS(`#next`)))
		b.wait("the next page", `location.href === `+fmt.Sprintf("%q", url)+` && !!document.querySelector('#event-filters')`)
	}
	slices.Sort(paged)
	want := slices.Clone(acmeAll)
	slices.Sort(want)
	if !slices.Equal(paged, want) {
		t.Fatalf("paging acme's events: want each once %v, got %v", want, paged)
	}

	// The detail of a running event: what it waits for, since when; no action.
	b.filter("acme's running", url.Values{"account": {"acme"}, "state": {"running"}}, running)
	b.do("open the running event", chromedp.Click(chromedp.CSS(`#events tbody a.open`)), chromedp.WaitVisible(chromedp.CSS(`#next-step`)))
	if s := b.eval(`document.querySelector('#status').textContent`); s != "running" {
		t.Fatalf("detail: want running, got %q", s)
	}
	if s := b.eval(`document.querySelector('#next-step').textContent`); !strings.Contains(s, "the answer of attempt 1, under way since") || b.eval(`document.querySelector('#next-run').textContent`) == "" {
		t.Fatalf("a running event's next step: got %q", s)
	}
	if b.eval(`document.querySelector('#retry-form, #cancel-wait-form, #replay-form') ? 'form' : ''`) != "" || !strings.Contains(b.eval(`document.querySelector('main').textContent`), "nothing to do here") {
		t.Fatal("a running event offers no action")
	}
	b.screenshot("running-detail")
	b.do("back to the list", chromedp.Click(chromedp.CSS(`#back`)))
	b.wait("the filtered list again", `location.pathname === '/ui/events' && location.search.includes('state=running') && `+eventRows+`.length === 1`)

	// A retrying event: its next attempt and when, the 503 it got, and retry now.
	b.do("open the retrying event", chromedp.Navigate(e.http.URL+"/ui/events/"+retrying), chromedp.WaitVisible(chromedp.CSS(`#next-step`)))
	if s := b.eval(`document.querySelector('#next-step').textContent`); !strings.Contains(s, "attempt 2 of its primary stage") {
		t.Fatalf("a retrying event's next step: got %q", s)
	}
	at, err := time.Parse("2006-01-02 15:04:05Z", b.eval(`document.querySelector('#next-run').textContent`))
	if err != nil || time.Until(at) < 50*time.Minute || time.Until(at) > 61*time.Minute {
		t.Fatalf("a retrying event's next attempt: want in an hour, got %v (%v)", at, err)
	}
	if s := b.eval(`document.querySelector('#last-answer').textContent`); !strings.Contains(s, "retry") || !strings.Contains(s, "HTTP 503") {
		t.Fatalf("a retrying event's last answer: want the 503, got %q", s)
	}
	if b.eval(`document.querySelector('#retry-form') ? 'form' : ''`) == "" {
		t.Fatal("a retrying event offers retry now")
	}
	b.screenshot("retrying-detail")

	// A done event: its payload, its last answer, its timeline, its entity.
	b.do("open the done event", chromedp.Navigate(e.http.URL+"/ui/events/"+proposal), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	if s := b.eval(`document.querySelector('#status').textContent`); s != "done" {
		t.Fatalf("detail: want done, got %q", s)
	}
	if b.eval(`document.querySelector('#next-step') ? 'next' : ''`) != "" {
		t.Fatal("a done event waits for nothing")
	}
	if s := b.eval(`document.querySelector('#last-answer').textContent`); !strings.Contains(s, "succeed") {
		t.Fatalf("a done event's last answer: got %q", s)
	}
	if s := b.eval(`document.querySelector('#payload').textContent`); !strings.Contains(s, "proposal-42") {
		t.Fatalf("the payload: got %q", s)
	}
	if tl := b.eval(`document.querySelector('#timeline').textContent`); !strings.Contains(tl, "succeed") || !strings.Contains(tl, "claim") || !strings.Contains(tl, "accept") {
		t.Fatalf("the timeline: want accept, claim and succeed, got %q", tl)
	}
	if h := b.eval(`document.querySelector('#entity').getAttribute('href')`); h != "/ui/entities/acme/proposal-42" {
		t.Fatalf("the entity's timeline: want a link to /ui/entities/acme/proposal-42, got %q", h)
	}
	b.screenshot("done-detail")
}
