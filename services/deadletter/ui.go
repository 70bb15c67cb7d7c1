package deadletter

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/daemon"
	"github.com/tenaz/tenaz/pkg/indent"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter/internal/index"
)

// The screen: server-rendered pages under /ui/ (html/template), made
// lively by htmx (vendored in ui/static, embedded; hx-boost turns links and
// forms into swaps, a running job's progress refreshes itself). Every
// action goes through a confirmation page that says what will happen, and
// every POST is checked twice against cross-site forgery: the browser's
// Sec-Fetch-Site/Origin (http.CrossOriginProtection) and a token in the
// form that must equal the tenaz_csrf cookie (SameSite=Strict, HttpOnly).

//go:embed ui/*.html ui/static/*
var uiFiles embed.FS

const csrfCookie = "tenaz_csrf"

type ui struct {
	s        *Service
	pages    map[string]*template.Template
	cop      *http.CrossOriginProtection
	activity *activity // the overview's counts (activity.go)
}

var uiFuncs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := time.Since(t).Round(time.Second)
		switch {
		case d < time.Minute:
			return fmt.Sprintf("%ds ago", int(d.Seconds()))
		case d < time.Hour:
			return fmt.Sprintf("%dm ago", int(d.Minutes()))
		case d < 48*time.Hour:
			return fmt.Sprintf("%dh ago", int(d.Hours()))
		}
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"input": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02T15:04")
	},
	"pretty": func(b []byte) string { return string(indent.JSON(b)) },
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		for n > 0 && !utf8.RuneStart(s[n]) {
			n-- // cut before a character, not inside one: half of it would show as U+FFFD
		}
		return s[:n] + "…"
	},
	"add3": func(a, b, c int) int { return a + b + c },
	// dict passes several values to a template: dict "Row" $row "Page" $.
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = kv[i+1]
		}
		return m
	},
	"num":     num,
	"pathesc": url.PathEscape,
	"recent":  func() int { return recentMinutes },
	"pct": func(a, b int) int {
		if b <= 0 {
			return 100
		}
		return min(100, a*100/b)
	},
}

func newUI(s *Service) (*ui, error) {
	u := &ui{s: s, pages: map[string]*template.Template{}, cop: http.NewCrossOriginProtection(), activity: newActivity()}
	for _, p := range []string{"list", "detail", "confirm", "job", "breakers", "accounts", "states", "message", "overview", "events", "entity"} {
		t, err := template.New("layout.html").Funcs(uiFuncs).ParseFS(uiFiles, "ui/layout.html", "ui/actions.html", "ui/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("deadletter: ui template %s: %w", p, err)
		}
		u.pages[p] = t
	}
	return u, nil
}

func (u *ui) routes(mux readyMux) {
	static, _ := fs.Sub(uiFiles, "ui/static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticFiles(http.FileServerFS(static))))
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/dead", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /ui/dead", u.list(state.Dead))
	mux.HandleFunc("GET /ui/review", u.list(state.ManualReview))
	mux.HandleFunc("GET /ui/events/{id}", u.detail)
	mux.HandleFunc("GET /ui/entities/{account}/{entity}", u.entity)
	mux.HandleFunc("GET /ui/entries/{seq}", u.detail)
	mux.HandleFunc("GET /ui/jobs/{job}", u.job)
	mux.HandleFunc("GET /ui/breakers", u.breakers)
	mux.HandleFunc("GET /ui/accounts", u.accounts)
	mux.HandleFunc("GET /ui/overview", u.overview)
	mux.HandleFunc("GET /ui/events", u.events)
	mux.HandleFunc("GET /ui/retrying", u.states(state.Retrying))
	mux.HandleFunc("GET /ui/scheduled", u.states(state.Scheduled))
	mux.Handle("POST /ui/actions", u.cop.Handler(http.HandlerFunc(u.action)))
}

