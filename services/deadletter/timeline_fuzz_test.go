package deadletter

import (
	"net/http"
	"net/url"
	"testing"
	"time"
)

// The export's query is outside input: any query string is an
// ExportRequest or a 400 naming the parameter, and an accepted time is
// UTC and the one written.
func FuzzExportQuery(f *testing.F) {
	for _, s := range []string{"since=2026-01-01", "since=2026-03-01T06:00:00Z&until=2026-03-02&account=acme", "event=ev_1",
		"since=2026-13-01", "since=%zz", "until=2026-03-01T06:00", "since=2026-03-01T06:00:00%2B02:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := exportQuery(q)
		if err != nil {
			if st, code, _ := statusOf(err); st != http.StatusBadRequest || code != "invalid_since" && code != "invalid_until" {
				t.Fatalf("%q: want a 400 naming since or until, got %d %s", raw, st, code)
			}
			return
		}
		for _, v := range []*time.Time{req.Since, req.Until} {
			if v != nil && v.Location() != time.UTC {
				t.Fatalf("%q: time %v not in UTC", raw, v)
			}
		}
		if req.Account != q.Get("account") || req.EventID != q.Get("event") {
			t.Fatalf("%q: account/event %q %q", raw, req.Account, req.EventID)
		}
	})
}
