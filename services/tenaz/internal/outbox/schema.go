package outbox

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Row status values of the status column.
const (
	StatusPending = "pending" // waiting for the relay
	StatusSent    = "sent"    // accepted by tenaz (as new, or as the duplicate of a row sent before)
	StatusFailed  = "failed"  // refused by tenaz for good; error says why
)

// names are the SQL names derived from outbox.table (validated by
// pkg/config as one or two unquoted-style names).
type names struct {
	table   string // quoted, possibly schema-qualified
	channel string // the LISTEN channel: outbox.table as written
	pending string // index of the pending rows
	lane    string // index of the pending rows per ordering key
	fn      string // quoted, possibly schema-qualified trigger function
	trigger string
}

func namesOf(table string) names {
	schema, base, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, base = "", table
	}
	q := func(name string) string {
		if schema == "" {
			return pgx.Identifier{name}.Sanitize()
		}
		return pgx.Identifier{schema, name}.Sanitize()
	}
	return names{
		table:   q(base),
		channel: table,
		pending: pgx.Identifier{base + "_pending"}.Sanitize(),
		lane:    pgx.Identifier{base + "_lane"}.Sanitize(),
		fn:      q(base + "_notify"),
		trigger: pgx.Identifier{base + "_notify"}.Sanitize(),
	}
}

// Schema returns the DDL of the outbox table table (outbox.table): the
// table, its two partial indexes and the trigger that notifies the relay
// when a transaction that inserted rows commits. Every statement may be
// run again. It needs PostgreSQL 14 or later (CREATE OR REPLACE TRIGGER).
func Schema(table string) string {
	n := namesOf(table)
	return fmt.Sprintf(`-- The tenaz outbox (tenaz outbox schema; docs/producers.md). A producer
-- inserts one row per event in the transaction of its business change;
-- tenaz outbox relay submits it once that transaction has committed.
CREATE TABLE IF NOT EXISTS %[1]s (
    -- The event's idempotency key: however often the relay submits the
    -- row, tenaz keeps one event (event id: account + this key).
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- Submission order, kept per account and ordering_key.
    seq          bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    account      text        NOT NULL,
    kind         text        NOT NULL,
    payload      json        NOT NULL,
    entity_id    text,
    ordering_key text,
    not_before   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Written by the relay.
    status       text        NOT NULL DEFAULT '%[7]s'
                 CHECK (status IN ('%[7]s', '%[8]s', '%[9]s')),
    attempts     integer     NOT NULL DEFAULT 0,
    event_id     text,
    error        text,
    settled_at   timestamptz
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (seq) WHERE status = '%[7]s';
CREATE INDEX IF NOT EXISTS %[3]s ON %[1]s (account, ordering_key, seq)
    WHERE status = '%[7]s' AND ordering_key IS NOT NULL;
-- NOTIFY is delivered when the inserting transaction commits, and not at
-- all when it rolls back; one per statement, however many rows.
CREATE OR REPLACE FUNCTION %[4]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(%[6]s, '');
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER %[5]s AFTER INSERT ON %[1]s
    FOR EACH STATEMENT EXECUTE FUNCTION %[4]s();
`, n.table, n.pending, n.lane, n.fn, n.trigger, literal(n.channel), StatusPending, StatusSent, StatusFailed)
}

// literal quotes s as an SQL string literal (s is a validated name).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
