package deadletter

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/target"
)

// The digest: the server fires a cron message schedule kept on
// <prefix>.digest.schedule in the TENAZ_DIGEST stream onto
// <prefix>.digest.tick; one durable consumer (deadletter-digest, one
// message in flight) hands each tick to one replica, which counts what
// arrived in DEAD since the previous tick and sends the digest. The state
// in tenaz_ops (key "digest") records the last DEAD sequence counted and
// the last tick sent, written by compare-and-set before sending, so each
// period is counted once and each entry in exactly one digest.

const (
	digestKey        = "digest"
	headerSchedule   = "Nats-Schedule"
	headerTarget     = "Nats-Schedule-Target"
	headerTimeZone   = "Nats-Schedule-Time-Zone"
	digestMaxResend  = 5  // deliveries of a tick whose webhook keeps failing
	digestSlackLines = 20 // account/kind lines in the webhook text
)

type digestState struct {
	LastSeq  uint64      `json:"last_dead_seq"` // DEAD entries up to here are counted
	LastTick uint64      `json:"last_tick"`     // TENAZ_DIGEST sequence of the last tick
	LastAt   time.Time   `json:"last_at"`
	Sent     bool        `json:"sent"`
	Digest   *ops.Digest `json:"digest,omitempty"` // the last tick's digest
}

func (s *Service) scheduleSubject() string { return s.cfg.Prefix + ".digest.schedule" }
func (s *Service) tickSubject() string     { return s.cfg.Prefix + ".digest.tick" }

// startDigest keeps the server's schedule in line with the config and
// consumes the ticks; with no digest configured it removes the schedule.
func (s *Service) startDigest(ctx context.Context) error {
	st, err := s.js.Stream(ctx, s.subj.Stream(StreamDigest))
	if err != nil {
		return fmt.Errorf("deadletter: stream %s: %w", s.subj.Stream(StreamDigest), err)
	}
	d := s.cfg.Deadletter.Digest
	last, err := st.GetLastMsgForSubject(ctx, s.scheduleSubject())
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("deadletter: digest schedule: %w", err)
	}
	if !d.Enabled() {
		if last != nil {
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(s.scheduleSubject())); err != nil {
				return fmt.Errorf("deadletter: removing the digest schedule: %w", err)
			}
		}
		return nil
	}
	tz := ""
	if d.Timezone != "UTC" {
		tz = d.Timezone
	}
	if last == nil || last.Header.Get(headerSchedule) != d.Cron() || last.Header.Get(headerTimeZone) != tz || last.Header.Get(headerTarget) != s.tickSubject() {
		m := nats.NewMsg(s.scheduleSubject())
		m.Header.Set(headerSchedule, d.Cron())
		m.Header.Set(headerTarget, s.tickSubject())
		if tz != "" {
			m.Header.Set(headerTimeZone, tz)
		}
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Data = []byte("digest")
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("deadletter: digest schedule %q (%s): %w", d.Cron(), d.Timezone, err)
		}
		s.log.Info().Str("cron", d.Cron()).Str("timezone", d.Timezone).Msg("digest schedule set")
	}
	return s.consume(ctx, s.subj.Stream(StreamDigest), "", s.dataConsumer("consumer-deadletter-digest.json"), 1, s.handleTick)
}

// loadDigestState reads the state and its revision (0 when absent).
func (s *Service) loadDigestState(ctx context.Context) (digestState, uint64, error) {
	var st digestState
	e, err := s.kvOps.Get(ctx, digestKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, 0, nil
	}
	if err != nil {
		return st, 0, err
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return st, 0, fmt.Errorf("digest state: %w", err)
	}
	return st, e.Revision(), nil
}

func (s *Service) saveDigestState(ctx context.Context, st digestState, rev uint64) (uint64, error) {
	val, _ := json.Marshal(st)
	if rev == 0 {
		return s.kvOps.Create(ctx, digestKey, val)
	}
	return s.kvOps.Update(ctx, digestKey, val, rev)
}

