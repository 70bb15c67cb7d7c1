package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
	"github.com/tenaz/tenaz/pkg/tracing"
)

// View is an event as the API shows it (see event.View).
type View = event.View

// statusURL is where the event's status is read: under http.public_url
// when it is set, else at the scheme and Host the request came with (a
// client's own Host, which it may set as it likes), or the path alone for
// a request over NATS, which has no Host.
func (s *Service) statusURL(r *http.Request, id string) string {
	path := "/v1/events/" + id
	if base := s.conf().HTTP.PublicURL; base != "" {
		return strings.TrimSuffix(base, "/") + path
	}
	if r.Host == "" {
		return path
	}
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host + path
}

func viewOf(rec state.Record, url string) View {
	v := View{ID: rec.ID, Status: rec.Status, IdempotencyKey: rec.IdempotencyKey, StatusURL: url,
		Account: rec.Account, Kind: rec.Kind, EntityID: rec.EntityID, OrderingKey: rec.OrderingKey,
		Stage: rec.Stage, Attempts: rec.Attempts, Replays: rec.Replays, LastError: rec.LastError, NextRunAt: rec.NextRunAt,
		Deadline: rec.Deadline, Polls: rec.Polls,
		Reference: rec.Reference, Result: rec.Result}
	if !rec.CreatedAt.IsZero() {
		c, u := rec.CreatedAt, rec.UpdatedAt
		v.CreatedAt, v.UpdatedAt = &c, &u
	}
	return v
}

// handlePost: POST /v1/events, tenaz's submission or a CloudEvent
// (cloudevents.go). The submission is validated here (so errors
// are answered at once), written to INTAKE (durable from then on), and
// accepted by the intake consumer, whose outcome decides 202 (new) or 200
// (a duplicate: the existing event). If the outcome takes longer than
// ReplyTimeout the answer is 202 with status "accepted": the submission is
// safe in INTAKE. A write to INTAKE that fails is 503: "unavailable" or
// "store_full" when it was certainly not stored, "outcome_unknown" when
// its acknowledgement was lost and it may have been (publishIntake).
func (s *Service) handlePost(w http.ResponseWriter, r *http.Request) {
	max := s.cfg.HTTP.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max+64*1024))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.metrics.Rejected("too_large")
			httpapi.Error(w, http.StatusRequestEntityTooLarge, "too_large", "request body is over the limit")
			return
		}
		s.metrics.Rejected("malformed")
		httpapi.Error(w, http.StatusBadRequest, "malformed", "reading body: "+err.Error())
		return
	}
	if name := givenTwice(r.Header); name != "" {
		s.metrics.Rejected("malformed")
		httpapi.Error(w, http.StatusBadRequest, "malformed", "the "+name+" header is given twice, with different values: send one")
		return
	}
	if s.postCloudEvent(w, r, body) {
		return
	}
	sub, err := event.ParseSubmission(body)
	if err != nil {
		s.metrics.Rejected("malformed")
		httpapi.Error(w, http.StatusBadRequest, "malformed", err.Error())
		return
	}
	if msg := fieldsFromHeaders(r.Header, headerFields(&sub)); msg != "" {
		s.metrics.Rejected("malformed")
		httpapi.Error(w, http.StatusBadRequest, "malformed", msg)
		return
	}
	p, authed := auth.From(r.Context())
	if authed && sub.Account == "" && !p.Operator && !p.Anonymous {
		sub.Account = p.Account // a key submits for its own account, named or not, as in a CloudEvent
	}
	if authed && !p.MayAccess(sub.Account) {
		httpapi.Error(w, http.StatusForbidden, "forbidden", p.String()+" may not submit for account "+strconv.Quote(sub.Account))
		return
	}
	f := event.Fields{Account: sub.Account, Kind: sub.Kind, EntityID: sub.EntityID, OrderingKey: sub.OrderingKey,
		NotBefore: sub.NotBefore, IdempotencyKey: r.Header.Get(names.HeaderIdempotencyKey), Traceparent: tracing.From(r.Header.Get)}
	status, v := s.submit(r, f, sub.Payload)
	httpapi.JSON(w, status, v)
}

