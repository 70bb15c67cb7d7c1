package provider_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tenaz/tenaz/pkg/provider"
)

func poll(t *testing.T, c *http.Client, url string) (int, provider.PollAnswer) {
	t.Helper()
	r, err := send(t, c, http.MethodGet, url, "")
	if err != nil {
		t.Fatalf("poll %s: %v", url, err)
	}
	var a provider.PollAnswer
	if r.status == 200 {
		if err := json.Unmarshal(r.body, &a); err != nil {
			t.Fatalf("poll %s: want a JSON answer, got %s", url, r.body)
		}
	}
	return r.status, a
}

func TestPollingFinality(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{}, provider.WithPollAfter(2))
	ref := reference(t, deliver(t, srv, "k1", `{}`))
	var got []string
	for range 4 {
		status, a := poll(t, srv.Client(), srv.URL+"/evaluations/"+ref)
		if status != 200 || a.ID != ref {
			t.Fatalf("poll: want 200 for %s, got %d %+v", ref, status, a)
		}
		got = append(got, a.Status)
	}
	want := []string{"processing", "processing", "approved", "approved"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("want statuses %v, got %v", want, got)
		}
	}
	if p.Polls(ref) != 4 || p.PollCount() != 4 {
		t.Errorf("want 4 polls of %s, got %d (total %d)", ref, p.Polls(ref), p.PollCount())
	}
	if p.CallCount() != 1 {
		t.Errorf("want polls kept out of the delivery calls (1), got %d", p.CallCount())
	}
}

func TestPollingRoutes(t *testing.T) {
	t.Parallel()
	p, srv := setup(t, provider.Faults{})
	ref := reference(t, deliver(t, srv, "k1", `{"decision":"rejected"}`))
	c := srv.Client()

	if status, a := poll(t, c, srv.URL+"/evaluations/"+ref+"/"); status != 200 || a.Status != "rejected" {
		t.Errorf("PollAfter 0 and decision rejected: want 200 rejected, got %d %+v", status, a)
	}
	if status, _ := poll(t, c, srv.URL+"/evaluations/ref_999"); status != 404 {
		t.Errorf("unknown reference: want 404, got %d", status)
	}
	// GET without a reference, and POST to a reference path, are deliveries.
	if status, _ := poll(t, c, srv.URL+"/evaluations"); status != 200 || p.CallCount() != 2 {
		t.Errorf("GET /evaluations: want a delivery (200, 2 calls), got %d, %d calls", status, p.CallCount())
	}
	if r := deliver(t, srv, "k2", `{}`); r.status != 200 || p.CallCount() != 3 {
		t.Errorf("POST: want a delivery, got %d, %d calls", r.status, p.CallCount())
	}

	p.SetFaults(provider.Faults{Down: true, PollAfter: 5})
	if status, _ := poll(t, c, srv.URL+"/x/"+ref); status != 503 {
		t.Errorf("down: want polls answered 503, got %d", status)
	}
	p.SetDown(false)
	if status, a := poll(t, c, srv.URL+"/x/"+ref); status != 200 || a.Status != "rejected" {
		t.Errorf("already final: want rejected, got %d %+v", status, a)
	}
}
