package provider_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/webhook"
)

const cbSecret = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ="

type received struct {
	at        time.Time
	webhookID string
	body      provider.Callback
	verifyErr error
}

// receiver is tenaz's webhook endpoint: it verifies and hands each callback
// to the test.
func receiver(t *testing.T) (*httptest.Server, chan received) {
	t.Helper()
	ch := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc := received{at: time.Now(), webhookID: r.Header.Get("webhook-id")}
		rc.verifyErr = webhook.Verify(cbSecret, r.Header, b, time.Minute, time.Now())
		if err := json.Unmarshal(b, &rc.body); err != nil {
			t.Errorf("callback body: want JSON, got %s", b)
		}
		ch <- rc
		if rc.verifyErr != nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

// next waits for one callback at the receiver.
func next(t *testing.T, ch chan received) received {
	t.Helper()
	select {
	case rc := <-ch:
		return rc
	case <-waitCtx(t).Done():
		t.Fatal("want a callback at the receiver, got none before the deadline")
		return received{}
	}
}

func TestCallbackDelivered(t *testing.T) {
	t.Parallel()
	rcv, ch := receiver(t)
	const delay, late = 30 * time.Millisecond, 20 * time.Millisecond
	p, srv := setup(t, provider.Faults{}, provider.WithCallbacks(rcv.URL+"/v1/callbacks/bureau_a", cbSecret, delay))
	p.SetCallbackFaults(provider.CallbackFaults{LateBy: late})
	start := time.Now()
	ref := reference(t, deliver(t, srv, "k1", `{"total":1}`))

	rc := next(t, ch)
	if rc.verifyErr != nil {
		t.Errorf("want a valid Standard Webhooks signature, got %v", rc.verifyErr)
	}
	if want := (provider.Callback{EventID: "evt-k1", Reference: ref, Status: "approved"}); rc.body != want {
		t.Errorf("want callback %+v, got %+v", want, rc.body)
	}
	if rc.webhookID != "msg_"+ref {
		t.Errorf("want webhook-id msg_%s, got %q", ref, rc.webhookID)
	}
	if waited := rc.at.Sub(start); waited < delay+late {
		t.Errorf("want the callback no sooner than delay+LateBy (%s), got it after %s", delay+late, waited)
	}
	if err := p.WaitCallbacks(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if cb := p.Callbacks()[0]; cb.Status != 200 || cb.Dropped || cb.Duplicate || cb.Reference != ref {
		t.Errorf("want the callback recorded as answered 200, got %+v", cb)
	}
}

func TestCallbackDecision(t *testing.T) {
	t.Parallel()
	rcv, ch := receiver(t)
	_, srv := setup(t, provider.Faults{}, provider.WithCallbacks(rcv.URL, cbSecret, 0))
	deliver(t, srv, "k1", `{"decision":"rejected"}`)
	if rc := next(t, ch); rc.body.Status != "rejected" {
		t.Errorf("want status rejected from the payload's decision, got %+v", rc.body)
	}
}

func TestCallbackDuplicated(t *testing.T) {
	t.Parallel()
	rcv, ch := receiver(t)
	p, srv := setup(t, provider.Faults{}, provider.WithCallbacks(rcv.URL, cbSecret, 0), provider.WithSeed(1))
	p.SetCallbackFaults(provider.CallbackFaults{DuplicateRate: 1})
	ref := reference(t, deliver(t, srv, "k1", `{}`))
	a, b := next(t, ch), next(t, ch)
	if a.webhookID != "msg_"+ref || b.webhookID != a.webhookID || a.body != b.body || b.verifyErr != nil {
		t.Errorf("want the same signed callback twice for %s, got %+v and %+v", ref, a, b)
	}
	if err := p.WaitCallbacks(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	if cbs := p.Callbacks(); cbs[0].Duplicate || !cbs[1].Duplicate {
		t.Errorf("want the second record marked Duplicate, got %+v", cbs)
	}
}

func TestCallbackDropped(t *testing.T) {
	t.Parallel()
	rcv, ch := receiver(t)
	p, srv := setup(t, provider.Faults{}, provider.WithCallbacks(rcv.URL, cbSecret, 0), provider.WithSeed(1))
	p.SetCallbackFaults(provider.CallbackFaults{DropRate: 1})
	deliver(t, srv, "k1", `{}`)
	if err := p.WaitCallbacks(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	_ = p.Close() // waits for every callback goroutine
	if cbs := p.Callbacks(); len(cbs) != 1 || !cbs[0].Dropped {
		t.Errorf("want one dropped callback recorded, got %+v", cbs)
	}
	if len(ch) != 0 {
		t.Errorf("want nothing at the receiver, got %d callbacks", len(ch))
	}
}

func TestCallbackOnlyWhenApplied(t *testing.T) {
	t.Parallel()
	rcv, ch := receiver(t)
	p, srv := setup(t, provider.Faults{}, provider.WithCallbacks(rcv.URL, cbSecret, 0), provider.WithIdempotent())
	deliver(t, srv, "k1", `{}`)
	deliver(t, srv, "k1", `{}`) // replayed: no new effect, no new callback
	p.SetFaults(provider.Faults{Status: 400})
	deliver(t, srv, "k2", `{}`) // failed: no callback
	next(t, ch)
	if err := p.WaitCallbacks(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	_ = p.Close() // waits for any other callback goroutine
	if n, extra := len(p.Callbacks()), len(ch); n != 1 || extra != 0 {
		t.Errorf("want exactly one callback (the applied call), got %d recorded, %d more received", n, extra)
	}
}

func TestCloseStopsPendingCallbacks(t *testing.T) {
	t.Parallel()
	rcv, ch := receiver(t)
	p, srv := setup(t, provider.Faults{}, provider.WithCallbacks(rcv.URL, cbSecret, time.Hour))
	for i := range 5 {
		deliver(t, srv, keyN(i), `{}`)
	}
	closed := make(chan struct{})
	go func() { _ = p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-waitCtx(t).Done():
		t.Fatal("want Close to return at once with callbacks pending, it blocked")
	}
	if len(ch) != 0 || len(p.Callbacks()) != 0 {
		t.Errorf("want no callback sent after Close, got %d received, %d recorded", len(ch), len(p.Callbacks()))
	}
	// A closed provider still answers but schedules nothing (goleak checks).
	if r := deliver(t, srv, "after", `{}`); r.status != 200 {
		t.Errorf("closed provider: want 200, got %d", r.status)
	}
}

func TestCallbackReceiverDown(t *testing.T) {
	t.Parallel()
	rcv, _ := receiver(t)
	url := rcv.URL
	rcv.Close()
	p, srv := setup(t, provider.Faults{}, provider.WithCallbacks(url, cbSecret, 0))
	deliver(t, srv, "k1", `{}`)
	if err := p.WaitCallbacks(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if cb := p.Callbacks()[0]; cb.Err == "" || cb.Status != 0 {
		t.Errorf("want the transport error recorded, got %+v", cb)
	}
}
