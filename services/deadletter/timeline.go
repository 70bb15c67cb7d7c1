package deadletter

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/audit"
	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/store"
)

// "What happened to X": the timeline of a business entity and the export
// of the audit, both read from the audit archive (archive.go), so they
// outlive the records. An API key with the read scope may read its own
// account's; an operator any account's.

// mayRead refuses a principal another account's audit.
func mayRead(ctx context.Context, account string) error {
	if p, ok := auth.From(ctx); ok && !p.MayAccess(account) {
		return fail(http.StatusForbidden, "forbidden", "%s may not read the audit of account %q", p, account)
	}
	return nil
}

// timeline is everything the archive holds about one entity of one
// account, in order.
func (s *Service) timeline(ctx context.Context, req ops.TimelineRequest) (ops.TimelineReply, error) {
	if err := validAccount(req.Account); err != nil {
		return ops.TimelineReply{}, err
	}
	if req.EntityID == "" || len(req.EntityID) > names.MaxKeyLen {
		return ops.TimelineReply{}, fail(http.StatusBadRequest, "invalid_entity", "entity: want the entity id the events were submitted with (1 to %d bytes)", names.MaxKeyLen)
	}
	if err := mayRead(ctx, req.Account); err != nil {
		return ops.TimelineReply{}, err
	}
	rep := ops.TimelineReply{Account: req.Account, EntityID: req.EntityID, Events: []ops.TimelineEvent{}, Items: []ops.AuditEntry{}}
	events := map[string]*ops.TimelineEvent{}
	type key struct {
		id   string
		step int
	}
	steps := map[key]int{} // index in rep.Items
	err := s.readArchive(ctx, audit.EntityFilter(s.cfg.Prefix, req.Account, req.EntityID), time.Time{}, func(subject string, data []byte) error {
		var r audit.Revision
		if json.Unmarshal(data, &r) != nil || r.EntityID != req.EntityID {
			return nil // another entity's token (a hash collision) or not a revision
		}
		es, err := audit.Decode(subject, data)
		if err != nil {
			return nil
		}
		ev := events[r.ID]
		if ev == nil {
			ev = &ops.TimelineEvent{ID: r.ID, Kind: r.Kind, IdempotencyKey: r.IdempotencyKey}
			events[r.ID] = ev
		}
		ev.Status, ev.Stage = r.Status, r.Stage
		for _, e := range es {
			if ev.FirstAt.IsZero() || e.At.Before(ev.FirstAt) {
				ev.FirstAt = e.At
			}
			ev.LastAt = later(ev.LastAt, e.At)
			k := key{e.EventID, e.Step}
			if i, ok := steps[k]; ok {
				rep.Items[i] = e // a later count of the same step
				continue
			}
			if len(rep.Items) >= ops.MaxTimeline {
				rep.Truncated = true
				continue
			}
			steps[k] = len(rep.Items)
			rep.Items = append(rep.Items, e)
		}
		return nil
	})
	if err != nil {
		return ops.TimelineReply{}, err
	}
	if len(events) == 0 {
		return ops.TimelineReply{}, fail(http.StatusNotFound, "not_found", "the audit archive has no event of entity %q in account %s", req.EntityID, req.Account)
	}
	var first, last time.Time
	for _, ev := range events {
		_, _, err := s.st.Get(ctx, req.Account, ev.ID)
		switch {
		case err == nil:
			ev.Live = true
		case !errors.Is(err, store.ErrNotFound):
			return ops.TimelineReply{}, err
		}
		if first.IsZero() || ev.FirstAt.Before(first) {
			first = ev.FirstAt
		}
		last = later(last, ev.LastAt)
		rep.Events = append(rep.Events, *ev)
	}
	// The account's operator actions while the entity's events ran: a
	// pause or an opened breaker explains a wait.
	err = s.readArchive(ctx, audit.OpsFilter(s.cfg.Prefix, req.Account), first, func(subject string, data []byte) error {
		es, err := audit.Decode(subject, data)
		if err != nil {
			return nil
		}
		for _, e := range es {
			if !e.At.Before(first) && !e.At.After(last) && len(rep.Items) < ops.MaxTimeline {
				rep.Items = append(rep.Items, e)
			}
		}
		return nil
	})
	if err != nil {
		return ops.TimelineReply{}, err
	}
	slices.SortFunc(rep.Events, func(a, b ops.TimelineEvent) int {
		return cmp.Or(a.FirstAt.Compare(b.FirstAt), strings.Compare(a.ID, b.ID))
	})
	slices.SortStableFunc(rep.Items, func(a, b ops.AuditEntry) int {
		if a.EventID == b.EventID && a.EventID != "" {
			return cmp.Compare(a.Step, b.Step) // one event's own order, whatever its clocks said
		}
		return a.At.Compare(b.At)
	})
	return rep, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// export writes the audit entries req selects to w, one JSON object a
// line, in the order they were archived (each event's in its order).
func (s *Service) export(ctx context.Context, req ops.ExportRequest, w func(ops.AuditEntry) error) error {
	filter := audit.AccountFilter(s.cfg.Prefix, req.Account)
	var since time.Time
	switch {
	case req.EventID != "":
		if err := names.ValidateEventID(req.EventID); err != nil {
			return fail(http.StatusBadRequest, "invalid_id", "%v", err)
		}
		filter = audit.EventFilter(s.cfg.Prefix, req.EventID)
	case req.Since == nil:
		return fail(http.StatusBadRequest, "since_required", "give since, the time the export starts at (RFC 3339), or one event's entries with event (event_id over NATS)")
	}
	if req.Since != nil {
		// Every entry is archived after it happened: none at or after
		// since is stored before it.
		since = *req.Since
	}
	if req.Account != "" {
		if err := validAccount(req.Account); err != nil {
			return err
		}
	}
	if req.Since != nil && req.Until != nil && !req.Until.After(*req.Since) {
		return fail(http.StatusBadRequest, "invalid_until", "until must be after since")
	}
	if p, ok := auth.From(ctx); ok && !p.Operator && !p.Anonymous && req.Account == "" {
		req.Account = p.Account // a key exports its own account's audit
	}
	if err := mayRead(ctx, req.Account); err != nil {
		return err
	}
	if req.Account != "" && req.EventID == "" {
		filter = audit.AccountFilter(s.cfg.Prefix, req.Account)
	}
	return s.readArchive(ctx, filter, since, func(subject string, data []byte) error {
		es, err := audit.Decode(subject, data)
		if err != nil {
			return nil
		}
		for _, e := range es {
			if req.Account != "" && e.Account != req.Account ||
				req.Since != nil && e.At.Before(*req.Since) || req.Until != nil && !e.At.Before(*req.Until) {
				continue
			}
			if err := w(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// exportQuery reads an ExportRequest from query parameters.
func exportQuery(q url.Values) (ops.ExportRequest, error) {
	req := ops.ExportRequest{Account: q.Get("account"), EventID: q.Get("event")}
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"since", &req.Since}, {"until", &req.Until}} {
		raw := q.Get(p.name)
		if raw == "" {
			continue
		}
		t, err := parseTime(raw)
		if err != nil {
			return req, fail(http.StatusBadRequest, "invalid_"+p.name, "%s: want RFC 3339 (2026-03-01T06:00:00Z) or a date (2026-03-01), got %q", p.name, raw)
		}
		*p.dst = &t
	}
	return req, nil
}

// auditRoutes registers the timeline and the export (see apiRoutes).
func (s *Service) auditRoutes(mux readyMux) {
	a := s.o.Auth
	mux.Handle("GET /v1/entities/{account}/{entity}/timeline", a.Require(auth.Read, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep, err := s.timeline(r.Context(), ops.TimelineRequest{Account: r.PathValue("account"), EntityID: r.PathValue("entity")})
		s.answer(w, http.StatusOK, rep, err)
	})))
	mux.Handle("GET /v1/audit/export", a.Require(auth.Read, http.HandlerFunc(s.apiExport)))
}

// apiExport streams the export as JSON Lines. A failure once lines are
// written ends the stream with an {"error":…} line, since the status is
// already sent.
func (s *Service) apiExport(w http.ResponseWriter, r *http.Request) {
	v, ok := s.query(w, r, "account", "event", "since", "until")
	if !ok {
		return
	}
	req, err := exportQuery(v)
	if err != nil {
		s.answer(w, 0, nil, err)
		return
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	started := false
	// An export may outlast http.write_timeout: each flush moves the
	// deadline on, so only a stalled export is cut.
	rc := http.NewResponseController(w)
	n := 0
	err = s.export(r.Context(), req, func(e ops.AuditEntry) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if err := enc.Encode(e); err != nil {
			return err
		}
		if n++; n%1000 == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
			_ = rc.Flush()
			if d := s.cfg.HTTP.WriteTimeout.D(); d > 0 {
				_ = rc.SetWriteDeadline(time.Now().Add(d))
			}
		}
		return nil
	})
	switch {
	case err != nil && !started:
		s.answer(w, 0, nil, err)
		return
	case err != nil:
		_, code, msg := statusOf(err)
		_ = enc.Encode(ops.ErrorBody{Error: ops.ErrorDetail{Code: code, Message: msg}})
	case !started:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}
	_ = bw.Flush()
}
