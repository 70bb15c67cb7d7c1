package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/store"
)

// maxDeliveries is the server's advisory that a consumer gave up on a
// message (io.nats.jetstream.advisory.v1.max_deliver), or, with Reason,
// that a client terminated one (io.nats.jetstream.advisory.v1.terminated).
type maxDeliveries struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	Reason     string `json:"reason,omitempty"`
	terminated bool
}

// advisoryTerminated is the subject prefix of terminated advisories.
const advisoryTerminated = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."

// handleAdvisory moves a message the server gave up on to DEAD: the
// event's record goes to dead (class crash), its DEAD entry keeps the
// payload and history, and the message is deleted from its work queue.
// A terminated EVENTS message is moved the same way (class and reason
// "terminated") if it is still there and its event still active: tenaz
// itself terminates only what it already kept in DEAD, and in a work
// queue a terminated message is normally gone, so this catches a client
// that terminated an event's message by hand. Everything is idempotent, so
// a redelivered advisory changes nothing.
func (s *Service) handleAdvisory(ctx context.Context, m jetstream.Msg) {
	var a maxDeliveries
	if err := json.Unmarshal(m.Data(), &a); err != nil || a.StreamSeq == 0 {
		_ = m.Term()
		return
	}
	a.terminated = strings.HasPrefix(m.Subject(), advisoryTerminated)
	if err := s.moveToDead(ctx, a); err != nil {
		s.log.Warn().Err(err).Str("stream", a.Stream).Uint64("seq", a.StreamSeq).Msg("moving a max-deliveries message to DEAD; will retry")
		_ = m.NakWithDelay(2 * time.Second)
		return
	}
	_ = m.Ack()
}

func (s *Service) moveToDead(ctx context.Context, a maxDeliveries) error {
	if !s.isEventsStream(a.Stream) && (a.Stream != s.subj.Stream(names.StreamIntake) || a.terminated) {
		return nil
	}
	st, err := s.js.Stream(ctx, a.Stream)
	if err != nil {
		return err
	}
	raw, err := st.GetMsg(ctx, a.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		if a.terminated {
			s.log.Debug().Uint64("seq", a.StreamSeq).Str("consumer", a.Consumer).Str("reason", a.Reason).Msg("terminated message already gone")
		}
		return nil // already moved (or acked at the last moment)
	}
	if err != nil {
		return err
	}
	why := fmt.Sprintf("workers failed on it %d times (consumer %s gave up)", a.Deliveries, a.Consumer)
	msgID := fmt.Sprintf("maxdeliver/%s/%d", a.Stream, a.StreamSeq)
	reason, class := dead.ReasonCrash, string(outcome.ClassCrash)
	if a.terminated {
		why = fmt.Sprintf("consumer %s terminated its message after %d deliveries", a.Consumer, a.Deliveries)
		if a.Reason != "" {
			why += ": " + a.Reason
		}
		msgID = fmt.Sprintf("terminated/%s/%d", a.Stream, a.StreamSeq)
		reason, class = ReasonTerminated, ReasonTerminated
	}
	now := s.now().UTC()
	env, eerr := event.Unmarshal(raw.Data)
	if a.terminated && eerr != nil {
		return nil // an undecodable message is kept in DEAD by whoever terminated it
	}
	if a.Stream == s.subj.Stream(names.StreamIntake) || eerr != nil {
		e := dead.Entry{Reason: dead.ReasonCrash, Class: string(outcome.ClassCrash), Error: why, At: now, Raw: raw.Data, RawSubject: raw.Subject, RawHeader: raw.Header}
		if acct, kind, err := s.subj.ParseIntake(raw.Subject); err == nil {
			e.Account, e.Kind = acct, kind
		}
		if _, err := s.dead.Keep(ctx, e, msgID); err != nil {
			return err
		}
		return deleteMsg(ctx, st, a.StreamSeq)
	}
	g := dead.GiveUp{Dead: s.dead, Conn: s.o.Conn, Subj: s.subj, Store: s.st, Actor: "deadletter", Order: s.order}
	moved, err := g.Maxed(ctx, env, reason, class, why, msgID)
	if err != nil {
		return err
	}
	if moved {
		s.log.Warn().Str("event_id", env.ID).Str("reason", why).Msg("dead-lettered by the server's advisory")
	}
	return deleteMsg(ctx, st, a.StreamSeq)
}

func deleteMsg(ctx context.Context, st jetstream.Stream, seq uint64) error {
	if err := st.DeleteMsg(ctx, seq); err != nil && !store.IsGone(err) {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil
		}
		return err
	}
	return nil
}

// isEventsStream reports whether name is one of the partitions' EVENTS.
func (s *Service) isEventsStream(name string) bool {
	for p := range s.subj.Parts() {
		if name == s.subj.EventsStreamOf(p) {
			return true
		}
	}
	return false
}
