package ingest

import (
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

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
	r := &replies{prefix: nc.NewRespInbox() + ".", wait: map[string]chan []byte{}}
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
