package deadletter_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/chromedp/chromedp"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/state"
)

// Text an account or its provider writes, as the screen must show it:
// literally, never as markup. Each piece carries an element with an id
// pwned<n>, a handler setting window.pwned, or a script, so that markup
// let through is found in the DOM even where the page's CSP would stop it
// from running.
const (
	hostileAccount = "evil"
	// hostileNote goes in a payload: it closes the <pre> and the
	// <textarea> that show payloads.
	hostileNote = `</pre><img src=x id=pwned1 onerror="window.pwned=1"><script>window.pwned=2</script></textarea><img src=x id=pwned6 onerror="window.pwned=6">`
	// hostileAnswer is the provider's body of a 422: the last error. Its
	// script fits in the list's 90-byte cut of the error.
	hostileAnswer = `<script>window.pwned=3</script><img src=x id=pwned3 onerror="window.pwned=3"> & 'single' "double"`
	// hostileEntity and hostileKey are as much markup as a key may hold
	// (printable ASCII without spaces).
	hostileEntity = `e'"><svg/onload=window.pwned=4><i/id=pwned4>`
	hostileKey    = `k'"><script>window.pwned=5</script><img/src=x/id=pwned5/onerror=window.pwned=5>`
	// hostileResult is a provider's 200 answer, kept as the event's result.
	hostileResult = `{"status":"accepted","note":"</pre><script>window.pwned=13</script><img src=x id=pwned13 onerror=\"window.pwned=13\">"}`
	// A submission ingest refuses (a key with spaces, a body that is not
	// JSON) is kept in DEAD as received, headers and all.
	hostileRawKey  = `<img src=x id=pwned8 onerror="window.pwned=8">`
	hostileRawBody = `</pre><script>window.pwned=9</script><img src=x id=pwned9 onerror="window.pwned=9">`
	hostileRawNote = `<svg/onload=window.pwned=10><i id=pwned10>`
	// hostileQuery is what a link can put in the screen's query strings.
	hostileQuery = `"><img src=x id=pwned11 onerror="window.pwned=11"><script>window.pwned=11</script>`
)

// injectedJS lists what of the hostile text became markup ("" for none):
// window.pwned set, an element with an id pwned<n> or an <img src=x>, a
// script other than the page's one (htmx), or an on* handler anywhere.
const injectedJS = `(() => {
  const bad = [];
  if (typeof window.pwned !== 'undefined') bad.push('window.pwned = ' + window.pwned);
  for (const el of document.querySelectorAll('[id^="pwned"], img[src="x"]')) bad.push('an injected element ' + el.outerHTML.slice(0, 120));
  for (const s of document.scripts) if (s.getAttribute('src') !== '/ui/static/htmx.min.js') bad.push('a script that is not the page\'s own: ' + s.outerHTML.slice(0, 120));
  if (document.scripts.length !== 1) bad.push(document.scripts.length + ' scripts where the page has 1');
  for (const el of document.querySelectorAll('*')) for (const a of el.attributes) if (a.name.startsWith('on')) bad.push('a handler ' + a.name + '=' + JSON.stringify(a.value) + ' on <' + el.localName + '>');
  return bad.join('; ');
})()`

