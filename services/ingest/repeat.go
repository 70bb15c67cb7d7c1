package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/queue"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/streams"
)

// Repeating events (config.Repeat). Each repeat is a message schedule on
// <p>.repeat.sched.<account>.<name> in TENAZ_REPEATS, which the server
// fires onto <p>.repeat.fire.<account>.<name> with the schedule's headers
// and payload; the shared consumer ingest-repeat submits each firing to
// INTAKE with the idempotency key repeat/<name>/<occurrence>, so that an
// occurrence fired or delivered twice is one event. The schedule message
// carries the whole repeat (kind, pattern, zone, entity, payload), so a
// firing needs no config to be submitted. Every replica applies the
// config's repeats at start by compare-and-set on each schedule subject,
// writing only one that differs: N replicas make one schedule, and a
// restart does not move an interval's phase.

// StreamRepeats is the stream of the repeats' schedules and firings, as
// the default prefix names it (see names.Subjects.Stream).
const StreamRepeats = "TENAZ_REPEATS"

const (
	headerSchedule         = "Nats-Schedule"
	headerScheduleTarget   = "Nats-Schedule-Target"
	headerScheduleTimeZone = "Nats-Schedule-Time-Zone"
	// headerScheduleNext is set by the server on each firing: when the
	// schedule fires next, from which the occurrence is derived.
	headerScheduleNext = "Nats-Schedule-Next"

	// The repeat, on its schedule message and so on every firing (the
	// server strips only its own Nats-Schedule* headers).
	headerRepeatKind     = "Tenaz-Repeat-Kind"
	headerRepeatCron     = "Tenaz-Repeat-Cron"
	headerRepeatEvery    = "Tenaz-Repeat-Every"
	headerRepeatTimezone = "Tenaz-Repeat-Timezone"
	headerRepeatOrigin   = "Tenaz-Repeat-Origin" // originConfig or originAPI
	headerRepeatBy       = "Tenaz-Repeat-By"     // who made it over the API
)

// Where a repeat was declared: tenaz.yaml (applied, and removed, at
// start) or the API (kept until deleted there).
const (
	originConfig = "config"
	originAPI    = "api"
)

// RepeatKey is the idempotency key of the occurrence at of the repeat
// name: "repeat/<name>/<at in UTC, RFC 3339>".
func RepeatKey(name string, at time.Time) string {
	return repeatKeyPrefix + name + "/" + at.UTC().Format(time.RFC3339)
}

// repeatKeyPrefix begins every occurrence's key: reserved for them, a
// submission over HTTP or micro may not use it.
const repeatKeyPrefix = "repeat/"

func (s *Service) repeatSchedule(account, name string) string {
	return s.cfg.Prefix + ".repeat.sched." + account + "." + name
}

func (s *Service) repeatFire(account, name string) string {
	return s.cfg.Prefix + ".repeat.fire." + account + "." + name
}

// repeatOf splits a schedule or firing subject of kind ("sched" or "fire")
// into account and name.
func (s *Service) repeatOf(subject, kind string) (account, name string, ok bool) {
	rest, ok := strings.CutPrefix(subject, s.cfg.Prefix+".repeat."+kind+".")
	if !ok {
		return "", "", false
	}
	account, name, ok = strings.Cut(rest, ".")
	return account, name, ok && names.ValidateAccount(account) == nil && names.ValidateAccount(name) == nil
}

// storedRepeat is a repeat as its schedule message holds it.
type storedRepeat struct {
	Account, Name string
	Repeat        config.Repeat
	Origin, By    string
	Stored        time.Time // when the schedule was written
	Seq           uint64    // its sequence, for compare-and-set
}

// decodeRepeat reads the repeat a schedule message or a firing carries.
func decodeRepeat(h nats.Header, data []byte) (config.Repeat, error) {
	r := config.Repeat{Kind: h.Get(headerRepeatKind), Cron: h.Get(headerRepeatCron), Timezone: h.Get(headerRepeatTimezone),
		EntityID: h.Get(names.HeaderEntityID), Payload: string(data)}
	if e := h.Get(headerRepeatEvery); e != "" {
		d, err := time.ParseDuration(e)
		if err != nil {
			return r, fmt.Errorf("repeat interval %q: %w", e, err)
		}
		r.Every = config.Duration(d)
	}
	if r.Kind == "" || r.Cron == "" && r.Every == 0 {
		return r, errors.New("not a repeat: no kind or schedule")
	}
	return r, nil
}

