package dispatcher_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/provider"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/dispatcher"
)

// An EVENTS without direct gets (applied by a version before, during a
// rolling upgrade) is still read: a message at a time, from the stream's
// leader. Every event is delivered, each once.
func TestTailReadsWithoutDirectGets(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, `attempts: 3`), provider.Faults{})
	h.dispatcher("d1", nil) // applies the layout at its start: direct gets allowed
	st, err := h.JS.Stream(h.Ctx(), h.Subj.EventsStream("acme"))
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	c.AllowDirect = false
	if _, err := h.JS.UpdateStream(h.Ctx(), c); err != nil {
		t.Fatal(err)
	}
	ids := h.Submit("acme", "order.create", keys("nd", 12), orderPayload)
	recs := h.waitAll(ids, state.Done, servicetest.WaitFor)
	for _, id := range ids {
		if r := recs[id]; r.Attempts != 1 {
			t.Errorf("%s: want one attempt, got %s", id, servicetest.Actions(r))
		}
	}
	if d := h.prov.DuplicateEffects(); len(d) != 0 {
		t.Fatalf("effects applied more than once: %v", d)
	}
	if st, err = h.JS.Stream(h.Ctx(), h.Subj.EventsStream("acme")); err != nil || st.CachedInfo().Config.AllowDirect {
		t.Fatalf("EVENTS: want it still without direct gets (so they were read without), got %v", err)
	}
}

// A tail that has caught up reads again only when the watch reports a
// message past its cursor, not after each settlement: such a read walks
// the stream from the cursor on the server, and one per settlement made
// many accounts' backlogs cost the server their square. Events sent one at
// a time cost about one read each.
func TestCaughtUpTailReadsOnlyWhatTheWatchReports(t *testing.T) {
	t.Parallel()
	h := setup(t, yamlFor(4, `attempts: 3`), provider.Faults{})
	h.dispatcher("d1", nil)
	var reads atomic.Int64
	sub, err := h.NC.Subscribe("$JS.API.DIRECT.GET."+h.Subj.EventsStream("acme"), func(m *nats.Msg) {
		if strings.Contains(string(m.Data), strings.TrimSuffix(h.Subj.EventsOf("acme"), ">")) { // json.Marshal escapes ">"
			reads.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	const n = 20
	for i := range n {
		ids := h.Submit("acme", "order.create", keys(fmt.Sprint("one-", i), 1), orderPayload)
		h.waitAll(ids, state.Done, servicetest.WaitFor)
	}
	if got := reads.Load(); got > n+n/4 {
		t.Fatalf("%d direct gets of acme's messages for %d events sent one at a time, want about one each", got, n)
	}
}

// The backstop to the watch: a tail that read, settled and trimmed all it
// knew of looks again when its account still has messages in EVENTS, so a
// message the watch never reported is delivered all the same.
func TestUnreportedMessageFoundByTheSweep(t *testing.T) {
	t.Parallel()
	h := setup(t, strings.Replace(yamlFor(4, `attempts: 3`), "ack_wait: 1s", "ack_wait: 1s, trim_after: 100ms", 1), provider.Faults{})
	d := h.dispatcher("d1", nil, func(o *dispatcher.Options) { o.Adopt = 200 * time.Millisecond })
	first := h.Submit("acme", "order.create", keys("seen", 1), orderPayload)
	h.waitAll(first, state.Done, servicetest.WaitFor)
	st, err := h.JS.Stream(h.Ctx(), h.Subj.EventsStream("acme"))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, servicetest.WaitFor, func() bool {
		info, err := st.Info(h.Ctx(), jetstream.WithSubjectFilter(h.Subj.EventsOf("acme")))
		return err == nil && len(info.State.Subjects) == 0
	}, "acme's first message was not trimmed")
	d.StopWatches()
	later := h.Submit("acme", "order.create", keys("unreported", 1), orderPayload)
	h.waitAll(later, state.Done, servicetest.WaitFor)
}
