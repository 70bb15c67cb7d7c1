package deadletter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/breaker"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/outcome"
	"github.com/tenaz/tenaz/pkg/search"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/services/deadletter/internal/index"
)

// apiRoutes registers the JSON API. Bodies and answers are the pkg/ops
// types; errors are {"error":{"code","message"}}.
//
//	GET  /v1/dead                       list (query: account kind class reason since until cursor limit)
//	GET  /v1/dead/{id}                  show (seq_<n> for an entry without an event)
//	POST /v1/dead/replay                ReplayRequest → ReplayReply (202 with job_id for a filter)
//	POST /v1/dead/{id}/replay           {payload?, stage?, reason} → ReplayReply
//	POST /v1/dead/discard               DiscardRequest → ActionReply
//	GET  /v1/dead/jobs/{job}            JobReply
//	POST /v1/dead/jobs/{job}/cancel     {reason} → JobReply (409 once it is not running)
//	GET  /v1/review                     list of manual reviews
//	GET  /v1/review/{id}                show
//	POST /v1/review/{id}/resolve        {outcome, result?, reason} → ActionReply
//	GET  /v1/breakers                   BreakersReply (query: account)
//	POST /v1/breakers/{account}/{target}/close  {reason?} → BreakerItem
//	POST /v1/breakers/{account}/{target}/open   {until|for, reason} → BreakerItem
//	POST /v1/accounts/{account}/pause   {until?|for?, reason} → AccountReply
//	POST /v1/accounts/{account}/resume  {reason} → AccountReply
//	GET  /v1/pauses                     PausesReply (query: account)
//	POST /v1/events/{id}/retry          {reason} → EventReply
//	POST /v1/events/{id}/cancel-wait    {reason} → EventReply
//	GET  /v1/actions                    ActionsReply (query: account limit)
//	GET  /v1/entities/{account}/{entity}/timeline  TimelineReply (an API key: its account)
//	GET  /v1/audit/export               JSON Lines of AuditEntry (query: since until account event)
//	GET  /v1/events                     FindReply (query: account kind state entity idempotency_key provider_ref since until cursor limit; an API key: its account)
//
// Every route but the timeline and the export is operator-only (pkg/auth's
// class of its pattern); those two also answer an API key with the read
// scope, for its own account (timeline.go). The
// actor recorded is the principal the Guard authenticated, never a body
// field.
func (s *Service) apiRoutes(mux readyMux) {
	mux.HandleFunc("GET /v1/dead", s.apiList(state.Dead))
	mux.HandleFunc("GET /v1/review", s.apiList(state.ManualReview))
	mux.HandleFunc("GET /v1/dead/{id}", s.apiShow)
	mux.HandleFunc("GET /v1/review/{id}", s.apiShow)
	mux.HandleFunc("POST /v1/dead/replay", func(w http.ResponseWriter, r *http.Request) {
		var req ops.ReplayRequest
		if !s.decode(w, r, &req) {
			return
		}
		s.answerReplay(w, r, req)
	})
	mux.HandleFunc("POST /v1/dead/{id}/replay", func(w http.ResponseWriter, r *http.Request) {
		var req ops.ReplayRequest
		if !s.decode(w, r, &req) {
			return
		}
		req.IDs, req.Filter = []string{r.PathValue("id")}, nil
		s.answerReplay(w, r, req)
	})
	mux.HandleFunc("POST /v1/dead/discard", decoded(s, nil, s.discardRequest))
	mux.HandleFunc("GET /v1/dead/jobs/{job}", func(w http.ResponseWriter, r *http.Request) {
		rep, err := s.getJob(r.Context(), r.PathValue("job"))
		s.answer(w, http.StatusOK, rep, err)
	})
	mux.HandleFunc("POST /v1/dead/jobs/{job}/cancel", decoded(s, func(r *http.Request, req *ops.JobCancelRequest) { req.JobID = r.PathValue("job") }, s.cancelJob))
	mux.HandleFunc("POST /v1/review/{id}/resolve", decoded(s, func(r *http.Request, req *ops.ResolveRequest) { req.ID = r.PathValue("id") },
		func(ctx context.Context, req ops.ResolveRequest) (ops.ActionReply, error) {
			return ops.ActionReply{Done: 1}, s.resolve(ctx, req)
		}))
	mux.HandleFunc("GET /v1/breakers", func(w http.ResponseWriter, r *http.Request) {
		if q, ok := s.query(w, r, "account"); ok {
			rep, err := s.breakersList(r.Context(), ops.BreakersRequest{Account: q.Get("account")})
			s.answer(w, http.StatusOK, rep, err)
		}
	})
	mux.HandleFunc("POST /v1/breakers/{account}/{target}/close", decoded(s, func(r *http.Request, req *ops.CloseBreakerRequest) {
		req.Account, req.Target = r.PathValue("account"), r.PathValue("target")
	}, s.closeBreaker))
	s.operatorRoutes(mux)
	s.auditRoutes(mux)
	s.searchRoutes(mux)
	s.storedRoutes(mux)
}

