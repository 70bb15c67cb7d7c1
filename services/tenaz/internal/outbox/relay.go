package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/client"
	"github.com/tenaz/tenaz/pkg/config"
)

// Name is the relay's NATS connection name (ConnName); its replies come
// on natsconn.InboxPrefix(Name).
const Name = "tenaz-outbox"

// ConnName is the NATS connection name of a relay with settings c: Name,
// or Name-<account> for a relay bound to an account, whose replies then
// come on an inbox a NATS permission can grant to that producer alone.
func ConnName(c config.Outbox) string {
	if c.Account != "" {
		return Name + "-" + c.Account
	}
	return Name
}

// ErrStopped is the cause of a deliberate stop: what it cancels is not a
// failure.
var ErrStopped = errors.New("outbox: relay stopped")

// Options configure a Relay.
type Options struct {
	// Config is the outbox section of the config; zero fields take their
	// defaults. DSN is required.
	Config config.Outbox
	// Prefix is the subject prefix of the tenaz deployment. Defaults to
	// "tenaz".
	Prefix string
	// Conn is the NATS connection the submissions go over. Required.
	Conn *nats.Conn
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
}

// Relay submits the committed rows of one outbox table to tenaz.
type Relay struct {
	o      Options
	n      names
	pg     *pgxpool.Config
	log    zerolog.Logger
	client *client.Client
	claim  string // the claim query (see claimSQL)
	settle string // the update of a batch's outcomes

	mu      sync.Mutex
	started bool
	stopped bool
	pool    *pgxpool.Pool
	halt    context.CancelCauseFunc // no new batch
	kill    context.CancelCauseFunc // the batch in flight too
	done    chan struct{}
}

// New checks o and makes a relay; it connects nothing before Start.
func New(o Options) (*Relay, error) {
	if o.Conn == nil {
		return nil, errors.New("outbox: Options.Conn is required")
	}
	c := (&config.Config{Outbox: o.Config}).WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	o.Config = c.Outbox
	if o.Prefix == "" {
		o.Prefix = "tenaz"
	}
	if o.Config.DSN == "" {
		return nil, &config.KeyError{Key: "outbox.dsn", Msg: "required: the PostgreSQL database of the outbox table (TENAZ_OUTBOX_DSN)"}
	}
	pg, err := pgxpool.ParseConfig(o.Config.DSN.Reveal())
	if err != nil {
		// pgconn's parse errors show a URL with its password masked.
		return nil, &config.KeyError{Key: "outbox.dsn", Msg: err.Error()}
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("component", "outbox").Str("table", o.Config.Table).Logger()
	}
	n := namesOf(o.Config.Table)
	return &Relay{o: o, n: n, pg: pg, log: log, client: client.NewNATS(o.Conn, client.WithPrefix(o.Prefix)),
		claim: claimSQL(n), settle: settleSQL(n)}, nil
}

// Start connects to PostgreSQL, checks the table, and starts relaying
// until Stop. ctx bounds the start only.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return errors.New("outbox: Start called twice, or after Stop")
	}
	pool, err := pgxpool.NewWithConfig(ctx, r.pg)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if err := r.check(ctx, pool); err != nil {
		pool.Close()
		return err
	}
	base := context.WithoutCancel(ctx)
	haltCtx, halt := context.WithCancelCause(base)
	batchCtx, kill := context.WithCancelCause(base)
	r.pool, r.halt, r.kill, r.done, r.started = pool, halt, kill, make(chan struct{}), true
	go r.loop(haltCtx, batchCtx)
	return nil
}

// check reads no row but every column the relay uses: a missing table or
// an old one fails the start, not each batch.
func (r *Relay) check(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "SELECT id, seq, account, kind, payload, entity_id, ordering_key, not_before, status, attempts, event_id, error, settled_at FROM "+r.n.table+" LIMIT 0")
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
		return &config.KeyError{Key: "outbox.table", Msg: fmt.Sprintf("no table %s in the database: create it with the DDL of `tenaz outbox schema`", r.o.Config.Table), Err: err}
	case errors.As(err, &pe) && pe.Code == "42703": // undefined_column
		return &config.KeyError{Key: "outbox.table", Msg: fmt.Sprintf("table %s is not an outbox table as `tenaz outbox schema` makes it: %s", r.o.Config.Table, pe.Message), Err: err}
	case err != nil:
		return fmt.Errorf("outbox: PostgreSQL: %w", err)
	}
	return nil
}

// Stop finishes the batch in flight (its rows are submitted and marked)
// and stops; when ctx ends first, the batch is cancelled and rolled back,
// its rows left to the next relay. Idempotent, safe before Start.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || !r.started {
		r.stopped = true
		return nil
	}
	r.stopped = true
	r.halt(ErrStopped)
	var err error
	select {
	case <-r.done:
	case <-ctx.Done():
		err = fmt.Errorf("outbox: stop: the batch in flight was cancelled: %w", context.Cause(ctx))
		r.kill(ErrStopped)
		<-r.done
	}
	r.kill(ErrStopped)
	r.pool.Close()
	return err
}

// loop drains the table whenever a notification or the poll interval
// says so.
func (r *Relay) loop(haltCtx, batchCtx context.Context) {
	defer close(r.done)
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(haltCtx, wake) })
	defer wg.Wait()
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		select {
		case <-haltCtx.Done():
			return
		case <-wake:
		case <-poll.C:
		}
		r.drain(haltCtx, batchCtx)
		poll.Reset(r.o.Config.PollInterval.D())
	}
}

// listen keeps a connection LISTENing on the table's channel and wakes
// the loop on each notification. A notification is only a hint: after
// each (re)connect it wakes the loop too, for the commits it missed.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, notify)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn().Err(err).Dur("retry_in", r.o.Config.PollInterval.D()).Msg("LISTEN connection lost; polling meanwhile")
		t := time.NewTimer(r.o.Config.PollInterval.D())
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func (r *Relay) listenOnce(ctx context.Context, notify func()) error {
	conn, err := pgx.ConnectConfig(ctx, r.pg.ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{r.n.channel}.Sanitize()); err != nil {
		return err
	}
	notify()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		notify()
	}
}

// drain runs batches while they come back full and nothing needs a retry.
func (r *Relay) drain(haltCtx, batchCtx context.Context) {
	for haltCtx.Err() == nil {
		full, err := r.batch(batchCtx)
		if err != nil {
			if !errors.Is(context.Cause(batchCtx), ErrStopped) {
				r.log.Warn().Err(err).Msg("batch failed; its rows are tried again")
			}
			return
		}
		if !full {
			return
		}
	}
}
