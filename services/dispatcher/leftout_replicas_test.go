package dispatcher_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/live"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// An account of the accounts bucket whose definition is left out (sealed
// with another key than the replicas hold) has its own URL and its own
// credential; "*"'s are another endpoint and someone else's secret. Over
// two dispatcher processes, the owner of its lease killed mid-run, its
// event goes to neither: it waits, while another account's is done. A
// replica that holds the right key, left alone, then calls the account's
// own URL with its credential, once.
func TestALeftOutAccountWaitsOnEveryReplica(t *testing.T) {
	t.Parallel()
	const (
		keyA = "dGVuYXotdGVzdC1zZWFsaW5nLWtleS0zMi1ieXRlcyE="
		keyB = "YW5vdGhlci1zZWFsaW5nLWtleS1vZi0zMi1ieXRlcyE="
	)
	withKey := func(key string) string {
		return `
streams: {ack_wait: 2s}
http: {addr: "127.0.0.1:0"}
auth: {disabled: true}
sealing_key: "` + key + `"
accounts:
  "*": {concurrency: 4, breaker: {failures: 100}}
targets:
  erp: {url: "${TARGET}/{{.Account}}", timeout: 5s}
kinds:
  order.create: {target: erp, entity: order_id, attempts: 5, backoff: {initial: 1s, multiplier: 1, jitter: 0}}
`
	}
	h := setup(t, withKey(keyB), provider.Faults{})

	// newco's own endpoint, which records what each call carried.
	var mu sync.Mutex
	var auths []string
	own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(own.Close)
	ownCalls := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), auths...)
	}
	const secret = "Bearer newco-erp-credential"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfgA := servicetest.Config(t, withKey(keyA), map[string]string{"TARGET": h.target.URL})
	lv := live.New(cfgA, live.Options{})
	if err := lv.Watch(ctx, h.JS, store.LayoutOptions(cfgA)); err != nil {
		t.Fatal(err)
	}
	def := `{"targets":{"erp":{"url":"` + own.URL + `/newco/{{.Kind}}","headers":{"Authorization":"` + secret + `"}}}}`
	if _, err := lv.Set(ctx, "newco", json.RawMessage(def)); err != nil {
		t.Fatal(err)
	}

	procs := startReplicas(t, h, 2, h.target.URL)
	newco := h.Submit("newco", "order.create", []string{"n-1"}, orderPayload)[0]
	acme := h.Submit("acme", "order.create", []string{"a-1"}, orderPayload)[0]
	h.WaitStatus(acme, state.Done, 30*time.Second)
	absent := func(what string) {
		t.Helper()
		// Nothing is awaited: a call of newco's would come within
		// milliseconds of its event being read, as acme's did.
		natstest.Never(t, 2*time.Second, func() bool { return len(ownCalls())+len(h.prov.CallsFor(newco)) > 0 },
			"%s: newco's event, left out: want no call, got %v at its own URL and %v at \"*\"'s", what,
			natstest.Lazy(func() any { return len(ownCalls()) }), natstest.Lazy(func() any { return len(h.prov.CallsFor(newco)) }))
	}
	absent("two replicas")
	killed := ownerOf(t, h, procs, "newco")
	killed.Kill(t)
	absent("the owner of its lease killed")

	// A replica with the key that opens newco's definition, alone.
	natstest.StartProc(t, "r3", replicaBinary(t), withKey(keyA),
		"NATS_URL="+h.Srv.ClientURL(), "TARGET="+h.target.URL, "LOG_LEVEL=warn", "LOG_FORMAT=json")
	for _, p := range procs {
		if p != killed {
			p.Kill(t)
		}
	}
	h.WaitStatus(newco, state.Done, 60*time.Second)
	if calls := ownCalls(); len(calls) != 1 || calls[0] != secret || len(h.prov.CallsFor(newco)) != 0 {
		t.Fatalf("want newco's one call at its own URL with its credential and none at \"*\"'s, got %v and %d", calls, len(h.prov.CallsFor(newco)))
	}
}