// handleTick sends the digest of one tick.
func (s *Service) handleTick(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	tick := meta.Sequence.Stream
	st, rev, err := s.loadDigestState(ctx)
	if err != nil {
		s.log.Warn().Err(err).Msg("digest state; will retry")
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	switch {
	case st.LastTick > tick || st.LastTick == tick && st.Sent:
		_ = m.Ack() // sent already
		return
	case st.LastTick < tick:
		d, lastSeq, err := s.countDead(ctx, st.LastSeq, meta.Timestamp)
		if err != nil {
			s.log.Warn().Err(err).Msg("counting DEAD for the digest; will retry")
			_ = m.NakWithDelay(5 * time.Second)
			return
		}
		d.From, d.To = st.LastAt, meta.Timestamp.UTC()
		d.OpenDead, d.OpenReview = s.x.Count(state.Dead), s.x.Count(state.ManualReview)
		st = digestState{LastSeq: lastSeq, LastTick: tick, LastAt: d.To, Digest: &d}
		if rev, err = s.saveDigestState(ctx, st, rev); err != nil {
			_ = m.NakWithDelay(time.Second) // another replica moved it: look again
			return
		}
	}
	// The digest of this tick is claimed and not sent yet.
	if err := s.sendDigest(ctx, *st.Digest); err != nil {
		if meta.NumDelivered < digestMaxResend {
			s.log.Warn().Err(err).Msg("digest webhook failed; will retry")
			_ = m.NakWithDelay(time.Duration(meta.NumDelivered) * 10 * time.Second)
			return
		}
		s.log.Error().Err(err).Msg("digest webhook failed; giving up on this digest's webhook")
	}
	st.Sent = true
	if _, err := s.saveDigestState(ctx, st, rev); err != nil {
		s.log.Warn().Err(err).Msg("marking the digest sent")
	}
	_ = m.Ack()
}

// countDead counts the DEAD entries after sequence after that arrived by
// until, and returns the last sequence counted.
func (s *Service) countDead(ctx context.Context, after uint64, until time.Time) (ops.Digest, uint64, error) {
	d := ops.Digest{ByAccount: map[string]int{}, ByKind: map[string]int{}, ByReason: map[string]int{}, Rows: []ops.DigestRow{}}
	info, err := s.deadSt.Info(ctx)
	if err != nil {
		return d, after, err
	}
	if info.State.LastSeq <= after || info.State.Msgs == 0 {
		return d, after, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.subj.DeadAll()}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := s.js.OrderedConsumer(ctx, s.subj.Stream(names.StreamDead), cfg)
	if err != nil {
		return d, after, err
	}
	rows := map[ops.DigestRow]int{}
	last := after
	for done := false; !done; {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return d, after, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			if meta.Timestamp.After(until) {
				done = true
				break
			}
			last = meta.Sequence.Stream
			var e struct {
				Account string `json:"account"`
				Kind    string `json:"kind"`
				Reason  string `json:"reason"`
			}
			_ = json.Unmarshal(m.Data(), &e)
			if e.Account == "" || e.Kind == "" {
				e.Account, e.Kind, _ = s.parseDead(m.Subject())
			}
			d.Total++
			d.ByAccount[e.Account]++
			d.ByKind[e.Kind]++
			d.ByReason[e.Reason]++
			rows[ops.DigestRow{Account: e.Account, Kind: e.Kind, Reason: e.Reason}]++
			if meta.NumPending == 0 {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return d, after, err
		}
		if n == 0 {
			break
		}
	}
	for r, n := range rows {
		r.Count = n
		d.Rows = append(d.Rows, r)
	}
	slices.SortFunc(d.Rows, func(a, b ops.DigestRow) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Account, b.Account), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Reason, b.Reason))
	})
	return d, last, nil
}

// sendDigest publishes the advisory and posts the webhook.
func (s *Service) sendDigest(ctx context.Context, d ops.Digest) error {
	b, _ := json.Marshal(d)
	if err := s.o.Conn.Publish(s.subj.AdvisoryDigest(), b); err != nil {
		return err
	}
	s.log.Info().Int("total", d.Total).Int("open_dead", d.OpenDead).Int("open_review", d.OpenReview).Msg("digest sent")
	url := s.cfg.Deadletter.Digest.Webhook.Reveal()
	if url == "" {
		return nil
	}
	body, _ := json.Marshal(map[string]string{"text": DigestText(d, s.cfg.Deadletter.Digest.Timezone)})
	// The webhook URL is a secret (Slack's carries its token): errors,
	// which are logged, must not quote it.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("digest webhook: %w", target.RedactURL(err, url))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.o.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("digest webhook: %w", target.RedactURL(err, url))
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("digest webhook answered %d", resp.StatusCode)
	}
	return nil
}

// DigestText is the Slack-compatible text of a digest, times in zone tz.
func DigestText(d ops.Digest, tz string) string {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		loc = time.UTC
	}
	var b strings.Builder
	from := "the start"
	if !d.From.IsZero() {
		from = d.From.In(loc).Format("2006-01-02 15:04")
	}
	fmt.Fprintf(&b, "*tenaz digest* %s → %s (%s)\n", from, d.To.In(loc).Format("2006-01-02 15:04"), loc)
	if d.Total == 0 {
		b.WriteString("Nothing died and nothing went to manual review.\n")
	} else {
		fmt.Fprintf(&b, "%d arrived: %d dead, %d to manual review.\n", d.Total, d.Total-d.ByReason["manual_review"], d.ByReason["manual_review"])
		for i, r := range d.Rows {
			if i == digestSlackLines {
				fmt.Fprintf(&b, "• … and %d more lines\n", len(d.Rows)-i)
				break
			}
			fmt.Fprintf(&b, "• %s / %s — %s: %d\n", r.Account, r.Kind, r.Reason, r.Count)
		}
	}
	fmt.Fprintf(&b, "Still open: %d dead, %d in manual review.", d.OpenDead, d.OpenReview)
	return b.String()
}
