package deadletter

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/search"
)

// Search (pkg/search): the indexer runs in every deadletter replica (its
// durable consumers share the partitions' feeds between them, and hand
// each batch to the audit archiver), and
// GET /v1/events and the events.find endpoint answer from its index.
// An operator searches every account; an API key with the read scope
// only its own, whichever account it names.

// startSearch starts the indexer, and with it the archiver, and opens the
// searcher.
func (s *Service) startSearch(ctx context.Context) error {
	s.indexer = search.NewIndexer(s.follow, s.subj, search.IndexerOptions{Retention: s.cfg.Streams.Retention.D(), Logger: &s.log, Settle: s.o.Settle,
		Follow: s.archiveRevisions})
	if err := s.indexer.Start(ctx); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	s.bg.Add(1)
	go s.watchArchiveLag(s.indexer)
	var err error
	if s.search, err = search.Open(ctx, s.js, s.st, s.subj); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	return nil
}

// stopSearch stops the indexer (what it has not acknowledged comes back
// to the next one) and closes the searcher.
func (s *Service) stopSearch(ctx context.Context) error {
	if s.search != nil {
		s.search.Close() // a search still running fails
	}
	if s.indexer == nil {
		return nil
	}
	err := s.indexer.Stop(ctx)
	s.indexer = nil
	return err
}

// keyAccount is the account an API key in ctx is held to: "" for an
// operator, anonymous, or no principal.
func keyAccount(ctx context.Context) string {
	if p, ok := auth.From(ctx); ok && !p.Operator && !p.Anonymous {
		return p.Account
	}
	return ""
}

// findEvents answers one page of a search, held to the principal's account.
func (s *Service) findEvents(ctx context.Context, req ops.FindRequest) (ops.FindReply, error) {
	if own := keyAccount(ctx); own != "" {
		switch req.Account {
		case "":
			req.Account = own
		case own:
		default:
			p, _ := auth.From(ctx)
			return ops.FindReply{}, fail(http.StatusForbidden, "forbidden", "%s may search only account %q, not %q", p, own, req.Account)
		}
	}
	rep, err := s.search.Find(ctx, req)
	var pe *search.ParamError
	if errors.As(err, &pe) {
		return rep, fail(http.StatusBadRequest, "invalid_"+pe.Param, "%v", pe)
	}
	return rep, err
}

// searchRoutes registers GET /v1/events (query: account kind state entity
// idempotency_key provider_ref since until cursor limit).
func (s *Service) searchRoutes(mux readyMux) {
	mux.Handle("GET /v1/events", s.o.Auth.Require(auth.Read, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query()
		if own := keyAccount(r.Context()); own != "" && !v.Has("account") {
			// A key searches its own account, named or not: its
			// idempotency keys too, which ParseQuery wants an account for.
			v.Set("account", own)
		}
		req, err := search.ParseQuery(v)
		var pe *search.ParamError
		if errors.As(err, &pe) {
			s.answer(w, 0, nil, fail(http.StatusBadRequest, "invalid_"+pe.Param, "%v", pe))
			return
		}
		rep, err := s.findEvents(r.Context(), req)
		s.answer(w, http.StatusOK, rep, err)
	})))
}
