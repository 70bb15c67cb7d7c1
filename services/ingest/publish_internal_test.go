package ingest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/store"
)

// A failed publish to INTAKE is "not taken" only when nothing can have
// been stored; every row's error is a real one, from a real server and
// nats.go.
func TestPublishIntakeTellsNotTakenFromUnknown(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.MaxPayload(4096))
	const intake = "tenaz.intake.acme.order.create"
	msg := func(subject string, headers ...string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = []byte(`{"order_id":"o-1"}`)
		for i := 0; i+1 < len(headers); i += 2 {
			m.Header.Set(headers[i], headers[i+1])
		}
		return m
	}
	// silent is a subscriber that takes every message on held.> and
	// answers none, as a stream whose acknowledgement is lost.
	silent := func(t *testing.T) *nats.Subscription {
		nc, _ := srv.Conn(t)
		sub, err := nc.SubscribeSync("held.>")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	// whenDelivered runs do once the silent subscriber has the message.
	whenDelivered := func(t *testing.T, sub *nats.Subscription, do func()) {
		go func() {
			if _, err := sub.NextMsg(10 * time.Second); err == nil {
				do()
			}
		}()
	}
	for _, tc := range []struct {
		name    string
		publish func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error)
		unknown bool
		want    func(error) bool // the error nats.go gave, to show the row is the case it names
	}{
		{name: "stored", publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			return publishIntake(ctx, nc, js, msg(intake))
		}, want: func(err error) bool { return err == nil }},
		{name: "no stream takes the subject", publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			return publishIntake(ctx, nc, js, msg("nostream.x"))
		}, want: func(err error) bool { return errors.Is(err, jetstream.ErrNoStreamResponse) }},
		{name: "refused by the server", publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			return publishIntake(ctx, nc, js, msg(intake, jetstream.ExpectedLastSeqHeader, "999999"))
		}, want: func(err error) bool { var a *jetstream.APIError; return errors.As(err, &a) && !store.IsFull(err) }},
		{name: "over max_payload", publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			m := msg(intake)
			m.Data = []byte(`{"pad":"` + strings.Repeat("x", 5000) + `"}`)
			return publishIntake(ctx, nc, js, m)
		}, want: func(err error) bool { return errors.Is(err, nats.ErrMaxPayload) }},
		{name: "connection closed before", publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			nc.Close()
			return publishIntake(ctx, nc, js, msg(intake))
		}, want: func(err error) bool { return errors.Is(err, nats.ErrConnectionClosed) }},
		{name: "ctx done before", publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			return publishIntake(ctx, nc, js, msg(intake))
		}, want: func(err error) bool { return errors.Is(err, context.Canceled) }},
		{name: "no answer in time", unknown: true, publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			silent(t)
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return publishIntake(ctx, nc, js, msg("held.x"))
		}, want: func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		{name: "connection closed while waiting", unknown: true, publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			whenDelivered(t, silent(t), nc.Close)
			return publishIntake(ctx, nc, js, msg("held.x"))
		}, want: func(err error) bool { return errors.Is(err, nats.ErrConnectionClosed) }},
		{name: "connection lost while waiting", unknown: true, publish: func(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (bool, error) {
			whenDelivered(t, silent(t), func() { _ = nc.ForceReconnect() })
			return publishIntake(ctx, nc, js, msg("held.x"))
		}, want: func(err error) bool { return errors.Is(err, nats.ErrDisconnected) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, js := srv.Conn(t)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			unknown, err := tc.publish(t, ctx, nc, js)
			if !tc.want(err) {
				t.Fatalf("the row's publish failed otherwise than it names: %v", err)
			}
			if unknown != tc.unknown {
				t.Fatalf("%v: want unknown %v (may be stored), got %v", err, tc.unknown, unknown)
			}
		})
	}
}