func (s *Service) answerReplay(w http.ResponseWriter, r *http.Request, req ops.ReplayRequest) {
	rep, err := s.replayRequest(r.Context(), req)
	status := http.StatusOK
	if rep.JobID != "" {
		status = http.StatusAccepted
		w.Header().Set("Location", "/v1/dead/jobs/"+rep.JobID)
	}
	s.answer(w, status, rep, err)
}

// decoded is the handler of a route whose JSON body is a Req (see decode):
// path fills in its fields from the URL's path (nil: none), and act's
// reply or error is the answer.
func decoded[Req, Rep any](s *Service, path func(*http.Request, *Req), act func(context.Context, Req) (Rep, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if !s.decode(w, r, &req) {
			return
		}
		if path != nil {
			path(r, &req)
		}
		rep, err := act(r.Context(), req)
		s.answer(w, http.StatusOK, rep, err)
	}
}

// answer writes v, or err as a coded error.
func (s *Service) answer(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		st, code, msg := statusOf(err)
		if st == http.StatusInternalServerError {
			s.log.Error().Err(err).Msg("operator request failed")
		}
		httpapi.Error(w, st, code, msg)
		return
	}
	httpapi.JSON(w, status, v)
}

// query is r's query string if it holds only known parameters, each
// once (httpapi.CheckQuery); else it answers 400 invalid_<param>.
func (s *Service) query(w http.ResponseWriter, r *http.Request, known ...string) (url.Values, bool) {
	v := r.URL.Query()
	if qe := httpapi.CheckQuery(v, known...); qe != nil {
		s.answer(w, 0, nil, fail(http.StatusBadRequest, "invalid_"+qe.Param, "%v", qe))
		return nil, false
	}
	return v, true
}

// decode reads a JSON body into v as strict does a NATS request's: a
// field v does not have (such as "actor"), anything after the object, and
// a body decoders may read two ways (a member given twice:
// {"rate":"1/s","rate":"1000/s"} would be stored as the last, read by a
// reviewer as the first) are 400.
func (s *Service) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	limit := s.cfg.HTTP.MaxBodyBytes + 64<<10
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		httpapi.Error(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body over %d bytes", limit))
		return false
	}
	if err != nil {
		httpapi.Error(w, http.StatusBadRequest, "malformed", "reading body: "+err.Error())
		return false
	}
	if err := strict(bytes.TrimSpace(body), v); err != nil {
		s.answer(w, 0, nil, err)
		return false
	}
	return true
}

func (s *Service) apiList(st state.State) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := s.query(w, r, listParams...)
		if !ok {
			return
		}
		q, err := listQuery(v)
		if err != nil {
			s.answer(w, 0, nil, err)
			return
		}
		rep, err := s.listNamed(st, q)
		s.answer(w, http.StatusOK, rep, err)
	}
}

func (s *Service) apiShow(w http.ResponseWriter, r *http.Request) {
	rep, err := s.showNamed(r.Context(), ops.ShowRequest{ID: r.PathValue("id")})
	s.answer(w, http.StatusOK, rep, err)
}

// An entry's id, as the API (HTTP and NATS) lists it and takes it back
// in show, replay and discard, is its event id, or seq_<n> (its index key,
// n its DEAD sequence) for an entry without an event: a refused
// submission. The screen keeps such items' ID "" (its templates tell the
// two apart by it), so only the API's answers are named.

// named is it with its id as the API gives it.
func named(it ops.Item) ops.Item {
	it.ID = keyOf(it)
	return it
}

