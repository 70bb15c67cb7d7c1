package directget_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/directget"
	"github.com/tenaz/tenaz/pkg/natstest"
)

func setup(t *testing.T, allowDirect bool) (jetstream.JetStream, *directget.Mux, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv := natstest.Start(t)
	nc, js := srv.Conn(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: allowDirect}); err != nil {
		t.Fatal(err)
	}
	// s.a.0 s.b.1 s.a.2 s.b.3 ... s.a.8 s.b.9 at sequences 1 to 10.
	for i := range 10 {
		if _, err := js.Publish(ctx, fmt.Sprintf("s.%c.%d", 'a'+i%2, i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := directget.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return js, g, ctx
}

func seqs(t *testing.T, msgs []*nats.Msg) (out []uint64) {
	t.Helper()
	for _, m := range msgs {
		subject, seq, at, err := directget.Meta(m)
		if err != nil || at.IsZero() || subject == "" || int(m.Data[0])+1 != int(seq) {
			t.Fatalf("answer %v: subject %q seq %d at %s err %v", m.Header, subject, seq, at, err)
		}
		out = append(out, seq)
	}
	return out
}

// A batch returns the subject's messages from a sequence and how many
// match past them; the last of each of several subjects comes in one
// request; nothing matching is no error; many requests at once each get
// their own answers on the one subscription.
func TestGetBatchesAndLasts(t *testing.T) {
	t.Parallel()
	_, g, ctx := setup(t, true)
	msgs, pending, err := g.Get(ctx, "S", directget.Request{Seq: 2, NextFor: "s.a.>", Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(t, msgs); !slices.Equal(got, []uint64{3, 5}) || pending != 2 {
		t.Fatalf("batch: sequences %v pending %d, want [3 5] and 2", got, pending)
	}
	msgs, _, err = g.Get(ctx, "S", directget.Request{MultiLast: []string{"s.a.4", "s.b.9", "s.c.0"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(t, msgs); !slices.Equal(got, []uint64{5, 10}) {
		t.Fatalf("last of s.a.4, s.b.9, s.c.0: sequences %v, want [5 10]", got)
	}
	msgs, pending, err = g.Get(ctx, "S", directget.Request{Seq: 1, NextFor: "s.c.>", Batch: 5})
	if err != nil || len(msgs) != 0 || pending != 0 {
		t.Fatalf("nothing matching: %d messages, pending %d, err %v", len(msgs), pending, err)
	}
	errs := make(chan error, 20)
	for i := range 20 {
		go func() {
			want := uint64(i%10 + 1)
			msgs, _, err := g.Get(ctx, "S", directget.Request{MultiLast: []string{fmt.Sprintf("s.%c.%d", 'a'+i%2, i%10)}})
			if err == nil {
				var seq uint64
				if len(msgs) == 1 {
					_, seq, _, err = directget.Meta(msgs[0])
				}
				if err == nil && seq != want {
					err = fmt.Errorf("request %d: %d answers (sequence %d), want sequence %d", i, len(msgs), seq, want)
				}
			}
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A stream that answers no direct gets is told apart, so the caller can
// read another way (the server answers for it that nobody listens).
func TestGetWithoutDirectGets(t *testing.T) {
	t.Parallel()
	_, g, ctx := setup(t, false)
	for _, stream := range []string{"S", "NONE"} {
		if _, _, err := g.Get(ctx, stream, directget.Request{Seq: 1, NextFor: "s.>", Batch: 2}); !errors.Is(err, directget.ErrNoDirect) {
			t.Fatalf("%s: err %v, want ErrNoDirect", stream, err)
		}
	}
}

// A batch can start at a time: the first message stored at or after it.
// A multi-last that matches more subjects than the server answers at once
// (1,024) is an error, not a short answer: the searcher then scans.
func TestGetFromATimeAndTooMany(t *testing.T) {
	t.Parallel()
	js, g, ctx := setup(t, true)
	all, _, err := g.Get(ctx, "S", directget.Request{Seq: 1, Batch: 10})
	if err != nil || len(all) != 10 {
		t.Fatalf("all: %d messages, err %v", len(all), err)
	}
	_, _, at, err := directget.Meta(all[6])
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(7) // the first stored at or after the seventh's time
	for i := 5; i >= 0; i-- {
		if _, _, t0, _ := directget.Meta(all[i]); t0.Before(at) {
			break
		}
		want = uint64(i + 1)
	}
	msgs, pending, err := g.Get(ctx, "S", directget.Request{StartTime: &at, NextFor: "s.>", Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(t, msgs); len(got) != 2 || got[0] != want || pending != 10-want-1 {
		t.Fatalf("from the seventh's time: sequences %v pending %d, want [%d %d] and %d", got, pending, want, want+1, 10-want-1)
	}

	for i := range 1025 {
		if _, err := js.PublishAsync(fmt.Sprintf("s.many.%d", i), []byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if msgs, _, err := g.Get(ctx, "S", directget.Request{MultiLast: []string{"s.many.*"}, Batch: 1024}); err == nil {
		t.Fatalf("a multi-last of 1,025 subjects: %d messages and no error", len(msgs))
	}
}

// An answer lost in the middle of a batch (one connection does not lose
// one alone, but a route that reconnects mid-batch may) is an error,
// not a shorter batch: each answer names the sequence of the one before
// it, and a reader that went on would move past a message it never saw.
// A responder on the stream's direct get subject plays the server here,
// answering as nats-server does, with one answer left out.
func TestGetRefusesABatchWithAnAnswerMissing(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, _ := srv.Conn(t)
	g, err := directget.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	answer := func(reply string, seq, last uint64, status string) {
		m := nats.NewMsg(reply)
		if status != "" {
			m.Header.Set("Status", status)
		} else {
			m.Header.Set(jetstream.StreamHeader, "LOSSY")
			m.Header.Set(jetstream.SubjectHeader, fmt.Sprintf("s.%d", seq))
			m.Header.Set(jetstream.SequenceHeader, fmt.Sprint(seq))
			m.Header.Set(jetstream.TimeStampHeaer, time.Now().UTC().Format(time.RFC3339Nano))
			m.Data = []byte{byte(seq)}
		}
		m.Header.Set("Nats-Num-Pending", "0")
		m.Header.Set("Nats-Last-Sequence", fmt.Sprint(last))
		// A Get that saw its gap returns before the rest of its answers
		// are sent; those of the last one may meet the connection closed
		// by the test's end.
		if err := nc.PublishMsg(m); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Error(err)
		}
	}
	lose := map[string]uint64{"middle": 5, "last": 7, "none": 0}
	for name, lost := range lose {
		sub, err := nc.Subscribe("$JS.API.DIRECT.GET.LOSSY."+name, func(m *nats.Msg) {
			prev := uint64(0)
			for _, seq := range []uint64{3, 5, 7} {
				if seq != lost {
					answer(m.Reply, seq, prev, "")
				}
				prev = seq
			}
			answer(m.Reply, 0, prev, "204")
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, lost := range lose {
		msgs, _, err := g.Get(ctx, "LOSSY."+name, directget.Request{Seq: 1, Batch: 3})
		switch {
		case lost == 0 && (err != nil || len(msgs) != 3):
			t.Errorf("%s: want the 3 answers, got %d, %v", name, len(msgs), err)
		case lost != 0 && (!errors.Is(err, directget.ErrGap) || msgs != nil):
			t.Errorf("%s: with answer %d lost, want ErrGap and no messages, got %d messages, %v", name, lost, len(msgs), err)
		}
	}
}

// Stored gives an answer back as it was stored: its own headers, even
// one named as a header the direct get appends, without the appended ones.
func TestStoredDropsWhatTheDirectGetAppended(t *testing.T) {
	t.Parallel()
	js, g, ctx := setup(t, true)
	m := nats.NewMsg("s.c.h")
	m.Data = []byte("body")
	m.Header.Set("Idempotency-Key", "k-1")
	m.Header.Set("Nats-Msg-Id", "id-1")
	m.Header.Set(jetstream.SubjectHeader, "its-own")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	msgs, _, err := g.Get(ctx, "S", directget.Request{Seq: 1, NextFor: "s.c.>", Batch: 4})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("want the one message, got %d (%v)", len(msgs), err)
	}
	raw, err := directget.Stored(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{"Idempotency-Key": {"k-1"}, "Nats-Msg-Id": {"id-1"}, jetstream.SubjectHeader: {"its-own"}}
	if raw.Subject != "s.c.h" || raw.Sequence != ack.Sequence || string(raw.Data) != "body" || raw.Time.IsZero() || fmt.Sprint(raw.Header) != fmt.Sprint(want) {
		t.Fatalf("want s.c.h at %d with body and headers %v, got %s at %d (%s, %s) with %v",
			ack.Sequence, want, raw.Subject, raw.Sequence, raw.Data, raw.Time, raw.Header)
	}
}
