package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/tracing"
	"github.com/tenaz/tenaz/services/ingest/internal/cloudevent"
)

// A CloudEvent is a submission: type is the kind, id the idempotency key,
// subject the entity id, data the payload. source, time and dataschema are
// checked and not kept: within an account ids must be unique across
// sources (CloudEvents asks that of source and id together).
const (
	// ceAccount is the extension attribute naming the account; over HTTP
	// it defaults to the API key's account.
	ceAccount = "tenazaccount"
	// cePartitionKey is CloudEvents' Partitioning extension: the ordering
	// key (events with one key run in order).
	cePartitionKey = "partitionkey"
)

// codeInvalidCloudEvent answers a CloudEvent refused for an attribute.
const codeInvalidCloudEvent = "invalid_cloudevent"

// cloudRefusal is err (of package cloudevent, or naming an attribute) as
// a refused submission: 400 invalid_cloudevent.
func cloudRefusal(err error) *submitError {
	return &submitError{Status: http.StatusBadRequest, Code: codeInvalidCloudEvent, Err: err}
}

func ceBad(attr, format string, args ...any) *submitError {
	return cloudRefusal(&cloudevent.Error{Attribute: attr, Problem: fmt.Sprintf(format, args...)})
}

// cloudFields maps ev to a submission's fields; account is the one the
// path implies (the API key's; "" for none), which a tenazaccount
// attribute overrides (whether the caller may submit for it is checked
// after, as for any submission).
func cloudFields(ev cloudevent.Event, account string) (event.Fields, *submitError) {
	if a, ok := ev.Extensions[ceAccount]; ok {
		account = a
	}
	if account == "" {
		return event.Fields{}, ceBad(ceAccount, "missing: name the tenaz account (an API key of one account implies it)")
	}
	if err := names.ValidateAccount(account); err != nil {
		return event.Fields{}, ceBad(ceAccount, "%v", err)
	}
	if err := names.ValidateKind(ev.Type); err != nil {
		return event.Fields{}, ceBad("type", "%v (the type is the event's kind)", err)
	}
	f := event.Fields{Account: account, Kind: ev.Type, IdempotencyKey: ev.ID, EntityID: ev.Subject, OrderingKey: ev.Extensions[cePartitionKey]}
	for _, c := range []struct{ attr, v string }{{"id", f.IdempotencyKey}, {"subject", f.EntityID}, {cePartitionKey, f.OrderingKey}} {
		if c.v == "" && c.attr != "id" {
			continue
		}
		check := names.ValidateKey
		if c.attr == "id" {
			check = event.CheckKey // the id is the idempotency key
		}
		if err := check(c.attr, c.v); err != nil {
			return event.Fields{}, ceBad(c.attr, "%v", err)
		}
	}
	return f, nil
}

// knownType refuses a type that is no configured kind as any submission
// of an unknown kind is refused (422 unknown_kind), naming the attribute.
func (s *Service) knownType(f event.Fields) *submitError {
	if _, ok := s.cfg.Kind(f.Kind); !ok {
		return refuse(http.StatusUnprocessableEntity, "unknown_kind", "CloudEvents attribute \"type\": %q is not a configured kind", f.Kind)
	}
	return nil
}

// readCloudEvent reads a CloudEvent from a submission's headers and body:
// structured by its Content-Type, else binary by its ce- headers. ok is
// false when it carries none.
func readCloudEvent(h map[string][]string, body []byte) (ev cloudevent.Event, ok bool, serr *submitError) {
	ct := cloudevent.ContentTypeOf(h)
	var err error
	switch {
	case cloudevent.IsBatch(ct):
		return ev, true, cloudRefusal(errors.New("CloudEvents batches are not taken: send one event per request"))
	case cloudevent.IsStructured(ct):
		ev, err = cloudevent.Structured(body)
	case cloudevent.IsBinary(h):
		ev, err = cloudevent.Binary(h, ct, body)
	default:
		return ev, false, nil
	}
	if err != nil {
		return ev, true, cloudRefusal(err)
	}
	return ev, true, nil
}

// cloudSubmission reads a submission of POST /v1/events or of the submit
// endpoint that is a CloudEvent (ok false when it is not one): its fields
// for account (the API key's; "" for none), with those tenaz's headers
// give (withFieldHeaders), and its payload.
func (s *Service) cloudSubmission(h map[string][]string, body []byte, account string) (f event.Fields, payload []byte, ok bool, serr *submitError) {
	ev, ok, serr := readCloudEvent(h, body)
	if !ok || serr != nil {
		return f, nil, ok, serr
	}
	if f, serr = cloudFields(ev, account); serr != nil {
		return f, nil, true, serr
	}
	if serr = s.knownType(f); serr != nil {
		return f, nil, true, serr
	}
	if f, serr = withFieldHeaders(f, h); serr != nil {
		return f, nil, true, serr
	}
	return f, ev.Data, true, nil
}