// listNamed is list with every item named.
func (s *Service) listNamed(st state.State, q ops.ListRequest) (ops.ListReply, error) {
	rep, err := s.list(st, q)
	for i := range rep.Items {
		rep.Items[i] = named(rep.Items[i])
	}
	return rep, err
}

// showNamed is show with its item named.
func (s *Service) showNamed(ctx context.Context, req ops.ShowRequest) (ops.ShowReply, error) {
	rep, err := s.show(ctx, req)
	if err == nil {
		rep.Item = named(rep.Item)
	}
	return rep, err
}

// seqOf reads an entry id of the form seq_<n>: ok says it has that form,
// and err that n is not a DEAD sequence.
func seqOf(id string) (seq uint64, ok bool, err error) {
	n, ok := strings.CutPrefix(id, "seq_")
	if !ok {
		return 0, false, nil
	}
	seq, perr := strconv.ParseUint(n, 10, 64)
	if perr != nil || seq == 0 {
		return 0, true, fail(http.StatusBadRequest, "invalid_id", "invalid entry %q: want seq_<sequence>", id)
	}
	return seq, true, nil
}

// list serves one page of a list.
func (s *Service) list(st state.State, q ops.ListRequest) (ops.ListReply, error) {
	if err := s.checkFilter(q); err != nil {
		return ops.ListReply{}, err
	}
	rep, err := s.x.List(st, q)
	if errors.Is(err, index.ErrBadCursor) {
		return rep, fail(http.StatusBadRequest, "invalid_cursor", "%v", err)
	}
	if err != nil {
		return rep, fail(http.StatusBadRequest, "bad_request", "%v", err)
	}
	return rep, nil
}

// checkListRequest refuses what GET /v1/events (pkg/search) refuses of the
// same parameters, with the same code and message: an account or a kind
// that cannot be a name (it matches nothing, and an empty list would say
// that nothing is dead), a time range that holds no instant, and a limit
// out of range (0 is the default for a request over NATS; the query
// string's limit=0 is refused by listQuery). Every list filter goes
// through it: the dead and review lists, a replay job's filter, and the
// account of the breakers and stored accounts lists.
func checkListRequest(q ops.ListRequest) error {
	err := search.Validate(ops.FindRequest{Account: q.Account, Kind: q.Kind, Since: q.Since, Until: q.Until, Limit: q.Limit})
	var pe *search.ParamError
	if errors.As(err, &pe) {
		return fail(http.StatusBadRequest, "invalid_"+pe.Param, "%v", pe)
	}
	return err
}

// reasons are the reasons an entry is in DEAD.
var reasons = []string{dead.ReasonPermanent, dead.ReasonExhausted, dead.ReasonCrash, dead.ReasonRejected,
	dead.ReasonReview, dead.ReasonTooLarge, dead.ReasonUndecodable, ReasonTerminated}

// classes are the error classes DEAD entries are written with: a
// delivery's outcome (pkg/outcome), a refused submission's code (ingest's
// refusals), an entry or message that could not be read, and the classes
// of the give-ups (an undecodable record, a terminated message).
var classes = []string{
	string(outcome.ClassTransient), string(outcome.ClassPermanent), string(outcome.ClassTimeout), string(outcome.ClassCrash),
	"invalid_account", "invalid_kind", "invalid_subject", "invalid_cloudevent", "malformed", "too_large", "unknown_kind",
	"schema_unavailable", "schema_violation", "idempotency_key_reused", "malformed_message", "malformed_entry",
	dead.ReasonUndecodable, ReasonTerminated,
}

// checkFilter is checkListRequest, and refuses a reason or a class that no
// entry has: a misspelt one matched nothing, so that the list was empty
// and a replay job by it replayed nothing, as if nothing were dead.
func (s *Service) checkFilter(q ops.ListRequest) error {
	if err := checkListRequest(q); err != nil {
		return err
	}
	if err := s.checkValue("reason", q.Reason, reasons, func(c index.Counts) map[string]int { return c.Reasons }); err != nil {
		return err
	}
	return s.checkValue("class", q.Class, classes, func(c index.Counts) map[string]int { return c.Classes })
}