// hostileJSON writes v as a hostile account would: <, > and & as they
// are, not as encoding/json's \u003c.
func hostileJSON(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(b.String())
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// noInjection fails the test when the page shows hostile text as markup.
func noInjection(t *testing.T, b *browser, page string) {
	t.Helper()
	if got := b.eval(injectedJS); got != "" {
		b.screenshot("injected")
		t.Fatalf("%s: hostile text became markup, want none: %s", page, got)
	}
}

// showsText fails the test unless the JavaScript expr (a string) holds
// want, as text.
func showsText(t *testing.T, b *browser, page, expr, want string) string {
	t.Helper()
	got := b.eval(expr)
	if !strings.Contains(got, want) {
		b.screenshot("not-literal")
		t.Fatalf("%s: want %s to show %q literally, it shows %q", page, expr, want, got)
	}
	return got
}

// Hostile text in every place of the screen that an account or its
// provider writes, opened in a real headless Chromium: the payload, the
// idempotency key and entity id, the provider's error body and result, a
// refused submission's raw body and headers, an error cut by the list
// across a multi-byte character, and query strings the screen reflects.
// On the dead list, the event pages, the replay's confirmation, the
// entity page, the events search and the error pages nothing of it
// becomes an element, a script or a handler, and it reads as written.
func TestHostileContentInChromium(t *testing.T) {
	t.Parallel()
	// The account's provider answers a payload's "answer" raw with a 422,
	// anything else 200 with hostileResult.
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Answer *string `json:"answer"`
		}
		_ = json.Unmarshal(body, &p)
		if p.Answer != nil {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, *p.Answer)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, hostileResult)
	}))
	t.Cleanup(provider.Close)
	e := setup(t, fmt.Sprintf("accounts:\n  %s: {targets: {erp: {url: %q}}}", hostileAccount, provider.URL+"/erp"))
	startIngest(t, e)
	e.startDispatcher(nil)

	// An error whose byte 90, where the list cuts it, is inside a
	// three-byte €.
	prefix := strings.TrimSuffix((&outcome.HTTPError{Status: http.StatusUnprocessableEntity, Body: "|"}).Error(), "|")
	head := `<u id=pwned7>ü</u>`
	pad := 89 - len(prefix) - len(head)
	if pad < 0 {
		t.Fatalf("the error's prefix %q is too long to put a € across byte 90", prefix)
	}
	cutAnswer := head + strings.Repeat("-", pad) + "€€€€ <script>window.pwned=7</script>"

	markup := submit(t, e, hostileAccount, "order.create", hostileKey, hostileJSON(t, map[string]string{"note": hostileNote, "answer": hostileAnswer}), names.HeaderEntityID, hostileEntity)
	cut := submit(t, e, hostileAccount, "order.create", `cut<b>&"'`, hostileJSON(t, map[string]string{"answer": cutAnswer}))
	done := submit(t, e, hostileAccount, "order.create", `done<script>window.pwned=14</script>`, `{"order":"o-1"}`, names.HeaderEntityID, hostileEntity)
	e.Submit(hostileAccount, "order.create", []string{hostileRawKey}, func(string) string { return hostileRawBody }, "X-Note", hostileRawNote)
	e.WaitStatus(markup, state.Dead, time.Minute)
	e.WaitStatus(cut, state.Dead, time.Minute)
	if r := e.WaitStatus(done, state.Done, time.Minute); string(r.Result) != hostileResult {
		t.Fatalf("the done event's result: want the provider's answer %s, got %s", hostileResult, r.Result)
	}
	e.waitListed(state.Dead, url.Values{"account": {hostileAccount}}, 3)

	// What the screen is given, as the dispatcher and ingest kept it.
	items := map[string]ops.Item{}
	var raw ops.Item
	for _, it := range e.items(ops.ListRequest{Account: hostileAccount}) {
		items[it.ID] = it
		if strings.HasPrefix(it.ID, "seq_") { // a refused submission, as the API names it
			raw = it
		}
	}
	if got := items[markup].Error; !strings.Contains(got, hostileAnswer) {
		t.Fatalf("the DEAD entry's error: want the provider's answer %q in it, got %q", hostileAnswer, got)
	}
	cutErr := items[cut].Error
	if len(cutErr) <= 90 || utf8.RuneStart(cutErr[90]) || !strings.Contains(cutErr, cutAnswer) {
		t.Fatalf("the DEAD entry's error must hold the answer with a multi-byte character across byte 90 (its prefix changed?), got %q", cutErr)
	}
	if raw.Seq == 0 {
		t.Fatalf("the refused submission: want it in DEAD, the list holds %+v", items)
	}

	// The dead list: the error and the cut.
	b := newBrowser(t, e.http.URL)
	page := "the dead list"
	b.do("open "+page, chromedp.Navigate(e.http.URL+"/ui/dead?account="+hostileAccount), chromedp.WaitVisible(chromedp.CSS("#filters")))
	b.wait("the three dead letters", rows+` === 3`)
	noInjection(t, b, page)
	showsText(t, b, page, `document.querySelector('table.list tbody').innerText`, `<script>window.pwned=3</script><img src=x id=pwn`)
	cell := b.eval(`document.querySelector(` + jsString(fmt.Sprintf(`tr[data-id=%q] td.err`, cut)) + `).innerText`)
	shown, ok := strings.CutSuffix(strings.TrimPrefix(cell, "422 "), "…")
	if strings.ContainsRune(cell, utf8.RuneError) || !ok || !strings.HasPrefix(cutErr, shown) || len(shown) > 90 || len(shown) < 87 {
		b.screenshot("cut")
		t.Fatalf("%s: want the error cut at most 90 bytes in, on a character boundary, then …; the full error is %q, the cell shows %q", page, cutErr, cell)
	}
	b.screenshot("dead-list")

	// The event's page: payload, key, entity, error and timeline, with a
	// hostile way back.
	page = "the event's page"
	back := "/ui/dead?account=" + hostileQuery
	b.do("open "+page, chromedp.Navigate(e.http.URL+"/ui/events/"+markup+"?back="+url.QueryEscape(back)), chromedp.WaitVisible(chromedp.CSS("#payload")))
	noInjection(t, b, page)
	for _, want := range []string{`</pre><img src=x id=pwned1 onerror=`, `<script>window.pwned=2</script></textarea>`} {
		showsText(t, b, page, `document.querySelector('#payload').innerText`, want)
		showsText(t, b, page, `document.querySelector('#payload-edit').value`, want)
	}
	showsText(t, b, page, `document.querySelector('#last-error').innerText`, hostileAnswer)
	showsText(t, b, page, `document.querySelector('#timeline').innerText`, `<script>window.pwned=3</script>`)
	showsText(t, b, page, `document.querySelector('dl.facts').innerText`, hostileKey)
	if got := b.eval(`document.querySelector('#entity').textContent`); got != hostileEntity {
		t.Fatalf("%s: the entity: want %q, got %q", page, hostileEntity, got)
	}
	entityPath := "/ui/entities/" + hostileAccount + "/" + url.PathEscape(hostileEntity)
	if got := b.eval(`document.querySelector('#entity').getAttribute('href')`); got != entityPath {
		t.Fatalf("%s: the entity's link: want %q, got %q", page, entityPath, got)
	}
	b.screenshot("event")

	// The replay's confirmation shows the payload again.
	page = "the confirmation of a replay with the payload edited"
	b.do("replay with the payload", chromedp.Click(chromedp.CSS(`#edit`)), chromedp.SendKeys(chromedp.CSS(`#replay-form input[name=reason]`), "look"),
		chromedp.Click(chromedp.CSS(`#replay`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	noInjection(t, b, page)
	showsText(t, b, page, `document.querySelector('pre.payload').innerText`, `<script>window.pwned=2</script></textarea>`)
	b.screenshot("confirm")

	// The cut error in full on its page.
	page = "the cut error's page"
	b.do("open "+page, chromedp.Navigate(e.http.URL+"/ui/events/"+cut), chromedp.WaitVisible(chromedp.CSS("#last-error")))
	noInjection(t, b, page)
	if got := showsText(t, b, page, `document.querySelector('#last-error').innerText`, cutAnswer); strings.ContainsRune(got, utf8.RuneError) {
		t.Fatalf("%s: want no U+FFFD in the error, got %q", page, got)
	}

	// The provider's result of a done event.
	page = "the done event's page"
	b.do("open "+page, chromedp.Navigate(e.http.URL+"/ui/events/"+done), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	noInjection(t, b, page)
	showsText(t, b, page, `[...document.querySelectorAll('pre.payload')].map(p => p.innerText).join('\n')`, `</pre><script>window.pwned=13</script>`)
	b.screenshot("result")

	// The refused submission, as received.
	page = "the refused submission's page"
	b.do("open "+page, chromedp.Navigate(fmt.Sprintf("%s/ui/entries/%d", e.http.URL, raw.Seq)), chromedp.WaitVisible(chromedp.CSS("pre.payload")))
	noInjection(t, b, page)
	showsText(t, b, page, `document.querySelector('pre.payload').innerText`, hostileRawBody)
	showsText(t, b, page, `document.querySelector('dl.headers').innerText`, hostileRawNote)
	showsText(t, b, page, `document.querySelector('dl.headers').innerText`, hostileRawKey)
	b.screenshot("refused")

	// The entity page, once the archive holds both of its events.
	natstest.Eventually(t, time.Minute, func() bool {
		rep, st := e.timeline(hostileAccount, hostileEntity)
		return st == http.StatusOK && len(rep.Events) == 2
	}, "the archive to hold both events of the hostile entity")
	page = "the entity page"
	b.do("open "+page, chromedp.Navigate(e.http.URL+entityPath), chromedp.WaitVisible(chromedp.CSS("#entity-timeline")))
	noInjection(t, b, page)
	if got := b.eval(`document.querySelector('#entity-id').textContent`); got != hostileEntity {
		t.Fatalf("%s: want the entity %q, got %q", page, hostileEntity, got)
	}
	showsText(t, b, page, `document.querySelector('#entity-timeline').innerText`, `<script>window.pwned=3</script>`)
	b.screenshot("entity")

	// The events search: by the entity, and the account's all.
	page = "the events search"
	b.filter("search by the hostile entity", url.Values{"account": {hostileAccount}, "entity": {hostileEntity}}, markup, done)
	noInjection(t, b, page)
	showsText(t, b, page, `document.querySelector('#events tbody').innerText`, hostileEntity)
	if got := b.eval(`document.querySelector('#event-filters input[name=entity]').value`); got != hostileEntity {
		t.Fatalf("%s: the form's entity: want %q, got %q", page, hostileEntity, got)
	}
	b.filter("search the account", url.Values{"account": {hostileAccount}}, markup, cut, done)
	noInjection(t, b, page)
	b.screenshot("events")

	// Query strings the screen shows back: in an error (quoted with %q:
	// its script part reads as written), in a form.
	for _, c := range []struct{ page, path, ready, expr, want string }{
		{"the dead list's error for a hostile account", "/ui/dead?account=" + url.QueryEscape(hostileQuery), "#error", `document.querySelector('#error').innerText`, `<script>window.pwned=11</script>`},
		{"the dead list's error for a hostile time", "/ui/dead?since=" + url.QueryEscape(hostileQuery), "#error", `document.querySelector('#error').innerText`, `<script>window.pwned=11</script>`},
		{"the events search's error", "/ui/events?account=" + url.QueryEscape(hostileQuery), "#error", `document.querySelector('#error').innerText`, `<script>window.pwned=11</script>`},
		{"the events search by a hostile reference", "/ui/events?provider_ref=" + url.QueryEscape(hostileQuery), "#event-filters", `document.querySelector('#event-filters input[name=provider_ref]').value`, hostileQuery},
	} {
		b.do("open "+c.page, chromedp.Navigate(e.http.URL+c.path), chromedp.WaitVisible(chromedp.CSS("main")))
		if b.eval(`document.querySelector(`+jsString(c.ready)+`) ? 'ready' : ''`) == "" {
			b.screenshot("not-ready")
			t.Fatalf("%s: want %s on the page, it shows %q", c.page, c.ready, b.eval(`document.querySelector('main').innerText`))
		}
		noInjection(t, b, c.page)
		showsText(t, b, c.page, c.expr, c.want)
	}
	t.Logf("screenshots in %s", b.dir)
}
