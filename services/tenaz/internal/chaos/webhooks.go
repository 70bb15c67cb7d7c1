package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/webhook"
)

// Sources of the webhooks the run sends itself.
const (
	srcForged      = "forged"       // a bad signature: must be refused (401, or 429 past the refusal budget)
	srcOutOfOrder  = "out_of_order" // a "processing" status, after the provider accepted: never applied
	srcConflicting = "conflicting"  // a second, different result after one was applied: never applied
	srcReplay      = "replay"       // an applied webhook sent again, freshly signed: never applied
)

// webhooks sends, every period until ctx ends, one webhook of its own to
// ingest's /v1/callbacks/bureau_a: forged ones (wrong secret, a timestamp
// outside the tolerance, no signature, a body that is not the signed
// one), and validly signed ones that must change nothing: a "processing"
// status for an event the provider accepted (out of order, and not final
// under done_when), a conflicting result for an event whose result was
// applied, and a replay of an applied webhook under its webhook-id.
func webhooks(ctx context.Context, f *fleet, l *loader, rng *rand.Rand, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n++
		now := time.Now()
		switch r := rng.Float64(); {
		case r < 0.4:
			credit := l.creditEvents()
			if len(credit) == 0 {
				continue
			}
			id := credit[rng.IntN(len(credit))]
			body, _ := json.Marshal(provider.Callback{EventID: id, Status: "approved"})
			wid := fmt.Sprintf("forged_%d", n)
			var h http.Header
			switch n % 4 {
			case 0:
				h = webhook.Headers("whsec_"+"d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==", wid, now, body)
			case 1:
				h = webhook.Headers(callbackSecret, wid, now.Add(-10*time.Minute), body)
			case 2:
				h = http.Header{}
				h.Set(webhook.HeaderID, wid)
			case 3:
				other, _ := json.Marshal(provider.Callback{EventID: id, Status: "processing"})
				h = webhook.Headers(callbackSecret, wid, now, other)
			}
			f.sendCallback(ctx, srcForged, targetBureauA, h, body, id)
		case r < 0.65:
			refs := f.recentRefs(500)
			if len(refs) == 0 {
				continue
			}
			a := refs[rng.IntN(len(refs))]
			body, _ := json.Marshal(provider.Callback{EventID: a.eventID, Reference: a.ref, Status: "processing"})
			f.sendCallback(ctx, srcOutOfOrder, targetBureauA, webhook.Headers(callbackSecret, fmt.Sprintf("ooo_%d", n), now, body), body, a.eventID)
		case r < 0.8:
			done := f.applied(500)
			if len(done) == 0 {
				continue
			}
			c := done[rng.IntN(len(done))]
			body, _ := json.Marshal(provider.Callback{EventID: c.eventID, Reference: c.ref, Status: "rejected"})
			f.sendCallback(ctx, srcConflicting, targetBureauA, webhook.Headers(callbackSecret, fmt.Sprintf("conflict_%d", n), now, body), body, c.eventID)
		default:
			done := f.applied(500)
			if len(done) == 0 {
				continue
			}
			c := done[rng.IntN(len(done))]
			f.sendCallback(ctx, srcReplay, targetBureauA, webhook.Headers(callbackSecret, c.webhookID, now, c.req), c.req, c.eventID)
		}
	}
}
