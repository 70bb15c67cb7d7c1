package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/services/tenaz/internal/outbox"
)

// startInProcess runs a relay in the test process with outbox settings c
// (DSN filled in) and stops it at the end of the test.
func (h *harness) startInProcess(c config.Outbox) *outbox.Relay {
	h.t.Helper()
	nc, err := natsconn.Connect(config.NATS{}, outbox.ConnName(c), h.tz.NATSURL())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(nc.Close)
	c.DSN = config.Secret(h.dsn)
	r, err := outbox.New(outbox.Options{Config: c, Conn: nc})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := r.Start(h.t.Context()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			h.t.Errorf("stop: %v", err)
		}
	})
	return r
}

// A producer transaction that rolls back sends nothing: its row never
// becomes visible and its NOTIFY is never delivered. The committed row
// after it is sent on its notification alone (the poll interval is an
// hour), and is the only submission tenaz sees.
func TestRolledBackTransactionSendsNothing(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.startInProcess(config.Outbox{PollInterval: config.Duration(time.Hour)})

	tx, err := h.db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var rolledBack string
	if err := tx.QueryRow(t.Context(), `INSERT INTO tenaz_outbox (account, kind, payload) VALUES ('acme', 'order.paid', '{"n":1}') RETURNING id`).Scan(&rolledBack); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	ids := h.insert([]string{""}, 2)
	h.waitSettled()
	h.assertAllSentOnce(ids)
	if n := h.accepted.Load() + h.duplicate.Load() + h.refused.Load(); n != 1 {
		t.Fatalf("want one submission (the committed row), tenaz answered %d", n)
	}
	if got := h.eventStatus(event.ID("acme", rolledBack)); got != 404 {
		t.Fatalf("the rolled-back row's event: want 404, got %d", got)
	}
}

// A row committed without a notification (the trigger disabled, as rows
// committed while no relay listened) is found by the poll.
func TestPollFindsRowsWithoutNotification(t *testing.T) {
	t.Parallel()
	h := setup(t)
	if _, err := h.db.Exec(t.Context(), "ALTER TABLE tenaz_outbox DISABLE TRIGGER tenaz_outbox_notify"); err != nil {
		t.Fatal(err)
	}
	h.startInProcess(config.Outbox{PollInterval: config.Duration(200 * time.Millisecond)})
	ids := h.insert(keys(5, 0), 0)
	h.waitSettled()
	h.assertAllSentOnce(ids)
}

// Stop is idempotent and safe before Start; a relay whose table does not
// exist fails its start naming outbox.table; a missing DSN fails New
// naming outbox.dsn.
func TestRelayLifecycleAndConfigErrors(t *testing.T) {
	t.Parallel()
	h := setup(t)
	nc, err := nats.Connect(h.tz.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := outbox.New(outbox.Options{Conn: nc}); !errors.Is(err, config.ErrInvalidConfig) || !contains(err, "outbox.dsn: required") {
		t.Fatalf("no DSN: want an invalid-config error naming outbox.dsn, got %v", err)
	}
	if _, err := outbox.New(outbox.Options{Conn: nc, Config: config.Outbox{DSN: "postgres://relay:s3cret@[bad/x"}}); !errors.Is(err, config.ErrInvalidConfig) || !contains(err, "outbox.dsn:") || contains(err, "s3cret") {
		t.Fatalf("bad DSN: want an invalid-config error naming outbox.dsn without the password, got %v", err)
	}
	if _, err := outbox.New(outbox.Options{Conn: nc, Config: config.Outbox{DSN: config.Secret(h.dsn), Batch: -1}}); !errors.Is(err, config.ErrInvalidConfig) || !contains(err, "outbox.batch") {
		t.Fatalf("bad batch: want an invalid-config error naming outbox.batch, got %v", err)
	}
	r, err := outbox.New(outbox.Options{Conn: nc, Config: config.Outbox{DSN: config.Secret(h.dsn), Table: "app.nope"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	r, _ = outbox.New(outbox.Options{Conn: nc, Config: config.Outbox{DSN: config.Secret(h.dsn), Table: "nope"}})
	err = r.Start(t.Context())
	var pe *pgconn.PgError
	if !errors.Is(err, config.ErrInvalidConfig) || !contains(err, "outbox.table: no table nope") || !errors.As(err, &pe) {
		t.Fatalf("missing table: want an invalid-config error naming outbox.table, got %v", err)
	}
	good := h.startInProcess(config.Outbox{})
	for range 2 {
		if err := good.Stop(t.Context()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// eventStatus is the HTTP status of GET /v1/events/{id}.
func (h *harness) eventStatus(id string) int {
	h.t.Helper()
	resp, err := http.Get("http://" + h.tz.HTTPAddr() + "/v1/events/" + id)
	if err != nil {
		h.t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A relay bound to an account (outbox.account) sends that account's rows
// and fails another account's with the reason, sending nothing for it;
// its replies come on the account's own inbox, which a NATS permission
// can grant to that producer alone.
func TestRelayBoundToAnAccount(t *testing.T) {
	t.Parallel()
	h := setup(t)
	nc, err := nats.Connect(h.tz.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var replies atomic.Int32
	if _, err := nc.Subscribe("_INBOX.tenaz-outbox-acme.>", func(*nats.Msg) { replies.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ids := h.insert([]string{"o1"}, 1)
	var other string
	if err := h.db.QueryRow(t.Context(), `INSERT INTO tenaz_outbox (account, kind, payload) VALUES ('globex', 'order.paid', '{"key":"g1","n":2}') RETURNING id`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	h.startInProcess(config.Outbox{Account: "acme", PollInterval: config.Duration(100 * time.Millisecond)})
	h.waitSettled()
	var status, reason string
	if err := h.db.QueryRow(t.Context(), "SELECT status, coalesce(error, '') FROM tenaz_outbox WHERE id = $1", other).Scan(&status, &reason); err != nil {
		t.Fatal(err)
	}
	if status != outbox.StatusFailed || !strings.HasPrefix(reason, `403 forbidden: the row's account "globex" is not outbox.account "acme"`) {
		t.Fatalf("globex's row: want failed 403 forbidden, got %s %q", status, reason)
	}
	if n := h.count(outbox.StatusSent); n != 1 {
		t.Fatalf("want acme's row sent, got %d rows sent", n)
	}
	if got := h.eventStatus(event.ID("acme", ids[0])); got != http.StatusOK || replies.Load() == 0 {
		t.Fatalf("acme's row: want its event (200) and the answer on _INBOX.tenaz-outbox-acme, got %d and %d answers", got, replies.Load())
	}
	if got := h.eventStatus(event.ID("globex", other)); got != http.StatusNotFound {
		t.Fatalf("globex's row: want no event (404), got %d", got)
	}
}
