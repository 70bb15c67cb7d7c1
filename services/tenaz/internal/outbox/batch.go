package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/event"
)

// SubmitTimeout bounds one submission: longer than ingest waits for its
// intake consumer (5s) before it answers 202 anyway.
const SubmitTimeout = 15 * time.Second

// claimSQL locks up to $1 pending rows, oldest first, skipping rows
// another relay holds, and returns those it may send now: a row with an
// ordering key only if no older pending row of its account and key is
// held elsewhere (another relay sends that one first; this row waits for
// a later batch). Within the batch, a key's rows go out in seq order.
func claimSQL(n names) string {
	return `WITH claimed AS (
    SELECT id, seq, account, ordering_key FROM ` + n.table + `
    WHERE status = '` + StatusPending + `'
    ORDER BY seq LIMIT $1
    FOR UPDATE SKIP LOCKED
)
SELECT o.id::text, o.seq, o.account, o.kind, o.payload::text, o.entity_id, o.ordering_key, o.not_before
FROM claimed c JOIN ` + n.table + ` o ON o.id = c.id
WHERE c.ordering_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM ` + n.table + ` p
    WHERE p.status = '` + StatusPending + `' AND p.account = c.account AND p.ordering_key = c.ordering_key
      AND p.seq < c.seq AND p.id NOT IN (SELECT id FROM claimed))
ORDER BY o.seq`
}

// settleSQL writes a batch's outcomes in one statement: sent and failed
// rows are settled; a row to retry stays pending with its error.
func settleSQL(n names) string {
	return `UPDATE ` + n.table + ` t SET status = u.status, event_id = u.event_id, error = u.error,
    attempts = t.attempts + 1, settled_at = CASE WHEN u.status = '` + StatusPending + `' THEN NULL ELSE now() END
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS u(id, status, event_id, error)
WHERE t.id = u.id`
}

// row is one claimed outbox row and, once submitted, its outcome.
type row struct {
	id, account, kind, payload string
	seq                        int64
	entityID, orderingKey      *string
	notBefore                  pgtype.Timestamptz

	submitted bool
	outcome
}

// outcome is what tenaz answered: status sent or failed, or pending (to
// retry) with the reason.
type outcome struct {
	status, eventID, reason string
}

// batch claims, submits and settles one batch in one transaction. full
// reports a batch of outbox.batch rows: more may be waiting.
func (r *Relay) batch(ctx context.Context) (full bool, err error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, r.claim, r.o.Config.Batch)
	if err != nil {
		return false, err
	}
	claimed, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (*row, error) {
		var w row
		err := cr.Scan(&w.id, &w.seq, &w.account, &w.kind, &w.payload, &w.entityID, &w.orderingKey, &w.notBefore)
		return &w, err
	})
	if err != nil || len(claimed) == 0 {
		return false, err
	}
	var wg sync.WaitGroup
	for _, lane := range lanes(claimed) {
		wg.Go(func() {
			for _, w := range lane {
				w.outcome, w.submitted = r.submit(ctx, w), true
				if w.status == StatusPending {
					return // the key's later rows wait for this one
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false, context.Cause(ctx)
	}
	var ids, statuses, eventIDs, reasons []string
	var sent, failed, retry int
	for _, w := range claimed {
		if !w.submitted {
			continue
		}
		ids, statuses, eventIDs, reasons = append(ids, w.id), append(statuses, w.status), append(eventIDs, w.eventID), append(reasons, w.reason)
		switch w.status {
		case StatusSent:
			sent++
		case StatusFailed:
			failed++
			r.log.Warn().Str("row", w.id).Str("account", w.account).Str("kind", w.kind).Str("reason", w.reason).Msg("row refused by tenaz; marked failed")
		default:
			retry++
			r.log.Warn().Str("row", w.id).Str("reason", w.reason).Msg("row not accepted; tried again at the next poll")
		}
	}
	if len(ids) == 0 {
		return false, nil // every row waits for an older one of its key
	}
	if _, err := tx.Exec(ctx, r.settle, ids, statuses, nullable(eventIDs), nullable(reasons)); err != nil {
		return false, fmt.Errorf("mark the batch: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit the batch: %w", err)
	}
	r.log.Info().Int("sent", sent).Int("failed", failed).Int("retry", retry).Int("waiting", len(claimed)-len(ids)).Msg("batch")
	return len(claimed) == r.o.Config.Batch && retry == 0, nil
}

// lanes splits a batch (in seq order) into what may be submitted
// concurrently: the rows of one account and ordering key, in order, form
// one lane; every other row is a lane of its own.
func lanes(rows []*row) [][]*row {
	var out [][]*row
	at := map[[2]string]int{}
	for _, w := range rows {
		if w.orderingKey == nil {
			out = append(out, []*row{w})
			continue
		}
		k := [2]string{w.account, *w.orderingKey}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], w)
	}
	return out
}

// nullable maps "" to NULL.
func nullable(vs []string) []*string {
	out := make([]*string, len(vs))
	for i := range vs {
		if vs[i] != "" {
			out[i] = &vs[i]
		}
	}
	return out
}

// submit sends one row to ingest's submit endpoint
// (<prefix>.api.ingest.submit), which validates it as POST /v1/events
// does and answers at once: 202 accepted, or 200 for a duplicate (the
// event this key already made), both sent; 408, 429, 5xx and no answer
// are tried again; any other 4xx is the row's own fault and fails it.
func (r *Relay) submit(ctx context.Context, w *row) outcome {
	if a := r.o.Config.Account; a != "" && w.account != a {
		return outcome{status: StatusFailed, reason: fmt.Sprintf("403 forbidden: the row's account %q is not outbox.account %q", w.account, a)}
	}
	sub := event.Submission{Account: w.account, Kind: w.kind, Payload: json.RawMessage(w.payload)}
	if w.entityID != nil {
		sub.EntityID = *w.entityID
	}
	if w.orderingKey != nil {
		sub.OrderingKey = *w.orderingKey
	}
	switch nb := w.notBefore; {
	case nb.InfinityModifier == pgtype.Infinity:
		// Never due: ingest refuses what is more than a year ahead, and
		// so fails the row with its reason rather than stalling the batch.
		sub.NotBefore = "9999-12-31T23:59:59Z"
	case nb.Valid && nb.InfinityModifier == pgtype.Finite:
		sub.NotBefore = nb.Time.UTC().Format(time.RFC3339)
	} // -infinity, like NULL, is due now
	ctx, cancel := context.WithTimeout(ctx, SubmitTimeout)
	defer cancel()
	rc, err := r.client.Submit(ctx, sub, client.IdempotencyKey(w.id))
	var ce *client.Error
	switch {
	case err == nil:
		return outcome{status: StatusSent, eventID: rc.ID}
	case errors.Is(err, nats.ErrMaxPayload): // ingest would answer 413 if it could read it
		return outcome{status: StatusFailed, reason: "413 too_large: the submission is over the NATS server's max_payload"}
	case errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 &&
		ce.Status != http.StatusRequestTimeout && ce.Status != http.StatusTooManyRequests:
		return outcome{status: StatusFailed, reason: fmt.Sprintf("%d %s: %s", ce.Status, ce.Code, ce.Message)}
	default:
		return outcome{status: StatusPending, reason: err.Error()}
	}
}