// startRepeats applies the config's repeats and consumes their firings
// (submitted under runCtx).
func (s *Service) startRepeats(ctx, runCtx context.Context) error {
	name := s.subj.Stream(StreamRepeats)
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	s.repeats = st
	if err := s.applyRepeats(ctx); err != nil {
		return err
	}
	cc, err := repeatConsumer(s.cfg.Prefix)
	if err != nil {
		return err
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, name, cc)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", cc.Durable, err)
	}
	s.repeatCC, err = cons.Consume(func(m jetstream.Msg) { s.handleFire(runCtx, m) }, append(queue.Pull(64),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				s.log.Debug().Err(err).Msg("repeat consume")
			}
		}))...)
	if err != nil {
		return fmt.Errorf("consume %s: %w", cc.Durable, err)
	}
	return nil
}

// stopRepeats stops taking firings and waits (until ctx ends) for the one
// being submitted; an unacked firing is delivered again.
func (s *Service) stopRepeats(ctx context.Context) {
	if s.repeatCC == nil {
		return
	}
	s.repeatCC.Drain()
	select {
	case <-s.repeatCC.Closed():
	case <-ctx.Done():
		s.repeatCC.Stop()
		<-s.repeatCC.Closed()
	}
	s.repeatCC = nil
}

// repeatConsumer is the data file's consumer under prefix.
func repeatConsumer(prefix string) (jetstream.ConsumerConfig, error) {
	var c jetstream.ConsumerConfig
	b, err := fs.ReadFile(streams.FS(), "consumer-ingest-repeat.json")
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("consumer-ingest-repeat.json: %w", err)
	}
	if rest, ok := strings.CutPrefix(c.FilterSubject, "tenaz."); ok {
		c.FilterSubject = prefix + "." + rest
	}
	return c, nil
}

