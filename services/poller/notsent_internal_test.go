package poller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/servicetest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/target"
)

// A poll whose request cannot be made (its URL does not fit: the
// provider's reference, escaped and repeated, past 8 KiB) gives its
// target's token back: at 1/m with one slot, the next poll goes at once
// instead of being put off for a minute behind a token nothing used.
func TestAPollNotSentGivesItsTokenBack(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, _ := srv.Conn(t)
	cfg := servicetest.Config(t, `
targets:
  bureau_a:
    url: "http://127.0.0.1:1/x"
    rate: 1/m
    concurrency: 1
    poll: {url: "http://127.0.0.1:1/jobs/`+strings.Repeat("{{.Reference}}", 12)+`", interval: 1s, done_when: {field: status, in: [done]}}
kinds: {report.fetch: {target: bureau_a, completion: poll, poll_sla: 1h}}
`, nil)
	s, err := New(Options{Conn: nc, Config: cfg, Instance: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servicetest.Run(t, ctx, s)
	env, err := event.New(event.Fields{Account: "acme", Kind: "report.fetch", IdempotencyKey: "k"}, []byte(`{}`), "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := s.target(env.Account, "bureau_a")
	if err != nil {
		t.Fatal(err)
	}
	var rec state.Record
	release, off, err := s.putOff(ctx, env, rec, "bureau_a", time.Second)
	if off || err != nil {
		t.Fatalf("the first poll: want it to go, got put off %v, %v", off, err)
	}
	_, perr := tgt.Poll(ctx, target.Request{Event: env, Reference: strings.Repeat("/", names.MaxKeyLen)})
	if !errors.Is(perr, target.ErrNotSent) {
		t.Fatalf("a poll whose URL does not fit: want ErrNotSent, got %v", perr)
	}
	release(perr)
	release, off, err = s.putOff(ctx, env, rec, "bureau_a", time.Second)
	if off || err != nil {
		t.Fatalf("the poll after one that was not sent: want it to go at once, got put off %v, %v", off, err)
	}
	release(nil)
}

