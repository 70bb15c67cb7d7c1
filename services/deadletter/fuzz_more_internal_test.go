package deadletter

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/ops"
)

// listSeeds are query strings of the package's tests and their edges.
var listSeeds = []string{
	"account=acme&kind=order.create&limit=64", "account=acme&limit=10", "limit=0", "limit=9999", "limit=500", "limit=501",
	"limit=-1", "limit=%2B5", "limit=0x10", "limit=", "since=yesterday", "since=last+tuesday", "since=2026-01-01",
	"since=2026-13-01", "until=2026-03-01T06:00", "since=2026-03-01T06:00:00%2B02:00&until=2026-03-02",
	"since=2026-03-01T06:00:00Z&until=2020-01-01", "class=permanent&reason=http_4xx&cursor=c1AQ",
	"reason=why&reason_filter=max_deliver", "since=%zz", "account=a&account=b",
}

// FuzzListQueryIsAPageOrA400 checks the dead and review lists' query
// (the API's and the screen's): it never panics; a refusal is an
// *apiError answered 400, naming since, until or limit; an accepted
// query holds the filter as given, its times in UTC, and a page size of
// 0 (the default, when not given) or 1..MaxLimit.
func FuzzListQueryIsAPageOrA400(f *testing.F) {
	for _, s := range listSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// A server's r.URL.Query() keeps what it read before an error.
		v, _ := url.ParseQuery(raw)
		q, err := listQuery(v)
		if err != nil {
			checkBadRequest(t, raw, err, "invalid_since", "invalid_until", "invalid_limit")
			return
		}
		checkFilter(t, raw, q, v, v.Get("reason"))
		if q.Cursor != v.Get("cursor") {
			t.Fatalf("listQuery(%q): cursor %q, given %q", raw, q.Cursor, v.Get("cursor"))
		}
		if (q.Limit == 0) != (v.Get("limit") == "") || q.Limit != 0 && (q.Limit < 1 || q.Limit > ops.MaxLimit) {
			t.Fatalf("listQuery(%q): limit %d, want 0 when not given, else 1..%d", raw, q.Limit, ops.MaxLimit)
		}
	})
}

// FuzzFormFilterReadsTheFilterNotTheWhy checks the filter of the screen's
// "replay matching" form: it never panics; a refusal is a 400 naming
// since or until (the form has no page); the filter's reason is
// reason_filter, never the operator's reason; and it takes no cursor or
// page size from the form.
func FuzzFormFilterReadsTheFilterNotTheWhy(f *testing.F) {
	for _, s := range listSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, _ := url.ParseQuery(raw)
		q, err := formFilter(v)
		if err != nil {
			checkBadRequest(t, raw, err, "invalid_since", "invalid_until")
			return
		}
		checkFilter(t, raw, q, v, v.Get("reason_filter"))
		if q.Cursor != "" || q.Limit != 0 {
			t.Fatalf("formFilter(%q): took cursor %q, limit %d from the form", raw, q.Cursor, q.Limit)
		}
	})
}

// checkBadRequest: err is an *apiError answered 400 with one of codes.
func checkBadRequest(t *testing.T, raw string, err error, codes ...string) {
	t.Helper()
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("%q: want an *apiError, got %T %v", raw, err, err)
	}
	st, code, _ := statusOf(err)
	for _, c := range codes {
		if st == http.StatusBadRequest && code == c {
			return
		}
	}
	t.Fatalf("%q: want a 400 with one of %q, got %d %s: %v", raw, codes, st, code, err)
}

// checkFilter: q is the filter v gives (its reason being reason), with
// times in UTC, present exactly when given.
func checkFilter(t *testing.T, raw string, q ops.ListRequest, v url.Values, reason string) {
	t.Helper()
	if q.Account != v.Get("account") || q.Kind != v.Get("kind") || q.Class != v.Get("class") || q.Reason != reason {
		t.Fatalf("%q: filter %+v, not the one given", raw, q)
	}
	for name, at := range map[string]*time.Time{"since": q.Since, "until": q.Until} {
		if (at != nil) != (v.Get(name) != "") || at != nil && at.Location() != time.UTC {
			t.Fatalf("%q: %s %v, given %q; want it in UTC when given", raw, name, at, v.Get(name))
		}
	}
}