// applyRepeats makes the stored repeats the config's: each declared one
// written if it differs, each one the config declared before and no
// longer does purged (cancelled). Repeats made over the API are left.
func (s *Service) applyRepeats(ctx context.Context) error {
	have, err := s.listRepeats(ctx, "")
	if err != nil {
		return err
	}
	declared := map[string]bool{}
	for _, account := range sortedKeys(s.cfg.Accounts) {
		rs := s.cfg.Accounts[account].Repeats
		for _, name := range sortedKeys(rs) {
			declared[account+"."+name] = true
			if _, changed, err := s.putRepeat(ctx, account, name, rs[name].WithDefaults(), originConfig, ""); err != nil {
				return fmt.Errorf("repeat %s of %s: %w", name, account, err)
			} else if changed {
				s.log.Info().Str("account", account).Str("repeat", name).Str("schedule", rs[name].Pattern()).Msg("repeat set")
			}
		}
	}
	for _, h := range have {
		if h.Origin != originConfig || declared[h.Account+"."+h.Name] {
			continue
		}
		if err := s.purgeRepeat(ctx, h.Account, h.Name, h.Seq); err != nil {
			return fmt.Errorf("removing repeat %s of %s: %w", h.Name, h.Account, err)
		}
		s.log.Info().Str("account", h.Account).Str("repeat", h.Name).Msg("repeat removed: no longer in the config")
	}
	return nil
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// getRepeat reads the stored repeat name of account; ok is false when
// there is none.
func (s *Service) getRepeat(ctx context.Context, account, name string) (storedRepeat, bool, error) {
	m, err := s.repeats.GetLastMsgForSubject(ctx, s.repeatSchedule(account, name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return storedRepeat{}, false, nil
	}
	if err != nil {
		return storedRepeat{}, false, err
	}
	r, err := decodeRepeat(m.Header, m.Data)
	if err != nil {
		return storedRepeat{}, false, fmt.Errorf("%s: %w", m.Subject, err)
	}
	return storedRepeat{Account: account, Name: name, Repeat: r, Origin: m.Header.Get(headerRepeatOrigin),
		By: m.Header.Get(headerRepeatBy), Stored: m.Time, Seq: m.Sequence}, true, nil
}

// listRepeats reads every stored repeat (of account, unless "").
func (s *Service) listRepeats(ctx context.Context, account string) ([]storedRepeat, error) {
	filter := s.cfg.Prefix + ".repeat.sched.>"
	if account != "" {
		filter = s.cfg.Prefix + ".repeat.sched." + account + ".*"
	}
	info, err := s.repeats.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	var out []storedRepeat
	for _, subj := range sortedKeys(info.State.Subjects) {
		a, n, ok := s.repeatOf(subj, "sched")
		if !ok {
			continue
		}
		r, found, err := s.getRepeat(ctx, a, n)
		if err != nil {
			return nil, err
		}
		if found { // else purged since the listing
			out = append(out, r)
		}
	}
	return out, nil
}

// putRepeat stores r as the repeat name of account unless the same repeat
// of the same origin is stored already; changed reports a write. The
// write is a compare-and-set on the schedule subject: of replicas
// writing at once one wins, and the others then find it stored.
func (s *Service) putRepeat(ctx context.Context, account, name string, r config.Repeat, origin, by string) (storedRepeat, bool, error) {
	for range 5 {
		cur, found, err := s.getRepeat(ctx, account, name)
		if err != nil {
			return cur, false, err
		}
		if found && cur.Repeat == r && cur.Origin == origin {
			return cur, false, nil
		}
		m := nats.NewMsg(s.repeatSchedule(account, name))
		m.Header.Set(headerSchedule, r.Pattern())
		m.Header.Set(headerScheduleTarget, s.repeatFire(account, name))
		m.Header.Set(headerRepeatKind, r.Kind)
		if r.Cron != "" {
			m.Header.Set(headerRepeatCron, r.Cron)
			if r.Timezone != "" {
				m.Header.Set(headerScheduleTimeZone, r.Timezone)
				m.Header.Set(headerRepeatTimezone, r.Timezone)
			}
		} else {
			m.Header.Set(headerRepeatEvery, time.Duration(r.Every).String())
		}
		if r.EntityID != "" {
			m.Header.Set(names.HeaderEntityID, r.EntityID)
		}
		m.Header.Set(headerRepeatOrigin, origin)
		if by != "" {
			m.Header.Set(headerRepeatBy, by)
		}
		m.Data = []byte(r.Payload)
		ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(cur.Seq))
		if store.IsWrongSequence(err) {
			continue // another replica wrote it: compare again
		}
		if err != nil {
			return cur, false, err
		}
		return storedRepeat{Account: account, Name: name, Repeat: r, Origin: origin, By: by, Stored: time.Now().UTC(), Seq: ack.Sequence}, true, nil
	}
	return storedRepeat{}, false, fmt.Errorf("repeat %s of %s keeps changing under this replica", name, account)
}

// purgeRepeat removes the schedule, which cancels the repeat. A firing
// already stored is still submitted.
func (s *Service) purgeRepeat(ctx context.Context, account, name string, read uint64) error {
	if hk := s.o.Hooks; hk != nil && hk.BeforeRepeatPurge != nil {
		hk.BeforeRepeatPurge(account, name)
	}
	// Up to the version read: one stored since (a change made meanwhile,
	// answered 200) stands.
	return s.repeats.Purge(ctx, jetstream.WithPurgeSubject(s.repeatSchedule(account, name)), jetstream.WithPurgeSequence(read+1))
}

// handleFire submits one firing to INTAKE as an ordinary submission, with
// the occurrence's idempotency key, and acks it once INTAKE has it. A
// failed publish is retried by redelivery; a second delivery, or a second
// firing of the same occurrence, makes the same key and so no second event.
func (s *Service) handleFire(ctx context.Context, m jetstream.Msg) {
	account, name, ok := s.repeatOf(m.Subject(), "fire")
	r, err := decodeRepeat(m.Headers(), m.Data())
	var subject string
	if ok && err == nil {
		subject, err = s.subj.Intake(account, r.Kind)
	}
	if !ok || err != nil {
		// Not what a schedule of ingest's fires: published by hand.
		s.log.Warn().Err(err).Str("subject", m.Subject()).Msg("repeat firing without a repeat; dropped")
		_ = m.TermWithReason("not a repeat")
		return
	}
	key := RepeatKey(name, s.occurrence(m, r))
	in := nats.NewMsg(subject)
	in.Data = m.Data()
	// The key makes a redelivered firing the same event at accept; no
	// Nats-Msg-Id, which another account could take first (see submit).
	in.Header.Set(names.HeaderIdempotencyKey, key)
	if r.EntityID != "" {
		in.Header.Set(names.HeaderEntityID, r.EntityID)
	}
	if _, err := s.js.PublishMsg(ctx, in); err != nil {
		if !errors.Is(context.Cause(ctx), ErrStopped) {
			s.log.Warn().Err(err).Str("account", account).Str("repeat", name).Msg("submitting a repeat's occurrence failed; will retry")
		}
		_ = m.NakWithDelay(retryDelay(m, err))
		return
	}
	if hk := s.o.Hooks; hk != nil && hk.AfterRepeatSubmit != nil {
		if err := hk.AfterRepeatSubmit(key); err != nil {
			_ = m.NakWithDelay(time.Second)
			return
		}
	}
	if err := m.Ack(); err != nil {
		s.log.Debug().Err(err).Str("repeat", name).Msg("repeat ack")
	}
	s.log.Debug().Str("account", account).Str("repeat", name).Str("key", key).Msg("repeat submitted")
}

// occurrence is the time of the firing m: derived from the next fire time
// the server announces on it, else (a one-off firing) the whole second it
// was stored at.
func (s *Service) occurrence(m jetstream.Msg, r config.Repeat) time.Time {
	if next, err := time.Parse(time.RFC3339Nano, m.Headers().Get(headerScheduleNext)); err == nil {
		return r.Occurrence(next)
	}
	if meta, err := m.Metadata(); err == nil {
		return meta.Timestamp.Truncate(time.Second)
	}
	return time.Now().Truncate(time.Second)
}

// RepeatRequest makes or replaces a repeat over the API: the fields of
// config.Repeat, with the payload as JSON.
type RepeatRequest struct {
	Kind     string          `json:"kind"`
	Cron     string          `json:"cron,omitempty"`
	Every    string          `json:"every,omitempty"`
	Timezone string          `json:"timezone,omitempty"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	EntityID string          `json:"entity_id,omitempty"`
}

// RepeatView is a stored repeat as the API shows it.
type RepeatView struct {
	Account   string          `json:"account"`
	Name      string          `json:"name"`
	Kind      string          `json:"kind"`
	Cron      string          `json:"cron,omitempty"`
	Every     string          `json:"every,omitempty"`
	Timezone  string          `json:"timezone,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	EntityID  string          `json:"entity_id,omitempty"`
	Origin    string          `json:"origin"`       // "config" (tenaz.yaml) or "api"
	By        string          `json:"by,omitempty"` // who made it over the API
	UpdatedAt time.Time       `json:"updated_at"`   // when the schedule was last written
	// Next is a cron repeat's next occurrence (an interval's phase is the
	// server's), NextLocal the same in the repeat's zone, and NextKey the
	// idempotency key its event will have.
	Next      *time.Time `json:"next,omitempty"`
	NextLocal string     `json:"next_local,omitempty"`
	NextKey   string     `json:"next_key,omitempty"`
}

// RepeatsReply lists repeats.
type RepeatsReply struct {
	Repeats []RepeatView `json:"repeats"`
}

func viewOfRepeat(r storedRepeat, now time.Time) RepeatView {
	v := RepeatView{Account: r.Account, Name: r.Name, Kind: r.Repeat.Kind, Cron: r.Repeat.Cron, Timezone: r.Repeat.Timezone,
		Payload: json.RawMessage(r.Repeat.Payload), EntityID: r.Repeat.EntityID, Origin: r.Origin, By: r.By, UpdatedAt: r.Stored.UTC()}
	if !json.Valid(v.Payload) {
		v.Payload = json.RawMessage(strconv.Quote(r.Repeat.Payload))
	}
	if r.Repeat.Every != 0 {
		v.Every = r.Repeat.Every.String()
	}
	if next := r.Repeat.Next(now); !next.IsZero() {
		u := next.UTC()
		v.Next, v.NextLocal, v.NextKey = &u, next.Format(time.RFC3339), RepeatKey(r.Name, next)
	}
	return v
}

// repeatRoutes registers the repeats' HTTP API (operators only: a repeat
// submits on an account's behalf without its keys' rates, and outlives
// any key).
func (s *Service) repeatRoutes(mux httpapi.Router) {
	mux.HandleFunc("GET /v1/repeats", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if qe := httpapi.CheckQuery(q, "account"); qe != nil {
			httpapi.Error(w, http.StatusBadRequest, "invalid_"+qe.Param, qe.Error())
			return
		}
		status, v := s.listRepeatsAPI(r.Context(), q.Get("account"))
		httpapi.JSON(w, status, v)
	})
	mux.HandleFunc("PUT /v1/repeats/{account}/{name}", func(w http.ResponseWriter, r *http.Request) {
		var req RepeatRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2*max(s.cfg.HTTP.MaxBodyBytes, 1<<16)))
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httpapi.Error(w, http.StatusRequestEntityTooLarge, "too_large", "request body is over the limit")
			return
		}
		if err == nil {
			err = event.DecodeStrict("request body", body, &req)
		}
		if err != nil {
			httpapi.Error(w, http.StatusBadRequest, "malformed", "want {kind, cron | every, timezone?, payload?, entity_id?}: "+err.Error())
			return
		}
		status, v := s.setRepeatAPI(r.Context(), r.PathValue("account"), r.PathValue("name"), req, principal(r.Context()))
		httpapi.JSON(w, status, v)
	})
	mux.HandleFunc("DELETE /v1/repeats/{account}/{name}", func(w http.ResponseWriter, r *http.Request) {
		status, v := s.deleteRepeatAPI(r.Context(), r.PathValue("account"), r.PathValue("name"))
		httpapi.JSON(w, status, v)
	})
}

