package deadletter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// stored creates n pending events of account in the store (the search
// indexes the records, whoever wrote them) and returns their ids.
func (e *env) stored(n int, account, kind, prefix string) []string {
	e.t.Helper()
	var ids []string
	for i := range n {
		key := fmt.Sprintf("%s-%d", prefix, i)
		r, _, err := state.New(state.Record{ID: event.ID(account, key), IdempotencyKey: key, Account: account, Kind: kind, EntityID: "E-" + prefix},
			state.Action{Name: state.Accept}, time.Now())
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.St.Create(servicetest.Context(e.t, 2*time.Minute), r); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// search pages through GET /v1/events?q with key ("" = alice) and
// returns the ids, sorted; a status other than 200 is returned with the body.
func (e *env) search(key, q string) ([]string, int, string) {
	e.t.Helper()
	var ids []string
	cursor := ""
	for {
		v, err := url.ParseQuery(q)
		if err != nil {
			e.t.Fatal(err)
		}
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		st, body := e.getWith(key, "/v1/events?"+v.Encode())
		if st != http.StatusOK {
			return nil, st, body
		}
		var rep ops.FindReply
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			e.t.Fatalf("GET /v1/events?%s: %v in %s", q, err, body)
		}
		for _, it := range rep.Items {
			if slices.Contains(ids, it.ID) {
				e.t.Fatalf("GET /v1/events?%s: %s on two pages", q, it.ID)
			}
			ids = append(ids, it.ID)
		}
		if cursor = rep.NextCursor; cursor == "" {
			break
		}
	}
	slices.Sort(ids)
	return ids, http.StatusOK, ""
}

// searched waits until GET /v1/events?q finds exactly want.
func (e *env) searched(key, q string, want []string) {
	e.t.Helper()
	want = slices.Sorted(slices.Values(want))
	var last strings.Builder // *strings.Builder prints as its text when the wait fails
	natstest.Eventually(e.t, 30*time.Second, func() bool {
		got, st, body := e.search(key, q)
		last.Reset()
		fmt.Fprintf(&last, "%d %v %s", st, got, body)
		return st == http.StatusOK && slices.Equal(got, want)
	}, "GET /v1/events?%s: want %v, last got %s", q, want, &last)
}

// GET /v1/events finds events in any state by its filters, pages with a
// cursor, follows a transition, and names a bad parameter in its 400.
func TestSearchOverHTTP(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	acme := e.stored(12, "acme", "order.create", "a")
	globex := e.stored(5, "globex", "invoice.send", "g")
	e.searched("", "account=acme&limit=5", acme)
	e.searched("", "kind=invoice.send", globex)
	e.searched("", "entity=E-g&limit=2", globex)
	e.searched("", "account=acme&idempotency_key=a-3", acme[3:4])
	e.searched("", "", append(slices.Clone(acme), globex...))

	if _, _, _, err := e.St.Transition(servicetest.Context(t, 2*time.Minute), "acme", acme[0], state.Action{Name: state.Claim, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	e.searched("", "state=running", acme[:1])
	e.searched("", "account=acme&state=pending", acme[1:])

	for q, param := range map[string]string{
		"state=asleep":         "state",
		"account=acme.x":       "account",
		"limit=9999":           "limit",
		"limit=0":              "limit",
		"cursor=c1zzzz":        "cursor",
		"since=last+tuesday":   "since",
		"idempotency_key=a-1":  "idempotency_key",
		"provider_reference=x": "provider_reference",
	} {
		_, st, body := e.search("", q)
		if st != http.StatusBadRequest || !strings.Contains(body, `"invalid_`+param+`"`) || !strings.Contains(body, param+":") {
			t.Errorf("GET /v1/events?%s: want 400 naming %s, got %d %s", q, param, st, body)
		}
	}
}

// An API key finds only its own account's events, over HTTP and NATS:
// naming another account is 403, naming none searches its own (by
// idempotency key too); a key without the read scope is refused.
func TestSearchKeepsAKeyToItsAccount(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	acme := e.stored(3, "acme", "order.create", "a")
	globex := e.stored(4, "globex", "order.create", "g")
	e.searched("", "kind=order.create", append(slices.Clone(acme), globex...))

	for _, c := range []struct {
		key, own, other string
		want            []string
	}{{acmeReadKey, "acme", "globex", acme}, {globexReadKey, "globex", "acme", globex}} {
		e.searched(c.key, "", c.want)
		e.searched(c.key, "account="+c.own, c.want)
		e.searched(c.key, "entity=E-"+c.other[:1], nil)                   // the other account's entity: nothing of its own
		e.searched(c.key, "idempotency_key="+c.own[:1]+"-1", c.want[1:2]) // a key's idempotency keys are its account's
		e.searched(c.key, "idempotency_key="+c.other[:1]+"-1", nil)
		if _, st, body := e.search(c.key, "account="+c.other); st != http.StatusForbidden {
			t.Errorf("%s's key searching %s over HTTP: want 403, got %d %s", c.own, c.other, st, body)
		}
		var rep ops.FindReply
		err := e.callWith(c.key, ops.EventsFind, ops.FindRequest{Account: c.other}, &rep)
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != http.StatusForbidden || len(rep.Items) != 0 {
			t.Errorf("%s's key searching %s over NATS: want 403, got %v %+v", c.own, c.other, err, rep)
		}
		rep = ops.FindReply{}
		if err := e.callWith(c.key, ops.EventsFind, ops.FindRequest{}, &rep); err != nil || len(rep.Items) != len(c.want) {
			t.Errorf("%s's key searching over NATS: want its %d events, got %v %+v", c.own, len(c.want), err, rep)
		}
		for _, it := range rep.Items {
			if it.Account != c.own {
				t.Errorf("%s's key found %s of %s", c.own, it.ID, it.Account)
			}
		}
	}
	if _, st, body := e.search(acmeSubmitKey, "account=acme"); st != http.StatusForbidden {
		t.Errorf("a key without the read scope: want 403, got %d %s", st, body)
	}
	err := e.callWith(acmeSubmitKey, ops.EventsFind, ops.FindRequest{Account: "acme"}, nil)
	var oe *ops.Error
	if !errors.As(err, &oe) || oe.Status != http.StatusForbidden || !strings.Contains(oe.Message, "does not have the read scope") {
		t.Errorf("a key without the read scope over NATS: want 403 saying so, as over HTTP, got %v", err)
	}
	// An operator searches every account, over NATS too.
	var rep ops.FindReply
	if err := e.call(ops.EventsFind, ops.FindRequest{State: state.Pending, Limit: 500}, &rep); err != nil || len(rep.Items) != len(acme)+len(globex) {
		t.Fatalf("alice over NATS: want all %d, got %v %+v", len(acme)+len(globex), err, rep)
	}
}

// GET /v1/events against the OpenAPI document: every answer it gives is
// produced and matches its schema.
func TestOpenAPIContractSearch(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	c, want := e.contract(t)
	alice := operatorKeys["alice"]
	ids := e.stored(3, "acme", "order.create", "o")
	e.searched("", "account=acme", ids)
	want(200, "GET", "/v1/events?account=acme&kind=order.create&state=pending&limit=2", alice, "", "a page")
	want(200, "GET", "/v1/events?entity=E-o&since=2020-01-01T00:00:00Z", acmeReadKey, "", "an API key's own account")
	want(400, "GET", "/v1/events?state=asleep", alice, "", "a bad state")
	want(401, "GET", "/v1/events", "", "", "no credential")
	want(403, "GET", "/v1/events?account=globex", acmeReadKey, "", "another account")
	servicetest.Stop(t, e.dl)
	want(503, "GET", "/v1/events", alice, "", "the service stopped")
	c.Covered(t, func(op string) bool { return op == "GET /v1/events" },
		map[string]string{"GET /v1/events 500": "an unexpected store or stream error: no request brings one about"})
}

// The followers write at most a window at a time (32 in flight): a burst
// of records, read in batches of hundreds of index and archive writes,
// still gets every entry, each event once in the archive.
func TestFollowersWriteBatchesLargerThanTheirWindow(t *testing.T) {
	t.Parallel()
	e := setup(t, "")
	c := servicetest.Context(t, 2*time.Minute)
	const n = 400 // ~3 writes each (state and entity entries, archive): a batch is hundreds
	var pends []store.Pending
	var ids []string
	for i := range n {
		key := fmt.Sprintf("burst-%d", i)
		r, _, err := state.New(state.Record{ID: event.ID("acme", key), IdempotencyKey: key, Account: "acme", Kind: "order.create", EntityID: "E-burst"},
			state.Action{Name: state.Accept}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.St.CreateAsync(r)
		if err != nil {
			t.Fatal(err)
		}
		pends = append(pends, p)
		ids = append(ids, r.ID)
	}
	for _, p := range pends {
		if _, err := p.Wait(c); err != nil {
			t.Fatal(err)
		}
	}
	e.searched("", "account=acme&entity=E-burst&limit=500", ids)
	archive, err := e.JS.Stream(c, "TENAZ_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	var subjects map[string]uint64
	natstest.Eventually(t, 30*time.Second, func() bool {
		info, err := archive.Info(c, jetstream.WithSubjectFilter("tenaz.audit.acme.>"))
		if err != nil {
			return false
		}
		subjects = info.State.Subjects
		return len(subjects) == n
	}, "the archive to hold all %d events (has %d)", n, len(subjects))
	for s, msgs := range subjects {
		if msgs != 1 {
			t.Fatalf("%s: %d archive messages for one revision, want 1", s, msgs)
		}
	}
}
