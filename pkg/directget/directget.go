// Package directget reads stream messages by batched direct get
// ($JS.API.DIRECT.GET.<stream>), with the answers of every request routed
// on one subscription: a subscription per request costs its channel
// (512 KB by default, as nats.go's and orbit.go's requests make one),
// which at 10,000 new accounts was 90% of the dispatcher's allocations.
//
//	g, err := directget.New(nc)
//	msgs, pending, err := g.Get(ctx, "EVENTS", directget.Request{Seq: 1, NextFor: "tenaz.events.acme.>", Batch: 64})
package directget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Request is a direct get's request (nats-server's JSApiMsgGetRequest):
// up to Batch messages on NextFor (empty: any subject) from Seq or from
// StartTime (one of the two), or the last message of each of MultiLast's
// subjects.
type Request struct {
	Seq       uint64     `json:"seq,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	MultiLast []string   `json:"multi_last,omitempty"`
	Batch     int        `json:"batch,omitempty"`
}

// answers is the most messages a request can be answered with, its end
// of batch included: the channel of its answers holds them all.
func (r Request) answers() int {
	if len(r.MultiLast) > 0 {
		return max(r.Batch, len(r.MultiLast)) + 1
	}
	return max(r.Batch, 1) + 1
}

// ErrNoDirect is Get's error when the stream answers no direct gets
// (allow_direct off: one applied by a version that did not set it).
var ErrNoDirect = errors.New("directget: the stream answers no direct gets")

// Mux sends direct gets and routes their answers, on one subscription.
type Mux struct {
	nc      *nats.Conn
	prefix  string // <inbox>.
	sub     *nats.Subscription
	mu      sync.Mutex
	next    uint64
	pending map[string]chan *nats.Msg
}

// New subscribes to the answers on nc; Close ends it.
func New(nc *nats.Conn) (*Mux, error) {
	g := &Mux{nc: nc, prefix: nc.NewInbox() + ".", pending: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(g.prefix+"*", func(m *nats.Msg) {
		g.mu.Lock()
		ch := g.pending[m.Subject[len(g.prefix):]]
		g.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default: // more than asked for: the request has given up
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("directget: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("directget: %w", err)
	}
	g.sub = sub
	return g, nil
}

// Close ends the subscription.
func (g *Mux) Close() { _ = g.sub.Unsubscribe() }

// open returns the reply subject of a request answered by up to n
// messages, where they arrive, and done, which forgets it.
func (g *Mux) open(n int) (string, <-chan *nats.Msg, func()) {
	g.mu.Lock()
	g.next++
	token := strconv.FormatUint(g.next, 36)
	ch := make(chan *nats.Msg, n)
	g.pending[token] = ch
	g.mu.Unlock()
	return g.prefix + token, ch, func() {
		g.mu.Lock()
		delete(g.pending, token)
		g.mu.Unlock()
	}
}

// Get sends req to stream and returns the messages it is answered with,
// in the stream's order, and how many more match past them (a batch's
// Nats-Num-Pending). None match: no messages and no error.
func (g *Mux) Get(ctx context.Context, stream string, req Request) ([]*nats.Msg, uint64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	reply, answers, done := g.open(req.answers())
	defer done()
	if err := g.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, reply, body); err != nil {
		return nil, 0, fmt.Errorf("direct get from %s: %w", stream, err)
	}
	var msgs []*nats.Msg
	var last uint64 // the sequence of the answer before
	for {
		var m *nats.Msg
		select {
		case m = <-answers:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("direct get from %s: %w", stream, context.Cause(ctx))
		}
		switch status := m.Header.Get("Status"); status {
		case "":
			if err := follows(m, last); err != nil {
				return nil, 0, fmt.Errorf("direct get from %s: %w", stream, err)
			}
			last, _ = strconv.ParseUint(lastHeader(m.Header, jetstream.SequenceHeader), 10, 64)
			msgs = append(msgs, m)
		case "204": // end of the batch
			if err := follows(m, last); err != nil {
				return nil, 0, fmt.Errorf("direct get from %s: %w", stream, err)
			}
			pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return msgs, pending, nil
		case "404": // nothing from there on
			return msgs, 0, nil
		case "503":
			return nil, 0, fmt.Errorf("%w: %s", ErrNoDirect, stream)
		default:
			return nil, 0, fmt.Errorf("direct get from %s: status %s %s", stream, status, m.Header.Get("Description"))
		}
	}
}

// ErrGap is Get's error when an answer of a batch did not arrive: each
// answer, and the end of the batch, names the sequence of the one before
// it (Nats-Last-Sequence), and one named another than the last that
// came. A reader that went on would take its cursor past a message it
// never saw.
var ErrGap = errors.New("directget: an answer of the batch is missing")

// follows checks that answer m comes right after the answer of sequence
// last (0: none yet).
func follows(m *nats.Msg, last uint64) error {
	v := lastHeader(m.Header, lastSequenceHeader)
	if v == "" {
		return nil // a server that does not say
	}
	if prev, err := strconv.ParseUint(v, 10, 64); err != nil || prev != last {
		return fmt.Errorf("%w: the answer after %d names %s as the one before it", ErrGap, last, v)
	}
	return nil
}

// lastSequenceHeader is the header of a batch's answer naming the
// sequence of the answer before it (0 in the first).
const lastSequenceHeader = "Nats-Last-Sequence"

// Meta is an answer's subject, sequence and time in the stream.
func Meta(m *nats.Msg) (subject string, seq uint64, at time.Time, err error) {
	seq, err = strconv.ParseUint(lastHeader(m.Header, jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return "", 0, time.Time{}, errors.New("direct get: no sequence")
	}
	at, _ = time.Parse(time.RFC3339Nano, lastHeader(m.Header, jetstream.TimeStampHeaer))
	return lastHeader(m.Header, jetstream.SubjectHeader), seq, at, nil
}

// appended are the headers a direct get appends to those a message was
// stored with.
var appended = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader,
	jetstream.TimeStampHeaer, "Nats-Num-Pending", lastSequenceHeader, "Nats-UpTo-Sequence"}

// Stored is an answer as it was stored: its subject, sequence and time,
// and its headers less what the direct get appended to them.
func Stored(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	subject, seq, at, err := Meta(m)
	if err != nil {
		return nil, err
	}
	h := nats.Header{}
	for k, vs := range m.Header {
		h[k] = append([]string(nil), vs...)
	}
	for _, k := range appended {
		if vs := h.Values(k); len(vs) > 0 {
			if vs = vs[:len(vs)-1]; len(vs) > 0 {
				h[k] = vs
			} else {
				h.Del(k)
			}
		}
	}
	return &jetstream.RawStreamMsg{Subject: subject, Sequence: seq, Header: h, Data: m.Data, Time: at}, nil
}

// lastHeader is h's last value of key: the server appends what a direct
// get says of the message (its sequence, subject, time) to the headers
// it was stored with, which may hold such a header of their own.
func lastHeader(h nats.Header, key string) string {
	v := h.Values(key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}