// postCloudEvent answers POST /v1/events when its body is a CloudEvent
// and reports whether it was one.
func (s *Service) postCloudEvent(w http.ResponseWriter, r *http.Request, body []byte) bool {
	p, authed := auth.From(r.Context())
	f, payload, ok, serr := s.cloudSubmission(r.Header, body, p.Account)
	switch {
	case !ok:
		return false
	case serr != nil:
		s.metrics.Rejected(serr.Code)
		httpapi.Error(w, serr.Status, serr.Code, serr.Error())
	case authed && !p.MayAccess(f.Account):
		httpapi.Error(w, http.StatusForbidden, "forbidden", p.String()+" may not submit for account "+strconv.Quote(f.Account))
	default:
		f.Traceparent = tracing.From(r.Header.Get)
		status, v := s.submit(r, f, payload)
		httpapi.JSON(w, status, v)
	}
	return true
}

// microCloudEvent answers a submit request that is a CloudEvent
// (structured by its Content-Type header, binary by its ce- headers; the
// account in tenazaccount, else the subject's account) and reports
// whether it was one. With account set, the event must be that account's.
func (s *Service) microCloudEvent(req micro.Request, account string) bool {
	f, payload, ok, serr := s.cloudSubmission(req.Headers(), req.Data(), account)
	switch {
	case !ok:
		return false
	case serr != nil:
		s.metrics.Rejected(serr.Code)
		respond(req, serr.Status, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: serr.Code, Message: serr.Error()}})
	case account != "" && f.Account != account:
		s.metrics.Rejected("forbidden")
		respond(req, http.StatusForbidden, httpapi.ErrorBody{Error: httpapi.ErrorDetail{Code: "forbidden",
			Message: fmt.Sprintf("a CloudEvent of account %q sent to the submit endpoint of account %q", f.Account, account)}})
	default:
		f.Traceparent = tracing.From(req.Headers().Get)
		r := httptest.NewRequest(http.MethodPost, "/v1/events", nil)
		r.Host = "" // over NATS: status_url is the path alone, or under http.public_url
		status, v := s.submit(r, f, payload)
		respond(req, status, v)
	}
	return true
}

// cePartitioned reports whether an intake message's ce- headers give an
// ordering key (its ordered lane is then the message's route).
func cePartitioned(h nats.Header) bool {
	for k, vs := range h {
		if strings.EqualFold(k, cloudevent.HeaderPrefix+cePartitionKey) && len(vs) > 0 && vs[0] != "" {
			return true
		}
	}
	return false
}

// intakeCloudEvent overlays the attributes of a binary-mode CloudEvent
// published to <prefix>.intake.<account>.<kind> (its ce- headers) on the
// fields the subject and tenaz's headers give: type and tenazaccount must
// agree with the subject, and a tenaz header given too with its attribute.
// The data is the message's, checked as any intake payload is.
func intakeCloudEvent(f event.Fields, h nats.Header) (event.Fields, *submitError) {
	ct := cloudevent.ContentTypeOf(h)
	if cloudevent.IsStructured(ct) || cloudevent.IsBatch(ct) {
		return f, cloudRefusal(fmt.Errorf("CloudEvent: Content-Type %s is not taken on intake subjects: publish binary mode (ce- headers, the data as the message), or send the event to the submit endpoint", ct))
	}
	if !cloudevent.IsBinary(h) {
		return f, nil
	}
	ev, err := cloudevent.Attributes(h, ct)
	if err != nil {
		return f, cloudRefusal(err)
	}
	if a, ok := ev.Extensions[ceAccount]; ok && a != f.Account {
		return f, ceBad(ceAccount, "%q differs from the subject's account %q", a, f.Account)
	}
	if ev.Type != f.Kind {
		return f, ceBad("type", "%q differs from the subject's kind %q", ev.Type, f.Kind)
	}
	cf, serr := cloudFields(ev, f.Account)
	if serr != nil {
		return f, serr
	}
	cf.Traceparent = f.Traceparent
	if cf, serr = withFieldHeaders(cf, h); serr != nil {
		return f, serr
	}
	return cf, nil // the id wins over a Nats-Msg-Id, which is only the server's dedup id then
}

// withFieldHeaders gives a CloudEvent's fields f those tenaz's headers in
// h give, as on any submission: a header fills an attribute the event
// leaves out (Tenaz-Not-Before has none), and one that differs from its
// attribute is refused, naming both. Ignored, a delay or an order would
// be lost without a word.
func withFieldHeaders(f event.Fields, h nats.Header) (event.Fields, *submitError) {
	f.NotBefore = headerOf(h, names.HeaderNotBefore)
	for _, c := range []struct {
		attr, header string
		v            *string
	}{
		{"id", names.HeaderIdempotencyKey, &f.IdempotencyKey},
		{"subject", names.HeaderEntityID, &f.EntityID},
		{cePartitionKey, names.HeaderOrderingKey, &f.OrderingKey},
	} {
		switch hv := headerOf(h, c.header); {
		case hv == "":
		case *c.v == "":
			*c.v = hv
		case *c.v != hv:
			return f, ceBad(c.attr, "%q differs from the %s header %q: send one", *c.v, c.header, hv)
		}
	}
	return f, nil
}
