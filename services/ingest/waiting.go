package ingest

import (
	"context"
	"time"

	"github.com/rs/zerolog"
)

// moveEvery is how often ingest takes the entries waiting for room into
// DEAD (dead.Writer.Move; every service parks such entries, and ingest,
// which always runs, moves them): room an operator frees is taken within
// seconds, at one request per replica when nothing waits.
const moveEvery = 2 * time.Second

// moveTimeout bounds one pass of the mover, however many accounts wait.
const moveTimeout = 30 * time.Second

// moveWaiting runs the waiting room's mover until ctx ends.
func (s *Service) moveWaiting(ctx context.Context) {
	log := s.log.Sample(&zerolog.BurstSampler{Burst: 1, Period: time.Minute})
	t := time.NewTicker(moveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mctx, cancel := context.WithTimeout(ctx, moveTimeout)
		n, err := s.dead.Move(mctx)
		cancel()
		if n > 0 {
			s.log.Info().Int("entries", n).Msg("entries that waited for room kept in DEAD")
		}
		if err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("moving the entries that wait for room into DEAD failed; will retry")
		}
	}
}
