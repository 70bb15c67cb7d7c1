package ingest

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/services/ingest/internal/cloudevent"
)

// A header sent in two spellings with two values reads the same on every
// delivery: otherwise a redelivered submission could derive another key,
// and so another event.
func TestHeaderInTwoSpellingsReadsTheSameEachTime(t *testing.T) {
	t.Parallel()
	h := nats.Header{"idempotency-key": {"a"}, "IDEMPOTENCY-KEY": {"b"}, "content-type": {"application/json"}, "CONTENT-TYPE": {"text/plain"}}
	for range 200 {
		if got := headerOf(h, "Idempotency-Key"); got != "b" {
			t.Fatalf("want the smallest spelling's value b every time, got %q", got)
		}
		if got := cloudevent.ContentTypeOf(h); got != "text/plain" {
			t.Fatalf("want the smallest spelling's content type every time, got %q", got)
		}
	}
}