func staticFiles(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// tab is one tab of the header.
type tab struct {
	Name, Path string
	Count      int
	NoCount    bool // the tab shows no count
	Stale      bool // a cached count
	Active     bool
}

// page is what every template gets.
type page struct {
	Title    string
	Tabs     []tab
	CSRF     string
	Operator string // the authenticated operator's name; "" when anonymous (auth disabled)
	Flash    string
	Error    string
	Data     any
}

// csrf returns the request's token, setting the cookie when it has none.
func csrf(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

// A flash is the outcome of the form posted last, carried by its redirect
// in the query. It is shown only with the MAC that the redirect's browser
// token makes of it: a link crafted elsewhere, whose text could tell an
// operator anything in the screen's own voice, shows none.
const flashParam, flashMACParam = "flash", "flash_mac"

func flashMAC(token, flash string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(flash))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// flashOf returns r's flash if its MAC is this browser's.
func flashOf(r *http.Request) string {
	q := r.URL.Query()
	c, err := r.Cookie(csrfCookie)
	if err != nil || q.Get(flashParam) == "" {
		return ""
	}
	if !hmac.Equal([]byte(q.Get(flashMACParam)), []byte(flashMAC(c.Value, q.Get(flashParam)))) {
		return ""
	}
	return q.Get(flashParam)
}

func (u *ui) page(w http.ResponseWriter, r *http.Request, active, title string) page {
	s := u.s
	p := page{Title: title, CSRF: csrf(w, r), Flash: flashOf(r)}
	if op, ok := auth.From(r.Context()); ok && op.Operator {
		p.Operator = op.ID
	}
	sc := s.scanned(r.Context(), 300*time.Millisecond)
	open := 0
	for _, c := range s.brk.List() {
		if c.State != "closed" {
			open++
		}
	}
	p.Tabs = []tab{
		{Name: "Overview", Path: "/ui/overview", NoCount: true},
		{Name: "Events", Path: "/ui/events", NoCount: true},
		{Name: "Dead", Path: "/ui/dead", Count: s.x.Count(state.Dead)},
		{Name: "Manual review", Path: "/ui/review", Count: s.x.Count(state.ManualReview)},
		{Name: "Retrying", Path: "/ui/retrying", Stale: true},
		{Name: "Scheduled", Path: "/ui/scheduled", Stale: true},
		{Name: "Open breakers", Path: "/ui/breakers", Count: open},
		{Name: "Accounts", Path: "/ui/accounts", NoCount: true},
	}
	if sc != nil {
		p.Tabs[4].Count, p.Tabs[5].Count = sc.Counts[state.Retrying], sc.Counts[state.Scheduled]
	}
	for i := range p.Tabs {
		p.Tabs[i].Active = p.Tabs[i].Path == active
	}
	return p
}

func (u *ui) render(w http.ResponseWriter, status int, name string, p page) {
	var buf bytes.Buffer
	if err := u.pages[name].Execute(&buf, p); err != nil {
		u.s.log.Error().Err(err).Str("page", name).Msg("rendering the screen")
		http.Error(w, "rendering failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (u *ui) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, _, msg := statusOf(err)
	p := u.page(w, r, "", "Error")
	p.Error = msg
	u.render(w, status, "message", p)
}

// listData is the list page.
type listData struct {
	Status   state.State
	Review   bool
	Path     string
	Q        ops.ListRequest
	Query    template.URL // the filter as a query string (for links), encoded by url.Values
	Reply    ops.ListReply
	Facets   index.Counts
	Accounts []string
	Kinds    []string
	Classes  []string
	Reasons  []string
	First    bool
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func filterQuery(q ops.ListRequest) url.Values {
	v := url.Values{}
	for k, val := range map[string]string{"account": q.Account, "kind": q.Kind, "class": q.Class, "reason": q.Reason} {
		if val != "" {
			v.Set(k, val)
		}
	}
	if q.Since != nil {
		v.Set("since", q.Since.UTC().Format("2006-01-02T15:04"))
	}
	if q.Until != nil {
		v.Set("until", q.Until.UTC().Format("2006-01-02T15:04"))
	}
	return v
}

func (u *ui) list(st state.State) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		path, title := "/ui/dead", "Dead letters"
		if st == state.ManualReview {
			path, title = "/ui/review", "Manual review"
		}
		q, err := listQuery(r.URL.Query())
		if err == nil {
			var rep ops.ListReply
			if rep, err = u.s.list(st, q); err == nil {
				f := u.s.x.Facets(st)
				d := listData{Status: st, Review: st == state.ManualReview, Path: path, Q: q, Query: template.URL(filterQuery(q).Encode()), Reply: rep, Facets: f,
					Accounts: keys(f.Accounts), Kinds: keys(f.Kinds), Classes: keys(f.Classes), Reasons: keys(f.Reasons), First: q.Cursor == ""}
				p := u.page(w, r, path, title)
				p.Data = d
				u.render(w, http.StatusOK, "list", p)
				return
			}
		}
		u.fail(w, r, err)
	}
}

// detailData is the detail page.
type detailData struct {
	Back     string // the list it was opened from
	Show     ops.ShowReply
	Key      string // id, or seq_<n>
	Payload  string
	History  []state.Entry
	Parked   bool
	Review   bool
	Fallback bool
	Live     bool // on its way, with an action of its own (uiactions.go)
	// Next is the event's next step and NextAt when (nil: no time, or
	// none); Answer is the last answer of a call, poll or callback.
	Next   string
	NextAt *time.Time
	Answer *state.Entry
}

func (u *ui) detail(w http.ResponseWriter, r *http.Request) {
	req := ops.ShowRequest{ID: r.PathValue("id")}
	if seq := r.PathValue("seq"); seq != "" {
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			u.fail(w, r, fail(http.StatusBadRequest, "invalid_seq", "invalid sequence %q", seq))
			return
		}
		req = ops.ShowRequest{Seq: n}
	}
	sh, err := u.s.show(r.Context(), req)
	var ae *apiError
	if errors.As(err, &ae) && ae.code == "not_parked" {
		sh, err = u.s.showLive(r.Context(), req.ID) // an event on its way: its record, and the actions on it
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d := detailData{Show: sh, Key: keyOf(sh.Item), Parked: sh.Item.Status.Parked(), Review: sh.Item.Status == state.ManualReview, Live: live(sh.Item.Status)}
	d.Back = "/ui/events"
	switch {
	case d.Review:
		d.Back = "/ui/review"
	case d.Parked:
		d.Back = "/ui/dead"
	}
	d.Back = backTo(r.URL.Query().Get("back"), d.Back)
	if sh.Event != nil {
		d.Payload = string(indent.JSON(sh.Event.Payload))
	}
	if sh.Record != nil {
		d.History = slices.Clone(sh.Record.History)
		slices.Reverse(d.History)
		d.Next, d.NextAt = nextStep(*sh.Record)
		d.Answer = lastAnswer(*sh.Record)
	}
	if k, ok := u.s.cfg.Kind(sh.Item.Kind); ok && k.Fallback != nil {
		d.Fallback = true
	}
	title := sh.Item.ID
	if title == "" {
		title = "DEAD entry " + strconv.FormatUint(sh.Item.Seq, 10)
	}
	p := u.page(w, r, "", title)
	p.Data = d
	u.render(w, http.StatusOK, "detail", p)
}

func (u *ui) job(w http.ResponseWriter, r *http.Request) {
	j, err := u.s.getJob(r.Context(), r.PathValue("job"))
	if err != nil {
		u.fail(w, r, err)
		return
	}
	p := u.page(w, r, "/ui/dead", "Replay job "+j.JobID)
	p.Data = j
	u.render(w, http.StatusOK, "job", p)
}

// breakersData is the breakers page.
type breakersData struct {
	Items   []ops.BreakerItem
	Targets []string // configured targets, for opening a breaker by hand
}

func (u *ui) breakers(w http.ResponseWriter, r *http.Request) {
	p := u.page(w, r, "/ui/breakers", "Breakers")
	d := breakersData{Items: u.s.breakers("").Items}
	for name := range u.s.live.Load().Targets { // as openBreaker checks them: reloads included
		d.Targets = append(d.Targets, name)
	}
	slices.Sort(d.Targets)
	p.Data = d
	u.render(w, http.StatusOK, "breakers", p)
}

func (u *ui) accounts(w http.ResponseWriter, r *http.Request) {
	p := u.page(w, r, "/ui/accounts", "Accounts")
	p.Data = u.s.accounts(r.Context())
	u.render(w, http.StatusOK, "accounts", p)
}

type statesData struct {
	State state.State
	Count int
	Scan  *scan
	Items []stateSample
}

func (u *ui) states(st state.State) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sc := u.s.scanned(r.Context(), 10*time.Second)
		p := u.page(w, r, "/ui/"+string(st), strings.ToUpper(string(st[:1]))+string(st[1:]))
		d := statesData{State: st, Scan: sc}
		if sc != nil {
			d.Count, d.Items = sc.Counts[st], sc.Samples[st]
		}
		p.Data = d
		u.render(w, http.StatusOK, "states", p)
	}
}

// confirmData is the confirmation page of an action: what will happen and
// the same form again with confirm=yes.
type confirmData struct {
	Action  string
	Summary string
	Fields  url.Values
	Danger  bool
	IDs     []string
	Reason  string
	Payload string // the edited payload, when there is one
	Back    string
}

func why0(f url.Values) string { return strings.TrimSpace(f.Get("reason")) }

// formFilter reads the list filter of a form, whose own "reason" is the
// operator's why: the filter's reason comes as reason_filter.
func formFilter(f url.Values) (ops.ListRequest, error) {
	v := url.Values{}
	for _, k := range []string{"account", "kind", "class", "since", "until"} {
		v.Set(k, f.Get(k))
	}
	v.Set("reason", f.Get("reason_filter"))
	return listQuery(v)
}

// backTo is a safe place to return to: a path of the screen, else def.
func backTo(raw, def string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme == "" && u.Host == "" &&
		strings.HasPrefix(raw, "/ui/") && !strings.HasPrefix(raw, "/ui//") {
		return raw
	}
	return def
}

// Actions of the screen's form.
const (
	actReplay        = "replay"
	actReplayMatch   = "replay_matching"
	actDiscard       = "discard"
	actResolve       = "resolve"
	actCloseBreaker  = "close_breaker"
	actOpenBreaker   = "open_breaker"
	actPause         = "pause"
	actResume        = "resume"
	actRetryNow      = "retry_now"
	actCancelWait    = "cancel_wait"
	maxFormSelection = ops.MaxSelection
)

// action handles every form of the screen: a first POST shows the
// confirmation, a second (confirm=yes) acts and redirects back.
func (u *ui) action(w http.ResponseWriter, r *http.Request) {
	s := u.s
	// A replay's form carries the event's payload (daemon.FormLimit says
	// why its limit); the payload itself is held to max_body_bytes when it
	// is edited.
	limit := daemon.FormLimit(s.cfg)
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			u.fail(w, r, fail(http.StatusRequestEntityTooLarge, "too_large", "the form is over %d bytes: its payload is larger than http.max_body_bytes takes", limit))
			return
		}
		u.fail(w, r, fail(http.StatusBadRequest, "malformed", "form: %v", err))
		return
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostForm.Get("csrf"))) != 1 {
		u.fail(w, r, fail(http.StatusForbidden, "csrf", "the form's anti-forgery token does not match this browser's; reload the page and try again"))
		return
	}
	f := r.PostForm
	act := f.Get("action")
	ids := slices.DeleteFunc(slices.Clone(f["id"]), func(s string) bool { return s == "" })
	var seqs []uint64
	for _, raw := range f["seq"] {
		if n, err := strconv.ParseUint(raw, 10, 64); err == nil {
			seqs = append(seqs, n)
		}
	}
	entries := formEntries(f)
	back := backTo(f.Get("back"), "/ui/dead")
	if err := checkReason(strings.TrimSpace(f.Get("reason"))); err != nil {
		u.fail(w, r, err)
		return
	}
	var summary string
	danger := false
	n := len(ids) + len(seqs)
	switch act {
	case actReplay:
		if len(ids) == 0 { // a refused submission (seq) has no event to replay
			u.fail(w, r, fail(http.StatusBadRequest, "ids_required", "select at least one event to replay (a refused submission has none: discard it, or submit it again)"))
			return
		}
		summary = fmt.Sprintf("Replay %d event(s): each starts a fresh attempt cycle", len(ids))
		if st := f.Get("stage"); st != "" {
			summary += " at the " + st + " stage"
		}
		if f.Get("edit") == "1" {
			summary += ", with the edited payload below"
		}
	case actReplayMatch:
		q, err := formFilter(f)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		rep, err := s.list(state.Dead, ops.ListRequest{Account: q.Account, Kind: q.Kind, Class: q.Class, Reason: q.Reason, Since: q.Since, Until: q.Until, Limit: 1})
		if err != nil {
			u.fail(w, r, err)
			return
		}
		summary = fmt.Sprintf("Replay every dead event matching the filter (%d now), at most %g per second, as a background job", rep.Total, s.cfg.Deadletter.ReplayRate)
	case actDiscard:
		if n == 0 {
			u.fail(w, r, fail(http.StatusBadRequest, "ids_required", "select at least one entry to discard"))
			return
		}
		if err := discardReason(why0(f)); err != nil { // refused before the confirmation, not after
			u.fail(w, r, err)
			return
		}
		summary, danger = fmt.Sprintf("Discard %d entr(ies): they are cancelled and leave the list for good", n), true
	case actResolve:
		switch f.Get("outcome") {
		case ops.OutcomeDone:
			summary = "Resolve as done (the operator did the work)"
		case ops.OutcomeDiscard:
			if err := discardReason(why0(f)); err != nil { // refused before the confirmation, not after
				u.fail(w, r, err)
				return
			}
			summary, danger = "Resolve by discarding the event", true
		case ops.OutcomeRequeuePrimary:
			summary = "Requeue to the primary stage: a fresh attempt cycle there"
		case ops.OutcomeRequeueFallback:
			summary = "Requeue to the fallback stage: a fresh attempt cycle there"
		default:
			u.fail(w, r, fail(http.StatusBadRequest, "invalid_outcome", "choose an outcome"))
			return
		}
		summary += " — " + f.Get("id")
	case actCloseBreaker:
		summary = fmt.Sprintf("Close the breaker of %s → %s for every replica: calls resume at once", f.Get("account"), f.Get("target"))
	case actPause, actResume, actRetryNow, actCancelWait, actOpenBreaker:
		if summary, danger, err = u.actionSummary(act, f); err != nil {
			u.fail(w, r, err)
			return
		}
	default:
		u.fail(w, r, fail(http.StatusBadRequest, "invalid_action", "unknown action %q", act))
		return
	}
	if n > maxFormSelection {
		u.fail(w, r, fail(http.StatusBadRequest, "too_many", "at most %d at once; replay by filter instead", maxFormSelection))
		return
	}
	if f.Get("confirm") != "yes" {
		fields := url.Values{}
		for k, v := range f {
			if k != "csrf" && k != "confirm" {
				fields[k] = v
			}
		}
		p := u.page(w, r, "", "Confirm")
		d := confirmData{Action: act, Summary: summary, Fields: fields, Danger: danger, IDs: ids, Reason: why0(f), Back: back}
		if act == actReplay && f.Get("edit") == "1" {
			d.Payload = f.Get("payload")
		}
		p.Data = d
		u.render(w, http.StatusOK, "confirm", p)
		return
	}
	// The actor is the principal in r's context (actorOf), never a field
	// of the form.
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	why := strings.TrimSpace(f.Get("reason"))
	var flash string
	switch act {
	case actReplay:
		var payload json.RawMessage
		if f.Get("edit") == "1" {
			payload = json.RawMessage(f.Get("payload"))
		}
		var rep ops.ReplayReply
		rep, err = s.replayRequest(ctx, ops.ReplayRequest{IDs: ids, Payload: payload, Stage: f.Get("stage"), Reason: why, Entries: entries})
		flash = fmt.Sprintf("Replayed %d, skipped %d (no longer dead), failed %d.", rep.Replayed, rep.Skipped, len(rep.Errors))
	case actReplayMatch:
		q, _ := formFilter(f)
		var rep ops.ReplayReply
		if rep, err = s.replayRequest(ctx, ops.ReplayRequest{Filter: &q, Stage: f.Get("stage"), Reason: why}); err == nil {
			http.Redirect(w, r, "/ui/jobs/"+rep.JobID, http.StatusSeeOther)
			return
		}
	case actDiscard:
		var rep ops.ActionReply
		rep, err = s.discardRequest(ctx, ops.DiscardRequest{IDs: ids, Seqs: seqs, Reason: why, Entries: entries})
		flash = fmt.Sprintf("Discarded %d, skipped %d, failed %d.", rep.Done, rep.Skipped, len(rep.Errors))
	case actResolve:
		var result json.RawMessage
		if res := strings.TrimSpace(f.Get("result")); res != "" {
			result = json.RawMessage(res)
		}
		err = s.resolve(ctx, ops.ResolveRequest{ID: f.Get("id"), Outcome: f.Get("outcome"), Result: result, Reason: why, Entry: entries[f.Get("id")]})
		flash = fmt.Sprintf("%s resolved: %s.", f.Get("id"), f.Get("outcome"))
	case actCloseBreaker:
		_, err = s.closeBreaker(ctx, ops.CloseBreakerRequest{Account: f.Get("account"), Target: f.Get("target"), Reason: why})
		flash = fmt.Sprintf("Breaker %s → %s closed.", f.Get("account"), f.Get("target"))
	case actPause, actResume, actRetryNow, actCancelWait, actOpenBreaker:
		flash, err = u.act(ctx, act, f)
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	to, _ := url.Parse(back)
	q := to.Query()
	q.Set(flashParam, flash)
	q.Set(flashMACParam, flashMAC(r.PostForm.Get("csrf"), flash)) // checked equal to the cookie above
	to.RawQuery = q.Encode()
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
}

// formEntries reads the form's entry fields ("<id>:<seq>", one per event
// the page listed): the DEAD entries the operator saw (ops.Entries).
func formEntries(f url.Values) ops.Entries {
	entries := ops.Entries{}
	for _, raw := range f["entry"] {
		id, seq, ok := strings.Cut(raw, ":")
		if n, err := strconv.ParseUint(seq, 10, 64); ok && err == nil && n > 0 {
			entries[id] = n
		}
	}
	return entries
}
