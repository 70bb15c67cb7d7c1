package webhook_test

import (
	"fmt"
	"time"

	"github.com/tenaz/tenaz/pkg/webhook"
)

func Example() {
	body := []byte(`{"event_id":"e1","reference":"ref_1","status":"approved"}`)
	ts := time.Unix(1_800_000_000, 0)
	h := webhook.Headers("whsec_c2VjcmV0", "msg_ref_1", ts, body) // set these on the request
	fmt.Println(webhook.Verify("whsec_c2VjcmV0", h, body, time.Minute, ts.Add(30*time.Second)))
	fmt.Println(webhook.Verify("whsec_c2VjcmV0", h, body, time.Minute, ts.Add(2*time.Minute)))
	fmt.Println(webhook.Verify("whsec_c2VjcmV0", h, []byte(`{}`), time.Minute, ts))
	// Output:
	// <nil>
	// invalid webhook: timestamp outside tolerance: 2m0s away from now, tolerance 1m0s
	// invalid webhook: signature does not match
}