// checkValue refuses v for param unless it is known or an entry listed
// now has it (listed picks it from the index's facets): a class written by
// a part newer than this list still filters its entries.
func (s *Service) checkValue(param, v string, known []string, listed func(index.Counts) map[string]int) error {
	if v == "" || slices.Contains(known, v) {
		return nil
	}
	valid := slices.Clone(known)
	for _, st := range []state.State{state.Dead, state.ManualReview} {
		for k := range listed(s.x.Facets(st)) {
			if k == v {
				return nil
			}
			valid = append(valid, k)
		}
	}
	slices.Sort(valid)
	return fail(http.StatusBadRequest, "invalid_"+param, "%s: unknown %s %q; want one of %s", param, param, v, strings.Join(slices.Compact(valid), ", "))
}

// listParams are the parameters listQuery reads.
var listParams = []string{"account", "kind", "class", "reason", "cursor", "since", "until", "limit"}

// listQuery reads a ListRequest from query parameters.
func listQuery(v url.Values) (ops.ListRequest, error) {
	q := ops.ListRequest{Account: v.Get("account"), Kind: v.Get("kind"), Class: v.Get("class"), Reason: v.Get("reason"), Cursor: v.Get("cursor")}
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		raw := v.Get(p.name)
		if raw == "" {
			continue
		}
		t, err := parseTime(raw)
		if err != nil {
			return q, fail(http.StatusBadRequest, "invalid_"+p.name, "%s: want RFC 3339 (2026-03-01T06:00:00Z) or a date (2026-03-01), got %q", p.name, raw)
		}
		*p.dst = &t
	}
	if raw := v.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > ops.MaxLimit {
			return q, fail(http.StatusBadRequest, "invalid_limit", "limit: want 1..%d, got %q", ops.MaxLimit, raw)
		}
		q.Limit = n
	}
	return q, nil
}

// parseTime reads RFC 3339, a datetime-local input value or a date (UTC).
func parseTime(raw string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, raw); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("bad time")
}

// breakersList answers a request for the breakers (of one account when
// given): a bad account name is refused, not an empty list.
func (s *Service) breakersList(_ context.Context, req ops.BreakersRequest) (ops.BreakersReply, error) {
	if err := checkListRequest(ops.ListRequest{Account: req.Account}); err != nil {
		return ops.BreakersReply{}, err
	}
	return s.breakers(req.Account), nil
}

// breakers lists the breakers (of one account when given).
func (s *Service) breakers(account string) ops.BreakersReply {
	rep := ops.BreakersReply{Items: []ops.BreakerItem{}}
	for _, c := range s.brk.List() {
		if account != "" && c.Account != account {
			continue
		}
		rep.Items = append(rep.Items, breakerItem(c))
	}
	return rep
}

func breakerItem(c breaker.Change) ops.BreakerItem {
	it := ops.BreakerItem{Account: c.Account, Target: c.Target, State: string(c.State), Reason: c.Reason, Failures: c.Failures, By: c.By, At: c.At}
	if !c.OpenUntil.IsZero() {
		t := c.OpenUntil
		it.OpenUntil = &t
	}
	return it
}

// closeBreaker closes one breaker for every replica (an operator's call).
func (s *Service) closeBreaker(ctx context.Context, req ops.CloseBreakerRequest) (ops.BreakerItem, error) {
	actor := actorOf(ctx)
	if names.ValidateAccount(req.Account) != nil || req.Target == "" {
		return ops.BreakerItem{}, fail(http.StatusBadRequest, "invalid_breaker", "give a valid account and target, got %q and %q", req.Account, req.Target)
	}
	known := false
	for _, c := range s.brk.List() {
		known = known || c.Account == req.Account && c.Target == req.Target
	}
	if !known {
		return ops.BreakerItem{}, fail(http.StatusNotFound, "not_found", "no breaker for account %s and target %s", req.Account, req.Target)
	}
	if err := s.brk.Close(ctx, req.Account, req.Target, actor); err != nil {
		if errors.Is(err, breaker.ErrInvalidName) {
			return ops.BreakerItem{}, fail(http.StatusBadRequest, "invalid_breaker", "%v", err)
		}
		return ops.BreakerItem{}, err
	}
	if err := s.audit(ctx, ops.Action{At: s.now().UTC(), Action: ops.ActionCloseBreaker, Account: req.Account, Target: req.Target, Actor: actor, Reason: strings.TrimSpace(req.Reason)}); err != nil {
		return ops.BreakerItem{}, err
	}
	s.log.Info().Str("account", req.Account).Str("target", req.Target).Str("actor", actor).Msg("breaker closed by an operator")
	return s.breakerNow(req.Account, req.Target), nil
}
