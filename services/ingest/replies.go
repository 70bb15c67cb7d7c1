package ingest

import (
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/natsconn"
)

// replyInboxes prefixes the subjects on which HTTP handlers wait for
// their submissions' outcomes ("_INBOX.tenaz-ingest."), whatever inbox
// prefix ingest's connection has: under deploy/nats/values.yaml no NATS
// user but ingest's may read them. A submission's reply header counts
// only under it. Any NATS publisher can set the header, and one trusted
// elsewhere would have ingest wait on a handler that is not one for each
// of its refusals (tell), and keep each of its submissions from an
// anchor (answered): one producer could stall every account's intake.
var replyInboxes = natsconn.InboxPrefix(Name) + "."

// replyOf is the reply subject h names, or "" when it names none under
// replyInboxes.
func replyOf(h nats.Header) string {
	if r := h.Get(headerReply); strings.HasPrefix(r, replyInboxes) {
		return r
	}
	return ""
}

// answered reports whether an HTTP handler may wait for a submission's
// outcome (its reply header in h). Such a submission is never delegated:
// its refusal is told to the handler or kept as its event by its own
// delivery alone, and a drain reading it back passes it over (a handler
// told by one and an event kept by the other would disagree). HTTP
// producers are held by their keys' rates.
func answered(h nats.Header) bool { return replyOf(h) != "" }

// replies multiplexes the outcomes of HTTP submissions over one
// subscription, as nats.go's request mux does for requests.
type replies struct {
	sub    *nats.Subscription
	prefix string
	mu     sync.Mutex
	n      uint64
	wait   map[string]chan []byte
}

func newReplies(nc *nats.Conn) (*replies, error) {
	r := &replies{prefix: replyInboxes + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix) + ".", wait: map[string]chan []byte{}}
	sub, err := nc.Subscribe(r.prefix+"*", func(m *nats.Msg) {
		r.mu.Lock()
		ch, ok := r.wait[m.Subject]
		delete(r.wait, m.Subject)
		r.mu.Unlock()
		if ok {
			ch <- m.Data
		}
		if m.Reply != "" { // a refusal: say whether a handler takes it (see tell)
			ans := replyGone
			if ok {
				ans = replyTaken
			}
			_ = m.Respond([]byte(ans))
		}
	})
	if err != nil {
		return nil, err
	}
	r.sub = sub
	return r, nil
}

// next registers a waiter and returns its subject and channel; forget
// removes it and reports whether it was still waiting: false means an
// outcome was taken for it, and is (or is about to be) in the channel.
func (r *replies) next() (string, <-chan []byte, func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	subj := r.prefix + strconv.FormatUint(r.n, 10)
	ch := make(chan []byte, 1)
	r.wait[subj] = ch
	return subj, ch, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, waiting := r.wait[subj]
		delete(r.wait, subj)
		return waiting
	}
}

func (r *replies) close() {
	if r != nil && r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}
