// Package accounts provisions the per-account dispatch consumers of the
// EVENTS stream. Ingest ensures an account's consumer exists before it
// first enqueues an event of that account and announces it on a core NATS
// subject, so dispatchers start consuming it at once; dispatchers also list
// the consumers at start-up and periodically to catch anything missed.
// Pauses keeps the operators' pauses of accounts and applies them, with
// the accounts' open breakers, to those consumers.
//
//	p := accounts.NewProvisioner(js, nc, live.Load, subj)
//	err := p.Ensure(ctx, "acme")
package accounts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/streams"
)

// Provisioner creates account consumers once per process.
type Provisioner struct {
	js   jetstream.JetStream
	nc   *nats.Conn
	conf func() *config.Config
	subj names.Subjects
	mu   sync.Mutex
	done map[string]chan struct{}
	errs map[string]error
	at   map[string]time.Time
}

// Refresh is how long an ensured consumer is trusted without asking the
// server again: a dispatcher may delete an idle account's consumer, and
// the announcement of that (AccountGone) is best effort.
const Refresh = 5 * time.Minute

// NewProvisioner returns a Provisioner of the consumers on the EVENTS
// streams of subj's partitions, made under the config conf returns at
// the time (the config in force: an account's concurrency may change by
// reload, and a consumer put again must not take it back).
func NewProvisioner(js jetstream.JetStream, nc *nats.Conn, conf func() *config.Config, subj names.Subjects) *Provisioner {
	return &Provisioner{js: js, nc: nc, conf: conf, subj: subj,
		done: map[string]chan struct{}{}, errs: map[string]error{}, at: map[string]time.Time{}}
}

// AckPendingPerSlot is how many unacknowledged messages the server lets an
// account have per unit of concurrency: a dispatcher may start the next
// call while the previous outcome is still being stored.
const AckPendingPerSlot = 2

// ConsumerConfig is the dispatch consumer config of account under cfg,
// on the EVENTS stream of its partition of parts.
func ConsumerConfig(cfg *config.Config, parts int, account string) (jetstream.ConsumerConfig, error) {
	acct := cfg.Account(account)
	return streams.DispatchConsumer(streams.Options{Prefix: cfg.Prefix, AckWait: cfg.Streams.AckWait.D(), Partitions: parts}, account, AckPendingPerSlot*acct.MaxConcurrency())
}

// Ensure makes sure account's consumer exists. Concurrent callers for one
// account share one creation; a failure is retried by the next call.
func (p *Provisioner) Ensure(ctx context.Context, account string) error {
	p.mu.Lock()
	ch, ok := p.done[account]
	if ok && p.errs[account] == nil && time.Since(p.at[account]) > Refresh {
		select {
		case <-ch: // settled and stale: ask the server again
			delete(p.done, account)
			ok = false
		default:
		}
	}
	if ok {
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		p.mu.Lock()
		err := p.errs[account]
		p.mu.Unlock()
		if err != nil {
			return p.Ensure(ctx, account)
		}
		return nil
	}
	ch = make(chan struct{})
	p.done[account] = ch
	p.mu.Unlock()

	err := p.create(ctx, account)
	p.mu.Lock()
	if err != nil {
		delete(p.done, account)
	}
	p.errs[account] = err
	p.at[account] = time.Now()
	p.mu.Unlock()
	close(ch)
	return err
}

func (p *Provisioner) create(ctx context.Context, account string) error {
	if err := names.ValidateAccount(account); err != nil {
		return err
	}
	cc, err := ConsumerConfig(p.conf(), p.subj.Parts(), account)
	if err != nil {
		return err
	}
	stream := p.subj.EventsStream(account)
	create := func(ctx context.Context, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
		return p.js.CreateOrUpdateConsumer(ctx, stream, cc)
	}
	if _, err := Put(ctx, create, cc); err != nil {
		return fmt.Errorf("accounts: consumer for %s: %w", account, err)
	}
	if p.nc != nil {
		_ = p.nc.Publish(p.subj.AccountAnnounce(), []byte(account))
	}
	return nil
}

// Forget drops account from the cache (its consumer was deleted).
func (p *Provisioner) Forget(account string) {
	p.mu.Lock()
	delete(p.done, account)
	delete(p.errs, account)
	delete(p.at, account)
	p.mu.Unlock()
}

// jsErrStorageUpdate is the server's err_code for an update that would
// change a consumer's storage type.
const jsErrStorageUpdate = 10012

// Put creates account's dispatch consumer cc with create (a stream's or
// js's CreateOrUpdateConsumer), or updates it. A consumer made before
// dispatch consumers were memory-backed keeps its file storage, which the
// server cannot change: it becomes memory-backed when it is next made (an
// idle account's is retired and made again on its next event).
func Put(ctx context.Context, create func(context.Context, jetstream.ConsumerConfig) (jetstream.Consumer, error), cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := create(ctx, cc)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrStorageUpdate {
		cc.MemoryStorage = !cc.MemoryStorage
		c, err = create(ctx, cc)
	}
	return c, err
}
