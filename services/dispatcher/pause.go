package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/accounts"
)

// An operator's pause of an account (pkg/accounts.Pause, in tenaz_ops) is
// applied to the account's consumer by the deadletter service. The
// dispatcher keeps it in force where it changes the same consumer's pause
// itself: when a breaker of the account opens or closes (syncPause), and
// before a reader's first pull (holdPaused), which is where a consumer made
// afresh (deleted while idle, provisioned again by ingest) would start
// delivering.

// syncPause pauses account's consumer as its operator's pause and its open
// breakers want together, or resumes it when neither does.
func (s *Service) syncPause(ctx context.Context, account string) (time.Time, error) {
	return s.pauses.Sync(ctx, account, func() time.Time { return s.breakers.OpenUntil(account) })
}

// holdPaused pauses cons before the reader pulls from it, when the account's
// pause or breakers want it paused longer than it is. It never resumes:
// only a resume or a breaker's close does.
func (s *Service) holdPaused(ctx context.Context, account string, cons jetstream.Consumer) error {
	p, ok, _, err := s.pauses.Get(ctx, account)
	if err != nil {
		return fmt.Errorf("reading the pause of %s: %w", account, err)
	}
	want := accounts.Want(p, ok, s.breakers.OpenUntil(account), time.Now())
	info := cons.CachedInfo()
	if want.IsZero() || info.Paused && info.Config.PauseUntil != nil && !info.Config.PauseUntil.Before(want) {
		return nil
	}
	if err := s.pauses.Apply(ctx, account, want); err != nil {
		return err
	}
	s.log.Info().Str("account", account).Time("until", want).Bool("operator", ok && p.Holds(time.Now())).Msg("account paused before its reader starts")
	return nil
}