// submit is the shared path of HTTP and micro submissions.
func (s *Service) submit(r *http.Request, f event.Fields, payload []byte) (int, any) {
	if strings.HasPrefix(f.IdempotencyKey, repeatKeyPrefix) {
		// A key could take an occurrence's event before its repeat fires
		// (the keys are known in advance), with another time or lane.
		s.metrics.Rejected("malformed")
		return http.StatusBadRequest, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "malformed",
			Message: fmt.Sprintf("idempotency key %q: keys that begin with %q are the repeats' occurrences' own; choose another", f.IdempotencyKey, repeatKeyPrefix)}}
	}
	env, serr := s.build(f, payload, time.Now())
	if serr != nil {
		s.metrics.Rejected(serr.Code)
		return serr.Status, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: serr.Code, Message: serr.Error()}}
	}
	subject, _ := s.subj.Intake(env.Account, env.Kind)
	reply, ch, forget := s.replies.next()
	defer forget()
	m := nats.NewMsg(subject)
	m.Data = payload
	if f.IdempotencyKey != "" {
		// A derived key is derived again at accept, from the same bytes: as
		// a header it would be checked as a caller's key, which it may
		// outgrow (kind, entity and a hash).
		m.Header.Set(names.HeaderIdempotencyKey, f.IdempotencyKey)
	}
	// No Nats-Msg-Id: INTAKE dedups it over every account, so another
	// account's producer could publish this one's id first and have the
	// server drop this submission. A copy is the same event at accept.
	m.Header.Set(headerReply, reply)
	m.Header.Set(headerReplySeal, s.replies.seal(reply))
	for h, v := range map[string]string{names.HeaderEntityID: f.EntityID, names.HeaderOrderingKey: f.OrderingKey, names.HeaderNotBefore: f.NotBefore, tracing.Header: f.Traceparent} {
		if v != "" {
			m.Header.Set(h, v)
		}
	}
	m.Header.Set(headerPromised, env.ID)
	m.Header.Set(headerPromisedSeal, s.replies.promise(reply, env.ID))
	url := s.statusURL(r, env.ID)
	accepted := View{ID: env.ID, Status: "accepted", IdempotencyKey: env.IdempotencyKey, StatusURL: url, Account: env.Account, Kind: env.Kind}
	ctx := r.Context()
	unknown, err := publishIntake(ctx, s.nc, s.js, m)
	switch {
	case store.IsFull(err):
		s.metrics.Rejected("store_full")
		return http.StatusServiceUnavailable, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "store_full",
			Message: "the submission was not taken: tenaz's storage is full; try again later"}}
	case unknown && !forget():
		// Only the acknowledgement was lost: the submission was stored,
		// and its outcome came (or is coming) all the same.
		return answer(<-ch, accepted, url)
	case unknown:
		// The write went out (or waits in the connection's buffer to) and
		// no answer came back: the submission may be in INTAKE, and then
		// becomes its event. The event's id is the account's and key's,
		// so a resend is the same event.
		s.metrics.Rejected(codeOutcomeUnknown)
		return http.StatusServiceUnavailable, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: codeOutcomeUnknown,
			Message: "the submission may have been taken, as event " + env.ID + ": it went to NATS but no acknowledgement came back (" + err.Error() + "). " +
				"Send it again with the same idempotency key (with none, the same body): if it was taken, the answer is that event, never a second one"}}
	case err != nil:
		s.metrics.Rejected("unavailable")
		return http.StatusServiceUnavailable, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "unavailable",
			Message: "the submission was not taken: " + err.Error() + "; try again later"}}
	}
	t := time.NewTimer(s.o.ReplyTimeout)
	defer t.Stop()
	select {
	case b := <-ch:
		return answer(b, accepted, url)
	case <-t.C:
	case <-ctx.Done():
	}
	if forget() {
		return http.StatusAccepted, accepted
	}
	// An outcome was taken for this handler as the wait ended; a refusal
	// taken is not kept anywhere else, so it must be the answer.
	return answer(<-ch, accepted, url)
}

// headerField is a field of a submission's body that a header may give
// too (a NATS producer's way).
type headerField struct {
	header, field string
	v             *string
}

// headerFields are sub's fields that headers may give.
func headerFields(sub *event.Submission) []headerField {
	return []headerField{
		{names.HeaderEntityID, "entity_id", &sub.EntityID},
		{names.HeaderOrderingKey, "ordering_key", &sub.OrderingKey},
		{names.HeaderNotBefore, "not_before", &sub.NotBefore},
	}
}

// fieldsFromHeaders reads the fields a submission over NATS gives as
// headers (Tenaz-Entity-Id, Tenaz-Ordering-Key, Tenaz-Not-Before) into
// the body's fields fs when the body leaves them out, so that a producer
// moving from NATS to HTTP or the submit endpoint keeps them; ignored, a
// delay or an order would be lost without a word. A header and a body
// field that disagree are refused: the message says which.
func fieldsFromHeaders(h map[string][]string, fs []headerField) string {
	for _, f := range fs {
		switch v := headerOf(h, f.header); {
		case v == "" || v == *f.v:
		case *f.v == "":
			*f.v = v
		default:
			return fmt.Sprintf("the %s header (%q) and the body's %s (%q) differ: send one", f.header, v, f.field, *f.v)
		}
	}
	return ""
}

// answer is the HTTP answer of an intake outcome.
func answer(b []byte, accepted View, url string) (int, any) {
	var o outcomeMsg
	if err := json.Unmarshal(b, &o); err != nil || (o.Record == nil && o.Code == "") {
		return http.StatusAccepted, accepted
	}
	if o.Code != "" {
		return o.Status, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: o.Code, Message: o.Message}}
	}
	if o.Created {
		return http.StatusAccepted, viewOf(*o.Record, url)
	}
	return http.StatusOK, viewOf(*o.Record, url)
}

func (s *Service) lookup(w http.ResponseWriter, r *http.Request) (state.Record, bool) {
	id := r.PathValue("id")
	if err := names.ValidateEventID(id); err != nil {
		httpapi.Error(w, http.StatusNotFound, "not_found", "no event "+id)
		return state.Record{}, false
	}
	rec, _, err := s.st.Get(r.Context(), "", id)
	if errors.Is(err, store.ErrNotFound) {
		httpapi.Error(w, http.StatusNotFound, "not_found", "no event "+id)
		return rec, false
	}
	if err != nil {
		httpapi.Error(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return rec, false
	}
	if p, ok := auth.From(r.Context()); ok && !p.MayAccess(rec.Account) {
		// Another account's event is answered as one that does not
		// exist: a key learns nothing of other accounts' ids.
		httpapi.Error(w, http.StatusNotFound, "not_found", "no event "+id)
		return rec, false
	}
	return rec, true
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	if rec, ok := s.lookup(w, r); ok {
		httpapi.JSON(w, http.StatusOK, viewOf(rec, s.statusURL(r, rec.ID)))
	}
}

// HistoryView is the answer of GET /v1/events/{id}/history (see event.HistoryView).
type HistoryView = event.HistoryView

func (s *Service) handleHistory(w http.ResponseWriter, r *http.Request) {
	if rec, ok := s.lookup(w, r); ok {
		httpapi.JSON(w, http.StatusOK, HistoryView{ID: rec.ID, Status: rec.Status, History: rec.History, Truncated: rec.Truncated})
	}
}
