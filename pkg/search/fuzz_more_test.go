package search

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/ops"
)

// FuzzParseQueryAcceptsOnlyValidQueries drives ParseQuery from a raw query
// string, as GET /v1/events gets it: it never panics; a refusal is a
// *ParamError (so an ErrBadQuery) naming a parameter the query gave; what
// it accepts passes Validate, holds the parameters as given, each once,
// and a page size of 0 (the default) or 1..MaxLimit.
func FuzzParseQueryAcceptsOnlyValidQueries(f *testing.F) {
	const good = "account=acme&kind=order.create&state=retrying&entity=p-1&idempotency_key=k&provider_ref=j&since=2026-03-01T00:00:00Z&until=2026-03-02T00:00:00Z&limit=10"
	for _, raw := range []string{
		good, "", "account=acme&state=dead", "limit=500", "limit=-1", "limit=9999999999999999999",
		"account=a.b", "kind=order..create", "state=sleeping", "entity=" + url.QueryEscape("has space"),
		"idempotency_key=k1", "since=yesterday", "until=2026-13-01T00:00:00Z",
		"since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z", "since=2026-03-01T00:00:00.5%2B03:30",
		"limit=0x10", "limit=501", "cursor=abc", "colour=red", "kind=a&kind=b", "account=&kind=",
		"provider_ref=%ff%00", "a=%zz&account=acme", ";account=acme",
	} {
		f.Add(raw)
	}
	// A cursor of the good query's own filter, and one of another filter.
	v, _ := url.ParseQuery(good)
	q, err := ParseQuery(v)
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range []cursor{{seq: 1}, {seq: 1 << 40, hour: 493000}, {after: "ev_j316bgkf314ocqth5in0fp1gj0"}} {
		f.Add(good + "&cursor=" + encodeCursor(q, c))
		f.Add("account=acme&cursor=" + encodeCursor(q, c))
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// url.ParseQuery keeps what it could read before an error, and
		// so does the HTTP server's r.URL.Query().
		v, _ := url.ParseQuery(raw)
		q, err := ParseQuery(v)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || !errors.Is(err, ErrBadQuery) {
				t.Fatalf("ParseQuery(%q): want a *ParamError wrapping ErrBadQuery, got %T %v", raw, err, err)
			}
			if _, given := v[pe.Param]; !given {
				t.Fatalf("ParseQuery(%q) names %q, which the query does not give: %v", raw, pe.Param, err)
			}
			return
		}
		if err := Validate(q); err != nil {
			t.Fatalf("ParseQuery(%q) accepted %+v, which Validate refuses: %v", raw, q, err)
		}
		for k, vs := range v {
			if len(vs) != 1 || !slices.Contains(params, k) {
				t.Fatalf("ParseQuery(%q) accepted parameter %q given as %q", raw, k, vs)
			}
		}
		if q.Account != v.Get("account") || q.Kind != v.Get("kind") || string(q.State) != v.Get("state") || q.EntityID != v.Get("entity") ||
			q.IdempotencyKey != v.Get("idempotency_key") || q.ProviderRef != v.Get("provider_ref") || q.Cursor != v.Get("cursor") {
			t.Fatalf("ParseQuery(%q) = %+v, not the parameters given", raw, q)
		}
		if (q.Since != nil) != (v.Get("since") != "") || (q.Until != nil) != (v.Get("until") != "") {
			t.Fatalf("ParseQuery(%q): since %v, until %v, not as given", raw, q.Since, q.Until)
		}
		if q.Limit != 0 && (q.Limit < 1 || q.Limit > ops.MaxLimit) {
			t.Fatalf("ParseQuery(%q): limit %d outside 1..%d", raw, q.Limit, ops.MaxLimit)
		}
	})
}

// A search by idempotency key takes a key tenaz derived, as the 202
// answered it, however long; not a caller's key past 255 bytes.
func TestParseQueryTakesADerivedKey(t *testing.T) {
	derived := event.DerivedKey("order.create", strings.Repeat("e", 255), []byte(`{"a":1}`))
	q, err := ParseQuery(url.Values{"account": {"acme"}, "idempotency_key": {derived}})
	if err != nil || q.IdempotencyKey != derived {
		t.Fatalf("a derived key of %d bytes: want it taken, got %+v, %v", len(derived), q, err)
	}
	if _, err := ParseQuery(url.Values{"account": {"acme"}, "idempotency_key": {strings.Repeat("k", 256)}}); err == nil {
		t.Fatal("a caller's key of 256 bytes: want it refused")
	}
}
