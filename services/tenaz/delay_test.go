package tenaz_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
)

// A delayed event is held by the server (status scheduled) and delivered
// at its due time, not before; a cancelled one never fires.
func TestDelayedEventRunsAtDueTimeAndCancelStopsIt(t *testing.T) {
	t.Parallel()
	p, target := servicetest.Provider(t, provider.Faults{})
	tz := start(t, testConfig(t.TempDir(), target.URL, ""))
	base := "http://" + tz.HTTPAddr()

	due := time.Now().Add(2 * time.Second).UTC().Truncate(time.Second).Add(time.Second)
	body := func(order string) string {
		return fmt.Sprintf(`{"account":"acme","kind":"order.create","not_before":%q,"payload":{"order_id":%q}}`, due.Format(time.RFC3339), order)
	}
	code, v := post(t, base, "late-1", body("late-1"))
	if code != http.StatusAccepted || v.Status != "scheduled" {
		t.Fatalf("want 202 scheduled, got %d %+v", code, v)
	}
	code, c := post(t, base, "late-2", body("late-2"))
	if code != http.StatusAccepted {
		t.Fatalf("want 202, got %d", code)
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/events/"+c.ID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel a scheduled event: want 200, got %d", resp.StatusCode)
	}

	waitStatus(t, base, v.ID, "done")
	calls := p.CallsFor(v.ID)
	if len(calls) != 1 {
		t.Fatalf("want one call for the delayed event, got %d", len(calls))
	}
	if calls[0].At.Before(due) {
		t.Fatalf("delivered at %s, before its due time %s", calls[0].At.Format(time.StampMilli), due.Format(time.StampMilli))
	}
	// The cancelled one never fires: give its schedule a second past due.
	natstest.Eventually(t, 5*time.Second, func() bool { return time.Now().After(due.Add(1500 * time.Millisecond)) }, "time to pass")
	if n := len(p.CallsFor(c.ID)); n != 0 {
		t.Fatalf("a cancelled delayed event must never be delivered, got %d calls", n)
	}
	if s := get(t, base+"/v1/events/"+c.ID).Status; s != "cancelled" {
		t.Fatalf("want cancelled, got %s", s)
	}
}
