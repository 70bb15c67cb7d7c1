package deadletter

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
)

// The screen's events list: every event in any state, found through the
// search index (pkg/search, search.go) with the filters of GET /v1/events,
// page by page by cursor. Its form sends times as the browser's
// datetime-local (UTC on this screen); everything else goes to
// search.ParseQuery as given, so the screen and the API judge a query
// alike.

// eventsFilters are the list's query parameters (the API's, less cursor
// and limit, which the pager sets).
var eventsFilters = []string{"account", "kind", "state", "entity", "idempotency_key", "provider_ref", "since", "until"}

// localTime is the value of a datetime-local input.
const localTime = "2006-01-02T15:04"

// eventsQuery reads the list's filter: the values for the search, and
// the same as the form shows them (for its inputs and the pager's links).
func eventsQuery(v url.Values) (ops.FindRequest, url.Values, error) {
	form, api := url.Values{}, url.Values{}
	for _, k := range append(eventsFilters, "limit", "cursor") {
		raw := strings.TrimSpace(v.Get(k))
		if raw == "" {
			continue
		}
		if k != "cursor" {
			form.Set(k, raw)
		}
		if k == "since" || k == "until" {
			if t, err := time.ParseInLocation(localTime, raw, time.UTC); err == nil {
				raw = t.Format(time.RFC3339)
			}
		}
		api.Set(k, raw)
	}
	q, err := search.ParseQuery(api)
	return q, form, err
}

// eventsData is the events list.
type eventsData struct {
	Q       ops.FindRequest
	Form    url.Values
	Query   template.URL // the filter as a query string (for links), encoded by url.Values
	Reply   ops.FindReply
	First   bool
	States  []state.State
	Kinds   []string
	Filters bool // some filter is set
}

func (u *ui) events(w http.ResponseWriter, r *http.Request) {
	q, form, err := eventsQuery(r.URL.Query())
	var pe *search.ParamError
	if errors.As(err, &pe) {
		err = fail(http.StatusBadRequest, "invalid_"+pe.Param, "%v", pe)
	}
	var rep ops.FindReply
	if err == nil {
		rep, err = u.s.findEvents(r.Context(), q)
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d := eventsData{Q: q, Form: form, Query: template.URL(form.Encode()), Reply: rep, First: q.Cursor == "", States: state.States, Filters: len(form) > 0}
	for k := range u.s.cfg.Kinds {
		d.Kinds = append(d.Kinds, k)
	}
	slices.Sort(d.Kinds)
	p := u.page(w, r, "/ui/events", "Events")
	p.Data = d
	u.render(w, http.StatusOK, "events", p)
}
