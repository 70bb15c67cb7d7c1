package dead_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stored is the last DEAD message.
func stored(t *testing.T, ctx context.Context, js jetstream.JetStream) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, names.NewSubjects("").DeadAll())
	if err != nil {
		t.Fatalf("want a DEAD message, got %v", err)
	}
	return m
}

// A dead letter with the event and its record holds the payload once,
// in the event: the message is barely larger than the payload.
func TestPublishStoresThePayloadOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, payload := bigEntry(t)
	env, rec := e.Event, e.Record
	if err := (&dead.Writer{JS: js, Subj: names.NewSubjects("")}).Publish(ctx, e, env.ID+"/dead/1"); err != nil {
		t.Fatal(err)
	}
	m := stored(t, ctx, js)
	wantPayloadOnce(t, m.Data, payload)
	var got dead.Entry
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Record == nil || got.Record.ID != env.ID || got.Event == nil || string(got.Event.Payload) != string(payload) {
		t.Errorf("want the record (without the payload) and the event with its payload, got record %v, event %v", got.Record != nil, got.Event != nil)
	}
	if rec.Payload == nil {
		t.Error("Publish must not change the caller's record")
	}
}

// payloadMarker marks bigEntry's payload.
const payloadMarker = "payload-marker-7f3a"

// bigEntry is a dying event's entry whose event and record both hold its
// payload of 200 KiB.
func bigEntry(t *testing.T) (dead.Entry, json.RawMessage) {
	t.Helper()
	payload := json.RawMessage(`{"order_id":"o-1","note":"` + payloadMarker + strings.Repeat("x", 200<<10) + `"}`)
	env, err := event.New(event.Fields{Account: "acme", Kind: "order.create", IdempotencyKey: "k-1"}, payload, "", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := queue.Initial(env)
	return dead.Entry{ID: env.ID, Account: env.Account, Kind: env.Kind, Reason: dead.ReasonPermanent, Error: "422", At: time.Now(), Event: &env, Record: &rec}, payload
}

// wantPayloadOnce fails the test unless data, a stored entry, holds
// payload once and barely more.
func wantPayloadOnce(t *testing.T, data []byte, payload json.RawMessage) {
	t.Helper()
	if n := strings.Count(string(data), payloadMarker); n != 1 {
		t.Errorf("want the payload stored once, found it %d times", n)
	}
	if extra := len(data) - len(payload); extra > 4<<10 {
		t.Errorf("want the message at most 4 KiB beyond its %d-byte payload, got %d bytes", len(payload), len(data))
	}
}

// A rejected submission as large as the server's max_payload does not fit
// in a DEAD message as base64: its first part is kept, with its size as
// received, rather than nothing at all (the rejection retried forever).
func TestPublishKeepsTheFirstPartOfARawBodyTooLargeForDEAD(t *testing.T) {
	t.Parallel()
	const maxPayload = 1 << 20
	srv := natstest.Start(t, natstest.MaxPayload(maxPayload))
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := []byte(`{"pad":"` + strings.Repeat("y", maxPayload-200) + `"}`)
	e := dead.Entry{Account: "acme", Kind: "order.create", Reason: dead.ReasonRejected, Class: "too_large", Error: "payload too large",
		At: time.Now(), Raw: raw, RawSubject: "tenaz.intake.acme.order.create"}
	if err := (&dead.Writer{JS: js, Subj: names.NewSubjects("")}).Publish(ctx, e, "intake-1"); err != nil {
		t.Fatalf("want the rejection kept, got %v", err)
	}
	var got dead.Entry
	if err := json.Unmarshal(stored(t, ctx, js).Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.RawBytes != len(raw) || len(got.Raw) == 0 || len(got.Raw) >= len(raw) || string(got.Raw) != string(raw[:len(got.Raw)]) {
		t.Errorf("want the first part of the %d-byte body and its size, got %d bytes, raw_bytes %d", len(raw), len(got.Raw), got.RawBytes)
	}
}

// A Writer keeps each account within its bound, exactly, however many
// of its goroutines write at once; an account at its bound is refused
// with an error its writers take for a full store, and another account's
// entries are still kept.
func TestWriterKeepsEachAccountWithinItsBound(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bound, writers = 5, 16
	w := &dead.Writer{JS: js, Subj: names.NewSubjects(""), Bound: func(string) int64 { return bound }}
	entry := func(account string, i int) (dead.Entry, string) {
		return dead.Entry{Account: account, Kind: "order.create", Reason: dead.ReasonRejected, Error: "unknown kind", At: time.Now()},
			fmt.Sprintf("%s-%d", account, i)
	}
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			e, id := entry("noisy", i)
			errs <- w.Publish(ctx, e, id)
		}()
	}
	kept, refused := 0, 0
	for range writers {
		switch err := <-errs; {
		case err == nil:
			kept++
		case errors.Is(err, dead.ErrAccountFull) && store.IsFull(err):
			refused++
		default:
			t.Fatalf("want kept or refused as full, got %v", err)
		}
	}
	if kept != bound || refused != writers-bound {
		t.Fatalf("want %d kept and %d refused, got %d and %d", bound, writers-bound, kept, refused)
	}
	if e, id := entry("calm", 0); true {
		if err := w.Publish(ctx, e, id); err != nil {
			t.Fatalf("want another account's entry kept, got %v", err)
		}
	}
}