// principal names who the request's credential proves, for the record.
func principal(ctx context.Context) string {
	p, ok := auth.From(ctx)
	if !ok {
		p = auth.Principal{Anonymous: true}
	}
	return p.String()
}

func errorBody(code, format string, args ...any) httpapi.ErrorBody {
	return httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func (s *Service) listRepeatsAPI(ctx context.Context, account string) (int, any) {
	if account != "" && names.ValidateAccount(account) != nil {
		return http.StatusBadRequest, errorBody("invalid_account", "%v", names.ValidateAccount(account))
	}
	rs, err := s.listRepeats(ctx, account)
	if err != nil {
		return http.StatusServiceUnavailable, errorBody("unavailable", "%v", err)
	}
	now := time.Now()
	out := RepeatsReply{Repeats: make([]RepeatView, 0, len(rs))}
	for _, r := range rs {
		out.Repeats = append(out.Repeats, viewOfRepeat(r, now))
	}
	return http.StatusOK, out
}

// declared reports whether this replica's config declares the repeat:
// the API leaves it to tenaz.yaml.
func (s *Service) declared(account, name string) bool {
	_, ok := s.cfg.Accounts[account].Repeats[name]
	return ok && account != config.DefaultAccountName
}

func (s *Service) setRepeatAPI(ctx context.Context, account, name string, req RepeatRequest, by string) (int, any) {
	r := config.Repeat{Kind: req.Kind, Cron: req.Cron, Timezone: req.Timezone, EntityID: req.EntityID, Payload: string(req.Payload)}
	if req.Every != "" {
		d, err := config.ParseDuration(req.Every)
		if err != nil {
			return http.StatusBadRequest, errorBody("invalid_repeat", "every: %v", err)
		}
		r.Every = d
	}
	if err := s.cfg.ValidateRepeat(account, name, r); err != nil {
		return http.StatusBadRequest, errorBody("invalid_repeat", "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if s.declared(account, name) {
		return http.StatusConflict, errorBody("declared_in_config", "repeat %s of %s is declared in tenaz.yaml; change it there", name, account)
	}
	cur, changed, err := s.putRepeat(ctx, account, name, r.WithDefaults(), originAPI, by)
	if err != nil {
		return http.StatusServiceUnavailable, errorBody("unavailable", "%v", err)
	}
	if changed {
		s.log.Info().Str("account", account).Str("repeat", name).Str("by", by).Str("schedule", r.Pattern()).Msg("repeat set over the API")
	}
	return http.StatusOK, viewOfRepeat(cur, time.Now())
}

func (s *Service) deleteRepeatAPI(ctx context.Context, account, name string) (int, any) {
	if names.ValidateAccount(account) != nil || names.ValidateAccount(name) != nil {
		return http.StatusNotFound, errorBody("not_found", "no repeat %s of %s", name, account)
	}
	if s.declared(account, name) {
		return http.StatusConflict, errorBody("declared_in_config", "repeat %s of %s is declared in tenaz.yaml; remove it there", name, account)
	}
	cur, found, err := s.getRepeat(ctx, account, name)
	if err != nil {
		return http.StatusServiceUnavailable, errorBody("unavailable", "%v", err)
	}
	if !found {
		return http.StatusNotFound, errorBody("not_found", "no repeat %s of %s", name, account)
	}
	if err := s.purgeRepeat(ctx, account, name, cur.Seq); err != nil {
		return http.StatusServiceUnavailable, errorBody("unavailable", "%v", err)
	}
	if now, found, err := s.getRepeat(ctx, account, name); err == nil && found {
		return http.StatusConflict, errorBody("repeat_changed", "repeat %s of %s was set again while it was deleted; the new one stands: %s", name, account, now.Repeat.Pattern())
	}
	s.log.Info().Str("account", account).Str("repeat", name).Msg("repeat deleted over the API")
	return http.StatusOK, viewOfRepeat(cur, time.Now())
}

// RepeatsRequest lists repeats over NATS (all, or one account's).
type RepeatsRequest struct {
	Account string `json:"account,omitempty"`
}

// RepeatSetRequest makes or replaces the repeat Name of Account over NATS.
type RepeatSetRequest struct {
	Account string `json:"account"`
	Name    string `json:"name"`
	RepeatRequest
}

// RepeatDeleteRequest deletes the repeat Name of Account over NATS.
type RepeatDeleteRequest struct {
	Account string `json:"account"`
	Name    string `json:"name"`
}

// microTimeout bounds a repeat endpoint's work.
const microTimeout = 10 * time.Second

// addRepeatEndpoints adds repeats, repeat-set and repeat-delete, which
// answer what GET, PUT and DELETE /v1/repeats… answer and, like the
// operator's other endpoints, need the operator credential in the
// request's Authorization header.
func (s *Service) addRepeatEndpoints(add func(string, micro.HandlerFunc) error) error {
	type handler func(ctx context.Context, data []byte, by string) (int, any)
	eps := []struct {
		name string
		h    handler
	}{
		{"repeats", func(ctx context.Context, data []byte, _ string) (int, any) {
			var req RepeatsRequest
			if len(data) > 0 { // empty: every account's
				if err := event.DecodeStrict("request", data, &req); err != nil {
					return http.StatusBadRequest, errorBody("malformed", "want {account?}: %v", err)
				}
			}
			return s.listRepeatsAPI(ctx, req.Account)
		}},
		{"repeat-set", func(ctx context.Context, data []byte, by string) (int, any) {
			var req RepeatSetRequest
			if err := event.DecodeStrict("request", data, &req); err != nil {
				return http.StatusBadRequest, errorBody("malformed", "want {account, name, kind, cron | every, timezone?, payload?, entity_id?}: %v", err)
			}
			return s.setRepeatAPI(ctx, req.Account, req.Name, req.RepeatRequest, by)
		}},
		{"repeat-delete", func(ctx context.Context, data []byte, _ string) (int, any) {
			var req RepeatDeleteRequest
			if err := event.DecodeStrict("request", data, &req); err != nil {
				return http.StatusBadRequest, errorBody("malformed", "want {account, name}: %v", err)
			}
			return s.deleteRepeatAPI(ctx, req.Account, req.Name)
		}},
	}
	for _, ep := range eps {
		h := ep.h
		if err := add(ep.name, func(req micro.Request) {
			p, err := s.o.Auth.RequireOperator(req.Headers().Get(ops.AuthorizationHeader))
			if err != nil {
				status, code, msg := auth.Refusal(err)
				respond(req, status, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: code, Message: msg}})
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), microTimeout)
			defer cancel()
			status, v := h(ctx, req.Data(), p.String())
			respond(req, status, v)
		}); err != nil {
			return err
		}
	}
	return nil
}
